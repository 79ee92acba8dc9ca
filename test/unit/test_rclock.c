/* The estimate of Redis's clock (core/rclock.h), without Redis: samples
 * narrow the bounds, age widens them, a contradicting sample replaces
 * them, and every mapping stays on the safe side of the true offset. */
#include <stdlib.h>

#include "harness.h"
#include "base/util.h"
#include "core/rclock.h"

/* Redis's clock runs `offset` ms ahead of our monotonic one. */
static const int64_t offset = INT64_C(1700000000000);

/* A sample of a reply sent at `sent` and read `rtt` later, Redis having
 * read its clock `at` ms after the send (0 <= at <= rtt). */
static void sample(sluice__rclock *k, uint64_t sent, uint64_t rtt, uint64_t at) {
  sluice__rclock_sample(k, sent, sent + rtt, (int64_t)(sent + at) + offset);
}

static void test_narrowing(void) {
  sluice__rclock k = {0};
  TH_ASSERT(!sluice__rclock_known(&k));
  TH_ASSERT_EQ(sluice__rclock_error(&k), -1);
  uint64_t now = sluice__mono_ms();
  sample(&k, now - 100, 40, 30);
  TH_ASSERT(sluice__rclock_known(&k));
  TH_ASSERT(k.lo <= offset && offset <= k.hi);
  TH_ASSERT_EQ(k.hi - k.lo, 40 + 2); /* the round trip, and a ms each side */
  sample(&k, now - 50, 4, 2);        /* a faster one narrows them */
  TH_ASSERT(k.lo <= offset && offset <= k.hi);
  TH_ASSERT_CMP(k.hi - k.lo, <=, 4 + 2 + 2);
  sample(&k, now - 10, 300, 150); /* a slow one keeps the narrow bounds */
  TH_ASSERT(k.lo <= offset && offset <= k.hi);
  TH_ASSERT_CMP(k.hi - k.lo, <=, 4 + 2 + 2 + 2);
}

static void test_step_replaces(void) {
  sluice__rclock k = {0};
  uint64_t now = sluice__mono_ms();
  sample(&k, now - 100, 2, 1);
  /* Redis's clock was set back 10 s: the old bounds cannot hold both. */
  sluice__rclock_sample(&k, now - 50, now - 48, (int64_t)(now - 49) + offset - 10000);
  TH_ASSERT(k.lo <= offset - 10000 && offset - 10000 <= k.hi);
  TH_ASSERT_CMP(k.hi - k.lo, <=, 4);
}

static void test_mappings_are_safe(void) {
  srand(7);
  for (int round = 0; round < 1000; round++) {
    sluice__rclock k = {0};
    uint64_t now = sluice__mono_ms();
    for (int i = 0; i < 5; i++) {
      uint64_t rtt = (uint64_t)(rand() % 50);
      sample(&k, now - 1000 + (uint64_t)i * 100, rtt, rtt ? (uint64_t)(rand() % (int)rtt) : 0);
    }
    uint64_t deadline = now + (uint64_t)(rand() % 60000);
    /* A deadline maps to a Redis moment no later than ours, with the
     * margin (20 ms, or a quarter of the time left). */
    int64_t margin = (int64_t)(deadline - now) / 4 < 20 ? (int64_t)(deadline - now) / 4 : 20;
    TH_ASSERT_CMP(sluice__rclock_deadline(&k, deadline, now), <=,
                  (int64_t)deadline + offset - margin + 1);
    /* An expiry on Redis's clock maps to a local moment no later. */
    int64_t expiry = (int64_t)now + offset + rand() % 60000;
    TH_ASSERT_CMP(sluice__rclock_local(&k, expiry), <=, expiry - offset);
  }
}

static void test_age_widens(void) {
  sluice__rclock k = {0};
  uint64_t now = sluice__mono_ms();
  sample(&k, now, 2, 1);
  int64_t near = sluice__rclock_deadline(&k, now + 1000, now);
  int64_t far = sluice__rclock_deadline(&k, now + 61000, now);
  /* 60 s further out: 60 s later on Redis's clock, less the drift
   * allowance (1 ms per second). */
  TH_ASSERT_CMP(far - near, <=, 60000 - 59);
  TH_ASSERT_CMP(far - near, >=, 60000 - 61);
}

static const th_case cases[] = {
    TH_CASE(narrowing, 0),
    TH_CASE(step_replaces, 0),
    TH_CASE(mappings_are_safe, 0),
    TH_CASE(age_widens, 0),
};
TH_MAIN_LOCAL(cases)
