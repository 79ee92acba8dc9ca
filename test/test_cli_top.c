/* `sluice top --once` as a separate process against the test server, with
 * a semaphore holder and a queued waiter, a queue with due and delayed
 * messages and limiter keys set up in process; the tool's output is read
 * from a pipe watched by the loop (so the waiter keeps heart-beating). */
#include <fcntl.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <event2/event.h>
#include <sluice/sluice.h>

#include "harness.h"
#include "prom_check.h"

typedef struct ctx {
  int flag;
  int want, reached; /* replies expected, and all of them came */
  int status;
  sluice_permit *permit;
  size_t nwaiters;
  char out[16384];
  size_t len;
  int eof;
} ctx;

static void on_acq(sluice_sem *s, int status, sluice_permit *p, void *ud) {
  ctx *c = ud;
  c->status = status;
  c->permit = p;
  c->flag = 1;
}
static void on_waiter(sluice_sem *s, int status, sluice_permit *p, void *ud) {
  if (p) sluice_permit_release(p, NULL, NULL);
}
static void on_info(sluice_sem *s, int status, const sluice_sem_info *info, void *ud) {
  ctx *c = ud;
  c->nwaiters = info ? info->nwaiters : 0;
  c->flag = 1;
}
/* The semaphore's waiters as Redis has them now. */
static size_t waiters_seen(struct event_base *base, sluice_sem *sem, ctx *c) {
  c->flag = 0;
  TH_ASSERT_EQ(sluice_sem_inspect(sem, on_info, c), SLUICE_OK);
  TH_ASSERT(th_loop_until(base, &c->flag, 5000));
  return c->nwaiters;
}
static void on_push(sluice_dq *dq, int status, const char *id, int64_t due, void *ud) {
  ctx *c = ud;
  TH_ASSERT_EQ(status, SLUICE_OK);
  if (++c->flag == c->want) c->reached = 1;
}
static void on_rl(sluice_limiter *l, int status, const sluice_rl_result *r, void *ud) {
  ctx *c = ud;
  TH_ASSERT_EQ(status, SLUICE_OK);
  if (++c->flag == c->want) c->reached = 1;
}
static void on_read(evutil_socket_t fd, short what, void *ud) {
  ctx *c = ud;
  ssize_t n = read(fd, c->out + c->len, sizeof c->out - 1 - c->len);
  if (n > 0) c->len += (size_t)n;
  else c->eof = 1;
  c->out[c->len] = '\0';
}

/* Run `sluice top MODE [NAME]` (MODE: --once or --prometheus) and collect
 * its output while the loop runs. */
static int run_top(struct event_base *base, ctx *c, const char *mode, const char *name) {
  int fds[2];
  TH_ASSERT(pipe(fds) == 0);
  pid_t pid = fork();
  TH_ASSERT(pid >= 0);
  if (pid == 0) {
    dup2(fds[1], 1);
    close(fds[0]);
    execl(getenv("SLUICE_BIN"), "sluice", "top", mode, "--redis", th_server.url, name ? name : mode,
          (char *)NULL);
    _exit(99);
  }
  close(fds[1]);
  c->len = 0;
  c->eof = 0;
  struct event *ev = event_new(base, fds[0], EV_READ | EV_PERSIST, on_read, c);
  event_add(ev, NULL);
  TH_ASSERT(th_loop_until(base, &c->eof, 20000));
  event_free(ev);
  close(fds[0]);
  int st;
  TH_ASSERT_EQ(waitpid(pid, &st, 0), pid);
  TH_ASSERT(WIFEXITED(st));
  return WEXITSTATUS(st);
}

