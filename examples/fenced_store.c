/*
 * A fenced resource: a file that accepts a write only with a fencing token
 * at least as high as every token it accepted before.
 *
 *   fenced_store [REDIS_URL [FILE [TEXT]]]
 *
 * Takes the one permit of the semaphore "fenced-store", writes TEXT to FILE
 * (default ./fenced-store.txt) with the permit's token, and releases. The
 * file's first line is the highest token accepted; check and write happen
 * under one flock(2), so they are one step for every process on the host.
 * A holder whose lease was lost (paused past it, or cut off with a deposed
 * master) is refused once a newer holder wrote: exit status 3.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <unistd.h>

#include <event2/event.h>
#include <sluice/sluice.h>

static const char *path = "fenced-store.txt", *text = "hello";
static int result = 1;

/* 0: written; 1: refused (a higher token was accepted); -1: an I/O error. */
static int store_write(uint64_t token, const char *what) {
  int fd = open(path, O_RDWR | O_CREAT, 0644);
  if (fd < 0) return -1;
  int rc = -1;
  if (flock(fd, LOCK_EX) == 0) {
    char buf[32] = "";
    ssize_t n = pread(fd, buf, sizeof buf - 1, 0);
    uint64_t highest = n > 0 ? strtoull(buf, NULL, 10) : 0;
    if (token < highest) {
      rc = 1;
    } else if (ftruncate(fd, 0) == 0 && dprintf(fd, "%" PRIu64 "\n%s\n", token, what) > 0 &&
               fsync(fd) == 0) {
      rc = 0;
    }
  }
  close(fd); /* drops the lock */
  return rc;
}

static void on_released(sluice_sem *sem, int status, void *client) {
  (void)status;
  sluice_sem_free(sem);
  sluice_client_close(client, NULL, NULL);
}

static void on_acquired(sluice_sem *sem, int status, sluice_permit *permit, void *client) {
  if (status != SLUICE_OK) {
    fprintf(stderr, "acquire: %s\n", sluice_strerror(status));
    on_released(sem, status, client);
    return;
  }
  uint64_t token = sluice_permit_fence(permit);
  int rc = store_write(token, text);
  if (rc == 0) printf("wrote with token %" PRIu64 "\n", token);
  else if (rc == 1) printf("refused: token %" PRIu64 " is stale\n", token);
  else fprintf(stderr, "%s: %s\n", path, strerror(errno));
  result = rc == 0 ? 0 : rc == 1 ? 3 : 1;
  if (sluice_permit_release(permit, on_released, client) != SLUICE_OK)
    on_released(sem, SLUICE_OK, client);
}

int main(int argc, char **argv) {
  if (argc > 2) path = argv[2];
  if (argc > 3) text = argv[3];
  struct event_base *base = event_base_new();
  sluice_client_options copts;
  sluice_client_options_init(&copts);
  copts.url = argc > 1 ? argv[1] : "redis://127.0.0.1:6379";
  sluice_client *client;
  if (!base || sluice_client_new(base, &copts, &client) != SLUICE_OK) return 1;
  sluice_sem_options sopts;
  sluice_sem_options_init(&sopts);
  sopts.permits = 1;
  sluice_sem *sem = NULL;
  int rc = sluice_sem_new(client, "fenced-store", &sopts, &sem);
  if (rc == SLUICE_OK) rc = sluice_sem_acquire(sem, 5000, on_acquired, client, NULL);
  if (rc != SLUICE_OK) {
    fprintf(stderr, "%s\n", sluice_strerror(rc));
    sluice_sem_free(sem);
    sluice_client_close(client, NULL, NULL);
  }
  event_base_dispatch(base);
  event_base_free(base);
  return result;
}
