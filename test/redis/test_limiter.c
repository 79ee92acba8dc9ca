/* Rate limiters: every algorithm's decisions, exactness under concurrency
 * (several processes), waits, Redis-down policies, teardown. */
#include <signal.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <event2/event.h>
#include <sluice/sluice.h>

#include "harness.h"
#include "rl_util.h"
#include "limiter/limiter.h"
#include "core/engine.h"
#include "topology.h"

static const sluice_rl_algo all_algos[] = {SLUICE_RL_FIXED, SLUICE_RL_SLIDING_LOG,
                                           SLUICE_RL_SLIDING_COUNTER, SLUICE_RL_GCRA};

/* ---- helpers ------------------------------------------------------------- */

typedef struct rcv {
  int done;
  int status;
  int has_res;
  sluice_rl_result res;
  uint64_t at_ms;      /* when the callback ran */
  int *order, *norder; /* optional: append id to order[] */
  int id;
} rcv;

static void on_res(sluice_limiter *lim, int status, const sluice_rl_result *res, void *ud) {
  rcv *r = ud;
  r->done++;
  r->status = status;
  r->has_res = res != NULL;
  if (res) r->res = *res;
  r->at_ms = th_now_ms();
  if (r->order) r->order[(*r->norder)++] = r->id;
}

static void loop_until_connected(struct event_base *base, sluice_client *c, unsigned ms) {
  TH_LOOP_UNTIL(base, sluice_client_is_connected(c), ms);
  TH_ASSERT(sluice_client_is_connected(c));
}

static sluice_client *new_client(struct event_base *base, unsigned op_timeout) {
  sluice_client_options o;
  th_client_options(&o, th_server.url);
  o.op_timeout_ms = op_timeout;
  o.reconnect_min_ms = 20;
  o.reconnect_max_ms = 100;
  sluice_client *c = th_client_with(base, &o);
  loop_until_connected(base, c, 3000);
  return c;
}

static sluice_limiter *new_lim_p(sluice_client *c, const char *name, sluice_rl_algo algo,
                                 unsigned limit, unsigned period, unsigned burst, int policy) {
  sluice_limiter_options o = rl_test_options(algo, limit, period);
  o.burst = burst;
  o.on_redis_down = (sluice_rl_down_policy)policy;
  return rl_test_new_opts(c, name, &o);
}

static sluice_limiter *new_lim(sluice_client *c, const char *name, sluice_rl_algo algo,
                               unsigned limit, unsigned period, unsigned burst) {
  return new_lim_p(c, name, algo, limit, period, burst, SLUICE_RL_FAIL_CLOSED);
}

/* A check (or peek) run to completion. */
static rcv run(struct event_base *base, sluice_limiter *lim, const char *key, unsigned cost,
               int peek) {
  rcv r = {0};
  int rc = peek ? sluice_limiter_peek(lim, key, cost, on_res, &r)
                : sluice_limiter_check(lim, key, cost, on_res, &r);
  TH_ASSERT_EQ(rc, SLUICE_OK);
  TH_ASSERT_EQ(r.done, 0); /* never inside the call */
  TH_ASSERT(th_loop_until(base, &r.done, 5000));
  TH_ASSERT_EQ(r.done, 1);
  return r;
}

static rcv check_ok(struct event_base *base, sluice_limiter *lim, const char *key, unsigned cost) {
  rcv r = run(base, lim, key, cost, 0);
  TH_ASSERT_EQ(r.status, SLUICE_OK);
  TH_ASSERT(r.has_res);
  return r;
}

static void finish(struct event_base *base, sluice_client *c, sluice_limiter *lim) {
  sluice_limiter_free(lim);
  th_free_client_and_loop(base, c, 5000);
}

static char *rkey(sluice_limiter *lim, const char *key) {
  char *k = sluice__rl_redis_key(lim, key);
  TH_ASSERT(k != NULL);
  return k;
}

/* DUMP of a key (binary), malloc'd; *len = -1 if the key does not exist. */
static char *dump_key(const char *key, long *len) {
  redisReply *r = th_redis_command(&th_server, "DUMP %s", key);
  char *out = NULL;
  *len = -1;
  if (r->type == REDIS_REPLY_STRING) {
    out = malloc(r->len);
    memcpy(out, r->str, r->len);
    *len = (long)r->len;
  }
  freeReplyObject(r);
  return out;
}

/* Entries of a sliding log's key: {base, t1, s1, t2, s2, ...}. */
static long long log_entries(const char *key) {
  return (th_redis_int(&th_server, "LLEN %s", key) - 1) / 2;
}

static int aligned(sluice_rl_algo algo) {
  return algo == SLUICE_RL_FIXED || algo == SLUICE_RL_SLIDING_COUNTER;
}

/* Windows of the aligned algorithms start at multiples of the period. Before
 * checks that must share one window, make sure need_ms of it are left (on
 * Redis's clock, or on the monotonic one for the local limiter). */
static void window_room(struct event_base *base, sluice_rl_algo algo, unsigned period,
                        unsigned need_ms, int local) {
  if (!aligned(algo)) return;
  /* Check again after waiting: a loop timer may fire a few ms early by the
   * monotonic clock (libevent counts from its cached time), which would
   * leave us at the very end of the old window. */
  for (;;) {
    int64_t now_ms = local ? (int64_t)(sluice__mono_us() / 1000) : th_redis_time_us() / 1000;
    int64_t left = period - now_ms % period;
    if (left >= need_ms) return;
    th_loop_for(base, (unsigned)left + 2);
  }
}

/* ---- a case's loop and client ---------------------------------------------- */

/* A case's loop and its client (new_client); its limiters are its own. */
typedef struct rl_case {
  struct event_base *base;
  sluice_client *c;
} rl_case;

static rl_case case_open(unsigned op_timeout) {
  rl_case fx;
  fx.base = event_base_new();
  TH_ASSERT(fx.base != NULL);
  fx.c = new_client(fx.base, op_timeout);
  return fx;
}

/* A limiter of one algorithm (new_lim), with room_ms left in its window. */
static sluice_limiter *case_algo(rl_case *fx, const char *name, sluice_rl_algo algo, unsigned limit,
                                 unsigned period, unsigned burst, unsigned room_ms) {
  sluice_limiter *lim = new_lim(fx->c, name, algo, limit, period, burst);
  window_room(fx->base, algo, period, room_ms, 0);
  return lim;
}

/* Free lim (NULL: none), then the client and the loop (finish). */
static void case_close(rl_case *fx, sluice_limiter *lim) { finish(fx->base, fx->c, lim); }

/* ---- bad input ------------------------------------------------------------ */

