/*
 * Distributed rate limiters.
 *
 * A limiter has a name, an algorithm, a limit per period (and, for GCRA, a
 * burst). A check asks whether `cost` units may pass now for one key (a user,
 * an IP address, ...). Every decision is one atomic Lua script on Redis's own
 * clock (TIME), never the client's, and every key expires once it is idle.
 *
 * Algorithms:
 *  - SLUICE_RL_FIXED: at most `limit` units per window of `period_ms`, windows
 *    aligned to server time (window n covers [n*period, (n+1)*period)). Cheap
 *    and exact per window, but up to 2*limit may pass around a boundary.
 *  - SLUICE_RL_SLIDING_LOG: exact — never more than `limit` units in ANY span
 *    of `period_ms`. Keeps one list entry per admitted request, whatever
 *    its cost: its time and a running sum of units, about 16 bytes
 *    (docs/rate-limiters.md has measured bytes); denied requests are not
 *    recorded. Its state is bounded: a key holds at most
 *    SLUICE_RL_LOG_ENTRIES_MAX live entries (1.6 MB), so a cost below
 *    limit / SLUICE_RL_LOG_ENTRIES_MAX (rounded up) is refused with
 *    SLUICE_EINVAL: with a limit up to 100,000 every cost passes, with a
 *    limit of 1,000,000,000 the smallest cost is 10,000. Each decision reads
 *    a few entries (O(log n) of the n entries it skips), never the log. A
 *    key written by an older sluice (a sorted set, one member per unit) is
 *    converted on its first use, exactly when it holds at most 256 live
 *    requests; beyond that, all but the oldest 255 are merged into one
 *    entry at the newest time (they count a little longer: never more is
 *    admitted).
 *  - SLUICE_RL_SLIDING_COUNTER: two fixed-window counters weighted by how far
 *    the current window has run (estimate = prev * (1 - elapsed/period) + cur).
 *    O(1) memory; an approximation that assumes the previous window's traffic
 *    was spread evenly, so it can admit somewhat more or less than an exact
 *    sliding window would.
 *  - SLUICE_RL_GCRA: a token bucket (equivalently a leaky bucket used as a
 *    meter) of `burst` units refilled at limit/period, in one key holding one
 *    timestamp. It is a rate, not a window count. Worked example: limit 17,
 *    period 30000, burst 17 admits 17 requests at once, then one every
 *    30000/17 = 1765 ms. Starting full, a 30 s span can therefore see up to
 *    17 + 17 = 34 units. For "never more than 17 in any 30 s" use the sliding
 *    log; with GCRA pick burst = 1 to space requests evenly. Over any run
 *    that starts with an idle key, the admitted units are at most
 *    burst + elapsed * limit / period (+1 at the edges). The emission
 *    interval period/limit is kept in whole microseconds, rounded up.
 *
 * Results are in milliseconds and rounded so they can be trusted: a request
 * sent retry_after_ms after a denial is admitted unless others took the
 * capacity in between.
 *
 * A cost larger than the capacity (limit; for GCRA, burst) can never pass:
 * check, peek and wait refuse it with SLUICE_EINVAL.
 *
 * Deadlines: every request carries the latest moment, on Redis's clock, at
 * which its caller still wants an answer (the step's deadline, or a wait's
 * timeout if that comes first), and Redis takes no units for a request it
 * reads later. So a stall, a paused client or a process that exited can
 * delay a decision but never take units for a caller that already got a
 * timeout. (The client learns Redis's clock as the semaphores do: see
 * sluice/sem.h.)
 *
 * Every limiter keeps its keys at
 *   <prefix>rl:{<strlen(name)>:<name>:<key>}:<fw|log|swc|gcra>
 * so names and keys cannot collide, each key has its own hash tag (one
 * slot), and two algorithms never share a key. Limiters (in one process or
 * many) that use the same name and algorithm share state and should agree on
 * limit, period and burst.
 */
#ifndef SLUICE_LIMITER_H
#define SLUICE_LIMITER_H

#include <stdint.h>
#include <sluice/common.h>
#include <sluice/types.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum sluice_rl_algo {
  SLUICE_RL_FIXED = 1,
  SLUICE_RL_SLIDING_LOG = 2,
  SLUICE_RL_SLIDING_COUNTER = 3,
  SLUICE_RL_GCRA = 4
} sluice_rl_algo;

