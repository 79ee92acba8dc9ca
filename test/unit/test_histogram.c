/* The fixed-size latency histogram (src/base/histogram.c), without Redis: bucket
 * layout, the 12.5% bound on what a percentile reads back, the tail and
 * saturation edges. */
#include <string.h>

#include "harness.h"
#include "base/histogram.h"

/* Every value lands in a bucket whose bounds hold it, buckets are in order
 * and none is wider than an eighth of its values. */
static void test_layout(void) {
  unsigned last = 0;
  for (uint64_t v = 0; v < (1ull << 32); v = v < 4096 ? v + 1 : v + v / 7 + 1) {
    unsigned i = sluice__hist_index(v);
    TH_ASSERT_CMP(i, <, SLUICE__HIST_BUCKETS);
    TH_ASSERT_CMP(i, >=, last);
    last = i;
    TH_ASSERT_CMP(sluice__hist_upper(i), >=, v);
    if (i > 0) TH_ASSERT_CMP(sluice__hist_upper(i - 1), <, v);
    uint64_t lo = i ? sluice__hist_upper(i - 1) + 1 : 0;
    TH_ASSERT_CMP((sluice__hist_upper(i) - lo + 1) * 8, <=, lo < 8 ? 8 : lo);
  }
  TH_ASSERT_EQ(sluice__hist_index((1ull << 32) - 1), SLUICE__HIST_BUCKETS - 1);
  TH_ASSERT_EQ(sluice__hist_index(UINT64_MAX), SLUICE__HIST_BUCKETS - 1);
}

static void test_quantiles(void) {
  static sluice__hist h;
  memset(&h, 0, sizeof h);
  TH_ASSERT_EQ(sluice__hist_quantile(&h, 0.5), 0);
  for (uint64_t v = 1; v <= 1000; v++) sluice__hist_record(&h, v * 100); /* 100 µs .. 100 ms */
  TH_ASSERT_EQ(h.count, 1000);
  TH_ASSERT_EQ(h.max, 100000);
  uint64_t p50 = sluice__hist_quantile(&h, 0.50), p99 = sluice__hist_quantile(&h, 0.99);
  /* True values 50000 and 99000: read back no lower and within 12.5%. */
  TH_ASSERT_CMP(p50, >=, 50000);
  TH_ASSERT_CMP(p50, <=, 50000 + 50000 / 8);
  TH_ASSERT_CMP(p99, >=, 99000);
  TH_ASSERT_CMP(p99, <=, 100000); /* clamped to the max */
  TH_ASSERT_EQ(sluice__hist_quantile(&h, 1.0), 100000);
  TH_ASSERT_CMP(sluice__hist_quantile(&h, 0.001), <=, 100 + 100 / 8);
}

static void test_small_and_huge(void) {
  static sluice__hist h;
  memset(&h, 0, sizeof h);
  for (int i = 0; i < 99; i++) sluice__hist_record(&h, 3);
  sluice__hist_record(&h, UINT64_MAX / 2);
  TH_ASSERT_EQ(sluice__hist_quantile(&h, 0.5), 3); /* exact below 8 */
  TH_ASSERT_EQ(sluice__hist_quantile(&h, 0.99), 3);
  TH_ASSERT_EQ(sluice__hist_quantile(&h, 1.0), UINT64_MAX / 2);
  TH_ASSERT_EQ(h.max, UINT64_MAX / 2);
}

/* A bucket that fills stops counting instead of wrapping to zero. */
static void test_saturation(void) {
  static sluice__hist h;
  memset(&h, 0, sizeof h);
  h.b[sluice__hist_index(10)] = UINT32_MAX - 1;
  h.count = UINT32_MAX - 1;
  sluice__hist_record(&h, 10);
  sluice__hist_record(&h, 10);
  TH_ASSERT_EQ(h.b[sluice__hist_index(10)], UINT32_MAX);
  TH_ASSERT_EQ(h.count, (uint64_t)UINT32_MAX + 1);
  TH_ASSERT_EQ(sluice__hist_quantile(&h, 1.0), 10);
}

/* The sum (a Prometheus histogram's _sum) is exact, and stops at the top
 * rather than wrapping. */
static void test_sum(void) {
  static sluice__hist h;
  memset(&h, 0, sizeof h);
  for (uint64_t v = 1; v <= 1000; v++) sluice__hist_record(&h, v);
  TH_ASSERT_EQ(h.sum, 500500);
  sluice__hist_record(&h, UINT64_MAX - 10);
  TH_ASSERT_EQ(h.sum, UINT64_MAX);
  sluice__hist_record(&h, 1);
  TH_ASSERT_EQ(h.sum, UINT64_MAX);
}

/* Counts below a power of two are exact (what the exposition's buckets
 * read): each value lands below 2^k exactly when it is less than 2^k. */
static void test_below(void) {
  static sluice__hist h;
  memset(&h, 0, sizeof h);
  TH_ASSERT_EQ(sluice__hist_below(&h, 1024), 0);
  for (uint64_t v = 0; v < 5000; v += 3) sluice__hist_record(&h, v);
  sluice__hist_record(&h, 1ull << 40); /* past the resolved range */
  for (unsigned k = 0; k <= 31; k++) {
    uint64_t p = 1ull << k, want = 0;
    for (uint64_t v = 0; v < 5000; v += 3) want += v < p;
    TH_ASSERT_EQ(sluice__hist_below(&h, p), want);
  }
  TH_ASSERT_EQ(sluice__hist_below(&h, 0), 0);
}

static const th_case cases[] = {
    TH_CASE(layout, 10),     TH_CASE(quantiles, 10), TH_CASE(small_and_huge, 10),
    TH_CASE(saturation, 10), TH_CASE(sum, 10),       TH_CASE(below, 10),
};
TH_MAIN_LOCAL(cases)