static void test_bad_input(void) {
  rl_case fx = case_open(2000);
  sluice_limiter_options o;
  sluice_limiter *lim = (sluice_limiter *)&o;
  char big[SLUICE_NAME_MAX + 2];
  memset(big, 'x', sizeof big - 1);
  big[sizeof big - 1] = '\0';

  sluice_limiter_options_init(&o);
  o.limit = 5;
  o.period_ms = 1000;
  TH_ASSERT_EQ(sluice_limiter_new(NULL, "n", &o, &lim), SLUICE_EINVAL);
  TH_ASSERT(lim == NULL); /* *out cleared on error */
  TH_ASSERT_EQ(sluice_limiter_new(fx.c, NULL, &o, &lim), SLUICE_EINVAL);
  TH_ASSERT_EQ(sluice_limiter_new(fx.c, "", &o, &lim), SLUICE_EINVAL);
  TH_ASSERT_EQ(sluice_limiter_new(fx.c, big, &o, &lim), SLUICE_EINVAL);
  TH_ASSERT_EQ(sluice_limiter_new(fx.c, "n", NULL, &lim), SLUICE_EINVAL);
  TH_ASSERT_EQ(sluice_limiter_new(fx.c, "n", &o, NULL), SLUICE_EINVAL);
  o.limit = 0;
  TH_ASSERT_EQ(sluice_limiter_new(fx.c, "n", &o, &lim), SLUICE_EINVAL);
  o.limit = SLUICE_RL_LIMIT_MAX + 1u;
  TH_ASSERT_EQ(sluice_limiter_new(fx.c, "n", &o, &lim), SLUICE_EINVAL);
  o.limit = 5;
  o.period_ms = 0;
  TH_ASSERT_EQ(sluice_limiter_new(fx.c, "n", &o, &lim), SLUICE_EINVAL);
  o.period_ms = 1000;
  o.algo = (sluice_rl_algo)0;
  TH_ASSERT_EQ(sluice_limiter_new(fx.c, "n", &o, &lim), SLUICE_EINVAL);
  o.algo = (sluice_rl_algo)99;
  TH_ASSERT_EQ(sluice_limiter_new(fx.c, "n", &o, &lim), SLUICE_EINVAL);
  o.algo = SLUICE_RL_FIXED;
  o.on_redis_down = (sluice_rl_down_policy)7;
  TH_ASSERT_EQ(sluice_limiter_new(fx.c, "n", &o, &lim), SLUICE_EINVAL);
  o.on_redis_down = SLUICE_RL_FAIL_CLOSED;
  /* GCRA whose bucket would span more than 2^52 us. */
  o.algo = SLUICE_RL_GCRA;
  o.limit = 1;
  o.period_ms = SLUICE_RL_PERIOD_MAX;
  o.burst = 100000000;
  TH_ASSERT_EQ(sluice_limiter_new(fx.c, "n", &o, &lim), SLUICE_EINVAL);

  lim = new_lim(fx.c, "n", SLUICE_RL_FIXED, 5, 1000, 0);
  rcv r = {0};
  TH_ASSERT_EQ(sluice_limiter_check(NULL, "k", 1, on_res, &r), SLUICE_EINVAL);
  TH_ASSERT_EQ(sluice_limiter_check(lim, NULL, 1, on_res, &r), SLUICE_EINVAL);
  TH_ASSERT_EQ(sluice_limiter_check(lim, "", 1, on_res, &r), SLUICE_EINVAL);
  TH_ASSERT_EQ(sluice_limiter_check(lim, big, 1, on_res, &r), SLUICE_EINVAL);
  TH_ASSERT_EQ(sluice_limiter_check(lim, "k", 0, on_res, &r), SLUICE_EINVAL);
  TH_ASSERT_EQ(sluice_limiter_check(lim, "k", 6, on_res, &r), SLUICE_EINVAL); /* cost > limit */
  TH_ASSERT_EQ(sluice_limiter_check(lim, "k", 0xffffffffu, on_res, &r), SLUICE_EINVAL);
  TH_ASSERT_EQ(sluice_limiter_check(lim, "k", 1, NULL, &r), SLUICE_EINVAL);
  TH_ASSERT_EQ(sluice_limiter_peek(lim, "k", 6, on_res, &r), SLUICE_EINVAL);
  TH_ASSERT_EQ(sluice_limiter_wait(lim, "k", 6, 100, on_res, &r, NULL), SLUICE_EINVAL);
  TH_ASSERT_EQ(sluice_limiter_wait(lim, "", 1, 100, on_res, &r, NULL), SLUICE_EINVAL);
  TH_ASSERT_EQ(sluice_limiter_wait_cancel(NULL), SLUICE_EINVAL);
  th_loop_for(fx.base, 20);
  TH_ASSERT_EQ(r.done, 0); /* refused calls never call back */
  TH_ASSERT_STR_EQ(sluice_limiter_name(lim), "n");
  /* The largest key still works. */
  big[SLUICE_NAME_MAX] = '\0';
  TH_ASSERT_EQ(check_ok(fx.base, lim, big, 1).res.allowed, 1);

  sluice_rl_algo a;
  for (size_t i = 0; i < 4; i++) {
    TH_ASSERT_EQ(sluice_rl_algo_parse(sluice_rl_algo_name(all_algos[i]), &a), SLUICE_OK);
    TH_ASSERT_EQ(a, all_algos[i]);
  }
  TH_ASSERT_EQ(sluice_rl_algo_parse("leaky", &a), SLUICE_EINVAL);
  TH_ASSERT_EQ(sluice_rl_algo_parse(NULL, &a), SLUICE_EINVAL);
  TH_ASSERT(sluice_rl_algo_name((sluice_rl_algo)9) == NULL);
  TH_ASSERT_STR_EQ(sluice_rl_source_name(SLUICE_RL_UNCHECKED), "unchecked");
  sluice_limiter_free(NULL);
  case_close(&fx, lim);
}

/* ---- decisions ------------------------------------------------------------ */

static void test_basic_decisions(void) {
  rl_case fx = case_open(2000);
  for (size_t i = 0; i < 4; i++) {
    sluice_limiter *lim = case_algo(&fx, "basic", all_algos[i], 3, 10000, 0, 5000);
    for (int n = 0; n < 3; n++) {
      rcv r = check_ok(fx.base, lim, "user", 1);
      TH_ASSERT_EQ(r.res.allowed, 1);
      TH_ASSERT_EQ(r.res.source, SLUICE_RL_REDIS);
      TH_ASSERT_EQ(r.res.limit, 3);
      TH_ASSERT_EQ(r.res.remaining, 2 - n);
      TH_ASSERT_EQ(r.res.retry_after_ms, 0);
      TH_ASSERT_CMP(r.res.reset_after_ms, >, 0);
      TH_ASSERT_CMP(r.res.reset_after_ms, <=, 20000);
    }
    rcv r = check_ok(fx.base, lim, "user", 1);
    TH_ASSERT_EQ(r.res.allowed, 0);
    TH_ASSERT_EQ(r.res.remaining, 0);
    TH_ASSERT_CMP(r.res.retry_after_ms, >, 0);
    TH_ASSERT_CMP(r.res.retry_after_ms, <=, 20000);
    /* Keys are separate. */
    TH_ASSERT_EQ(check_ok(fx.base, lim, "other", 1).res.allowed, 1);
    sluice_limiter_free(lim);
  }
  case_close(&fx, NULL);
}

static void test_peek_consumes_nothing(void) {
  rl_case fx = case_open(2000);
  for (size_t i = 0; i < 4; i++) {
    sluice_limiter *lim = case_algo(&fx, "peek", all_algos[i], 4, 10000, 0, 5000);
    for (int n = 0; n < 6; n++) {
      rcv r = run(fx.base, lim, "k", 1, 1);
      TH_ASSERT_EQ(r.status, SLUICE_OK);
      TH_ASSERT_EQ(r.res.allowed, 1);
      TH_ASSERT_EQ(r.res.remaining, 3);
    }
    char *k = rkey(lim, "k");
    TH_ASSERT_EQ(th_redis_int(&th_server, "EXISTS %s", k), 0); /* peek wrote nothing */
    TH_ASSERT_EQ(check_ok(fx.base, lim, "k", 1).res.remaining, 3);
    TH_ASSERT_EQ(check_ok(fx.base, lim, "k", 3).res.remaining, 0);
    rcv p = run(fx.base, lim, "k", 1, 1);
    rcv d = check_ok(fx.base, lim, "k", 1);
    TH_ASSERT_EQ(p.res.allowed, 0);
    TH_ASSERT_EQ(d.res.allowed, 0);
    TH_ASSERT_CMP(p.res.retry_after_ms, >=, d.res.retry_after_ms);
    free(k);
    sluice_limiter_free(lim);
  }
  case_close(&fx, NULL);
}

/* Denied requests leave the stored state byte for byte unchanged. */
static void test_rejected_consume_nothing(void) {
  rl_case fx = case_open(2000);
  for (size_t i = 0; i < 4; i++) {
    sluice_limiter *lim = case_algo(&fx, "rej", all_algos[i], 5, 2000, 0,
                                    1500); /* slow under valgrind */
    char *k = rkey(lim, "k");
    for (int n = 0; n < 5; n++) TH_ASSERT_EQ(check_ok(fx.base, lim, "k", 1).res.allowed, 1);
    long len1, len2;
    char *before = dump_key(k, &len1);
    rcv first = check_ok(fx.base, lim, "k", 1);
    TH_ASSERT_EQ(first.res.allowed, 0);
    for (int n = 0; n < 20; n++) TH_ASSERT_EQ(check_ok(fx.base, lim, "k", 1).res.allowed, 0);
    char *after = dump_key(k, &len2);
    TH_ASSERT_EQ(len1, len2);
    TH_ASSERT(len1 > 0 && memcmp(before, after, (size_t)len1) == 0);
    if (all_algos[i] == SLUICE_RL_SLIDING_LOG) TH_ASSERT_EQ(log_entries(k), 5);
    /* The first denial's retry_after still holds despite the retries since. */
    th_loop_for(fx.base, (unsigned)first.res.retry_after_ms);
    TH_ASSERT_EQ(check_ok(fx.base, lim, "k", 1).res.allowed, 1);
    free(before);
    free(after);
    free(k);
    sluice_limiter_free(lim);
  }
  case_close(&fx, NULL);
}

