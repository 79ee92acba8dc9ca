/*
 * gateway: sluice in a libevent evhttp server (docs/evhttp.md).
 *
 * Per request, in one event_base:
 *   1. a GCRA rate limiter per client (the X-Client header, else the peer
 *      address) decides; a denial answers 429 with Retry-After;
 *   2. the request waits for one of the permits of a global semaphore
 *      (every gateway on the same Redis shares them); no permit within the
 *      queue timeout answers 503;
 *   3. holding it, the "work" is a short libevent timer (1 ms by default),
 *      then 200 and the permit is released;
 *   4. every N-th request also pushes a delayed follow-up job to a delay
 *      queue, which a consumer in the same loop handles.
 *
 * Redis down (connection lost, restarting, too slow):
 *   - the limiter fails open (SLUICE_RL_FAIL_OPEN): requests are not limited;
 *   - the semaphore cannot be asked: 503 with Retry-After: 1 at once (sluice
 *     answers SLUICE_ECONNECTION without waiting while disconnected);
 *   - follow-up pushes fail and are counted, the consumer retries by itself;
 *   - the client reconnects with backoff: no restart of the gateway needed.
 * Every Redis step has a request-path deadline (--op-timeout, default 100 ms)
 * instead of the client's background-job default of 5 s.
 *
 * --no-sluice does the same work without Redis: the same permits as an
 * in-process semaphore (FIFO, same queue timeout), follow-ups on local
 * timers, no rate limit. It is the baseline of bench/gateway.sh.
 *
 * GET /stats answers counters (not limited, no permit) for tests and
 * benchmarks; GET /metrics the sluice client's metrics in the Prometheus
 * text format (sluice_client_prometheus). SIGINT/SIGTERM: pending requests get 503, everything is
 * freed, the loop ends, and a summary goes to stderr.
 *
 *   gateway [--listen ADDR] [--port N] [--redis URL] [--permits N]
 *           [--rate N] [--period MS] [--burst N] [--work-ms MS]
 *           [--queue-timeout MS] [--op-timeout MS] [--followup-every N]
 *           [--followup-delay MS] [--prefix P] [--fair] [--local-handoff]
 *           [--no-sluice] [--quiet]
 */
#include <errno.h>
#include <inttypes.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <netinet/in.h>
#include <sys/socket.h>

#include <event2/buffer.h>
#include <event2/event.h>
#include <event2/http.h>
#include <event2/keyvalq_struct.h>
#include <sluice/sluice.h>

typedef struct gw gw;
typedef struct req_ctx req_ctx;

enum stage { ST_LIMIT, ST_ACQUIRE, ST_WORK };

/* One request in flight. Exactly one thing is pending for it at a time (a
 * limiter check, an acquire, or the work timer), and whichever completes
 * it moves it on or frees it. */
struct req_ctx {
  gw *g;
  struct evhttp_request *req; /* NULL once answered (e.g. at shutdown) */
  enum stage stage;
  sluice_permit *permit; /* sluice mode, while working */
  int local_permit;      /* --no-sluice, while working */
  struct event *timer;   /* work; in --no-sluice also the queue timeout */
  uint64_t seq;
  req_ctx *prev, *next; /* gw->live */
  req_ctx *qnext;       /* --no-sluice wait queue */
};

typedef struct gw_stats {
  uint64_t requests, ok, limited, busy, unavailable, errors;
  uint64_t unchecked; /* limiter decisions made without Redis */
  uint64_t followups_pushed, followups_push_failed, followups_done;
  uint64_t consumer_errors;
} gw_stats;

struct gw {
  struct event_base *base;
  struct evhttp *http;
  struct event *sigint, *sigterm;
  int use_sluice, quiet, stopping, fair, local_handoff;
  /* options */
  const char *listen_addr, *redis_url, *prefix;
  int port;
  unsigned permits, rate, period_ms, burst, work_ms, queue_timeout_ms, op_timeout_ms;
  unsigned followup_every, followup_delay_ms;
  /* sluice */
  sluice_client *client;
  sluice_limiter *limiter;
  sluice_sem *sem;
  sluice_dq *dq;
  sluice_dq_consumer *consumer;
  /* --no-sluice */
  unsigned local_free;
  req_ctx *qhead, *qtail;
  unsigned local_followups; /* follow-up timers pending */
  /* bookkeeping */
  req_ctx *live;
  unsigned nlive;
  uint64_t seq;
  gw_stats st;
};

