/* `sluice top --once` as a separate process against the test server, with
 * a semaphore holder and a queued waiter, a queue with due and delayed
 * messages and limiter keys set up in process; the tool's output is read
 * from a pipe watched by the loop (so the waiter keeps heart-beating). */
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <event2/buffer.h>
#include <event2/event.h>
#include <event2/http.h>
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
/* A new semaphore name of cl (options so, or the defaults) whose permit
 * try_acquire granted into c->permit. */
static sluice_sem *sem_held(struct event_base *base, sluice_client *cl, const char *name,
                            const sluice_sem_options *so, ctx *c) {
  sluice_sem *sem;
  TH_ASSERT_EQ(sluice_sem_new(cl, name, so, &sem), SLUICE_OK);
  TH_ASSERT_EQ(sluice_sem_try_acquire(sem, on_acq, c), SLUICE_OK);
  TH_ASSERT(th_loop_until(base, &c->flag, 5000));
  TH_ASSERT_EQ(c->status, SLUICE_OK);
  return sem;
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

/* Run `sluice top ARGS... --redis URL` and collect its output while the
 * loop runs. */
static int run_top_argv(struct event_base *base, ctx *c, const char *const *args) {
  th_argv a = {.n = 0};
  th_argv_add(&a, "top", NULL);
  while (*args && a.n < 44) a.v[a.n++] = *args++;
  th_argv_add(&a, "--redis", th_server.url, NULL);
  int fd;
  pid_t pid = th_tool_start_piped(&a, &fd);
  c->len = 0;
  c->eof = 0;
  struct event *ev = event_new(base, fd, EV_READ | EV_PERSIST, on_read, c);
  event_add(ev, NULL);
  TH_ASSERT(th_loop_until(base, &c->eof, 20000));
  event_free(ev);
  close(fd);
  int st;
  TH_ASSERT_EQ(waitpid(pid, &st, 0), pid);
  TH_ASSERT(WIFEXITED(st));
  return WEXITSTATUS(st);
}

/* `sluice top MODE [NAME]` (MODE: --once or --prometheus). */
static int run_top(struct event_base *base, ctx *c, const char *mode, const char *name) {
  const char *args[] = {mode, name, NULL};
  return run_top_argv(base, c, args);
}

static void test_once(void) {
  struct event_base *base = event_base_new();
  sluice_client_options o;
  sluice_client *cl;
  sluice_dq *dq;
  sluice_limiter *gcra, *fixed;
  ctx c;
  memset(&c, 0, sizeof c);
  th_client_options(&o, th_server.url);
  cl = th_client_with(base, &o);

  sluice_sem *sem = sem_held(base, cl, "web", NULL, &c);
  sluice_acquire *waiter;
  TH_ASSERT_EQ(sluice_sem_acquire(sem, 0, on_waiter, NULL, &waiter), SLUICE_OK);
  TH_LOOP_UNTIL(base, waiters_seen(base, sem, &c) > 0, 5000); /* queued in Redis */
  TH_ASSERT_CMP(c.nwaiters, >, 0);

  TH_ASSERT_EQ(sluice_dq_new(cl, "jobs", NULL, &dq), SLUICE_OK);
  sluice_dq_item now = {"a", 1, 0, 0, NULL}, later = {"b", 1, 600000, 0, NULL};
  c.flag = c.reached = 0;
  c.want = 3;
  /* The priority-7 one first: the next message is the earliest due, so
   * pushed second it would be next only when both landed in one ms. */
  TH_ASSERT_EQ(sluice_dq_push_ex(dq, &now, 7, SLUICE_DQ_REFUSE, on_push, &c), SLUICE_OK);
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
  TH_ASSERT(strstr(c.out, "    next message: priority 7\n"));
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
  TH_ASSERT_EQ(prom_value(c.out, "sluice_dq_next_priority{name=\"jobs\"}"), 7);
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
  th_free_client_and_loop(base, cl, 10000);
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
  ctx c;
  memset(&c, 0, sizeof c);
  th_client_options(&o, th_server.url);
  cl = th_client_with(base, &o);
  sluice_sem *sem = sem_held(base, cl, "tty", NULL, &c);
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
  th_free_client_and_loop(base, cl, 10000);
}

/* ---- --scrape: a process's own counters over HTTP ------------------------ */

/* A 200 answer of the len bytes at text. */
static void send_text(struct evhttp_request *req, const char *text, size_t len) {
  struct evbuffer *body = evbuffer_new();
  evbuffer_add(body, text, len);
  evhttp_send_reply(req, 200, "OK", body);
  evbuffer_free(body);
}

/* /metrics serves the client's own exposition, as an application would;
 * /big a reply over top's 1 MiB cap; /bad text that is not Prometheus's. */
static void serve_metrics(struct evhttp_request *req, void *ud) {
  char *text;
  size_t len;
  TH_ASSERT_EQ(sluice_client_prometheus(ud, &text, &len), SLUICE_OK);
  send_text(req, text, len);
  sluice_prometheus_free(text);
}
static void serve_big(struct evhttp_request *req, void *ud) {
  size_t size = (1 << 20) + 64;
  char *junk = malloc(size);
  memset(junk, '#', size);
  junk[size - 1] = '\n';
  send_text(req, junk, size);
  free(junk);
}
static void serve_bad(struct evhttp_request *req, void *ud) {
  static const char bad[] = "sluice_client_record_entries{a=\"b 12\n";
  send_text(req, bad, sizeof bad - 1);
}

static int bound_port(int fd) {
  struct sockaddr_in sin;
  socklen_t len = sizeof sin;
  TH_ASSERT(getsockname(fd, (struct sockaddr *)&sin, &len) == 0);
  return ntohs(sin.sin_port);
}

/* A loopback socket bound to a port of its own; listening (the kernel
 * completes connections, nothing ever answers) or not. */
static int loopback_socket(int listening) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in sin = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  TH_ASSERT(bind(fd, (struct sockaddr *)&sin, sizeof sin) == 0);
  if (listening) TH_ASSERT(listen(fd, 8) == 0);
  return fd;
}

