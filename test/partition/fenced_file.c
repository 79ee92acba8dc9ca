/* The fenced resource: see fenced_file.h. */
#include "fenced_file.h"

#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <unistd.h>

#include "event_log.h"

static uint64_t read_max(int fd) {
  char buf[32] = {0};
  ssize_t n = pread(fd, buf, sizeof buf - 1, 0);
  return n > 0 ? strtoull(buf, NULL, 10) : 0;
}

static int write_max(int fd, uint64_t token) {
  char buf[32];
  int n = snprintf(buf, sizeof buf, "%020" PRIu64 "\n", token); /* fixed width: no truncate */
  return pwrite(fd, buf, (size_t)n, 0) == n ? 0 : -1;
}

int fenced_write(const char *path, const char *id, uint64_t token) {
  int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) return -1;
  int rc = -1;
  if (flock(fd, LOCK_EX) == 0) {
    uint64_t max = read_max(fd);
    if (token < max) {
      event_log("fence %s %" PRIu64 " refused %" PRIu64, id, token, max);
      rc = 0;
    } else if (write_max(fd, token) == 0) {
      event_log("fence %s %" PRIu64 " accepted", id, token);
      rc = 1;
    }
    flock(fd, LOCK_UN);
  }
  close(fd);
  return rc;
}
