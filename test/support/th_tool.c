/* The harness's runner for the sluice tool: one child process, its argv
 * built from words, its output collected or logged, its exit awaited with
 * a deadline. */
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness.h"

void th_argv_addv(th_argv *a, va_list ap) {
  const char *w;
  int cap = (int)(sizeof a->v / sizeof a->v[0]) - 2; /* the binary, NULL */
  while ((w = va_arg(ap, const char *)) != NULL) {
    if (a->n >= cap) th_fail(__FILE__, __LINE__, "more than %d tool arguments", cap);
    a->v[a->n++] = w;
  }
}

void th_argv_add(th_argv *a, ...) {
  va_list ap;
  va_start(ap, a);
  th_argv_addv(a, ap);
  va_end(ap);
}

static const char *tool_bin(void) {
  const char *bin = getenv("SLUICE_BIN");
  if (!bin) th_fail(__FILE__, __LINE__, "SLUICE_BIN not set");
  return bin;
}

/* In the child: stdin from /dev/null, stdout/stderr to out/err (-1: keep),
 * nothing else open, then exec. */
static void exec_tool(const th_argv *a, int out, int err) {
  const char *argv[sizeof a->v / sizeof a->v[0]];
  argv[0] = tool_bin();
  memcpy(argv + 1, a->v, (size_t)a->n * sizeof *argv);
  argv[a->n + 1] = NULL;
  int null = open("/dev/null", O_RDONLY);
  if (null >= 0) dup2(null, 0);
  if (out >= 0) dup2(out, 1);
  if (err >= 0) dup2(err, 2);
  for (int fd = 3; fd < 1024; fd++) close(fd);
  execv(argv[0], (char *const *)argv);
  _exit(99);
}

pid_t th_tool_start(const th_argv *a, const char *log) {
  tool_bin();
  pid_t pid = fork();
  TH_ASSERT(pid >= 0);
  if (pid == 0) {
    int fd = log ? open(log, O_WRONLY | O_CREAT | O_APPEND, 0600) : -1;
    if (log && fd < 0) _exit(98);
    exec_tool(a, fd, fd);
  }
  return pid;
}

pid_t th_tool_start_piped(const th_argv *a, int *out) {
  tool_bin();
  int fds[2];
  TH_ASSERT(pipe(fds) == 0);
  pid_t pid = fork();
  TH_ASSERT(pid >= 0);
  if (pid == 0) exec_tool(a, fds[1], -1);
  close(fds[1]);
  *out = fds[0];
  return pid;
}

int th_tool_wait(pid_t pid, unsigned timeout_ms) {
  uint64_t end = th_now_ms() + timeout_ms;
  int st;
  pid_t r;
  while ((r = waitpid(pid, &st, WNOHANG)) == 0 && th_now_ms() < end) usleep(5000);
  if (r == 0) {
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
    th_fail(__FILE__, __LINE__, "pid %ld did not exit within %u ms", (long)pid, timeout_ms);
  }
  TH_ASSERT_EQ(r, pid);
  TH_ASSERT(WIFEXITED(st));
  return WEXITSTATUS(st);
}

/* Read fd to its end, keeping the first cap - 1 bytes. */
static void read_all(int fd, char *buf, size_t cap) {
  size_t len = 0;
  ssize_t got;
  char sink[4096];
  while ((got = read(fd, len < cap - 1 ? buf + len : sink,
                     len < cap - 1 ? cap - 1 - len : sizeof sink)) > 0)
    if (len < cap - 1) len += (size_t)got;
  buf[len] = '\0';
}

void th_tool_run(th_tool_out *r, const th_argv *a, int join) {
  int o[2], e[2];
  TH_ASSERT(pipe(o) == 0 && pipe(e) == 0);
  tool_bin();
  pid_t pid = fork();
  TH_ASSERT(pid >= 0);
  if (pid == 0) exec_tool(a, o[1], join ? o[1] : e[1]);
  close(o[1]);
  close(e[1]);
  read_all(o[0], r->out, sizeof r->out); /* short: stderr's pipe cannot fill meanwhile */
  read_all(e[0], r->err, sizeof r->err);
  close(o[0]);
  close(e[0]);
  r->status = th_tool_wait(pid, 120000);
}

/* In the child: env's changes ("NAME=VALUE" sets, "NAME" unsets). */
static void change_env(const char *const *env) {
  for (; env && *env; env++) {
    const char *eq = strchr(*env, '=');
    char name[128];
    if (!eq) {
      unsetenv(*env);
      continue;
    }
    snprintf(name, sizeof name, "%.*s", (int)(eq - *env), *env);
    setenv(name, eq + 1, 1);
  }
}

typedef struct sink {
  int fd;
  char *buf;
  size_t len, cap;
} sink;

/* One read into s, growing it; 0 at EOF. */
static int drain(sink *s) {
  if (s->len + 4096 + 1 > s->cap) {
    s->cap = s->cap * 2 + 8192;
    TH_ASSERT((s->buf = realloc(s->buf, s->cap)) != NULL);
  }
  ssize_t n = read(s->fd, s->buf + s->len, s->cap - s->len - 1);
  if (n > 0) s->len += (size_t)n;
  s->buf[s->len] = '\0';
  return n > 0;
}

th_run th_tool_capture(const char *const *words, const char *const *env, int join) {
  th_argv args = {{0}, 0}, *a = &args;
  int cap = (int)(sizeof a->v / sizeof a->v[0]) - 2; /* the binary, NULL */
  for (; *words; words++) {
    if (a->n >= cap) th_fail(__FILE__, __LINE__, "more than %d tool arguments", cap);
    a->v[a->n++] = *words;
  }
  int o[2], e[2];
  TH_ASSERT(pipe(o) == 0 && pipe(e) == 0);
  tool_bin();
  pid_t pid = fork();
  TH_ASSERT(pid >= 0);
  if (pid == 0) {
    change_env(env);
    exec_tool(a, o[1], join ? o[1] : e[1]);
  }
  close(o[1]);
  close(e[1]);
  sink s[2] = {{o[0], calloc(1, 1), 0, 1}, {e[0], calloc(1, 1), 0, 1}};
  TH_ASSERT(s[0].buf && s[1].buf);
  /* Both at once: either may fill its pipe while the other is read. */
  for (int open_pipes = 2; open_pipes > 0;) {
    struct pollfd p[2] = {{s[0].fd, POLLIN, 0}, {s[1].fd, POLLIN, 0}};
    TH_ASSERT(poll(p, 2, -1) > 0); /* poll skips a closed one's -1 */
    for (int i = 0; i < 2; i++)
      if (s[i].fd >= 0 && p[i].revents && !drain(&s[i])) {
        close(s[i].fd);
        s[i].fd = -1;
        open_pipes--;
      }
  }
  th_run r = {th_tool_wait(pid, 120000), s[0].buf, s[1].buf};
  return r;
}

void th_run_free(th_run *r) {
  free(r->out);
  free(r->err);
  r->out = r->err = NULL;
}
