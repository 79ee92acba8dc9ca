/* See tool_run.h. */
#include "tool_run.h"

#include <fcntl.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness.h"

static void child(const char *const *argv, const char *const *env, int out, int err) {
  for (; env && *env; env++) {
    const char *eq = strchr(*env, '=');
    if (!eq) {
      unsetenv(*env);
      continue;
    }
    char name[128];
    snprintf(name, sizeof name, "%.*s", (int)(eq - *env), *env);
    setenv(name, eq + 1, 1);
  }
  int null = open("/dev/null", O_RDONLY);
  dup2(null, 0);
  dup2(out, 1);
  dup2(err, 2);
  for (int fd = 3; fd < 1024; fd++) close(fd);
  execv(argv[0], (char *const *)argv);
  _exit(99);
}

typedef struct sink {
  int fd;
  char *buf;
  size_t len, cap;
} sink;

/* One read into s; 0 at EOF. */
static int drain(sink *s) {
  if (s->len + 4096 + 1 > s->cap) {
    s->cap = s->cap * 2 + 8192;
    s->buf = realloc(s->buf, s->cap);
    TH_ASSERT(s->buf != NULL);
  }
  ssize_t n = read(s->fd, s->buf + s->len, s->cap - s->len - 1);
  if (n > 0) s->len += (size_t)n;
  s->buf[s->len] = '\0';
  return n > 0;
}

th_run th_run_tool(const char *const *args, const char *const *env, int join) {
  const char *argv[64] = {getenv("SLUICE_BIN")};
  int n = 1, o[2], e[2];
  TH_ASSERT(argv[0] != NULL);
  for (; args[n - 1] && n < 63; n++) argv[n] = args[n - 1];
  argv[n] = NULL;
  TH_ASSERT(pipe(o) == 0 && pipe(e) == 0);
  pid_t pid = fork();
  TH_ASSERT(pid >= 0);
  if (pid == 0) child(argv, env, o[1], join ? o[1] : e[1]);
  close(o[1]);
  close(e[1]);
  sink s[2] = {{o[0], calloc(1, 1), 0, 1}, {e[0], calloc(1, 1), 0, 1}};
  TH_ASSERT(s[0].buf && s[1].buf);
  for (int open_pipes = 2; open_pipes > 0;) { /* poll skips a closed one's -1 */
    struct pollfd p[2] = {{s[0].fd, POLLIN, 0}, {s[1].fd, POLLIN, 0}};
    TH_ASSERT(poll(p, 2, -1) > 0);
    for (int i = 0; i < 2; i++)
      if (s[i].fd >= 0 && p[i].revents && !drain(&s[i])) {
        close(s[i].fd);
        s[i].fd = -1;
        open_pipes--;
      }
  }
  int st;
  TH_ASSERT_EQ(waitpid(pid, &st, 0), pid);
  th_run r = {WIFEXITED(st) ? WEXITSTATUS(st) : -1, s[0].buf, s[1].buf};
  return r;
}

void th_run_free(th_run *r) {
  free(r->out);
  free(r->err);
  r->out = r->err = NULL;
}
