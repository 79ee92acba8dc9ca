/*
 * examples/gateway under load while its Redis is killed and started again.
 *
 * The gateway (path in $SLUICE_GATEWAY; $SLUICE_GATEWAY_WRAPPER, e.g. a
 * valgrind command line, goes in front of it) runs against the binary's
 * private redis-server. A small evhttp client keeps a few connections busy
 * with back-to-back requests while the server is killed (SIGKILL), stays
 * down for a moment, and is started again, empty, on the same socket. The
 * gateway must keep answering every request (its documented Redis-down
 * behaviour: 503 while the semaphore cannot be asked, the limiter failing
 * open), serve 200s again after the restart without being restarted itself,
 * end with nothing in flight (GET /stats), keep its memory flat, and exit 0
 * on SIGTERM (under ASan or valgrind that includes no leaks).
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <event2/buffer.h>
#include <event2/event.h>
#include <event2/http.h>

#include "harness.h"

#define NCONN 8

/* The gateway of this build carries the same sanitizer as this test. ASan
 * keeps freed memory in quarantine, so RSS then says nothing about leaks
 * (its leak check at exit does). */
#if defined(__SANITIZE_ADDRESS__)
#define UNDER_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define UNDER_ASAN 1
#endif
#endif
#ifndef UNDER_ASAN
#define UNDER_ASAN 0
#endif

typedef struct gateway {
  pid_t pid;
  int port;
  int wrapped;  /* under a wrapper (valgrind): slow, RSS meaningless */
} gateway;

/* Start the gateway (extra: one more option, or NULL) and read "gateway
 * listening on 127.0.0.1:PORT" from it. */
static void gateway_start(gateway *gw, const char *extra) {
  const char *bin = getenv("SLUICE_GATEWAY");
  if (!bin || !*bin) th_fail(__FILE__, __LINE__, "SLUICE_GATEWAY not set");
  const char *wrap = getenv("SLUICE_GATEWAY_WRAPPER");
  char *wrapcopy = strdup(wrap ? wrap : "");
  const char *argv[64];
  int n = 0;
  for (char *t = strtok(wrapcopy, " "); t && n < 40; t = strtok(NULL, " ")) argv[n++] = t;
  gw->wrapped = n > 0;
  const char *args[] = {bin, "--redis", th_server.url, "--port", "0", "--quiet",
                        "--rate", "1000000", "--permits", "4", "--work-ms", "1",
                        "--op-timeout", "100", "--queue-timeout", "200",
                        "--followup-every", "5", "--followup-delay", "20", NULL};
  for (int i = 0; args[i]; i++) argv[n++] = args[i];
  if (extra) argv[n++] = extra;
  argv[n] = NULL;
  int fds[2];
  TH_ASSERT(pipe(fds) == 0);
  pid_t pid = fork();
  TH_ASSERT(pid >= 0);
  if (pid == 0) {
    /* Dies with the test case, even when an assertion ends it early. */
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    dup2(fds[1], 1);
    close(fds[0]);
    close(fds[1]);
    execvp(argv[0], (char *const *)argv);
    _exit(127);
  }
  free(wrapcopy);
  close(fds[1]);
  gw->pid = pid;
  char line[256];
  size_t len = 0;
  uint64_t end = th_now_ms() + 60000;  /* valgrind starts slowly */
  while (len < sizeof line - 1 && th_now_ms() < end) {
    struct pollfd p = {fds[0], POLLIN, 0};
    if (poll(&p, 1, 100) <= 0) continue;
    ssize_t k = read(fds[0], line + len, 1);
    if (k <= 0) break;
    if (line[len] == '\n') break;
    len++;
  }
  line[len] = '\0';
  close(fds[0]);
  const char *colon = strrchr(line, ':');
  gw->port = colon ? atoi(colon + 1) : 0;
  if (gw->port <= 0) th_fail(__FILE__, __LINE__, "gateway did not start: '%s'", line);
}

static int gateway_stop(gateway *gw) {
  kill(gw->pid, SIGTERM);
  int st = 0;
  uint64_t end = th_now_ms() + (gw->wrapped ? 60000 : 10000);
  while (th_now_ms() < end) {
    pid_t w = waitpid(gw->pid, &st, WNOHANG);
    if (w == gw->pid) return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
    usleep(10000);
  }
  kill(gw->pid, SIGKILL);
  waitpid(gw->pid, &st, 0);
  return -1;
}

static long rss_kb(pid_t pid) {
  char path[64], buf[4096];
  snprintf(path, sizeof path, "/proc/%d/status", (int)pid);
  FILE *f = fopen(path, "r");
  if (!f) return -1;
  long kb = -1;
  while (fgets(buf, sizeof buf, f))
    if (strncmp(buf, "VmRSS:", 6) == 0) kb = atol(buf + 6);
  fclose(f);
  return kb;
}

/* ---- the load: NCONN connections, one request at a time each ------------- */

typedef struct counts {
  long ok, limited, unavailable, other, failed;
} counts;

typedef struct load load;