static void test_once(void) {
  struct event_base *base = event_base_new();
  sluice_client_options o;
  sluice_client *cl;
  sluice_sem *sem;
  sluice_dq *dq;
  sluice_limiter *gcra, *fixed;
  ctx c;
  memset(&c, 0, sizeof c);
  th_client_options(&o, th_server.url);
  cl = th_client_with(base, &o);

  TH_ASSERT_EQ(sluice_sem_new(cl, "web", NULL, &sem), SLUICE_OK);
  TH_ASSERT_EQ(sluice_sem_try_acquire(sem, on_acq, &c), SLUICE_OK);
  TH_ASSERT(th_loop_until(base, &c.flag, 5000));
  TH_ASSERT_EQ(c.status, SLUICE_OK);
  sluice_acquire *waiter;
  TH_ASSERT_EQ(sluice_sem_acquire(sem, 0, on_waiter, NULL, &waiter), SLUICE_OK);
  TH_LOOP_UNTIL(base, waiters_seen(base, sem, &c) > 0, 5000); /* queued in Redis */
  TH_ASSERT_CMP(c.nwaiters, >, 0);

  TH_ASSERT_EQ(sluice_dq_new(cl, "jobs", NULL, &dq), SLUICE_OK);
  sluice_dq_item now = {"a", 1, 0, 0, NULL}, later = {"b", 1, 600000, 0, NULL};
  c.flag = c.reached = 0;
  c.want = 3;
  TH_ASSERT_EQ(sluice_dq_push(dq, &now, on_push, &c), SLUICE_OK);
  TH_ASSERT_EQ(sluice_dq_push(dq, &now, on_push, &c), SLUICE_OK);
  TH_ASSERT_EQ(sluice_dq_push(dq, &later, on_push, &c), SLUICE_OK);
  TH_ASSERT(th_loop_until(base, &c.reached, 5000));

  sluice_limiter_options lo;
  sluice_limiter_options_init(&lo);
  lo.algo = SLUICE_RL_GCRA;
  lo.limit = 10;
  lo.period_ms = 600000;
  TH_ASSERT_EQ(sluice_limiter_new(cl, "api", &lo, &gcra), SLUICE_OK);
  lo.algo = SLUICE_RL_FIXED;
  TH_ASSERT_EQ(sluice_limiter_new(cl, "login", &lo, &fixed), SLUICE_OK);
  c.flag = c.reached = 0;
  c.want = 2;
  TH_ASSERT_EQ(sluice_limiter_check(gcra, "user:1", 1, on_rl, &c), SLUICE_OK);
  TH_ASSERT_EQ(sluice_limiter_check(fixed, "10.0.0.1", 3, on_rl, &c), SLUICE_OK);
  TH_ASSERT(th_loop_until(base, &c.reached, 5000));

  TH_ASSERT_EQ(run_top(base, &c, "--once", NULL), 0);
  static char copy[sizeof c.out];
  memcpy(copy, c.out, sizeof copy);
  th_note("output:\n");
  for (char *line = strtok(copy, "\n"); line; line = strtok(NULL, "\n")) th_note("  %s\n", line);
  TH_ASSERT(!strchr(c.out, '\033'));
  TH_ASSERT(strstr(c.out, "SEMAPHORES\n  web "));
  TH_ASSERT(strstr(c.out, "holders 1    waiters 1"));
  char holder[80];
  snprintf(holder, sizeof holder, "holder  %s  lease left ", sluice_permit_id(c.permit));
  TH_ASSERT(strstr(c.out, holder));
  TH_ASSERT(strstr(c.out, "waiter  1. "));
  TH_ASSERT(strstr(c.out, "  jobs                    2          1          0      0  "));
  TH_ASSERT(strstr(c.out, "  api              user:1               gcra             tat +"));
  TH_ASSERT(
      strstr(c.out, "  login            10.0.0.1             fixed            n=3 in window"));
  TH_ASSERT(!strstr(c.out, "incomplete"));

  /* Named: only those objects. */
  TH_ASSERT_EQ(run_top(base, &c, "--once", "login"), 0);
  TH_ASSERT(!strstr(c.out, "web"));
  TH_ASSERT(!strstr(c.out, "jobs"));
  TH_ASSERT(!strstr(c.out, "user:1"));
  TH_ASSERT(strstr(c.out, "10.0.0.1"));

  /* The same state as Prometheus gauges, and the tool's own metrics. */
  TH_ASSERT_EQ(run_top(base, &c, "--prometheus", NULL), 0);
  prom_check_text(c.out);
  TH_ASSERT_EQ(prom_value(c.out, "sluice_sem_holders{name=\"web\"}"), 1);
  TH_ASSERT_EQ(prom_value(c.out, "sluice_sem_waiters{name=\"web\"}"), 1);
  TH_ASSERT_EQ(prom_value(c.out, "sluice_dq_messages{name=\"jobs\",state=\"due\"}"), 2);
  TH_ASSERT_EQ(prom_value(c.out, "sluice_dq_messages{name=\"jobs\",state=\"later\"}"), 1);
  TH_ASSERT_EQ(prom_value(c.out, "sluice_dq_messages{name=\"jobs\",state=\"in_flight\"}"), 0);
  TH_ASSERT_EQ(prom_value(c.out, "sluice_client_connection_up{connection=\"command\"}"), 1);
  TH_ASSERT_CMP(prom_value(c.out, "sluice_step_completed_total{step=\"sem_status\"}"), >=, 1);
  TH_ASSERT(!strstr(c.out, "user:1")); /* no limiter keys */
  prom_check_promtool(c.out);

  sluice_acquire_cancel(waiter);
  sluice_permit_release(c.permit, NULL, NULL);
  sluice_limiter_free(gcra);
  sluice_limiter_free(fixed);
  sluice_dq_free(dq);
  sluice_sem_free(sem);
  sluice_client_free(cl);
  TH_ASSERT(th_loop_drain(base, 10000));
  event_base_free(base);
}

