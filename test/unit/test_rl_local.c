/* The in-process limiter (src/limiter/limiter_local.c) without Redis: each
 * algorithm's decisions at the exact edges, on a synthetic clock (in us).
 * cost stays within 1..limit (burst for GCRA): sluice_limiter_* reject
 * anything else before the local limiter sees it. */
#include <sluice/sluice.h>

#include "harness.h"
#include "limiter/limiter.h"

/* A window boundary for every period used here, far from 0. */
#define B 1000000000ull

static sluice__rl_local *make(sluice_rl_algo algo, int64_t limit, int64_t period_ms,
                              int64_t burst) {
  sluice__rl_params p = {algo, limit, period_ms, burst};
  sluice__rl_local *l = sluice__rl_local_new(&p);
  TH_ASSERT(l != NULL);
  return l;
}

/* One decision, checked whole: allowed, remaining, retry_after, reset_after. */
#define CHECK(l, key, cost, peek, now, allowed_, remaining_, retry_, reset_)       \
  do {                                                                             \
    sluice_rl_result r_;                                                           \
    TH_ASSERT_EQ(sluice__rl_local_check(l, key, cost, peek, now, &r_), SLUICE_OK); \
    TH_ASSERT_EQ(r_.source, SLUICE_RL_LOCAL);                                      \
    TH_ASSERT_EQ(r_.allowed, allowed_);                                            \
    TH_ASSERT_EQ(r_.remaining, remaining_);                                        \
    TH_ASSERT_EQ(r_.retry_after_ms, retry_);                                       \
    TH_ASSERT_EQ(r_.reset_after_ms, reset_);                                       \
  } while (0)

static void test_fixed_edges(void) {
  sluice__rl_local *l = make(SLUICE_RL_FIXED, 3, 1000, 0);
  CHECK(l, "k", 1, 0, B, 1, 2, 0, 1000);
  CHECK(l, "k", 2, 1, B, 1, 0, 0, 1000); /* peek: would pass, takes nothing */
  CHECK(l, "k", 2, 0, B, 1, 0, 0, 1000);
  CHECK(l, "k", 1, 0, B, 0, 0, 1000, 1000);
  /* The last microsecond of the window is still in it. */
  CHECK(l, "k", 1, 0, B + 999999, 0, 0, 1, 1);
  CHECK(l, "k", 1, 0, B + 1000000, 1, 2, 0, 1000);
  /* More than fits: refused, nothing taken. */
  CHECK(l, "k", 3, 0, B + 1000000, 0, 2, 1000, 1000);
  CHECK(l, "k", 2, 0, B + 1000000, 1, 0, 0, 1000);
  CHECK(l, "other", 3, 0, B, 1, 0, 0, 1000); /* keys are independent */
  sluice__rl_local_free(l);
}

static void test_sliding_counter_edges(void) {
  sluice__rl_local *l = make(SLUICE_RL_SLIDING_COUNTER, 10, 1000, 0);
  CHECK(l, "k", 10, 0, B, 1, 0, 0, 2000);
  /* Full: the wait is until the previous window's weight lets one in. */
  CHECK(l, "k", 1, 0, B + 500000, 0, 0, 600, 1500);
  /* Next window, 99 ms in: 10 * 901/1000 + 1 > 10; at 100 ms exactly 10. */
  CHECK(l, "k", 1, 0, B + 1099000, 0, 0, 1, 901);
  CHECK(l, "k", 1, 1, B + 1100000, 1, 0, 0, 1900);
  CHECK(l, "k", 1, 0, B + 1100000, 1, 0, 0, 1900);
  CHECK(l, "k", 1, 0, B + 1100000, 0, 0, 100, 1900);
  /* Two windows later the old count no longer weighs. */
  CHECK(l, "k", 10, 0, B + 3000000, 1, 0, 0, 2000);
  sluice__rl_local_free(l);
}

static void test_gcra_edges(void) {
  /* 10 per second: one unit per 100 ms (T), a burst of 3. */
  sluice__rl_local *l = make(SLUICE_RL_GCRA, 10, 1000, 3);
  CHECK(l, "k", 1, 0, B, 1, 2, 0, 100);
  CHECK(l, "k", 1, 0, B, 1, 1, 0, 200);
  CHECK(l, "k", 1, 1, B, 1, 0, 0, 300);
  CHECK(l, "k", 1, 0, B, 1, 0, 0, 300);
  CHECK(l, "k", 1, 0, B, 0, 0, 100, 300);
  /* One microsecond short of T: still refused, retry rounds up to 1 ms. */
  CHECK(l, "k", 1, 0, B + 99999, 0, 0, 1, 201);
  CHECK(l, "k", 1, 0, B + 100000, 1, 0, 0, 300);
  /* Idle long enough: back to the full burst. */
  CHECK(l, "k", 3, 0, B + 10000000, 1, 0, 0, 300);
  sluice__rl_local_free(l);
}