/* ---- replies and request contexts --------------------------------------- */

static void reply(req_ctx *r, int code, const char *reason, const char *body,
                  unsigned retry_after_s) {
  if (!r->req) return;
  struct evkeyvalq *h = evhttp_request_get_output_headers(r->req);
  evhttp_add_header(h, "Content-Type", "text/plain");
  if (retry_after_s) {
    char v[16];
    snprintf(v, sizeof v, "%u", retry_after_s);
    evhttp_add_header(h, "Retry-After", v);
  }
  struct evbuffer *b = evbuffer_new();
  if (b) evbuffer_add_printf(b, "%s\n", body);
  evhttp_send_reply(r->req, code, reason, b);
  if (b) evbuffer_free(b);
  r->req = NULL;
}

static void ctx_free(req_ctx *r) {
  gw *g = r->g;
  if (r->prev) r->prev->next = r->next;
  else g->live = r->next;
  if (r->next) r->next->prev = r->prev;
  g->nlive--;
  if (r->timer) event_free(r->timer);
  free(r);
}

/* ---- the follow-up jobs --------------------------------------------------- */

static void on_pushed(sluice_dq *dq, int status, const char *id, int64_t due_ms, void *ud) {
  (void)dq, (void)id, (void)due_ms;
  gw *g = ud;
  if (status == SLUICE_OK) g->st.followups_pushed++;
  else g->st.followups_push_failed++;
}

static void on_followup(sluice_dq_consumer *con, sluice_dq_msg *msg, void *ud) {
  (void)con;
  gw *g = ud;
  /* The job itself would go here (an e-mail, a cache refresh...). */
  g->st.followups_done++;
  sluice_dq_ack(msg, NULL, NULL);
}

static void on_consumer_error(sluice_dq_consumer *con, int status, void *ud) {
  (void)con, (void)status;
  gw *g = ud;
  g->st.consumer_errors++; /* it retries with backoff by itself */
}

static void local_followup_cb(evutil_socket_t fd, short what, void *arg) {
  (void)fd, (void)what;
  gw *g = arg;
  g->st.followups_done++;
  g->local_followups--;
}

static void push_followup(gw *g, uint64_t seq) {
  char payload[64];
  int n = snprintf(payload, sizeof payload, "follow-up of request %" PRIu64, seq);
  if (!g->use_sluice) {
    struct timeval tv = {g->followup_delay_ms / 1000, (g->followup_delay_ms % 1000) * 1000};
    if (event_base_once(g->base, -1, EV_TIMEOUT, local_followup_cb, g, &tv) == 0) {
      g->local_followups++;
      g->st.followups_pushed++;
    } else {
      g->st.followups_push_failed++;
    }
    return;
  }
  sluice_dq_item it = {.payload = payload, .len = (size_t)n, .delay_ms = g->followup_delay_ms};
  if (sluice_dq_push(g->dq, &it, on_pushed, g) != SLUICE_OK) g->st.followups_push_failed++;
}

/* ---- stage 3: the work ---------------------------------------------------- */

static void release_permit(req_ctx *r);

static void work_done_cb(evutil_socket_t fd, short what, void *arg) {
  (void)fd, (void)what;
  req_ctx *r = arg;
  gw *g = r->g;
  /* Release first: without a callback the release is pipelined ahead of the
   * next acquire on the same connection (one round trip less per request). */
  release_permit(r);
  g->st.ok++;
  reply(r, HTTP_OK, "OK", "done", 0);
  if (g->followup_every && r->seq % g->followup_every == 0) push_followup(g, r->seq);
  ctx_free(r);
}

static void start_work(req_ctx *r) {
  r->stage = ST_WORK;
  struct timeval tv = {r->g->work_ms / 1000, (r->g->work_ms % 1000) * 1000};
  event_assign(r->timer, r->g->base, -1, 0, work_done_cb, r);
  evtimer_add(r->timer, &tv);
}

/* ---- stage 2: a permit ---------------------------------------------------- */

static void local_grant_next(gw *g);

static void release_permit(req_ctx *r) {
  if (r->permit) {
    sluice_permit_release(r->permit, NULL, NULL); /* handle invalid afterwards */
    r->permit = NULL;
  }
  if (r->local_permit) {
    r->local_permit = 0;
    r->g->local_free++;
    local_grant_next(r->g);
  }
}