/* One connection; the request callback's argument. */
typedef struct slot {
  load *l;
  int i;
} slot;

struct load {
  struct event_base *base;
  struct evhttp_connection *conn[NCONN];
  slot slots[NCONN];
  int port;
  int running;       /* issue new requests */
  int outstanding;
  counts c;
  uint64_t watch_since_ms;  /* non-zero: note the first 200 after this */
  uint64_t first_ok_ms;
};

static void issue(load *l, int i);

static void on_response(struct evhttp_request *req, void *arg) {
  slot *sl = arg;
  load *l = sl->l;
  l->outstanding--;
  int code = req ? evhttp_request_get_response_code(req) : 0;
  if (code == 200 && l->watch_since_ms && !l->first_ok_ms) l->first_ok_ms = th_now_ms();
  if (code == 200) l->c.ok++;
  else if (code == 429) l->c.limited++;
  else if (code == 503) l->c.unavailable++;
  else if (code == 0) l->c.failed++;
  else l->c.other++;
  if (l->running) issue(l, sl->i);
}

static void issue(load *l, int i) {
  struct evhttp_request *req = evhttp_request_new(on_response, &l->slots[i]);
  if (!req) return;
  char client[16];
  snprintf(client, sizeof client, "c%d", i);
  struct evkeyvalq *h = evhttp_request_get_output_headers(req);
  evhttp_add_header(h, "Host", "127.0.0.1");
  evhttp_add_header(h, "X-Client", client);
  if (evhttp_make_request(l->conn[i], req, EVHTTP_REQ_GET, "/") == 0) l->outstanding++;
  else l->c.failed++;  /* evhttp freed the request */
}

static void load_init(load *l, int port) {
  memset(l, 0, sizeof *l);
  l->base = event_base_new();
  TH_ASSERT(l->base != NULL);
  l->port = port;
  for (int i = 0; i < NCONN; i++) {
    l->slots[i].l = l;
    l->slots[i].i = i;
    l->conn[i] = evhttp_connection_base_new(l->base, NULL, "127.0.0.1", (ev_uint16_t)port);
    TH_ASSERT(l->conn[i] != NULL);
    evhttp_connection_set_timeout(l->conn[i], 10);
  }
}

/* Run the load for ms; returns the counts of that span. */
static counts load_for(load *l, unsigned ms) {
  counts before = l->c;
  l->running = 1;
  for (int i = 0; i < NCONN; i++)
    if (l->outstanding < NCONN) issue(l, i);
  th_loop_for(l->base, ms);
  counts d = {l->c.ok - before.ok, l->c.limited - before.limited,
              l->c.unavailable - before.unavailable, l->c.other - before.other,
              l->c.failed - before.failed};
  return d;
}

/* Stop issuing and let what is outstanding finish. */
static void load_settle(load *l) {
  l->running = 0;
  uint64_t end = th_now_ms() + 30000;
  while (l->outstanding > 0 && th_now_ms() < end) event_base_loop(l->base, EVLOOP_ONCE);
  TH_ASSERT_EQ(l->outstanding, 0);
}

static void load_free(load *l) {
  for (int i = 0; i < NCONN; i++) evhttp_connection_free(l->conn[i]);
  event_base_free(l->base);
}

static void print_counts(const char *what, counts c) {
  printf("# %-22s 200: %ld, 429: %ld, 503: %ld, other: %ld, failed: %ld\n", what, c.ok,
         c.limited, c.unavailable, c.other, c.failed);
  fflush(stdout);
}

/* GET /stats on a fresh connection: the gateway's counters as text, or NULL. */
typedef struct stats_req {
  struct event_base *base;
  char *text;
} stats_req;

static void stats_done(struct evhttp_request *req, void *arg) {
  stats_req *sr = arg;
  if (req && evhttp_request_get_response_code(req) == 200) {
    struct evbuffer *in = evhttp_request_get_input_buffer(req);
    size_t n = evbuffer_get_length(in);
    sr->text = malloc(n + 1);
    if (sr->text) {
      evbuffer_remove(in, sr->text, n);
      sr->text[n] = '\0';
    }
  }
  /* The kept-alive connection would keep the loop running. */
  event_base_loopexit(sr->base, NULL);
}

static char *get_stats(int port) {
  stats_req sr = {event_base_new(), NULL};
  TH_ASSERT(sr.base != NULL);
  struct evhttp_connection *con =
      evhttp_connection_base_new(sr.base, NULL, "127.0.0.1", (ev_uint16_t)port);
  TH_ASSERT(con != NULL);
  evhttp_connection_set_timeout(con, 10);
  struct evhttp_request *req = evhttp_request_new(stats_done, &sr);
  evhttp_add_header(evhttp_request_get_output_headers(req), "Host", "127.0.0.1");
  if (evhttp_make_request(con, req, EVHTTP_REQ_GET, "/stats") == 0)
    event_base_dispatch(sr.base);
  evhttp_connection_free(con);
  event_base_free(sr.base);
  return sr.text;
}

