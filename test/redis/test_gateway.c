/*
 * examples/gateway under load while its Redis is killed and started again.
 *
 * The gateway (gateway_proc.h) runs against the binary's private
 * redis-server. A small evhttp client keeps a few connections busy
 * with back-to-back requests while the server is killed (SIGKILL), stays
 * down for a moment, and is started again, empty, on the same socket. The
 * gateway must keep answering every request (its documented Redis-down
 * behaviour: 503 while the semaphore cannot be asked, the limiter failing
 * open), serve 200s again after the restart without being restarted itself,
 * end with nothing in flight (GET /stats), keep its memory flat, and exit 0
 * on SIGTERM (under ASan or valgrind that includes no leaks).
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <event2/buffer.h>
#include <event2/event.h>
#include <event2/http.h>

#include "gateway_proc.h"
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
  int running; /* issue new requests */
  int outstanding;
  counts c;
  uint64_t watch_since_ms; /* non-zero: note the first 200 after this */
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
  else l->c.failed++; /* evhttp freed the request */
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
  th_note("%-22s 200: %ld, 429: %ld, 503: %ld, other: %ld, failed: %ld\n", what, c.ok, c.limited,
          c.unavailable, c.other, c.failed);
  fflush(stdout);
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
    char *s = th_http_get(port, "/stats");
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
  unsigned scale = gw.wrapped ? 4 : 1; /* valgrind: longer phases */
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
  uint64_t up_ms = th_now_ms(); /* th_redis_restart returns once it answers */
  counts back = load_for(&l, 1500 * scale);
  print_counts("after the restart:", back);
  TH_ASSERT(l.first_ok_ms != 0);
  th_note("first 200 %lld ms after Redis answered again\n",
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
  th_note("load stopped\n");
  fflush(stdout);

  /* Nothing left in flight, in the gateway or in sluice; follow-up jobs
   * pushed after the restart were handled. */
  TH_ASSERT_EQ(wait_stat(gw.port, "live_requests", 0, 5000 * scale), 0);
  TH_ASSERT_EQ(wait_stat(gw.port, "ops_in_flight", 0, 5000 * scale), 0);
  char *s = th_http_get(gw.port, "/stats");
  TH_ASSERT(s != NULL);
  th_note("reconnects %ld, followups pushed %ld done %ld, unchecked decisions %ld\n",
          stat_value(s, "reconnects"), stat_value(s, "followups_pushed"),
          stat_value(s, "followups_done"), stat_value(s, "unchecked"));
  TH_ASSERT_CMP(stat_value(s, "reconnects"), >=, 1);
  TH_ASSERT_CMP(stat_value(s, "followups_done"), >, 0);
  free(s);

  long rss1 = rss_kb(gw.pid);
  th_note("gateway RSS %ld kB after warm-up, %ld kB at the end\n", rss0, rss1);
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

static const th_case cases[] = {
    TH_CASE(redis_restart_under_load, 180),
    TH_CASE(redis_restart_under_load_local_handoff, 180),
};
TH_MAIN(cases)