static void on_acquired(sluice_sem *sem, int status, sluice_permit *permit, void *ud) {
  (void)sem;
  req_ctx *r = ud;
  gw *g = r->g;
  if (status == SLUICE_OK && r->req && !g->stopping) {
    r->permit = permit;
    start_work(r);
    return;
  }
  if (status == SLUICE_OK) sluice_permit_release(permit, NULL, NULL);
  if (status == SLUICE_ETIMEDOUT) {
    g->st.busy++;
    reply(r, HTTP_SERVUNAVAIL, "Service Unavailable", "busy: no permit in time", 1);
  } else if (status == SLUICE_ECONNECTION || status == SLUICE_EREDIS ||
             status == SLUICE_EPROTOCOL) {
    g->st.unavailable++;
    reply(r, HTTP_SERVUNAVAIL, "Service Unavailable", "coordination unavailable", 1);
  } else if (r->req) {
    g->st.errors++;
    reply(r, HTTP_SERVUNAVAIL, "Service Unavailable", sluice_strerror(status), 1);
  }
  ctx_free(r);
}

/* --no-sluice: the same permits, FIFO, in process. */
static void local_dequeue(gw *g, req_ctx *r) {
  req_ctx **pp = &g->qhead, *prev = NULL;
  while (*pp && *pp != r) {
    prev = *pp;
    pp = &(*pp)->qnext;
  }
  if (!*pp) return;
  *pp = r->qnext;
  if (g->qtail == r) g->qtail = prev;
  r->qnext = NULL;
}

static void local_grant_next(gw *g) {
  if (g->stopping) return; /* stop() answers and frees the queued ones */
  while (g->local_free > 0 && g->qhead) {
    req_ctx *r = g->qhead;
    local_dequeue(g, r);
    event_del(r->timer);
    g->local_free--;
    r->local_permit = 1;
    start_work(r);
  }
}

static void local_wait_timeout_cb(evutil_socket_t fd, short what, void *arg) {
  (void)fd, (void)what;
  req_ctx *r = arg;
  local_dequeue(r->g, r);
  r->g->st.busy++;
  reply(r, HTTP_SERVUNAVAIL, "Service Unavailable", "busy: no permit in time", 1);
  ctx_free(r);
}

static void acquire(req_ctx *r) {
  gw *g = r->g;
  r->stage = ST_ACQUIRE;
  if (!g->use_sluice) {
    if (g->local_free > 0) {
      g->local_free--;
      r->local_permit = 1;
      start_work(r);
      return;
    }
    struct timeval tv = {g->queue_timeout_ms / 1000, (g->queue_timeout_ms % 1000) * 1000};
    event_assign(r->timer, g->base, -1, 0, local_wait_timeout_cb, r);
    evtimer_add(r->timer, &tv);
    if (g->qtail) g->qtail->qnext = r;
    else g->qhead = r;
    g->qtail = r;
    return;
  }
  /* Disconnected (Redis down or restarting): answer 503 now, without even
   * an attempt (fail_fast covers a connection lost while waiting). */
  if (!sluice_client_is_connected(g->client)) {
    on_acquired(g->sem, SLUICE_ECONNECTION, NULL, r);
    return;
  }
  int rc = sluice_sem_acquire(g->sem, g->queue_timeout_ms, on_acquired, r, NULL);
  if (rc != SLUICE_OK) on_acquired(g->sem, rc, NULL, r); /* it will not be called */
}

/* ---- stage 1: the rate limit ---------------------------------------------- */

static void on_decision(sluice_limiter *lim, int status, const sluice_rl_result *res, void *ud) {
  (void)lim;
  req_ctx *r = ud;
  gw *g = r->g;
  if (!r->req || g->stopping) {
    ctx_free(r);
    return;
  }
  if (status != SLUICE_OK) { /* fail-open covers Redis down; this is worse */
    g->st.errors++;
    reply(r, HTTP_SERVUNAVAIL, "Service Unavailable", sluice_strerror(status), 1);
    ctx_free(r);
    return;
  }
  if (res->source == SLUICE_RL_UNCHECKED) g->st.unchecked++;
  if (!res->allowed) {
    g->st.limited++;
    /* Retry-After is in whole seconds: round up, so a client that obeys it
     * is admitted (retry_after_ms is itself rounded up). */
    unsigned s = (unsigned)((res->retry_after_ms + 999) / 1000);
    reply(r, 429, "Too Many Requests", "rate limited", s ? s : 1);
    ctx_free(r);
    return;
  }
  acquire(r);
}