static void test_cost(void) {
  rl_case fx = case_open(2000);
  for (size_t i = 0; i < 3; i++) { /* window algorithms: capacity = limit */
    sluice_limiter *lim = case_algo(&fx, "cost", all_algos[i], 10, 60000, 0, 5000);
    rcv r = check_ok(fx.base, lim, "k", 4);
    TH_ASSERT_EQ(r.res.remaining, 6);
    TH_ASSERT_EQ(check_ok(fx.base, lim, "k", 4).res.remaining, 2);
    r = check_ok(fx.base, lim, "k", 4);
    TH_ASSERT_EQ(r.res.allowed, 0);
    TH_ASSERT_EQ(r.res.remaining, 2);
    r = check_ok(fx.base, lim, "k", 2);
    TH_ASSERT_EQ(r.res.allowed, 1);
    TH_ASSERT_EQ(r.res.remaining, 0);
    if (all_algos[i] == SLUICE_RL_SLIDING_LOG) { /* one entry per request, with its sum */
      char *k = rkey(lim, "k");
      TH_ASSERT_EQ(log_entries(k), 3);
      TH_ASSERT_EQ(th_redis_int(&th_server, "LINDEX %s -1", k), 10);
      free(k);
    }
    TH_ASSERT_EQ(check_ok(fx.base, lim, "k2", 10).res.allowed, 1); /* cost == limit */
    sluice_limiter_free(lim);
  }
  /* GCRA: capacity is the burst, which may exceed the limit. */
  sluice_limiter *lim = new_lim(fx.c, "cost", SLUICE_RL_GCRA, 4, 60000, 8);
  rcv r = {0};
  TH_ASSERT_EQ(sluice_limiter_check(lim, "k", 9, on_res, &r), SLUICE_EINVAL);
  r = check_ok(fx.base, lim, "k", 8);
  TH_ASSERT_EQ(r.res.allowed, 1);
  TH_ASSERT_EQ(r.res.limit, 8);
  TH_ASSERT_EQ(r.res.remaining, 0);
  r = check_ok(fx.base, lim, "k", 2);
  TH_ASSERT_EQ(r.res.allowed, 0);
  /* Two units come back after 2 emission intervals of 15 s. */
  TH_ASSERT_CMP(r.res.retry_after_ms, >, 29000);
  TH_ASSERT_CMP(r.res.retry_after_ms, <=, 30000);
  case_close(&fx, lim);
}

/* A request sent retry_after_ms after a denial is admitted. */
static void test_retry_after_honest(void) {
  rl_case fx = case_open(2000);
  for (size_t i = 0; i < 4; i++) {
    sluice_limiter *lim = new_lim(fx.c, "honest", all_algos[i], 3, 300, 2);
    for (int round = 0; round < 3; round++) {
      rcv r;
      do r = check_ok(fx.base, lim, "k", 1 + (unsigned)round % 2);
      while (r.res.allowed);
      TH_ASSERT_CMP(r.res.retry_after_ms, >, 0);
      TH_ASSERT_CMP(r.res.retry_after_ms, <=, 600);
      th_loop_for(fx.base, (unsigned)r.res.retry_after_ms);
      rcv again = check_ok(fx.base, lim, "k", 1 + (unsigned)round % 2);
      if (!again.res.allowed)
        th_fail(__FILE__, __LINE__, "%s: denied %lld ms after retry_after %lld",
                sluice_rl_algo_name(all_algos[i]), (long long)again.res.retry_after_ms,
                (long long)r.res.retry_after_ms);
    }
    sluice_limiter_free(lim);
  }
  case_close(&fx, NULL);
}

/* ---- expiry and memory ---------------------------------------------------- */

static void test_expiry(void) {
  rl_case fx = case_open(2000);
  sluice_limiter *lims[4];
  char *keys[4];
  for (size_t i = 0; i < 4; i++) {
    lims[i] = new_lim(fx.c, "exp", all_algos[i], 10, 250, 0);
    check_ok(fx.base, lims[i], "idle", 3);
    keys[i] = rkey(lims[i], "idle");
    long long pttl = th_redis_int(&th_server, "PTTL %s", keys[i]);
    long long bound = all_algos[i] == SLUICE_RL_SLIDING_COUNTER ? 2 * 250 + 100 : 250 + 100;
    TH_ASSERT_CMP(pttl, >, 0);
    TH_ASSERT_CMP(pttl, <=, bound);
  }
  th_loop_for(fx.base, 2 * 250 + 150);
  for (size_t i = 0; i < 4; i++) {
    TH_ASSERT_EQ(th_redis_int(&th_server, "EXISTS %s", keys[i]), 0);
    free(keys[i]);
    sluice_limiter_free(lims[i]);
  }
  case_close(&fx, NULL);
}

static void report_memory(struct event_base *base, sluice_client *c, sluice_rl_algo algo,
                          unsigned limit) {
  sluice_limiter *lim = new_lim(c, "mem", algo, limit, 600000, 0);
  char *k = rkey(lim, "203.0.113.7");
  freeReplyObject(th_redis_command(&th_server, "DEL %s", k)); /* a smaller limit's */
  for (unsigned n = 0; n < limit; n += 250) {                 /* limit requests of 1, 250 a call */
    rcv r[250];
    memset(r, 0, sizeof r);
    unsigned turn = limit - n < 250 ? limit - n : 250;
    for (unsigned i = 0; i < turn; i++)
      TH_ASSERT_EQ(sluice_limiter_check(lim, "203.0.113.7", 1, on_res, &r[i]), SLUICE_OK);
    TH_ASSERT(th_loop_until(base, &r[turn - 1].done, 5000));
    for (unsigned i = 0; i < turn; i++) TH_ASSERT(r[i].status == SLUICE_OK && r[i].res.allowed);
  }
  check_ok(base, lim, "203.0.113.7", 1); /* a denial does not grow it */
  long long bytes = th_redis_int(&th_server, "MEMORY USAGE %s SAMPLES 0", k);
  TH_ASSERT_CMP(bytes, >, 0);
  th_note("memory per key: %-15s limit %-5u %6lld bytes (key %zu bytes)\n",
          sluice_rl_algo_name(algo), limit, bytes, strlen(k));
  free(k);
  sluice_limiter_free(lim);
}

static void test_memory_per_key(void) {
  rl_case fx = case_open(2000);
  for (size_t i = 0; i < 4; i++) report_memory(fx.base, fx.c, all_algos[i], 100);
  report_memory(fx.base, fx.c, SLUICE_RL_SLIDING_LOG, 1000);
  report_memory(fx.base, fx.c, SLUICE_RL_SLIDING_LOG, 10000);
  case_close(&fx, NULL);
}

/* ---- concurrency: several processes against one key ----------------------- */

typedef struct worker_cfg {
  sluice_rl_algo algo;
  unsigned limit, period, burst;
  int in_flight;
  int total; /* stop after sending this many; 0: run for run_ms */
  unsigned run_ms;
} worker_cfg;

typedef struct worker_out {
  long allowed, denied, errors;
  int64_t first_admit_us; /* wall clock (Redis's TIME is on the same host) */
  int64_t last_send_us;
} worker_out;

