/* Small fixtures shared by the rate-limiter tests. */
#ifndef SLUICE_TEST_RL_UTIL_H
#define SLUICE_TEST_RL_UTIL_H

#include <string.h>

#include <event2/event.h>
#include <sluice/sluice.h>

#include "harness.h"
#include "lua_scripts.h"

/* What one limiter callback said. */
typedef struct rl_answer {
  int done;
  int status;
  int has_res;
  sluice_rl_result res;
} rl_answer;

static inline void rl_answer_cb(sluice_limiter *lim, int status, const sluice_rl_result *res,
                                void *ud) {
  rl_answer *a = ud;
  a->done++;
  a->status = status;
  a->has_res = res != NULL;
  if (res) a->res = *res;
}

/* A connected client of the test server. */
static inline sluice_client *rl_test_client(struct event_base *base) {
  sluice_client *c = th_client(base, th_server.url, 5000);
  TH_LOOP_UNTIL(base, sluice_client_is_connected(c), 3000);
  TH_ASSERT(sluice_client_is_connected(c));
  return c;
}

/* The defaults with algo, limit and period_ms; callers set the rest. */
static inline sluice_limiter_options rl_test_options(sluice_rl_algo algo, unsigned limit,
                                                     unsigned period_ms) {
  sluice_limiter_options o;
  sluice_limiter_options_init(&o);
  o.algo = algo;
  o.limit = limit;
  o.period_ms = period_ms;
  return o;
}

/* A limiter with options o, which must be accepted. */
static inline sluice_limiter *rl_test_new_opts(sluice_client *c, const char *name,
                                               const sluice_limiter_options *o) {
  sluice_limiter *lim = NULL;
  TH_ASSERT_EQ(sluice_limiter_new(c, name, o, &lim), SLUICE_OK);
  return lim;
}

static inline sluice_limiter *rl_test_new(sluice_client *c, const char *name, sluice_rl_algo algo,
                                          unsigned limit, unsigned period_ms) {
  sluice_limiter_options o = rl_test_options(algo, limit, period_ms);
  return rl_test_new_opts(c, name, &o);
}

/* One check run to its answer, whatever it is. */
static inline rl_answer rl_test_answer(struct event_base *base, sluice_limiter *lim,
                                       const char *key, unsigned cost) {
  rl_answer a = {0};
  TH_ASSERT_EQ(sluice_limiter_check(lim, key, cost, rl_answer_cb, &a), SLUICE_OK);
  TH_ASSERT(th_loop_until(base, &a.done, 5000));
  return a;
}

/* One check run to its answer, which must be a decision. */
static inline sluice_rl_result rl_test_check(struct event_base *base, sluice_limiter *lim,
                                             const char *key, unsigned cost) {
  rl_answer a = rl_test_answer(base, lim, key, cost);
  TH_ASSERT_EQ(a.status, SLUICE_OK);
  return a.res;
}

/* n requests of cost on key in one call of the sliding-log script, sent
 * as a caller with its own limit and period would; returns the reply
 * (freeReplyObject): Redis's clock, then one {allowed, remaining, retry,
 * reset} per request (rl_request_at finds them). No deadline: the requests
 * never give up. */
static inline redisReply *rl_log_call(redisContext *rc, const char *key, unsigned limit,
                                      unsigned period_ms, unsigned cost, int n) {
  const char **argv = calloc((size_t)(6 + 4 * n), sizeof *argv);
  char nk[16], lim[16], per[16], cst[16];
  snprintf(nk, sizeof nk, "%d", n);
  snprintf(lim, sizeof lim, "%u", limit);
  snprintf(per, sizeof per, "%u", period_ms);
  snprintf(cst, sizeof cst, "%u", cost);
  int argc = 0;
  argv[argc++] = "EVAL";
  argv[argc++] = sluice__lua_rl_sliding_log.body;
  argv[argc++] = nk;
  for (int i = 0; i < n; i++) argv[argc++] = key;
  argv[argc++] = lim;
  argv[argc++] = per;
  argv[argc++] = lim;
  for (int i = 0; i < n; i++)
    argv[argc++] = cst, argv[argc++] = "0", argv[argc++] = "9007199254740991";
  redisReply *r = redisCommandArgv(rc, argc, argv, NULL);
  free(argv);
  TH_ASSERT(r && r->type == REDIS_REPLY_ARRAY && r->elements == (size_t)(1 + 4 * n));
  return r;
}

/* Field f (0 allowed, 1 remaining, 2 retry, 3 reset) of request i's answer. */
static inline long long rl_request_at(const redisReply *r, int i, int f) {
  return r->element[1 + 4 * i + f]->integer;
}

#endif