/* The live view in a real terminal: tmux runs `sluice top` and its pane
 * must show a frame, then a later one. Skipped without tmux. */
static int pane_has(const char *session, const char *needle, char *last, size_t size) {
  char cmd[128];
  snprintf(cmd, sizeof cmd, "tmux capture-pane -p -t %s 2>/dev/null", session);
  FILE *p = popen(cmd, "r");
  if (!p) return 0;
  size_t n = fread(last, 1, size - 1, p);
  last[n] = '\0';
  pclose(p);
  return strstr(last, needle) != NULL;
}

static void test_tmux(void) {
  if (system("command -v tmux >/dev/null 2>&1") != 0) {
    th_note("tmux not installed: live view not checked\n");
    return;
  }
  struct event_base *base = event_base_new();
  sluice_client_options o;
  sluice_client *cl;
  sluice_sem *sem;
  ctx c;
  memset(&c, 0, sizeof c);
  th_client_options(&o, th_server.url);
  cl = th_client_with(base, &o);
  TH_ASSERT_EQ(sluice_sem_new(cl, "tty", NULL, &sem), SLUICE_OK);
  TH_ASSERT_EQ(sluice_sem_try_acquire(sem, on_acq, &c), SLUICE_OK);
  TH_ASSERT(th_loop_until(base, &c.flag, 5000));
  char session[32], cmd[1024], pane[8192];
  snprintf(session, sizeof session, "sluicetop%d", (int)getpid());
  snprintf(cmd, sizeof cmd,
           "tmux new-session -d -s %s -x 120 -y 30 '%s top --redis %s --interval 100'", session,
           getenv("SLUICE_BIN"), th_server.url);
  TH_ASSERT_EQ(system(cmd), 0);
  /* No event says the pane changed: look every 20 ms, for up to 10 s. */
  int never = 0, seen = 0;
  for (int i = 0; i < 500 && !(seen = pane_has(session, "tty ", pane, sizeof pane)); i++)
    th_loop_until(base, &never, 20);
  TH_ASSERT(seen);
  TH_ASSERT(strstr(pane, "holders 1"));
  TH_ASSERT(strstr(pane, sluice_permit_id(c.permit)));
  /* Redrawn: the clock in the title line moves on. */
  char first[64];
  const char *title = strstr(pane, "sluice:  ");
  TH_ASSERT(title);
  snprintf(first, sizeof first, "%.28s", title);
  int moved = 0;
  for (int i = 0; i < 300 && !moved; i++) {
    th_loop_until(base, &never, 20);
    moved = !pane_has(session, first, pane, sizeof pane) && strstr(pane, "SEMAPHORES");
  }
  snprintf(cmd, sizeof cmd, "tmux kill-session -t %s", session);
  TH_ASSERT_EQ(system(cmd), 0);
  TH_ASSERT(moved);
  sluice_permit_release(c.permit, NULL, NULL);
  sluice_sem_free(sem);
  sluice_client_free(cl);
  TH_ASSERT(th_loop_drain(base, 10000));
  event_base_free(base);
}

int main(int argc, char **argv) {
  static const th_case cases[] = {
      {"once", test_once, 60},
      {"tmux", test_tmux, 60},
      {NULL, NULL, 0},
  };
  return th_main(argc, argv, cases);
}