static void test_sliding_log_edges(void) {
  sluice__rl_local *l = make(SLUICE_RL_SLIDING_LOG, 3, 1000, 0);
  CHECK(l, "k", 1, 0, B, 1, 2, 0, 1000);
  CHECK(l, "k", 1, 0, B + 100000, 1, 1, 0, 1000);
  CHECK(l, "k", 1, 1, B + 200000, 1, 0, 0, 1000);
  CHECK(l, "k", 1, 0, B + 200000, 1, 0, 0, 1000);
  /* The first admission leaves the window exactly one period later. */
  CHECK(l, "k", 1, 0, B + 999999, 0, 0, 1, 201);
  CHECK(l, "k", 1, 0, B + 1000000, 1, 0, 0, 1000);
  /* Two more must wait for the two oldest: the second oldest decides. */
  CHECK(l, "k", 2, 0, B + 1000000, 0, 0, 200, 1000);
  sluice__rl_local_free(l);
}

/* Same-instant admissions are separate entries, never collapsed into one. */
static void test_sliding_log_same_instant(void) {
  sluice__rl_local *l = make(SLUICE_RL_SLIDING_LOG, 2, 100, 0);
  CHECK(l, "k", 1, 0, B, 1, 1, 0, 100);
  CHECK(l, "k", 1, 0, B, 1, 0, 0, 100);
  CHECK(l, "k", 1, 0, B, 0, 0, 100, 100);
  /* Both count until one period later, and leave together. */
  CHECK(l, "k", 1, 0, B + 99999, 0, 0, 1, 1);
  CHECK(l, "k", 2, 0, B + 100000, 1, 0, 0, 100);
  sluice__rl_local_free(l);
}

/* A request's cost is one entry, whatever its size: a log of the largest
 * limit admits and denies by sums, and keeps at most
 * SLUICE_RL_LOG_ENTRIES_MAX entries. */
static void test_sliding_log_costs(void) {
  sluice__rl_local *l = make(SLUICE_RL_SLIDING_LOG, SLUICE_RL_LIMIT_MAX, 1000, 0);
  CHECK(l, "k", 600000000, 0, B, 1, 400000000, 0, 1000);
  CHECK(l, "k", 400000000, 0, B + 1000, 1, 0, 0, 1000);
  /* More than the first request's units: the second must leave too. */
  CHECK(l, "k", 700000000, 0, B + 2000, 0, 0, 999, 999);
  CHECK(l, "k", 500000000, 0, B + 2000, 0, 0, 998, 999);
  CHECK(l, "k", 600000000, 0, B + 1000000, 1, 0, 0, 1000);
  sluice__rl_local_free(l);
  l = make(SLUICE_RL_SLIDING_LOG, SLUICE_RL_LOG_ENTRIES_MAX + 10, 1000, 0);
  for (unsigned i = 0; i < SLUICE_RL_LOG_ENTRIES_MAX; i++)
    CHECK(l, "k", 1, 0, B + i, 1, 10 + (SLUICE_RL_LOG_ENTRIES_MAX - 1 - i), 0, 1000);
  /* Full: denied until the oldest entry leaves, though units remain. */
  CHECK(l, "k", 1, 0, B + SLUICE_RL_LOG_ENTRIES_MAX, 0, 0, 900, 1000);
  CHECK(l, "k", 1, 0, B + 1000000, 1, 10, 0, 1000);
  sluice__rl_local_free(l);
}

/* Idle keys are dropped once the map doubled; a key in use keeps its state. */
static void test_idle_keys_swept(void) {
  sluice__rl_local *l = make(SLUICE_RL_FIXED, 3, 1000, 0);
  char key[32];
  for (int i = 0; i < 63; i++) {
    snprintf(key, sizeof key, "ip-%d", i);
    CHECK(l, key, 1, 0, B, 1, 2, 0, 1000);
  }
  TH_ASSERT_EQ(sluice__rl_local_keys(l), 63);
  CHECK(l, "hot", 1, 0, B + 2000000, 1, 2, 0, 1000);
  TH_ASSERT_EQ(sluice__rl_local_keys(l), 64);
  CHECK(l, "new", 1, 0, B + 2000000, 1, 2, 0, 1000);
  TH_ASSERT_EQ(sluice__rl_local_keys(l), 2);
  CHECK(l, "hot", 3, 0, B + 2000000, 0, 2, 1000, 1000);
  CHECK(l, "ip-0", 3, 0, B + 2000000, 1, 0, 0, 1000); /* fresh again */
  sluice__rl_local_free(l);
}

static const th_case cases[] = {
    TH_CASE(fixed_edges, 10),
    TH_CASE(sliding_counter_edges, 10),
    TH_CASE(gcra_edges, 10),
    TH_CASE(sliding_log_edges, 10),
    TH_CASE(sliding_log_same_instant, 10),
    TH_CASE(sliding_log_costs, 10),
    TH_CASE(idle_keys_swept, 10),
};
TH_MAIN_LOCAL(cases)
