/*
 * Redis's clock seen from ours: what the client knows of the offset between
 * Redis's TIME and its own monotonic clock, so that a caller's deadline can
 * travel with its request as a moment on Redis's clock. A script that runs
 * after that moment (a stall, a paused client, a process gone while its
 * request sat unread in a socket) then refuses to act for a caller that gave
 * up.
 *
 * Every reply that reports Redis's time is a sample: Redis read its clock
 * somewhere between the send and the receipt, so the offset lies in
 * [time - received, time - sent] (the round trip is the error bound).
 * Samples narrow the bounds; both widen by a drift allowance as they age,
 * and a sample that contradicts them (Redis's clock was set) replaces them.
 * Mapping is always conservative: a deadline maps to a Redis moment no later
 * than it, an expiry on Redis's clock to a local moment no later than it.
 * The servers of a Cluster or a Sentinel set are assumed to keep their
 * clocks within a few milliseconds of each other (NTP): one estimate serves
 * them all, the margin covers that much.
 */
#ifndef SLUICE_RCLOCK_H
#define SLUICE_RCLOCK_H

#include <stdint.h>

typedef struct sluice__rclock {
  int known;      /* a sample arrived */
  int64_t lo, hi; /* Redis ms - monotonic ms lies in [lo, hi] */
  uint64_t at_ms; /* monotonic: the last sample */
} sluice__rclock;

/* Redis's clock read redis_ms (whole ms) between sent_ms and recv_ms. */
void sluice__rclock_sample(sluice__rclock *k, uint64_t sent_ms, uint64_t recv_ms, int64_t redis_ms);
static inline int sluice__rclock_known(const sluice__rclock *k) { return k->known; }
/* The width of the bounds now, in ms (-1: unknown). */
int64_t sluice__rclock_error(const sluice__rclock *k);
/* A moment on Redis's clock no later than the one at which ours reads
 * deadline_ms, less a margin that leaves the answer time to arrive:
 * what a request carries as "act only until". now is our clock (ms), read
 * once by a caller that maps many deadlines. Needs a sample. */
int64_t sluice__rclock_deadline(const sluice__rclock *k, uint64_t deadline_ms, uint64_t now);
/* A monotonic moment no later than the one at which Redis's clock reads
 * redis_ms (0 if that is before our clock's start). Needs a sample. */
uint64_t sluice__rclock_local(const sluice__rclock *k, int64_t redis_ms);

#endif
