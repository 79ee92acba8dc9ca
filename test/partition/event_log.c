/* The per-process event log: see event_log.h. */
#include "event_log.h"

#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <time.h>
#include <unistd.h>

static int log_fd = -1;
static char log_name[32];

int event_log_open(const char *path, const char *name) {
  log_fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  snprintf(log_name, sizeof log_name, "%s", name);
  return log_fd >= 0 ? 0 : -1;
}

void event_log_close(void) {
  if (log_fd >= 0) close(log_fd);
  log_fd = -1;
}

int64_t event_log_now_us(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

void event_log(const char *fmt, ...) {
  char line[512];
  int n = snprintf(line, sizeof line, "%lld %s ", (long long)event_log_now_us(), log_name);
  va_list ap;
  va_start(ap, fmt);
  int m = vsnprintf(line + n, sizeof line - (size_t)n - 1, fmt, ap);
  va_end(ap);
  n += m < 0 ? 0 : (m > (int)sizeof line - n - 2 ? (int)sizeof line - n - 2 : m);
  line[n++] = '\n';
  if (log_fd >= 0 && write(log_fd, line, (size_t)n) < 0) {} /* nothing better to do */
}
