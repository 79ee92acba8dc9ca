/* The harness's runner for the sluice tool: one child process, its argv
 * built from words, its output collected or logged, its exit awaited with
 * a deadline. */
#include <fcntl.h>
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
