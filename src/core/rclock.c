/* Redis's clock seen from ours: see rclock.h. */
#include "core/rclock.h"

#include "base/util.h"

/* Two clocks kept by NTP may run up to 0.05 % apart each: bounds widen by
 * 1 ms per second of age (twice that), rounded up. */
#define DRIFT_MS_PER_S 1
/* How long before the caller's own deadline a request stops being acted
 * on: its answer still has to travel back (a quarter of the time left
 * when that is shorter, so short timeouts keep most of their window). */
#define DEADLINE_MARGIN_MS 20

static int64_t drift(uint64_t from_ms, uint64_t to_ms) {
  uint64_t age = to_ms > from_ms ? to_ms - from_ms : from_ms - to_ms;
  return (int64_t)((age * DRIFT_MS_PER_S + 999) / 1000);
}

void sluice__rclock_sample(sluice__rclock *k, uint64_t sent_ms, uint64_t recv_ms,
                           int64_t redis_ms) {
  /* Each clock reads whole ms: Redis's true time is in [redis_ms, +1), ours
   * at the receipt before recv_ms + 1. */
  int64_t lo = redis_ms - (int64_t)recv_ms - 1, hi = redis_ms + 1 - (int64_t)sent_ms;
  if (k->known) {
    int64_t d = drift(k->at_ms, recv_ms);
    int64_t old_lo = k->lo - d, old_hi = k->hi + d;
    /* Disjoint: one clock was set (or another server answered); the new
     * sample alone is right now. */
    if (old_lo <= hi && lo <= old_hi) {
      if (old_lo > lo) lo = old_lo;
      if (old_hi < hi) hi = old_hi;
    }
  }
  k->lo = lo;
  k->hi = hi;
  k->at_ms = recv_ms;
  k->known = 1;
}

int64_t sluice__rclock_error(const sluice__rclock *k) {
  if (!k->known) return -1;
  return k->hi - k->lo + 2 * drift(k->at_ms, sluice__mono_ms());
}

int64_t sluice__rclock_deadline(const sluice__rclock *k, uint64_t deadline_ms, uint64_t now) {
  uint64_t left = deadline_ms > now ? deadline_ms - now : 0;
  uint64_t margin = left / 4 < DEADLINE_MARGIN_MS ? left / 4 : DEADLINE_MARGIN_MS;
  uint64_t at = deadline_ms - margin;
  return (int64_t)at + k->lo - drift(k->at_ms, at);
}

uint64_t sluice__rclock_local(const sluice__rclock *k, int64_t redis_ms) {
  int64_t at = redis_ms - k->hi;
  if (at <= 0) return 0;
  at -= drift(k->at_ms, (uint64_t)at);
  return at > 0 ? (uint64_t)at : 0;
}