/* What a limiter does when Redis cannot be asked (not connected, or the step
 * timed out). Server errors (SLUICE_EREDIS) are always reported as such. */
typedef enum sluice_rl_down_policy {
  SLUICE_RL_FAIL_CLOSED = 0, /* the callback gets the error status */
  SLUICE_RL_FAIL_OPEN = 1,   /* allowed, with source SLUICE_RL_UNCHECKED */
  SLUICE_RL_FAIL_LOCAL = 2   /* decided by an in-process limiter of the same
                                 algorithm (each process then enforces the
                                 limit on its own) */
} sluice_rl_down_policy;

/* Who made the decision. */
typedef enum sluice_rl_source {
  SLUICE_RL_REDIS = 0,
  SLUICE_RL_LOCAL = 1,
  SLUICE_RL_UNCHECKED = 2 /* Redis was down and the policy is fail-open */
} sluice_rl_source;

typedef struct sluice_rl_result {
  int allowed; /* 1: the units were taken (peek: would be) */
  sluice_rl_source source;
  int64_t limit;          /* capacity: limit, or burst for GCRA */
  int64_t remaining;      /* units that could still pass now; -1 unchecked */
  int64_t retry_after_ms; /* 0 when allowed; else when this request could
                               pass, rounded up */
  int64_t reset_after_ms; /* until the key is back to full capacity */
} sluice_rl_result;

/* Largest accepted limit/burst and period. */
#define SLUICE_RL_LIMIT_MAX 1000000000u
#define SLUICE_RL_PERIOD_MAX 2000000000u
/* Most live entries of one sliding-log key (see SLUICE_RL_SLIDING_LOG). */
#define SLUICE_RL_LOG_ENTRIES_MAX 100000u

typedef struct sluice_limiter_options {
  sluice_rl_algo algo;                 /* default SLUICE_RL_FIXED */
  unsigned limit;                      /* units per period, 1..SLUICE_RL_LIMIT_MAX; required */
  unsigned period_ms;                  /* 1..SLUICE_RL_PERIOD_MAX; required */
  unsigned burst;                      /* GCRA bucket size; 0 = limit. Others ignore it */
  sluice_rl_down_policy on_redis_down; /* default SLUICE_RL_FAIL_CLOSED */
  unsigned wait_queue_max;             /* waiters queued per key; default 128 */
  unsigned op_timeout_ms;              /* deadline of each Redis step; 0 = client default */
} sluice_limiter_options;

/* Fill *opts with the defaults (limit and period are 0: set them). */
SLUICE_EXPORT void sluice_limiter_options_init(sluice_limiter_options *opts);

/* Create limiter NAME (1..SLUICE_NAME_MAX bytes, copied) on client.
 * Returns SLUICE_EINVAL for a bad name or options (zero limit or period,
 * unknown algorithm or policy, values above the maxima), SLUICE_ECLOSED when
 * the client is closing, SLUICE_ENOMEM. *out must later be released with
 * sluice_limiter_free(). */
SLUICE_EXPORT int sluice_limiter_new(sluice_client *client, const char *name,
                                     const sluice_limiter_options *opts, sluice_limiter **out);

/* Free the limiter. As for every sluice object (see sluice.h):
 * operations still pending complete with SLUICE_ECANCELED from the loop,
 * never inside this call; no other callback of it runs afterwards; freeing
 * inside any of its own callbacks is safe; NULL is a no-op. */
SLUICE_EXPORT void sluice_limiter_free(sluice_limiter *lim);

SLUICE_EXPORT const char *sluice_limiter_name(const sluice_limiter *lim);

/* status SLUICE_OK: a decision was made and res says which (a denial is not
 * an error). Otherwise res is NULL, except for a wait that ends with
 * SLUICE_ETIMEDOUT, where res is the last denial. Other statuses, with the
 * fail-closed policy: SLUICE_ECONNECTION (Redis down: nothing was counted),
 * SLUICE_EINDOUBT / SLUICE_ETIMEDOUT (a check whose answer was lost or late:
 * its units may have been taken). For a wait, SLUICE_ETIMEDOUT only ever
 * means its own timeout passed; a step that could not reach Redis, or whose
 * answer was lost or late, is reported as SLUICE_ECONNECTION.
 * SLUICE_EREDIS, SLUICE_EPROTOCOL, SLUICE_ECANCELED (freed, cancelled or
 * client closed), SLUICE_EFULL (wait queue of the key full). res is borrowed:
 * valid only during the call. */