/* A loopback port nothing listens on: bound, then closed. */
static int closed_port(void) {
  int fd = loopback_socket(0);
  int port = bound_port(fd);
  close(fd);
  return port;
}

/* The numbers of the PROCESSES row ending with url; its failure text
 * (copied to why) when it shows one instead. */
static int scrape_row(const char *out, const char *url, unsigned long long *v, char *oldest,
                      char *replayed, char *why, size_t size) {
  const char *processes = strstr(out, "\nPROCESSES ");
  TH_ASSERT(processes);
  char pattern[160];
  snprintf(pattern, sizeof pattern, "  %s\n", url);
  const char *end = strstr(processes, pattern);
  TH_ASSERT(end);
  const char *start = end;
  while (start > processes && start[-1] != '\n') start--;
  int n = sscanf(start, "%llu %llu %15s %llu %31s %llu %llu %llu %llu %llu", &v[0], &v[1], oldest,
                 &v[2], replayed, &v[3], &v[4], &v[5], &v[6], &v[7]);
  snprintf(why, size, "%.*s", (int)(end - start), start);
  return n;
}

static void test_scrape(void) {
  struct event_base *base = event_base_new();
  sluice_client_options o;
  sluice_dq *dq;
  ctx c;
  memset(&c, 0, sizeof c);
  th_redis r; /* the application's own Redis, restarted below */
  TH_ASSERT_EQ(th_redis_start(&r, 0, NULL), 0);
  th_client_options(&o, r.url);
  o.replay_window_ms = 600000; /* a single Redis: the record keeps the pushes */
  sluice_client *cl = th_client_with(base, &o);

  /* The application: a held permit and a waiter queued behind it, three
   * pushes in its record, replayed after a restart that lost them all. */
  sluice_sem_options so;
  sluice_sem_options_init(&so);
  so.permits = 1;
  sluice_sem *sem = sem_held(base, cl, "scraped", &so, &c);
  sluice_acquire *waiter;
  TH_ASSERT_EQ(sluice_sem_acquire(sem, 0, on_waiter, NULL, &waiter), SLUICE_OK);
  TH_ASSERT_EQ(sluice_dq_new(cl, "scraped", NULL, &dq), SLUICE_OK);
  sluice_dq_item items[3] = {{"p1", 1, 0, 0, NULL}, {"p2", 1, 0, 0, NULL}, {"p3", 1, 0, 0, NULL}};
  c.flag = c.reached = 0;
  c.want = 3;
  for (int i = 0; i < 3; i++) TH_ASSERT_EQ(sluice_dq_push(dq, &items[i], on_push, &c), SLUICE_OK);
  TH_ASSERT(th_loop_until(base, &c.reached, 5000));
  th_redis_respawn(&r, NULL);
  sluice_client_metrics m;
  TH_LOOP_UNTIL(
      base, (sluice_client_get_metrics(cl, &m), m.replay_pushes == 3 && m.permits_restored == 1),
      10000);
  TH_ASSERT_EQ(m.replay_pushes, 3);
  TH_ASSERT_EQ(m.permits_restored, 1);
  TH_ASSERT_CMP(m.record_entries, >=, 3);

  struct evhttp *http = evhttp_new(base);
  struct evhttp_bound_socket *bound = evhttp_bind_socket_with_handle(http, "127.0.0.1", 0);
  TH_ASSERT(bound);
  evhttp_set_cb(http, "/metrics", serve_metrics, cl);
  evhttp_set_cb(http, "/big", serve_big, NULL);
  evhttp_set_cb(http, "/bad", serve_bad, NULL);
  int port = bound_port(evhttp_bound_socket_get_fd(bound));
  char good[64], big[64], bad[64], missing[64], refused[64];
  snprintf(good, sizeof good, "http://127.0.0.1:%d/metrics", port);
  snprintf(big, sizeof big, "http://127.0.0.1:%d/big", port);
  snprintf(bad, sizeof bad, "http://127.0.0.1:%d/bad", port);
  snprintf(missing, sizeof missing, "http://127.0.0.1:%d/none", port);
  snprintf(refused, sizeof refused, "http://127.0.0.1:%d/metrics", closed_port());
  int silent_fd = loopback_socket(1);
  char silent[64];
  snprintf(silent, sizeof silent, "http://127.0.0.1:%d/metrics", bound_port(silent_fd));
  const char *args[] = {"--once",   "--scrape", good,       "--scrape", big,
                        "--scrape", bad,        "--scrape", missing,    "--scrape",
                        refused,    "--scrape", silent,     NULL};
  TH_ASSERT_EQ(run_top_argv(base, &c, args), 0);
  th_note("output:\n%s", c.out);

  unsigned long long v[8];
  char oldest[16], replayed[32], why[160];
  TH_ASSERT_EQ(scrape_row(c.out, good, v, oldest, replayed, why, sizeof why), 10);
  TH_ASSERT_EQ(v[0], m.record_entries);
  TH_ASSERT_EQ(v[1], m.record_bytes);
  TH_ASSERT(strcmp(oldest, "-") != 0); /* an age, the record not being empty */
  TH_ASSERT_EQ(v[2], 0);               /* nothing dropped */
  TH_ASSERT_STR_EQ(replayed, "0/3/0/0");
  TH_ASSERT_EQ(v[3], 1); /* the permit, put back */
  TH_ASSERT_EQ(v[4], 0);
  TH_ASSERT_EQ(v[5], 1); /* the waiter */
  TH_ASSERT_EQ(v[6], 0);
  TH_ASSERT_EQ(v[7], 0);
  scrape_row(c.out, big, v, oldest, replayed, why, sizeof why);
  TH_ASSERT(strstr(why, "refused: reply over 1 MiB"));
  scrape_row(c.out, bad, v, oldest, replayed, why, sizeof why);
  TH_ASSERT(strstr(why, "bad reply"));
  scrape_row(c.out, missing, v, oldest, replayed, why, sizeof why);
  TH_ASSERT(strstr(why, "bad reply (HTTP 404)"));
  scrape_row(c.out, refused, v, oldest, replayed, why, sizeof why);
  TH_ASSERT(strstr(why, "unreachable"));
  scrape_row(c.out, silent, v, oldest, replayed, why, sizeof why);
  TH_ASSERT(strstr(why, "timeout")); /* after the tool's 5 s */
  close(silent_fd);

  /* Refused at once: credentials (never echoed), a scheme other than
   * http, with --prometheus. */
  const char *secret[] = {"--once", "--scrape", "http://u:hunter2@127.0.0.1:1/", NULL};
  TH_ASSERT_EQ(run_top_argv(base, &c, secret), 64);
  const char *https[] = {"--once", "--scrape", "https://127.0.0.1:1/", NULL};
  TH_ASSERT_EQ(run_top_argv(base, &c, https), 64);
  const char *prom[] = {"--prometheus", "--scrape", good, NULL};
  TH_ASSERT_EQ(run_top_argv(base, &c, prom), 64);

  evhttp_free(http);
  sluice_acquire_cancel(waiter);
  sluice_permit_release(c.permit, NULL, NULL);
  sluice_dq_free(dq);
  sluice_sem_free(sem);
  th_free_client_and_loop(base, cl, 10000);
  th_redis_stop(&r);
}

static const th_case cases[] = {
    TH_CASE(once, 60),
    TH_CASE(tmux, 60),
    TH_CASE(scrape, 60),
};
TH_MAIN(cases)