static long stat_value(const char *text, const char *name) {
  size_t n = strlen(name);
  for (const char *p = text; p && *p; p = strchr(p, '\n') ? strchr(p, '\n') + 1 : NULL)
    if (strncmp(p, name, n) == 0 && p[n] == ' ') return atol(p + n + 1);
  return -1;
}

/* Poll /stats until name reaches want (the gateway may still be finishing). */
static long wait_stat(int port, const char *name, long want, unsigned timeout_ms) {
  uint64_t end = th_now_ms() + timeout_ms;
  long v = -1;
  for (;;) {
    char *s = get_stats(port);
    v = s ? stat_value(s, name) : -1;
    free(s);
    if (v == want || th_now_ms() >= end) return v;
    usleep(50000);
  }
}

static void redis_restart_under_load(const char *extra) {
  signal(SIGPIPE, SIG_IGN);
  gateway gw;
  gateway_start(&gw, extra);
  unsigned scale = gw.wrapped ? 4 : 1;  /* valgrind: longer phases */
  TH_ASSERT_EQ(wait_stat(gw.port, "connected", 1, 10000 * scale), 1);

  load l;
  load_init(&l, gw.port);
  counts warm = load_for(&l, 1000 * scale);
  print_counts("before the restart:", warm);
  TH_ASSERT_CMP(warm.ok, >, 0);
  TH_ASSERT_EQ(warm.failed + warm.other, 0);
  long rss0 = rss_kb(gw.pid);

  /* Redis dies and stays away for a moment: the gateway answers 503 (no
   * permit can be had) instead of hanging or dropping connections. */
  kill(th_server.pid, SIGKILL);
  waitpid(th_server.pid, NULL, 0);
  th_server.pid = 0;
  counts down = load_for(&l, 500 * scale);
  print_counts("while Redis is down:", down);
  TH_ASSERT_CMP(down.unavailable, >, 0);
  TH_ASSERT_EQ(down.failed + down.other, 0);

  /* Started again, empty, on the same socket: the gateway reconnects by
   * itself and serves again. */
  l.watch_since_ms = th_now_ms();
  th_redis_restart(&th_server);
  uint64_t up_ms = th_now_ms();  /* th_redis_restart returns once it answers */
  counts back = load_for(&l, 1500 * scale);
  print_counts("after the restart:", back);
  TH_ASSERT(l.first_ok_ms != 0);
  printf("# first 200 %lld ms after Redis answered again\n",
         (long long)l.first_ok_ms - (long long)up_ms);
  counts tail = load_for(&l, 500 * scale);
  print_counts("last 0.5 s:", tail);
  TH_ASSERT_EQ(back.failed + back.other + tail.failed + tail.other, 0);
  TH_ASSERT_CMP(tail.ok, >, 0);
  /* Recovered means served normally: a stray 503 from a full queue is fine,
   * a majority is not. */
  TH_ASSERT_CMP(tail.ok, >, tail.unavailable);
  load_settle(&l);
  load_free(&l);
  printf("# load stopped\n");
  fflush(stdout);

  /* Nothing left in flight, in the gateway or in sluice; follow-up jobs
   * pushed after the restart were handled. */
  TH_ASSERT_EQ(wait_stat(gw.port, "live_requests", 0, 5000 * scale), 0);
  TH_ASSERT_EQ(wait_stat(gw.port, "ops_in_flight", 0, 5000 * scale), 0);
  char *s = get_stats(gw.port);
  TH_ASSERT(s != NULL);
  printf("# reconnects %ld, followups pushed %ld done %ld, unchecked decisions %ld\n",
         stat_value(s, "reconnects"), stat_value(s, "followups_pushed"),
         stat_value(s, "followups_done"), stat_value(s, "unchecked"));
  TH_ASSERT_CMP(stat_value(s, "reconnects"), >=, 1);
  TH_ASSERT_CMP(stat_value(s, "followups_done"), >, 0);
  free(s);

  long rss1 = rss_kb(gw.pid);
  printf("# gateway RSS %ld kB after warm-up, %ld kB at the end\n", rss0, rss1);
  /* Flat memory: growth of more than 8 MB over tens of thousands of requests
   * would mean leaked request state (under valgrind or ASan RSS says
   * nothing; their leak checks at exit do). */
  if (!gw.wrapped && !UNDER_ASAN && rss0 > 0 && rss1 > 0) TH_ASSERT_CMP(rss1 - rss0, <, 8192);

  TH_ASSERT_EQ(gateway_stop(&gw), 0);
}

static void test_redis_restart_under_load(void) { redis_restart_under_load(NULL); }

/* The same with leases handed on inside the gateway (local_handoff). */
static void test_redis_restart_under_load_local_handoff(void) {
  redis_restart_under_load("--local-handoff");
}

int main(int argc, char **argv) {
  static const th_case cases[] = {
      {"redis_restart_under_load", test_redis_restart_under_load, 180},
      {"redis_restart_under_load_local_handoff", test_redis_restart_under_load_local_handoff, 180},
      {NULL, NULL, 0}};
  return th_main(argc, argv, cases);
}