typedef void sluice_limiter_cb(sluice_limiter *lim, int status, const sluice_rl_result *res,
                               void *userdata);

/* Take cost units (>= 1, <= capacity; for the sliding log also >= limit /
 * SLUICE_RL_LOG_ENTRIES_MAX) for key (1..SLUICE_NAME_MAX bytes, copied) if
 * they are available now. Never waits.
 * Returns 0, or SLUICE_EINVAL / SLUICE_ECLOSED / SLUICE_ENOMEM (cb not run). */
SLUICE_EXPORT int sluice_limiter_check(sluice_limiter *lim, const char *key, unsigned cost,
                                       sluice_limiter_cb *cb, void *userdata);

/* Like check, but consumes nothing: res says what a check would answer now. */
SLUICE_EXPORT int sluice_limiter_peek(sluice_limiter *lim, const char *key, unsigned cost,
                                      sluice_limiter_cb *cb, void *userdata);

/* Take cost units for key, waiting for them if needed: a denied request is
 * queued in this process and retried on a timer at its retry_after, until it
 * is allowed or timeout_ms (0 = no limit) passes. Waiters of one key are
 * served first-in first-out. It ends with SLUICE_ETIMEDOUT as soon as Redis's
 * answer shows the units cannot come before the deadline. When the key
 * already has wait_queue_max waiters, cb gets SLUICE_EFULL from the loop.
 * *handle (optional) is valid until cb runs. Returns 0, or SLUICE_EINVAL /
 * SLUICE_ECLOSED / SLUICE_ENOMEM, or SLUICE_EFULL when the client's
 * limiter_waits_max waits are pending already (cb not run). */
SLUICE_EXPORT int sluice_limiter_wait(sluice_limiter *lim, const char *key, unsigned cost,
                                      unsigned timeout_ms, sluice_limiter_cb *cb, void *userdata,
                                      sluice_rl_waiter **handle);

/* Cancel a pending wait: its callback runs with SLUICE_ECANCELED from the
 * loop. A script already in flight may still take the units in Redis; they
 * are then lost (a limiter cannot hand units back). Cancelling again before
 * the callback ran is a no-op. Returns SLUICE_EINVAL for NULL. */
SLUICE_EXPORT int sluice_limiter_wait_cancel(sluice_rl_waiter *handle);

/* "fixed", "sliding-log", "sliding-counter", "gcra"; NULL if unknown. */
SLUICE_EXPORT const char *sluice_rl_algo_name(sluice_rl_algo algo);
/* The reverse of sluice_rl_algo_name. 0 or SLUICE_EINVAL. */
SLUICE_EXPORT int sluice_rl_algo_parse(const char *name, sluice_rl_algo *out);
/* "redis", "local", "unchecked"; NULL if unknown. */
SLUICE_EXPORT const char *sluice_rl_source_name(sluice_rl_source source);

/* Counters of this limiter since it was created (see "metrics" in
 * sluice/client.h). Every check, peek and wait counts once, when answered.
 * wait: waits that were allowed, from the call to the answer. */
typedef struct sluice_limiter_metrics {
  uint64_t allowed;   /* answered allowed (any source) */
  uint64_t denied;    /* answered not allowed (a wait: not in time) */
  uint64_t waited;    /* waits that were denied at least once and slept */
  uint64_t fail_open; /* of the allowed: unchecked, Redis down (SLUICE_RL_FAIL_OPEN) */
  uint64_t local;     /* decided in process, Redis down (SLUICE_RL_FAIL_LOCAL) */
  uint64_t errors;    /* answered with a status other than SLUICE_OK */
  sluice_latency wait;
  /* Requests Redis read after their deadline (a stall, a slow connection)
   * and took nothing for: a wait then asks again or ends, a check or peek
   * is answered as timed out (see on_redis_down). */
  uint64_t late;
  unsigned waiting;       /* waits pending now */
  uint64_t waits_refused; /* waits refused at the call with SLUICE_EFULL
                             (the client's limiter_waits_max) */
} sluice_limiter_metrics;
SLUICE_EXPORT void sluice_limiter_get_metrics(const sluice_limiter *limiter,
                                              sluice_limiter_metrics *out);

#ifdef __cplusplus
}
#endif

#endif /* SLUICE_LIMITER_H */