/* ---- HTTP ----------------------------------------------------------------- */

static void send_stats(gw *g, struct evhttp_request *req) {
  struct evbuffer *b = evbuffer_new();
  if (!b) {
    evhttp_send_error(req, HTTP_INTERNAL, NULL);
    return;
  }
  sluice_client_stats cs = {0};
  if (g->client) sluice_client_get_stats(g->client, &cs);
  evbuffer_add_printf(
      b,
      "requests %" PRIu64 "\nok %" PRIu64 "\nlimited %" PRIu64 "\nbusy %" PRIu64
      "\nunavailable %" PRIu64 "\nerrors %" PRIu64 "\nunchecked %" PRIu64
      "\nfollowups_pushed %" PRIu64 "\nfollowups_push_failed %" PRIu64 "\nfollowups_done %" PRIu64
      "\nconsumer_errors %" PRIu64
      "\nlive_requests %u"
      "\nconnected %d\nops_in_flight %u\nops_timed_out %" PRIu64 "\nreconnects %" PRIu64 "\n",
      g->st.requests, g->st.ok, g->st.limited, g->st.busy, g->st.unavailable, g->st.errors,
      g->st.unchecked, g->st.followups_pushed, g->st.followups_push_failed, g->st.followups_done,
      g->st.consumer_errors, g->nlive, g->client ? sluice_client_is_connected(g->client) : 0,
      cs.ops_in_flight, cs.ops_timed_out, cs.reconnects);
  evhttp_send_reply(req, HTTP_OK, "OK", b);
  evbuffer_free(b);
}

/* The client's metrics, for Prometheus to scrape. */
static void send_metrics(gw *g, struct evhttp_request *req) {
  char *text = NULL;
  size_t len = 0;
  struct evbuffer *b = g->client ? evbuffer_new() : NULL;
  if (!g->client) {
    evhttp_send_error(req, HTTP_NOTFOUND, "no sluice client (--no-sluice)");
    return;
  }
  if (!b || sluice_client_prometheus(g->client, &text, &len) != SLUICE_OK ||
      evbuffer_add(b, text, len) != 0) {
    evhttp_send_error(req, HTTP_INTERNAL, NULL);
  } else {
    evhttp_add_header(evhttp_request_get_output_headers(req), "Content-Type",
                      "text/plain; version=0.0.4; charset=utf-8");
    evhttp_send_reply(req, HTTP_OK, "OK", b);
  }
  sluice_prometheus_free(text);
  if (b) evbuffer_free(b);
}

static void on_request(struct evhttp_request *req, void *arg) {
  gw *g = arg;
  const char *uri = evhttp_request_get_uri(req);
  if (uri && strcmp(uri, "/stats") == 0) {
    send_stats(g, req);
    return;
  }
  if (uri && strcmp(uri, "/metrics") == 0) {
    send_metrics(g, req);
    return;
  }
  if (g->stopping) {
    evhttp_send_error(req, HTTP_SERVUNAVAIL, "shutting down");
    return;
  }
  req_ctx *r = calloc(1, sizeof *r);
  struct event *timer = r ? event_new(g->base, -1, 0, work_done_cb, r) : NULL;
  if (!timer) {
    free(r);
    evhttp_send_error(req, HTTP_INTERNAL, NULL);
    return;
  }
  r->g = g;
  r->req = req;
  r->timer = timer;
  r->seq = ++g->seq;
  r->next = g->live;
  if (g->live) g->live->prev = r;
  g->live = r;
  g->nlive++;
  g->st.requests++;

  if (!g->use_sluice) {
    acquire(r);
    return;
  }
  /* The client: X-Client if given (a gateway behind a proxy would trust its
   * own header instead), else the peer address. */
  const char *key = evhttp_find_header(evhttp_request_get_input_headers(req), "X-Client");
  char *host = NULL;
  ev_uint16_t port;
  if (!key || !*key || strlen(key) > SLUICE_NAME_MAX) {
    struct evhttp_connection *con = evhttp_request_get_connection(req);
    if (con) evhttp_connection_get_peer(con, &host, &port);
    key = host && *host ? host : "unknown";
  }
  r->stage = ST_LIMIT;
  int rc = sluice_limiter_check(g->limiter, key, 1, on_decision, r);
  if (rc != SLUICE_OK) on_decision(g->limiter, rc, NULL, r); /* it will not be called */
}