static int64_t wall_us(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

typedef struct worker {
  sluice_limiter *lim;
  const worker_cfg *cfg;
  int sent, in_flight, finished;
  uint64_t stop_at;
  worker_out out;
} worker;

static void w_fill(worker *w);

static void w_done(sluice_limiter *lim, int status, const sluice_rl_result *res, void *ud) {
  worker *w = ud;
  w->in_flight--;
  if (status != SLUICE_OK) w->out.errors++;
  else if (!res->allowed) w->out.denied++;
  else if (w->out.allowed++ == 0) w->out.first_admit_us = wall_us();
  w_fill(w);
  if (w->in_flight == 0) w->finished = 1;
}

static int w_more(const worker *w) {
  return w->cfg->total ? w->sent < w->cfg->total : th_now_ms() < w->stop_at;
}

static void w_fill(worker *w) {
  while (w->in_flight < w->cfg->in_flight && w_more(w)) {
    if (sluice_limiter_check(w->lim, "shared", 1, w_done, w) != SLUICE_OK) {
      w->out.errors++;
      return;
    }
    w->in_flight++;
    w->sent++;
    w->out.last_send_us = wall_us();
  }
}

static void worker_main(const worker_cfg *cfg, int ready_fd, int go_fd, int out_fd) {
  rl_case fx = case_open(10000);
  worker w = {0};
  w.cfg = cfg;
  w.lim = new_lim(fx.c, "conc", cfg->algo, cfg->limit, cfg->period, cfg->burst);
  char b = 'r';
  if (write(ready_fd, &b, 1) != 1 || read(go_fd, &b, 1) != 1) _exit(1);
  w.stop_at = th_now_ms() + cfg->run_ms;
  w_fill(&w);
  if (!th_loop_until(fx.base, &w.finished, 60000)) _exit(2);
  if (write(out_fd, &w.out, sizeof w.out) != (ssize_t)sizeof w.out) _exit(3);
  case_close(&fx, w.lim);
  _exit(sluice__live_objects == 0 ? 0 : 4);
}

typedef void during_fn(void *arg);

/* Fork nproc workers, start them together, and sum what they saw. t0/t1:
 * Redis's clock just before the start and just after the last one ended. */
static worker_out run_workers(const worker_cfg *cfg, int nproc, int64_t *t0, int64_t *t1,
                              during_fn *during, void *arg) {
  int ready[2], go[2], out[2];
  pid_t pids[16];
  TH_ASSERT(pipe(ready) == 0 && pipe(go) == 0 && pipe(out) == 0);
  for (int i = 0; i < nproc; i++) {
    pids[i] = fork();
    TH_ASSERT(pids[i] >= 0);
    if (pids[i] == 0) {
      close(go[1]);
      worker_main(cfg, ready[1], go[0], out[1]);
    }
  }
  char b;
  for (int i = 0; i < nproc; i++) TH_ASSERT(read(ready[0], &b, 1) == 1);
  *t0 = th_redis_time_us();
  for (int i = 0; i < nproc; i++) TH_ASSERT(write(go[1], "g", 1) == 1);
  int left = nproc;
  while (left > 0) {
    if (during) during(arg);
    int st;
    pid_t p = waitpid(-1, &st, during ? WNOHANG : 0);
    if (p > 0) {
      if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
        th_fail(__FILE__, __LINE__, "worker failed (%d)", st);
      left--;
    } else if (during) {
      struct timespec ts = {0, 20 * 1000 * 1000};
      nanosleep(&ts, NULL);
    }
  }
  *t1 = th_redis_time_us();
  if (during) during(arg);
  worker_out sum = {0, 0, 0, INT64_MAX, 0};
  for (int i = 0; i < nproc; i++) {
    worker_out o;
    TH_ASSERT(read(out[0], &o, sizeof o) == (ssize_t)sizeof o);
    sum.allowed += o.allowed;
    sum.denied += o.denied;
    sum.errors += o.errors;
    if (o.allowed && o.first_admit_us < sum.first_admit_us) sum.first_admit_us = o.first_admit_us;
    if (o.last_send_us > sum.last_send_us) sum.last_send_us = o.last_send_us;
  }
  close(ready[0]), close(ready[1]), close(go[0]), close(go[1]), close(out[0]), close(out[1]);
  return sum;
}

/* Inside one window (10 min, checked on Redis's clock), fixed window, sliding
 * log and sliding counter admit exactly limit of 4 x 300 concurrent requests. */
static void test_concurrent_exact(void) {
  const sluice_rl_algo algos[] = {SLUICE_RL_FIXED, SLUICE_RL_SLIDING_LOG,
                                  SLUICE_RL_SLIDING_COUNTER};
  for (size_t i = 0; i < 3; i++) {
    worker_cfg cfg = {algos[i], 500, 600000, 0, 50, 300, 0};
    for (int attempt = 0;; attempt++) {
      int64_t t0, t1;
      th_redis_reset();
      worker_out s = run_workers(&cfg, 4, &t0, &t1, NULL, NULL);
      int64_t span = (int64_t)cfg.period * 1000;
      /* Same window (and, for the counter, a fresh previous one)? */
      if (t0 / span != t1 / span && attempt < 2) continue;
      th_note("%s: %ld admitted, %ld denied of 1200 (limit %u)\n", sluice_rl_algo_name(algos[i]),
              s.allowed, s.denied, cfg.limit);
      TH_ASSERT_EQ(s.errors, 0);
      TH_ASSERT_EQ(s.allowed + s.denied, 1200);
      TH_ASSERT_EQ(s.allowed, cfg.limit);
      break;
    }
  }
}

typedef struct log_entry {
  char member[40];
  int64_t score;
} log_entry;

typedef struct log_snap {
  const char *key;
  log_entry *e;
  size_t n, cap;
} log_snap;

/* Collect every entry the log ever held: entries stay at least a period,
 * and we look every ~20 ms. Each entry is one request of cost 1, named by
 * its time and sum (unique). */
static void snap_log(void *arg) {
  log_snap *s = arg;
  redisReply *r = th_redis_command(&th_server, "LRANGE %s 1 -1", s->key);
  TH_ASSERT(r->type == REDIS_REPLY_ARRAY);
  for (size_t i = 0; i + 1 < r->elements; i += 2) {
    char m[40];
    snprintf(m, sizeof m, "%s:%s", r->element[i]->str, r->element[i + 1]->str);
    size_t j = 0;
    while (j < s->n && strcmp(s->e[j].member, m) != 0) j++;
    if (j < s->n) continue;
    if (s->n == s->cap) {
      s->cap = s->cap ? s->cap * 2 : 256;
      s->e = realloc(s->e, s->cap * sizeof *s->e);
    }
    snprintf(s->e[s->n].member, sizeof s->e[s->n].member, "%s", m);
    s->e[s->n++].score = strtoll(r->element[i]->str, NULL, 10);
  }
  freeReplyObject(r);
}

static int cmp_entry(const void *a, const void *b) {
  int64_t x = ((const log_entry *)a)->score, y = ((const log_entry *)b)->score;
  return x < y ? -1 : x > y;
}

/* Sliding log under load across many windows: the admission times Redis
 * recorded never put more than limit in any span of period. */
static void test_concurrent_sliding_log_windows(void) {
  worker_cfg cfg = {SLUICE_RL_SLIDING_LOG, 20, 300, 0, 50, 0, 1200};
  log_snap s = {0};
  /* The key name, without a client: same layout as sluice__rl_redis_key. */
  s.key = "sluice:rl:{4:conc:shared}:log";
  int64_t t0, t1;
  worker_out w = run_workers(&cfg, 4, &t0, &t1, snap_log, &s);
  TH_ASSERT_EQ(w.errors, 0);
  TH_ASSERT_EQ((long)s.n, w.allowed); /* every admitted unit recorded, none collapsed */
  qsort(s.e, s.n, sizeof *s.e, cmp_entry);
  size_t worst = 0;
  int64_t span = (int64_t)cfg.period * 1000;
  for (size_t i = 0, j = 0; i < s.n; i++) {
    while (j < s.n && s.e[j].score < s.e[i].score + span) j++;
    if (j - i > worst) worst = j - i;
  }
  double windows = (double)(t1 - t0) / (double)span;
  th_note("sliding-log: %ld admitted over %.1f periods, at most %zu in any period (limit %u)\n",
          w.allowed, windows, worst, cfg.limit);
  TH_ASSERT_CMP(worst, <=, cfg.limit);
  TH_ASSERT_EQ(worst, cfg.limit); /* under load the limit is reached, too */
  TH_ASSERT_CMP(w.allowed, <=, (long)(cfg.limit * (windows + 1)));
  free(s.e);
}

/* GCRA under load: admitted = burst + elapsed / T (documented). Never more
 * over [t0, t1] (Redis's clock around the whole run); and, over the span
 * where requests certainly kept coming (first admission seen .. last send),
 * not much less. The stored TAT accounts for every admitted unit. */
typedef struct tat_watch {
  long long max;
} tat_watch;

/* The key expires ~burst*T after the last admission, which under valgrind
 * can come before the workers have exited: watch the TAT while they run. */
static void watch_tat(void *arg) {
  tat_watch *t = arg;
  redisReply *r = th_redis_command(&th_server, "GET sluice:rl:{4:conc:shared}:gcra");
  if (r->type == REDIS_REPLY_STRING && strtoll(r->str, NULL, 10) > t->max)
    t->max = strtoll(r->str, NULL, 10);
  freeReplyObject(r);
}

static void test_concurrent_gcra_rate(void) {
  worker_cfg cfg = {SLUICE_RL_GCRA, 100, 1000, 20, 50, 0, 1500};
  int64_t t0, t1;
  tat_watch watch = {0};
  worker_out w = run_workers(&cfg, 4, &t0, &t1, watch_tat, &watch);
  TH_ASSERT_EQ(w.errors, 0);
  int64_t T = 10000; /* us: 1000 ms / 100 */
  double most = cfg.burst + (double)(t1 - t0) / (double)T;
  double busy = cfg.burst + (double)(w.last_send_us - w.first_admit_us) / (double)T;
  long long tat = watch.max;
  th_note(
      "gcra: %ld admitted; burst + rate x time = %.1f over the run (%.0f ms), "
      "%.1f while loaded; TAT - n*T - t0 = %.1f ms\n",
      w.allowed, most, (double)(t1 - t0) / 1000, busy, (double)(tat - w.allowed * T - t0) / 1000);
  TH_ASSERT_CMP(w.allowed, <=, (long)most + 1);         /* never more */
  TH_ASSERT_CMP(w.allowed, >=, (long)(busy * 0.9) - 2); /* and close to it */
  /* TAT = first admission + n*T + idle gaps, and the first came after t0. */
  TH_ASSERT_CMP(tat - w.allowed * T, >=, t0);
}

/* ---- batching --------------------------------------------------------------- */

/* Calls of cmd (e.g. "evalsha") the test server has run, from INFO commandstats. */
static long long cmd_calls(const char *cmd) {
  char field[64];
  snprintf(field, sizeof field, "cmdstat_%s:calls=", cmd);
  return th_redis_info_sum("commandstats", field);
}

/* Checks issued in one loop turn go to Redis as one script call (or a few:
 * at most 255 requests each) and are decided exactly as one call each would
 * be: in issue order, each seeing the units the ones before it took. */
static void test_batch_one_call(void) {
  rl_case fx = case_open(2000);
  enum { N = 100, LIMIT = 50 };
  for (size_t a = 0; a < 4; a++) {
    sluice_limiter *lim = new_lim(fx.c, "batch", all_algos[a], LIMIT, 60000, 0);
    check_ok(fx.base, lim, "warm", 1); /* the script is cached: EVALSHA from now on */
    window_room(fx.base, all_algos[a], 60000, 5000, 0);
    static rcv r[N];
    static int order[N];
    int norder = 0;
    memset(r, 0, sizeof r);
    long long calls0 = cmd_calls("evalsha") + cmd_calls("eval");
    for (int i = 0; i < N; i++) {
      r[i].order = order, r[i].norder = &norder, r[i].id = i;
      TH_ASSERT_EQ(sluice_limiter_check(lim, "hot", 1, on_res, &r[i]), SLUICE_OK);
    }
    TH_ASSERT(th_loop_until(fx.base, &r[N - 1].done, 5000));
    long long calls = cmd_calls("evalsha") + cmd_calls("eval") - calls0;
    th_note("%s: %d checks in one turn took %lld script calls\n", sluice_rl_algo_name(all_algos[a]),
            N, calls);
    TH_ASSERT_CMP(calls, <=, 2);
    TH_ASSERT_EQ(norder, N);
    for (int i = 0; i < N; i++) {
      TH_ASSERT_EQ(order[i], i); /* callbacks in issue order */
      TH_ASSERT_EQ(r[i].status, SLUICE_OK);
      TH_ASSERT_EQ(r[i].res.allowed, i < LIMIT); /* exactly the first LIMIT */
      if (i < LIMIT) TH_ASSERT_EQ(r[i].res.remaining, LIMIT - 1 - i);
    }
    /* A peek in the same call as a check sees what the check took. */
    rcv p0 = {0}, ck = {0}, p1 = {0};
    TH_ASSERT_EQ(sluice_limiter_peek(lim, "pk", 1, on_res, &p0), SLUICE_OK);
    TH_ASSERT_EQ(sluice_limiter_check(lim, "pk", 3, on_res, &ck), SLUICE_OK);
    TH_ASSERT_EQ(sluice_limiter_peek(lim, "pk", 1, on_res, &p1), SLUICE_OK);
    TH_ASSERT(th_loop_until(fx.base, &p1.done, 5000));
    TH_ASSERT_EQ(p0.res.remaining, LIMIT - 1);
    TH_ASSERT_EQ(ck.res.remaining, LIMIT - 3);
    TH_ASSERT_EQ(p1.res.remaining, LIMIT - 4);
    sluice_limiter_free(lim);
  }
  /* Many keys in one turn: one call too (one Redis, one route); on a
   * cluster one call per master, whatever the keys' slots (a call carries
   * a node's requests of every slot: _spread.lua). */
  sluice_limiter *lim = new_lim(fx.c, "batchkeys", SLUICE_RL_GCRA, 1, 60000, 0);
  check_ok(fx.base, lim, "warm", 1);
  static rcv r[300];
  memset(r, 0, sizeof r);
  long long calls0 = cmd_calls("evalsha") + cmd_calls("eval");
  for (int i = 0; i < 300; i++) {
    char key[16];
    snprintf(key, sizeof key, "k%d", i % 150); /* each key twice, 150 apart */
    TH_ASSERT_EQ(sluice_limiter_check(lim, key, 1, on_res, &r[i]), SLUICE_OK);
  }
  /* Every one: on a cluster the slots' calls go to different masters and
   * answer in any order. */
  uint64_t end = th_now_ms() + 5000;
  for (int i = 0; i < 300 && th_now_ms() < end; i += r[i].done)
    if (!r[i].done) event_base_loop(fx.base, EVLOOP_ONCE);
  long long calls = cmd_calls("evalsha") + cmd_calls("eval") - calls0;
  th_note("300 checks on 150 keys in one turn took %lld script calls\n", calls);
  /* 150 keys' slots leave no master without any (odds 3 x (2/3)^150). */
  if (th_server_topo() == TH_TOPO_CLUSTER) TH_ASSERT_EQ(calls, th_redis_masters());
  else TH_ASSERT_EQ(calls, 2); /* 255 + 45 */
  for (int i = 0; i < 300; i++) {
    TH_ASSERT_EQ(r[i].done, 1);
    TH_ASSERT_EQ(r[i].status, SLUICE_OK);
    TH_ASSERT_EQ(r[i].res.allowed, i < 150); /* limit 1: the second of each key is denied */
  }
  case_close(&fx, lim);
}

/* ---- waits ------------------------------------------------------------------ */

static void test_wait_fifo(void) {
  rl_case fx = case_open(2000);
  sluice_limiter *lim = new_lim(fx.c, "fifo", SLUICE_RL_GCRA, 1, 100, 1);
  int order[8], norder = 0;
  rcv r[6];
  memset(r, 0, sizeof r);
  uint64_t t0 = th_now_ms(); /* before the bucket is emptied */
  TH_ASSERT_EQ(check_ok(fx.base, lim, "k", 1).res.allowed, 1);
  sluice_client_stats st0, st1;
  sluice_client_get_stats(fx.c, &st0);
  for (int i = 0; i < 5; i++) {
    r[i].order = order, r[i].norder = &norder, r[i].id = i;
    TH_ASSERT_EQ(sluice_limiter_wait(lim, "k", 1, 5000, on_res, &r[i], NULL), SLUICE_OK);
  }
  /* Another key is not held up by this one's queue. */
  r[5].order = order, r[5].norder = &norder, r[5].id = 5;
  TH_ASSERT_EQ(sluice_limiter_wait(lim, "other", 1, 5000, on_res, &r[5], NULL), SLUICE_OK);
  TH_ASSERT_EQ(norder, 0);
  TH_ASSERT(th_loop_until(fx.base, &r[4].done, 5000));
  TH_ASSERT_EQ(norder, 6);
  TH_ASSERT_EQ(order[0], 5);
  for (int i = 0; i < 5; i++) {
    TH_ASSERT_EQ(order[i + 1], i);
    TH_ASSERT_EQ(r[i].status, SLUICE_OK);
    TH_ASSERT_EQ(r[i].res.allowed, 1);
    /* one per 100 ms */
    TH_ASSERT_CMP(r[i].at_ms - t0, >=, 100 * (uint64_t)i + 99);
  }
  /* No busy loop: about one script per waiter and retry. */
  sluice_client_get_stats(fx.c, &st1);
  th_note("6 waits took %llu scripts\n", (unsigned long long)(st1.ops_started - st0.ops_started));
  TH_ASSERT_CMP(st1.ops_started - st0.ops_started, <=, 6 * 3);
  case_close(&fx, lim);
}

static void test_wait_timeout(void) {
  rl_case fx = case_open(2000);
  /* Cannot pass in time: ends at once (Redis's retry_after says so). */
  sluice_limiter *lim = new_lim(fx.c, "wt", SLUICE_RL_FIXED, 1, 60000, 0);
  window_room(fx.base, SLUICE_RL_FIXED, 60000, 5000, 0);
  check_ok(fx.base, lim, "k", 1);
  rcv r = {0};
  uint64_t t0 = th_now_ms();
  TH_ASSERT_EQ(sluice_limiter_wait(lim, "k", 1, 300, on_res, &r, NULL), SLUICE_OK);
  TH_ASSERT(th_loop_until(fx.base, &r.done, 3000));
  TH_ASSERT_EQ(r.status, SLUICE_ETIMEDOUT);
  TH_ASSERT(r.has_res);
  TH_ASSERT_EQ(r.res.allowed, 0);
  TH_ASSERT_CMP(r.res.retry_after_ms, >, 300);
  TH_ASSERT_CMP(r.at_ms - t0, <, 250);
  sluice_limiter_free(lim);

  /* Passes within its timeout: waits retry_after, then gets it. */
  lim = new_lim(fx.c, "wt2", SLUICE_RL_GCRA, 1, 300, 1);
  check_ok(fx.base, lim, "k", 1);
  rcv a = {0}, b = {0};
  t0 = th_now_ms();
  TH_ASSERT_EQ(sluice_limiter_wait(lim, "k", 1, 2000, on_res, &a, NULL), SLUICE_OK);
  /* Behind it, a waiter with a short timeout expires in the queue. */
  TH_ASSERT_EQ(sluice_limiter_wait(lim, "k", 1, 100, on_res, &b, NULL), SLUICE_OK);
  TH_ASSERT(th_loop_until(fx.base, &b.done, 3000));
  TH_ASSERT_EQ(b.status, SLUICE_ETIMEDOUT);
  TH_ASSERT_EQ(a.done, 0);
  TH_ASSERT_CMP(b.at_ms - t0, >=, 95);
  TH_ASSERT(th_loop_until(fx.base, &a.done, 3000));
  TH_ASSERT_EQ(a.status, SLUICE_OK);
  TH_ASSERT_EQ(a.res.allowed, 1);
  TH_ASSERT_CMP(a.at_ms - t0, >=, 200);
  case_close(&fx, lim);
}

static void test_wait_queue_full(void) {
  rl_case fx = case_open(2000);
  sluice_limiter_options o;
  sluice_limiter_options_init(&o);
  o.limit = 1;
  o.period_ms = 60000;
  o.wait_queue_max = 3;
  sluice_limiter *lim;
  TH_ASSERT_EQ(sluice_limiter_new(fx.c, "full", &o, &lim), SLUICE_OK);
  window_room(fx.base, SLUICE_RL_FIXED, 60000, 5000, 0);
  check_ok(fx.base, lim, "k", 1);
  rcv r[5];
  memset(r, 0, sizeof r);
  for (int i = 0; i < 4; i++)
    TH_ASSERT_EQ(sluice_limiter_wait(lim, "k", 1, 0, on_res, &r[i], NULL), SLUICE_OK);
  TH_ASSERT_EQ(r[3].done, 0); /* answered from the loop, not inside the call */
  TH_ASSERT(th_loop_until(fx.base, &r[3].done, 1000));
  TH_ASSERT_EQ(r[3].status, SLUICE_EFULL);
  TH_ASSERT(!r[3].has_res);
  /* The queue is per key. */
  TH_ASSERT_EQ(sluice_limiter_wait(lim, "k2", 1, 0, on_res, &r[4], NULL), SLUICE_OK);
  TH_ASSERT(th_loop_until(fx.base, &r[4].done, 3000));
  TH_ASSERT_EQ(r[4].status, SLUICE_OK);
  th_loop_for(fx.base, 50);
  for (int i = 0; i < 3; i++) TH_ASSERT_EQ(r[i].done, 0);
  sluice_limiter_free(lim);
  for (int i = 0; i < 3; i++) TH_ASSERT_EQ(r[i].done, 0); /* not inside free */
  th_loop_for(fx.base, 50);
  for (int i = 0; i < 3; i++) {
    TH_ASSERT_EQ(r[i].done, 1);
    TH_ASSERT_EQ(r[i].status, SLUICE_ECANCELED);
  }
  case_close(&fx, NULL);
}

/* The client's limiter_waits_max bounds the waits of all its limiters
 * together: one more is refused inside the call (no callback), and a slot
 * comes back when a wait completes. */
static void test_wait_client_cap(void) {
  struct event_base *base = event_base_new();
  sluice_client_options co;
  sluice_client_options_init(&co);
  TH_ASSERT_EQ(co.limiter_waits_max, 100000); /* the documented default */
  co.url = th_server.url;
  co.limiter_waits_max = 10;
  sluice_client *c = NULL;
  TH_ASSERT_EQ(sluice_client_new(base, &co, &c), SLUICE_OK);
  sluice_limiter *a = new_lim(c, "capa", SLUICE_RL_FIXED, 1, 60000, 0);
  sluice_limiter *b = new_lim(c, "capb", SLUICE_RL_FIXED, 1, 60000, 0);
  window_room(base, SLUICE_RL_FIXED, 60000, 5000, 0);
  check_ok(base, a, "k", 1);
  check_ok(base, b, "k", 1);
  rcv r[12];
  memset(r, 0, sizeof r);
  sluice_rl_waiter *h[12];
  for (int i = 0; i < 10; i++)
    TH_ASSERT_EQ(sluice_limiter_wait(i < 6 ? a : b, "k", 1, 0, on_res, &r[i], &h[i]), SLUICE_OK);
  TH_ASSERT_EQ(sluice_limiter_wait(a, "other", 1, 0, on_res, &r[10], NULL), SLUICE_EFULL);
  sluice_client_metrics cm;
  sluice_limiter_metrics am, bm;
  sluice_client_get_metrics(c, &cm);
  sluice_limiter_get_metrics(a, &am);
  sluice_limiter_get_metrics(b, &bm);
  TH_ASSERT_EQ(cm.limiter_waits, 10);
  TH_ASSERT_EQ(am.waiting, 6);
  TH_ASSERT_EQ(bm.waiting, 4);
  TH_ASSERT_EQ(am.waits_refused, 1);
  /* A cancelled wait gives its slot back once its callback ran. */
  TH_ASSERT_EQ(sluice_limiter_wait_cancel(h[7]), SLUICE_OK);
  TH_ASSERT(th_loop_until(base, &r[7].done, 1000));
  TH_ASSERT_EQ(r[7].status, SLUICE_ECANCELED);
  TH_ASSERT_EQ(sluice_limiter_wait(a, "other", 1, 0, on_res, &r[11], NULL), SLUICE_OK);
  th_loop_for(base, 50);
  TH_ASSERT_EQ(r[10].done, 0); /* refused in the call: never called back */
  sluice_limiter_free(a);
  sluice_limiter_free(b);
  th_loop_for(base, 50);
  sluice_client_get_metrics(c, &cm);
  TH_ASSERT_EQ(cm.limiter_waits, 0);
  finish(base, c, NULL);
}

static void test_wait_cancel(void) {
  rl_case fx = case_open(2000);
  sluice_limiter *lim = new_lim(fx.c, "cancel", SLUICE_RL_GCRA, 1, 200, 1);
  check_ok(fx.base, lim, "k", 1);
  rcv r[3];
  sluice_rl_waiter *h[3];
  memset(r, 0, sizeof r);
  for (int i = 0; i < 3; i++)
    TH_ASSERT_EQ(sluice_limiter_wait(lim, "k", 1, 5000, on_res, &r[i], &h[i]), SLUICE_OK);
  TH_ASSERT_EQ(sluice_limiter_wait_cancel(h[1]), SLUICE_OK);
  TH_ASSERT_EQ(r[1].done, 0);
  th_loop_for(fx.base, 30); /* let the head send its first script */
  TH_ASSERT_EQ(sluice_limiter_wait_cancel(h[0]), SLUICE_OK);
  TH_ASSERT_EQ(sluice_limiter_wait_cancel(h[0]), SLUICE_OK); /* until cb runs: no-op */
  TH_ASSERT(th_loop_until(fx.base, &r[2].done, 3000));
  TH_ASSERT_EQ(r[0].status, SLUICE_ECANCELED);
  TH_ASSERT_EQ(r[1].status, SLUICE_ECANCELED);
  TH_ASSERT_EQ(r[0].done, 1);
  TH_ASSERT_EQ(r[1].done, 1);
  TH_ASSERT_EQ(r[2].status, SLUICE_OK); /* the next in line took over */
  TH_ASSERT_EQ(r[2].res.allowed, 1);
  case_close(&fx, lim);
}

/* ---- teardown --------------------------------------------------------------- */

typedef struct freeing {
  sluice_limiter *lim;
  int done, status, others_done, others_bad;
} freeing;

static void on_free_me(sluice_limiter *lim, int status, const sluice_rl_result *res, void *ud) {
  freeing *f = ud;
  f->done++;
  f->status = status;
  sluice_limiter_free(lim);
  sluice_limiter_free(lim); /* still a no-op inside the callback */
}

static void on_other(sluice_limiter *lim, int status, const sluice_rl_result *res, void *ud) {
  freeing *f = ud;
  f->others_done++;
  if (status != SLUICE_ECANCELED) f->others_bad++;
}

/* A user key other than k whose Redis key shares k's: "j", or on a cluster
 * one in k's slot, so that its check goes in the same call as k's and
 * cannot be answered before it (another master may answer first). */
static void key_beside(sluice_limiter *lim, const char *k, char *out, size_t size) {
  snprintf(out, size, "j");
  if (th_server_topo() != TH_TOPO_CLUSTER) return;
  char *rk = rkey(lim, k);
  unsigned slot = th_keyslot(rk, strlen(rk));
  free(rk);
  for (int i = 0; i < 1000000; i++) {
    snprintf(out, size, "j%d", i);
    rk = rkey(lim, out);
    unsigned s = th_keyslot(rk, strlen(rk));
    free(rk);
    if (s == slot) return;
  }
  th_fail(__FILE__, __LINE__, "no key in the slot of %s", k);
}

static void test_free_in_callback(void) {
  rl_case fx = case_open(2000);
  for (int kind = 0; kind < 2; kind++) {
    freeing f = {0};
    f.lim = new_lim(fx.c, "fic", SLUICE_RL_SLIDING_LOG, 5, 1000, 0);
    char j[16];
    key_beside(f.lim, "k", j, sizeof j);
    if (kind == 0) TH_ASSERT_EQ(sluice_limiter_check(f.lim, "k", 1, on_free_me, &f), SLUICE_OK);
    else TH_ASSERT_EQ(sluice_limiter_wait(f.lim, "k", 1, 1000, on_free_me, &f, NULL), SLUICE_OK);
    sluice_limiter_wait(f.lim, "k", 5, 1000, on_other, &f, NULL); /* queued behind */
    sluice_limiter_wait(f.lim, j, 5, 1000, on_other, &f, NULL);
    TH_ASSERT(th_loop_until(fx.base, &f.done, 3000));
    TH_ASSERT_EQ(f.status, SLUICE_OK);
    th_loop_for(fx.base, 50);
    TH_ASSERT_EQ(f.done, 1);
    TH_ASSERT_EQ(f.others_bad, 0);
  }
  case_close(&fx, NULL);
}

static void test_free_cancels_pending(void) {
  rl_case fx = case_open(2000);
  sluice_limiter *lim = new_lim(fx.c, "fcp", SLUICE_RL_FIXED, 1, 60000, 0);
  freeing f = {0};
  for (int i = 0; i < 10; i++)
    TH_ASSERT_EQ(sluice_limiter_check(lim, "k", 1, on_other, &f), SLUICE_OK);
  TH_ASSERT_EQ(sluice_limiter_peek(lim, "k", 1, on_other, &f), SLUICE_OK);
  TH_ASSERT_EQ(sluice_limiter_wait(lim, "k", 1, 0, on_other, &f, NULL), SLUICE_OK);
  TH_ASSERT_EQ(sluice_limiter_wait(lim, "k", 1, 0, on_other, &f, NULL), SLUICE_OK);
  /* A wait refused for a full queue whose SLUICE_EFULL is not delivered yet. */
  for (int i = 0; i < 127; i++)
    TH_ASSERT_EQ(sluice_limiter_wait(lim, "k", 1, 0, on_other, &f, NULL), SLUICE_OK);
  sluice_limiter_free(lim);
  TH_ASSERT_EQ(f.others_done, 0);
  th_loop_for(fx.base, 100);
  TH_ASSERT_EQ(f.others_done, 13 + 127);
  TH_ASSERT_EQ(f.others_bad, 0);
  case_close(&fx, NULL);
}

static void test_client_close_cancels(void) {
  rl_case fx = case_open(2000);
  sluice_limiter *lim = new_lim(fx.c, "ccc", SLUICE_RL_GCRA, 1, 60000, 1);
  check_ok(fx.base, lim, "k", 1);
  freeing f = {0};
  TH_ASSERT_EQ(sluice_limiter_wait(lim, "k", 1, 0, on_other, &f, NULL), SLUICE_OK);
  TH_ASSERT_EQ(sluice_limiter_wait(lim, "k", 1, 0, on_other, &f, NULL), SLUICE_OK);
  th_loop_for(fx.base, 20); /* the head waiter now sleeps on its retry timer */
  for (int i = 0; i < 5; i++)
    TH_ASSERT_EQ(sluice_limiter_check(lim, "k", 1, on_other, &f), SLUICE_OK);
  sluice_client_free(fx.c);
  TH_ASSERT_EQ(f.others_done, 0);
  th_loop_for(fx.base, 100);
  TH_ASSERT_EQ(f.others_done, 7);
  TH_ASSERT_EQ(f.others_bad, 0);
  rcv r = {0};
  TH_ASSERT_EQ(sluice_limiter_check(lim, "k", 1, on_res, &r), SLUICE_ECLOSED);
  TH_ASSERT_EQ(sluice_limiter_wait(lim, "k", 1, 0, on_res, &r, NULL), SLUICE_ECLOSED);
  sluice_limiter *lim2;
  sluice_limiter_options o;
  sluice_limiter_options_init(&o);
  o.limit = 1, o.period_ms = 1;
  TH_ASSERT_EQ(sluice_limiter_new(fx.c, "late", &o, &lim2), SLUICE_ECLOSED);
  sluice_limiter_free(lim); /* the client's memory goes with its last child */
  TH_ASSERT(th_loop_drain(fx.base, 3000));
  event_base_free(fx.base);
}

/* ---- Redis down ------------------------------------------------------------- */

static void redis_kill(sluice_client *c, struct event_base *base) {
  TH_ASSERT(th_server.pid > 0); /* standalone: kill(0, ...) would hit the harness */
  kill(th_server.pid, SIGKILL);
  uint64_t end = th_now_ms() + 3000;
  while (sluice_client_is_connected(c) && th_now_ms() < end) event_base_loop(base, EVLOOP_ONCE);
  TH_ASSERT(!sluice_client_is_connected(c));
}

/* Bring the server back (the harness adopts it after the case). */
static void redis_back(sluice_client *c, struct event_base *base) {
  th_redis_restart(&th_server);
  loop_until_connected(base, c, 5000);
}

static rcv timed(struct event_base *base, sluice_limiter *lim, const char *key, uint64_t *ms) {
  uint64_t t0 = th_now_ms();
  rcv r = run(base, lim, key, 1, 0);
  *ms = th_now_ms() - t0;
  return r;
}

/* A paused server: a check's step times out (SLUICE_ETIMEDOUT); a wait
 * reports it as SLUICE_ECONNECTION, keeping ETIMEDOUT for its own timeout. */
static void paused_fail_closed(struct event_base *base, sluice_client *c) {
  sluice_limiter_options o;
  sluice_limiter_options_init(&o);
  o.limit = 3, o.period_ms = 60000, o.op_timeout_ms = 150;
  sluice_limiter *lim;
  TH_ASSERT_EQ(sluice_limiter_new(c, "dcp", &o, &lim), SLUICE_OK);
  check_ok(base, lim, "k", 1);
  th_redis_pause(&th_server);
  rcv r = {0}, w = {0};
  TH_ASSERT_EQ(sluice_limiter_check(lim, "k", 1, on_res, &r), SLUICE_OK);
  TH_ASSERT_EQ(sluice_limiter_wait(lim, "k", 1, 5000, on_res, &w, NULL), SLUICE_OK);
  TH_ASSERT(th_loop_until(base, &r.done, 3000));
  TH_ASSERT(th_loop_until(base, &w.done, 3000));
  th_redis_resume(&th_server);
  TH_ASSERT_EQ(r.status, SLUICE_ETIMEDOUT);
  TH_ASSERT_EQ(w.status, SLUICE_ECONNECTION);
  TH_ASSERT_CMP(w.at_ms - r.at_ms, <, 1000); /* not the wait's 5 s */
  sluice_limiter_free(lim);
}

static void test_down_fail_closed(void) {
  rl_case fx = case_open(2000);
  paused_fail_closed(fx.base, fx.c);
  sluice_limiter *lim = new_lim_p(fx.c, "dc", SLUICE_RL_FIXED, 3, 60000, 0, SLUICE_RL_FAIL_CLOSED);
  check_ok(fx.base, lim, "k", 1);
  /* A check in flight when the server dies. */
  rcv inflight = {0};
  TH_ASSERT_EQ(sluice_limiter_check(lim, "k", 1, on_res, &inflight), SLUICE_OK);
  redis_kill(fx.c, fx.base);
  TH_ASSERT(th_loop_until(fx.base, &inflight.done, 3000));
  TH_ASSERT(inflight.status == SLUICE_OK || inflight.status == SLUICE_EINDOUBT);
  uint64_t ms;
  rcv r = timed(fx.base, lim, "k", &ms);
  TH_ASSERT_EQ(r.status, SLUICE_ECONNECTION);
  TH_ASSERT(!r.has_res);
  TH_ASSERT_CMP(ms, <, 100); /* at once, not after a reconnect or deadline */
  rcv w = {0};
  TH_ASSERT_EQ(sluice_limiter_wait(lim, "k", 1, 2000, on_res, &w, NULL), SLUICE_OK);
  TH_ASSERT(th_loop_until(fx.base, &w.done, 3000));
  TH_ASSERT_EQ(w.status, SLUICE_ECONNECTION);
  redis_back(fx.c, fx.base);
  r = check_ok(fx.base, lim, "k", 1);
  TH_ASSERT_EQ(r.res.source, SLUICE_RL_REDIS);
  TH_ASSERT_EQ(r.res.remaining, 2); /* a fresh server */
  case_close(&fx, lim);
}

static int gave_up(int status) {
  return status == SLUICE_ETIMEDOUT || status == SLUICE_ECONNECTION;
}

/* Redis stalls with a check and a wait of each algorithm in its socket:
 * both time out at the client, and when Redis resumes and reads them it
 * takes no units for them (their deadlines on its clock have passed). */
static void test_stall_takes_nothing(void) {
  unsigned most = th_redis_stall_max_ms(), stall = most && most < 1500 ? most : 1500;
  struct event_base *base = event_base_new();
  sluice_client *c = new_client(base, stall / 3);
  for (size_t i = 0; i < sizeof all_algos / sizeof all_algos[0]; i++) {
    char name[16];
    snprintf(name, sizeof name, "st%zu", i);
    sluice_limiter *lim = new_lim(c, name, all_algos[i], 3, 60000, 0);
    check_ok(base, lim, "k", 1);
    rcv before = run(base, lim, "k", 1, 1);
    char *k = rkey(lim, "k");
    pid_t server = th_redis_stall(k);
    uint64_t t0 = th_now_ms();
    rcv chk = {0}, w = {0};
    TH_ASSERT_EQ(sluice_limiter_check(lim, "k", 1, on_res, &chk), SLUICE_OK);
    TH_ASSERT_EQ(sluice_limiter_wait(lim, "k", 1, stall / 2, on_res, &w, NULL), SLUICE_OK);
    TH_ASSERT(th_loop_until(base, &chk.done, stall));
    TH_ASSERT(th_loop_until(base, &w.done, stall));
    if (!gave_up(chk.status) || !gave_up(w.status))
      th_fail(__FILE__, __LINE__, "%s: check %s, wait %s (a timeout or no connection expected)",
              sluice_rl_algo_name(all_algos[i]), sluice_strerror(chk.status),
              sluice_strerror(w.status));
    th_loop_for(base, (unsigned)(t0 + stall - th_now_ms()));
    th_redis_unstall(server);
    free(k);
    loop_until_connected(base, c, 5000); /* it may have given up on the connection */
    rcv after = run(base, lim, "k", 1, 1);
    TH_ASSERT_EQ(after.status, SLUICE_OK);
    TH_ASSERT_EQ(after.res.remaining, before.res.remaining); /* nothing more taken */
    sluice_limiter_free(lim);
  }
  th_free_client_and_loop(base, c, 5000);
}

static void test_down_fail_open(void) {
  rl_case fx = case_open(150);
  sluice_limiter *lim = new_lim_p(fx.c, "do", SLUICE_RL_SLIDING_LOG, 1, 60000, 0,
                                  SLUICE_RL_FAIL_OPEN);
  check_ok(fx.base, lim, "k", 1);
  TH_ASSERT_EQ(check_ok(fx.base, lim, "k", 1).res.allowed, 0);
  /* A paused server: the step times out, then fail-open. */
  th_redis_pause(&th_server);
  rcv r = check_ok(fx.base, lim, "k", 1);
  th_redis_resume(&th_server);
  TH_ASSERT_EQ(r.res.allowed, 1);
  TH_ASSERT_EQ(r.res.source, SLUICE_RL_UNCHECKED);
  TH_ASSERT_EQ(r.res.remaining, -1);
  /* A dead server: at once. */
  redis_kill(fx.c, fx.base);
  uint64_t ms;
  for (int i = 0; i < 5; i++) {
    r = timed(fx.base, lim, "k", &ms);
    TH_ASSERT_EQ(r.status, SLUICE_OK);
    TH_ASSERT_EQ(r.res.allowed, 1);
    TH_ASSERT_EQ(r.res.source, SLUICE_RL_UNCHECKED);
    TH_ASSERT_CMP(ms, <, 100);
  }
  rcv p = run(fx.base, lim, "k", 1, 1);
  TH_ASSERT_EQ(p.res.source, SLUICE_RL_UNCHECKED);
  redis_back(fx.c, fx.base);
  r = check_ok(fx.base, lim, "k", 1);
  TH_ASSERT_EQ(r.res.source, SLUICE_RL_REDIS);
  case_close(&fx, lim);
}

static void test_down_local(void) {
  rl_case fx = case_open(2000);
  for (size_t i = 0; i < 4; i++) {
    sluice_limiter *lim = new_lim_p(fx.c, "dl", all_algos[i], 3, 1500, 0, SLUICE_RL_FAIL_LOCAL);
    check_ok(fx.base, lim, "k", 1);
    redis_kill(fx.c, fx.base);
    window_room(fx.base, all_algos[i], 1500, 1000, 1);
    uint64_t ms;
    for (int n = 0; n < 3; n++) {
      rcv r = timed(fx.base, lim, "k", &ms);
      TH_ASSERT_EQ(r.status, SLUICE_OK);
      TH_ASSERT_EQ(r.res.source, SLUICE_RL_LOCAL);
      TH_ASSERT_EQ(r.res.allowed, 1);
      TH_ASSERT_EQ(r.res.remaining, 2 - n);
      TH_ASSERT_CMP(ms, <, 100);
    }
    /* retry_after counts from the decision, inside check_ok: t0 is taken
     * before it, or the time check_ok takes to return (ms under valgrind)
     * would count against the wait. */
    uint64_t t0 = th_now_ms();
    rcv d = check_ok(fx.base, lim, "k", 1);
    TH_ASSERT_EQ(d.res.allowed, 0);
    TH_ASSERT_EQ(d.res.source, SLUICE_RL_LOCAL);
    TH_ASSERT_CMP(d.res.retry_after_ms, >, 0);
    TH_ASSERT_CMP(d.res.retry_after_ms, <=, 3000);
    /* Waits work on the local limiter too, and its retry_after is honest. */
    rcv w = {0};
    TH_ASSERT_EQ(sluice_limiter_wait(lim, "k", 1, 5000, on_res, &w, NULL), SLUICE_OK);
    TH_ASSERT(th_loop_until(fx.base, &w.done, 6000));
    TH_ASSERT_EQ(w.status, SLUICE_OK);
    TH_ASSERT_EQ(w.res.allowed, 1);
    TH_ASSERT_EQ(w.res.source, SLUICE_RL_LOCAL);
    TH_ASSERT_CMP(w.at_ms - t0, >=, (uint64_t)d.res.retry_after_ms - 5);
    redis_back(fx.c, fx.base);
    rcv r = check_ok(fx.base, lim, "k", 1);
    TH_ASSERT_EQ(r.res.source, SLUICE_RL_REDIS);
    sluice_limiter_free(lim);
  }
  case_close(&fx, NULL);
}

/* The local limiter alone: many keys, idle ones dropped. */
static void test_local_limiter_keys(void) {
  sluice__rl_params p = {SLUICE_RL_SLIDING_LOG, 2, 100, 2};
  sluice__rl_local *l = sluice__rl_local_new(&p);
  TH_ASSERT(l != NULL);
  sluice_rl_result r;
  char key[32];
  uint64_t now = 1000000000;
  for (int i = 0; i < 1000; i++) {
    snprintf(key, sizeof key, "ip-%d", i);
    TH_ASSERT_EQ(sluice__rl_local_check(l, key, 1, 0, now, &r), SLUICE_OK);
    TH_ASSERT_EQ(r.allowed, 1);
    now += 1000; /* 1 ms apart: old keys go idle after 100 */
  }
  TH_ASSERT_CMP(sluice__rl_local_keys(l), <, 400);
  TH_ASSERT_EQ(sluice__rl_local_check(l, "ip-999", 2, 0, now, &r), SLUICE_OK);
  TH_ASSERT_EQ(r.allowed, 0);
  TH_ASSERT_EQ(r.retry_after_ms, 99);
  sluice__rl_local_free(l);
}

static const th_case cases[] = {
    TH_CASE(bad_input, 0),
    TH_CASE(basic_decisions, 0),
    TH_CASE(peek_consumes_nothing, 0),
    TH_CASE(rejected_consume_nothing, 0),
    TH_CASE(cost, 0),
    TH_CASE(retry_after_honest, 0),
    TH_CASE(expiry, 0),
    TH_CASE(memory_per_key, 0),
    TH_CASE(concurrent_exact, 120),
    TH_CASE(concurrent_sliding_log_windows, 120),
    TH_CASE(concurrent_gcra_rate, 120),
    TH_CASE(batch_one_call, 0),
    TH_CASE(wait_fifo, 0),
    TH_CASE(wait_timeout, 0),
    TH_CASE(wait_queue_full, 0),
    TH_CASE(wait_client_cap, 0),
    TH_CASE(wait_cancel, 0),
    TH_CASE(free_in_callback, 0),
    TH_CASE(free_cancels_pending, 0),
    TH_CASE(client_close_cancels, 0),
    TH_CASE(down_fail_closed, 0, .standalone_only = "pauses and kills the server"),
    TH_CASE(down_fail_open, 0, .standalone_only = "pauses and kills the server"),
    TH_CASE(down_local, 0, .standalone_only = "kills the server"),
    TH_CASE(local_limiter_keys, 0),
    TH_CASE(stall_takes_nothing, 0),
};
TH_MAIN(cases)
