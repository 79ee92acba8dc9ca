/* The sliding log's bounded state: one list entry per admitted request
 * whatever its cost, at most SLUICE_RL_LOG_ENTRIES_MAX of them, about 16
 * bytes each; keys in the layout of older versions (a sorted set, one
 * member per unit) converted on first use without losing their units. */
#include <stdio.h>
#include <string.h>

#include "harness.h"
#include "limiter/limiter.h"
#include "rl_util.h"

static long long log_entries(const char *key) {
  return (th_redis_int(&th_server, "LLEN %s", key) - 1) / 2;
}

/* A cost too small for the limit could need more entries than a key may
 * hold: refused before anything is sent. */
static void test_min_cost_refused(void) {
  struct event_base *base = event_base_new();
  sluice_client *c = rl_test_client(base);
  sluice_limiter *big = rl_test_new(c, "big", SLUICE_RL_SLIDING_LOG, SLUICE_RL_LIMIT_MAX, 60000);
  sluice_limiter *edge = rl_test_new(c, "edge", SLUICE_RL_SLIDING_LOG,
                                     SLUICE_RL_LOG_ENTRIES_MAX + 1, 60000);
  rl_answer a = {0};
  TH_ASSERT_EQ(sluice_limiter_check(big, "k", 9999, rl_answer_cb, &a), SLUICE_EINVAL);
  TH_ASSERT_EQ(sluice_limiter_peek(big, "k", 9999, rl_answer_cb, &a), SLUICE_EINVAL);
  TH_ASSERT_EQ(sluice_limiter_wait(big, "k", 9999, 0, rl_answer_cb, &a, NULL), SLUICE_EINVAL);
  TH_ASSERT_EQ(sluice_limiter_check(edge, "k", 1, rl_answer_cb, &a), SLUICE_EINVAL);
  TH_ASSERT_EQ(a.done, 0);
  TH_ASSERT_EQ(rl_test_check(base, big, "k", 10000).allowed, 1);
  TH_ASSERT_EQ(rl_test_check(base, edge, "k", 2).allowed, 1);
  /* The largest cost is one entry too. */
  sluice_rl_result r = rl_test_check(base, big, "k2", SLUICE_RL_LIMIT_MAX);
  TH_ASSERT_EQ(r.allowed, 1);
  char *k = sluice__rl_redis_key(big, "k2");
  TH_ASSERT_EQ(log_entries(k), 1);
  free(k);
  sluice_limiter_free(big);
  sluice_limiter_free(edge);
  th_free_client_and_loop(base, c, 5000);
}

/* Memory per entry: a key of 20,000 admitted requests, checked 250 at a
 * time (one script call each). */
static void test_entry_bytes(void) {
  enum { N = 20000, TURN = 250 };
  struct event_base *base = event_base_new();
  sluice_client *c = rl_test_client(base);
  sluice_limiter *lim = rl_test_new(c, "mem", SLUICE_RL_SLIDING_LOG, N, 600000);
  for (int sent = 0; sent < N; sent += TURN) {
    rl_answer a[TURN];
    memset(a, 0, sizeof a);
    for (int i = 0; i < TURN; i++)
      TH_ASSERT_EQ(sluice_limiter_check(lim, "203.0.113.7", 1, rl_answer_cb, &a[i]), SLUICE_OK);
    TH_ASSERT(th_loop_until(base, &a[TURN - 1].done, 5000));
    for (int i = 0; i < TURN; i++) TH_ASSERT(a[i].done && a[i].res.allowed);
  }
  char *k = sluice__rl_redis_key(lim, "203.0.113.7");
  TH_ASSERT_EQ(log_entries(k), N);
  long long bytes = th_redis_int(&th_server, "MEMORY USAGE %s SAMPLES 0", k);
  th_note("sliding log: %d entries in %lld bytes, %.1f bytes an entry\n", N, bytes,
          (double)bytes / N);
  TH_ASSERT_CMP(bytes, <=, 20 * N);
  free(k);
  sluice_limiter_free(lim);
  th_free_client_and_loop(base, c, 5000);
}

/* Write key in the layout of older versions: per request (time, cost) the
 * members "<t>", "<t>.2" ... "<t>.<cost>", all scored t. */
static void old_layout(const char *key, const int64_t *t, const int *cost, int n) {
  for (int i = 0; i < n; i++) {
    for (int u = 1; u <= cost[i]; u++) {
      char member[48];
      if (u == 1) snprintf(member, sizeof member, "%lld", (long long)t[i]);
      else snprintf(member, sizeof member, "%lld.%d", (long long)t[i], u);
      freeReplyObject(
          th_redis_command(&th_server, "ZADD %s %lld %s", key, (long long)t[i], member));
    }
  }
  freeReplyObject(th_redis_command(&th_server, "PEXPIRE %s 60000", key));
}

/* A sorted set of three live requests (4, 3 and 2 units, 30, 20 and 10 s
 * old) and one expired: read exactly, and rewritten as the list. */