/* ---- start and stop ------------------------------------------------------- */

static void on_closed(void *ud) {
  gw *g = ud;
  g->client = NULL;
  if (!g->quiet) fprintf(stderr, "gateway: sluice client closed\n");
}

static void stop(gw *g) {
  if (g->stopping) return;
  g->stopping = 1;
  if (!g->quiet) fprintf(stderr, "gateway: stopping, %u requests in flight\n", g->nlive);
  /* Answer everything pending now. A request at work is done with; one that
   * waits for a decision or a permit stays until its callback (cancelled by
   * the frees below) frees it. */
  for (req_ctx *r = g->live, *next; r; r = next) {
    next = r->next;
    reply(r, HTTP_SERVUNAVAIL, "Service Unavailable", "shutting down", 0);
    if (r->stage == ST_WORK || !g->use_sluice) {
      if (r->stage == ST_ACQUIRE) local_dequeue(g, r);
      release_permit(r);
      ctx_free(r);
    }
  }
  if (g->use_sluice) {
    sluice_dq_consumer_free(g->consumer);
    sluice_dq_free(g->dq);
    sluice_sem_free(g->sem);         /* pending acquires: ECANCELED, now */
    sluice_limiter_free(g->limiter); /* pending checks: ECANCELED, from the loop */
    g->consumer = NULL;
    g->dq = NULL;
    g->sem = NULL;
    g->limiter = NULL;
    sluice_client_close(g->client, on_closed, g);
  }
  /* Connections and their (answered) requests go with the server; the loop
   * then ends once sluice has drained and local follow-up timers fired. */
  evhttp_free(g->http);
  g->http = NULL;
  event_del(g->sigint);
  event_del(g->sigterm);
}

static void on_signal(evutil_socket_t sig, short what, void *arg) {
  (void)sig, (void)what;
  stop(arg);
}

static int parse_uint(const char *s, unsigned lo, unsigned hi, unsigned *out) {
  char *end;
  if (!s || !*s || *s == '-') return -1;
  errno = 0;
  unsigned long v = strtoul(s, &end, 10);
  if (errno || *end || v < lo || v > hi) return -1;
  *out = (unsigned)v;
  return 0;
}

static void usage(FILE *f) {
  fprintf(f,
          "usage: gateway [options]\n"
          "  --listen ADDR         address to listen on (default 127.0.0.1)\n"
          "  --port N              port (default 8080; 0 picks one, printed)\n"
          "  --redis URL           Redis (default redis://127.0.0.1:6379)\n"
          "  --prefix P            sluice key prefix (default \"sluice:gw:\")\n"
          "  --permits N           global concurrency permits (default 16)\n"
          "  --rate N              requests per period per client (default 100)\n"
          "  --period MS           rate period (default 1000)\n"
          "  --burst N             GCRA burst (default: rate)\n"
          "  --work-ms MS          simulated work per request (default 1)\n"
          "  --queue-timeout MS    longest wait for a permit before 503 (default 200)\n"
          "  --op-timeout MS       deadline of each Redis step (default 100)\n"
          "  --followup-every N    push a follow-up job every N requests (default 10; 0 off)\n"
          "  --followup-delay MS   follow-up delay (default 100)\n"
          "  --fair                grant permits in arrival order (fair semaphore)\n"
          "  --local-handoff       a released permit goes straight to a request waiting here\n"
          "  --no-sluice           same work without Redis (in-process permits, no limit)\n"
          "  --quiet               no progress lines\n");
}

