/*
 * A fixed-size latency histogram, cheap enough to leave on: recording is a
 * few shifts and an increment, never an allocation, so every operation of
 * a client may record into one.
 *
 * Buckets are log-linear (the HDR histogram layout, reduced): values below
 * 2^SUB_BITS have a bucket each; above, every power of two is split into
 * 2^SUB_BITS equal buckets, so a bucket is at most 1/8 of its value wide
 * and a percentile read back is within 12.5% of the true one (never below
 * it: we report a bucket's upper bound, clamped to the maximum seen).
 * Values up to 2^32 - 1 (in µs: 71 minutes) are resolved; larger ones land
 * in the last bucket and still count in max.
 */
#ifndef SLUICE_HISTOGRAM_H
#define SLUICE_HISTOGRAM_H

#include <stdint.h>

#define SLUICE__HIST_SUB_BITS 3
#define SLUICE__HIST_SUB (1u << SLUICE__HIST_SUB_BITS)
/* Groups: one for [0, SUB), then one per power of two from SUB to 2^31. */
#define SLUICE__HIST_BUCKETS ((32 - SLUICE__HIST_SUB_BITS + 1) * SLUICE__HIST_SUB)

typedef struct sluice__hist {
  uint64_t count;
  uint64_t max;
  uint64_t sum; /* saturates at UINT64_MAX */
  uint32_t b[SLUICE__HIST_BUCKETS];
} sluice__hist;

/* Index of the bucket holding v. */
static inline unsigned sluice__hist_index(uint64_t v) {
  if (v >= (1ull << 32)) return SLUICE__HIST_BUCKETS - 1;
  if (v < SLUICE__HIST_SUB) return (unsigned)v;
  unsigned msb = 63u - (unsigned)__builtin_clzll(v); /* >= SUB_BITS */
  unsigned shift = msb - SLUICE__HIST_SUB_BITS;
  return (shift + 1) * SLUICE__HIST_SUB + (unsigned)((v >> shift) & (SLUICE__HIST_SUB - 1));
}

static inline void sluice__hist_record(sluice__hist *h, uint64_t v) {
  unsigned i = sluice__hist_index(v);
  if (h->b[i] != UINT32_MAX) h->b[i]++; /* saturate rather than wrap */
  h->count++;
  h->sum = v > UINT64_MAX - h->sum ? UINT64_MAX : h->sum + v;
  if (v > h->max) h->max = v;
}

/* The largest value bucket i holds. */
uint64_t sluice__hist_upper(unsigned i);
/* The value at quantile q (0..1]: the upper bound of the bucket holding the
 * ceil(q * count)-th value, clamped to max; 0 when empty. */
uint64_t sluice__hist_quantile(const sluice__hist *h, double q);
/* How many values lie in the buckets below the one holding v: exactly the
 * values < v when v starts a bucket (every power of two does). */
uint64_t sluice__hist_below(const sluice__hist *h, uint64_t v);

#endif