static void test_old_key_converted(void) {
  struct event_base *base = event_base_new();
  sluice_client *c = rl_test_client(base);
  sluice_limiter *lim = rl_test_new(c, "old", SLUICE_RL_SLIDING_LOG, 10, 60000);
  char *k = sluice__rl_redis_key(lim, "k");
  int64_t now = th_redis_time_us();
  const int64_t t[] = {now - 70000000, now - 30000000, now - 20000000, now - 10000000};
  const int cost[] = {5, 4, 3, 2};
  old_layout(k, t, cost, 4);
  rl_answer p = {0};
  TH_ASSERT_EQ(sluice_limiter_peek(lim, "k", 2, rl_answer_cb, &p), SLUICE_OK);
  TH_ASSERT(th_loop_until(base, &p.done, 5000));
  TH_ASSERT_EQ(p.res.allowed, 0);
  TH_ASSERT_EQ(p.res.remaining, 1);
  /* The oldest live request (4 units) leaves 60 s after it came. */
  TH_ASSERT_CMP(p.res.retry_after_ms, <=, 30000);
  TH_ASSERT_CMP(p.res.retry_after_ms, >, 29000);
  TH_ASSERT_CMP(p.res.reset_after_ms, >, 49000);
  TH_ASSERT_EQ(log_entries(k), 3);
  TH_ASSERT_EQ(th_redis_int(&th_server, "LINDEX %s 0", k), 0);
  TH_ASSERT_EQ(th_redis_int(&th_server, "LINDEX %s 2", k), 4);
  TH_ASSERT_EQ(th_redis_int(&th_server, "LINDEX %s 4", k), 7);
  TH_ASSERT_EQ(th_redis_int(&th_server, "LINDEX %s 6", k), 9);
  TH_ASSERT_EQ(th_redis_int(&th_server, "LINDEX %s 1", k), t[1]);
  TH_ASSERT_CMP(th_redis_int(&th_server, "PTTL %s", k), >, 0);
  sluice_rl_result r = rl_test_check(base, lim, "k", 1);
  TH_ASSERT_EQ(r.allowed, 1);
  TH_ASSERT_EQ(r.remaining, 0);
  TH_ASSERT_EQ(rl_test_check(base, lim, "k", 1).allowed, 0);
  free(k);
  sluice_limiter_free(lim);
  th_free_client_and_loop(base, c, 5000);
}

/* 300 live requests of one unit: the oldest 255 converted exactly, the
 * rest merged into one entry at the newest time; no unit lost. */
static void test_old_key_merged(void) {
  enum { N = 300 };
  struct event_base *base = event_base_new();
  sluice_client *c = rl_test_client(base);
  sluice_limiter *lim = rl_test_new(c, "oldm", SLUICE_RL_SLIDING_LOG, 1000, 60000);
  char *k = sluice__rl_redis_key(lim, "k");
  int64_t now = th_redis_time_us(), t[N];
  int cost[N];
  for (int i = 0; i < N; i++) t[i] = now - 50000000 + i * 1000, cost[i] = 1;
  old_layout(k, t, cost, N);
  sluice_rl_result r = rl_test_check(base, lim, "k", 1);
  TH_ASSERT_EQ(r.allowed, 1);
  TH_ASSERT_EQ(r.remaining, 1000 - N - 1);
  TH_ASSERT_EQ(log_entries(k), 256 + 1);
  TH_ASSERT_EQ(th_redis_int(&th_server, "LINDEX %s %d", k, 2 * 255 - 1), t[254]);
  TH_ASSERT_EQ(th_redis_int(&th_server, "LINDEX %s %d", k, 2 * 256 - 1), t[N - 1]);
  TH_ASSERT_EQ(th_redis_int(&th_server, "LINDEX %s %d", k, 2 * 256), N);
  free(k);
  sluice_limiter_free(lim);
  th_free_client_and_loop(base, c, 5000);
}

/* Callers that disagree on the limit cannot grow a key past its cap: a
 * full log denies (remaining 0) until its oldest entry leaves; a cost too
 * small for the limit is refused by the script itself. */
static void test_full_log_denies(void) {
  redisContext *rc = th_redis_connect(&th_server);
  const char *key = "sluice:rl:{4:full:k}:log";
  for (unsigned n = 0; n < SLUICE_RL_LOG_ENTRIES_MAX; n += 250)
    freeReplyObject(rl_log_call(rc, key, SLUICE_RL_LOG_ENTRIES_MAX, 600000, 1, 250));
  TH_ASSERT_EQ(log_entries(key), SLUICE_RL_LOG_ENTRIES_MAX);
  redisReply *r = rl_log_call(rc, key, SLUICE_RL_LIMIT_MAX, 600000, 10000, 1);
  TH_ASSERT_EQ(rl_request_at(r, 0, 0), 0);
  TH_ASSERT_EQ(rl_request_at(r, 0, 1), 0);
  TH_ASSERT_CMP(rl_request_at(r, 0, 2), >, 590000);
  freeReplyObject(r);
  r = rl_log_call(rc, key, SLUICE_RL_LIMIT_MAX, 600000, 9999, 1);
  TH_ASSERT_EQ(rl_request_at(r, 0, 0), 0);
  TH_ASSERT_EQ(rl_request_at(r, 0, 2), -1); /* never passes */
  freeReplyObject(r);
  TH_ASSERT_EQ(log_entries(key), SLUICE_RL_LOG_ENTRIES_MAX);
  redisFree(rc);
}

static const th_case cases[] = {
    TH_CASE(min_cost_refused, 0),
    TH_CASE(entry_bytes, 0),
    TH_CASE(old_key_converted, 0),
    TH_CASE(old_key_merged, 0),
    TH_CASE(full_log_denies, 0, .standalone_only = "calls the script directly"),
};
TH_MAIN(cases)