static int parse_args(gw *g, int argc, char **argv) {
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    const char *v = i + 1 < argc ? argv[i + 1] : NULL;
    unsigned u;
    int used = 1;
#define UOPT(name, lo, hi, field)                                              \
  if (strcmp(a, name) == 0) {                                                  \
    if (parse_uint(v, lo, hi, &u) != 0) {                                      \
      fprintf(stderr, "gateway: %s needs a number in %u..%u\n", name, lo, hi); \
      return -1;                                                               \
    }                                                                          \
    g->field = u;                                                              \
    i++;                                                                       \
    continue;                                                                  \
  }
    UOPT("--port", 0, 65535, port)
    UOPT("--permits", 1, 1000000, permits)
    UOPT("--rate", 1, SLUICE_RL_LIMIT_MAX, rate)
    UOPT("--period", 1, SLUICE_RL_PERIOD_MAX, period_ms)
    UOPT("--burst", 1, SLUICE_RL_LIMIT_MAX, burst)
    UOPT("--work-ms", 0, 60000, work_ms)
    UOPT("--queue-timeout", 1, 600000, queue_timeout_ms)
    UOPT("--op-timeout", 1, 600000, op_timeout_ms)
    UOPT("--followup-every", 0, 1000000000, followup_every)
    UOPT("--followup-delay", 0, 86400000, followup_delay_ms)
#undef UOPT
    if (strcmp(a, "--listen") == 0 || strcmp(a, "--redis") == 0 || strcmp(a, "--prefix") == 0) {
      if (!v) {
        fprintf(stderr, "gateway: %s needs a value\n", a);
        return -1;
      }
      if (a[2] == 'l') g->listen_addr = v;
      else if (a[2] == 'r') g->redis_url = v;
      else g->prefix = v;
      i++;
    } else if (strcmp(a, "--no-sluice") == 0) {
      g->use_sluice = 0;
    } else if (strcmp(a, "--fair") == 0) {
      g->fair = 1;
    } else if (strcmp(a, "--local-handoff") == 0) {
      g->local_handoff = 1;
    } else if (strcmp(a, "--quiet") == 0) {
      g->quiet = 1;
    } else if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
      usage(stdout);
      exit(0);
    } else {
      used = 0;
    }
    if (!used) {
      fprintf(stderr, "gateway: unknown argument '%s'\n", a);
      usage(stderr);
      return -1;
    }
  }
  return 0;
}

/* sluice's deadlines, and this gateway's 1 ms work, are libevent timers. On
 * Linux a plain event_base_new() reads CLOCK_MONOTONIC_COARSE (about 4 ms
 * resolution), so every such timer would fire up to 4 ms late: ask for the
 * precise clock. */
static struct event_base *new_precise_base(void) {
  struct event_config *cfg = event_config_new();
  if (!cfg) return NULL;
  event_config_set_flag(cfg, EVENT_BASE_FLAG_PRECISE_TIMER);
  struct event_base *base = event_base_new_with_config(cfg);
  event_config_free(cfg);
  return base;
}

static int start_sluice(gw *g) {
  sluice_client_options co;
  sluice_client_options_init(&co);
  co.url = g->redis_url;
  co.key_prefix = g->prefix;
  /* Request-path presets: a request must not wait seconds on Redis. */
  co.op_timeout_ms = g->op_timeout_ms;
  co.connect_timeout_ms = 500;
  co.reconnect_min_ms = 20;
  co.reconnect_max_ms = 500;
  int rc = sluice_client_new(g->base, &co, &g->client);
  if (rc != SLUICE_OK) {
    fprintf(stderr, "gateway: --redis %s: %s\n", g->redis_url, sluice_strerror(rc));
    return -1;
  }

  sluice_limiter_options lo;
  sluice_limiter_options_init(&lo);
  lo.algo = SLUICE_RL_GCRA;
  lo.limit = g->rate;
  lo.period_ms = g->period_ms;
  lo.burst = g->burst;
  lo.on_redis_down = SLUICE_RL_FAIL_OPEN; /* availability over strictness */
  if ((rc = sluice_limiter_new(g->client, "gateway", &lo, &g->limiter)) != SLUICE_OK) goto fail;

  sluice_sem_options so;
  sluice_sem_options_init(&so);
  so.permits = g->permits;
  /* Holds last milliseconds: a short lease frees the permits of a gateway
   * that crashed within seconds, and renewal (ttl/3) never runs. */
  so.ttl_ms = 5000;
  so.fair = g->fair;
  so.local_handoff = g->local_handoff;
  so.fail_fast = 1; /* Redis unreachable: 503 at once, not after the queue timeout */
  if ((rc = sluice_sem_new(g->client, "gateway-work", &so, &g->sem)) != SLUICE_OK) goto fail;

  if ((rc = sluice_dq_new(g->client, "gateway-followups", NULL, &g->dq)) != SLUICE_OK) goto fail;
  sluice_dq_consumer_options cons;
  sluice_dq_consumer_options_init(&cons);
  cons.visibility_ms = 10000;
  if ((rc = sluice_dq_consumer_new(g->client, "gateway-followups", &cons, on_followup, g,
                                   &g->consumer)) != SLUICE_OK)
    goto fail;
  sluice_dq_consumer_set_error_cb(g->consumer, on_consumer_error, g);
  return 0;
fail:
  fprintf(stderr, "gateway: %s\n", sluice_strerror(rc));
  return -1;
}

