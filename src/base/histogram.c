/* Fixed-size log-linear histogram; see histogram.h. */
#include "base/histogram.h"

uint64_t sluice__hist_upper(unsigned i) {
  if (i < SLUICE__HIST_SUB) return i;
  unsigned shift = i / SLUICE__HIST_SUB - 1;
  uint64_t sub = i % SLUICE__HIST_SUB;
  /* Bucket (shift, sub) holds [(SUB + sub) << shift, (SUB + sub + 1) << shift). */
  return ((SLUICE__HIST_SUB + sub + 1) << shift) - 1;
}

uint64_t sluice__hist_quantile(const sluice__hist *h, double q) {
  if (!h->count) return 0;
  if (q > 1) q = 1;
  uint64_t rank = (uint64_t)(q * (double)h->count);
  if ((double)rank < q * (double)h->count) rank++; /* ceil */
  if (rank < 1) rank = 1;
  uint64_t seen = 0;
  for (unsigned i = 0; i < SLUICE__HIST_BUCKETS; i++) {
    seen += h->b[i];
    if (seen >= rank) {
      if (i == SLUICE__HIST_BUCKETS - 1) return h->max; /* unbounded above */
      uint64_t up = sluice__hist_upper(i);
      return up < h->max ? up : h->max;
    }
  }
  return h->max; /* saturated buckets undercount: the tail is the max */
}

uint64_t sluice__hist_below(const sluice__hist *h, uint64_t v) {
  uint64_t n = 0;
  for (unsigned i = 0, end = sluice__hist_index(v); i < end; i++) n += h->b[i];
  return n;
}