int main(int argc, char **argv) {
  static gw g;
  g.use_sluice = 1;
  g.listen_addr = "127.0.0.1";
  g.redis_url = "redis://127.0.0.1:6379";
  g.prefix = "sluice:gw:";
  g.port = 8080;
  g.permits = 16;
  g.rate = 100;
  g.period_ms = 1000;
  g.work_ms = 1;
  g.queue_timeout_ms = 200;
  g.op_timeout_ms = 100;
  g.followup_every = 10;
  g.followup_delay_ms = 100;
  if (parse_args(&g, argc, argv) != 0) return 64;
  g.local_free = g.permits;

  /* A client that goes away mid-reply must not kill the server. */
  signal(SIGPIPE, SIG_IGN);

  int status = 1;
  g.base = new_precise_base();
  if (!g.base) {
    fprintf(stderr, "gateway: cannot create the event loop\n");
    return 1;
  }
  g.http = evhttp_new(g.base);
  g.sigint = evsignal_new(g.base, SIGINT, on_signal, &g);
  g.sigterm = evsignal_new(g.base, SIGTERM, on_signal, &g);
  if (!g.http || !g.sigint || !g.sigterm) {
    fprintf(stderr, "gateway: out of memory\n");
    goto out;
  }
  evsignal_add(g.sigint, NULL);
  evsignal_add(g.sigterm, NULL);
  evhttp_set_gencb(g.http, on_request, &g);
  evhttp_set_allowed_methods(g.http, EVHTTP_REQ_GET | EVHTTP_REQ_POST | EVHTTP_REQ_HEAD);
  struct evhttp_bound_socket *bs = evhttp_bind_socket_with_handle(g.http, g.listen_addr,
                                                                  (ev_uint16_t)g.port);
  if (!bs) {
    fprintf(stderr, "gateway: cannot listen on %s:%d\n", g.listen_addr, g.port);
    goto out;
  }
  if (g.use_sluice && start_sluice(&g) != 0) goto out;

  struct sockaddr_storage ss;
  ev_socklen_t sl = sizeof ss;
  int port = g.port;
  if (getsockname(evhttp_bound_socket_get_fd(bs), (struct sockaddr *)&ss, &sl) == 0)
    port = ntohs(((struct sockaddr_in *)&ss)->sin_port);
  /* One line on stdout, flushed: scripts and tests read the port from it. */
  printf("gateway listening on %s:%d (%s)\n", g.listen_addr, port,
         g.use_sluice ? "sluice" : "no-sluice");
  fflush(stdout);

  event_base_dispatch(g.base);
  status = 0;

out:
  if (!g.stopping) { /* a start-up failure: tear down what exists */
    g.stopping = 1;
    sluice_dq_consumer_free(g.consumer);
    sluice_dq_free(g.dq);
    sluice_sem_free(g.sem);
    sluice_limiter_free(g.limiter);
    if (g.client) sluice_client_close(g.client, on_closed, &g);
    if (g.http) evhttp_free(g.http);
    if (g.sigint) event_del(g.sigint);
    if (g.sigterm) event_del(g.sigterm);
    event_base_dispatch(g.base); /* lets the client drain and close */
  }
  if (g.sigint) event_free(g.sigint);
  if (g.sigterm) event_free(g.sigterm);
  if (!g.quiet || status != 0)
    fprintf(stderr,
            "gateway: %" PRIu64 " requests: %" PRIu64 " ok, %" PRIu64 " limited, %" PRIu64
            " busy, %" PRIu64 " unavailable, %" PRIu64 " errors; %" PRIu64
            " unchecked decisions; follow-ups %" PRIu64 " pushed, %" PRIu64 " failed, %" PRIu64
            " done\n",
            g.st.requests, g.st.ok, g.st.limited, g.st.busy, g.st.unavailable, g.st.errors,
            g.st.unchecked, g.st.followups_pushed, g.st.followups_push_failed, g.st.followups_done);
  event_base_free(g.base);
  return status;
}
