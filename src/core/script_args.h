/*
 * KEYS and ARGV of every batched script, built in one place per script from
 * typed values. Each block repeats the layout its Lua file documents: change
 * both together. The benchmarks build their redis-benchmark command lines
 * through the same functions, so they send exactly what the library sends.
 */
#ifndef SLUICE_SCRIPT_ARGS_H
#define SLUICE_SCRIPT_ARGS_H

#include <stddef.h>
#include <stdint.h>

#include "core/args.h"

/* A moment on Redis's clock (ms) that never comes: the deadline of requests
 * built once and sent many times (the benchmarks' redis-benchmark calls). */
#define REDIS_FOREVER_MS INT64_C(9007199254740991)

/* A batched script's layout, as sluice__batch_kind's fields (batcher.h):
 * KEYS+ARGV sizing, then the reply's shape. P names the script's block
 * below (SEM_RENEW for sem_renew.lua). */
#define SLUICE__BATCH_LAYOUT(P)                                                     \
  .args_head = P##_ARGS_HEAD, .args_per = P##_ARGS_PER, .nums_head = P##_NUMS_HEAD, \
  .nums_per = P##_NUMS_PER, .reply_head = P##_REPLY_HEAD, .reply_per = P##_REPLY_PER
/* A kind's script, requests per call at most, and layout. */
#define SLUICE__BATCH_SCRIPT(lua, most, P) .script = &(lua), .max = (most), SLUICE__BATCH_LAYOUT(P)

/* ---- semaphores ---------------------------------------------------------- */

enum { SEM_KEY_HOLDERS, SEM_KEY_QUEUE, SEM_KEY_BEATS, SEM_KEY_META, SEM_NKEYS };

/* What every semaphore script of one handle shares. */
typedef struct sluice__sem_call {
  const char *keys[SEM_NKEYS];
  const char *wake_base;    /* "<prefix>sem:{name}:wake:" */
  const char *restored_key; /* "<prefix>sem:{name}:restored" (sem_reassert.lua) */
  unsigned permits;
  uint64_t ttl_ms, heartbeat_ms, keep_ms;
  int fair;
} sluice__sem_call;

/* Every semaphore script but sem_renew.lua starts with the same head:
 * KEYS: 1 holders, 2 queue, 3 beats, 4 meta
 * ARGV: 1 permits, 2 ttl_ms, 3 heartbeat_ms, 4 fair (0/1), 5 wake list base
 *       ("<prefix>sem:{name}:wake:"), 6 keep_ms (idle expiry). */
#define SEM_HEAD_ARGS 10
#define SEM_HEAD_NUMS 4

/* sem_acquire.lua: the head; the handle whose heartbeat this step is (""
 * for none) and that heartbeat's deadline; then per request: permit id;
 * waiter ("" for try_acquire, else "<handle id>:<waiter id>"); "1" if an
 * earlier attempt with this id may have been granted, else "0"; the
 * request's deadline; the waiter's own deadline in the queue (0: none).
 * Deadlines are ms on Redis's clock (rclock.h).
 * Reply: {wait, now, beat, then granted, value, lease per request}. */
#define SEM_ACQUIRE_ARGS_HEAD (SEM_HEAD_ARGS + 2)
#define SEM_ACQUIRE_ARGS_PER 5
#define SEM_ACQUIRE_NUMS_HEAD (SEM_HEAD_NUMS + 1)
#define SEM_ACQUIRE_NUMS_PER 2
#define SEM_ACQUIRE_REPLY_HEAD 3
#define SEM_ACQUIRE_REPLY_PER 3
void sluice__sem_acquire_head(sluice__args *a, const sluice__sem_call *s, const char *handle,
                              int64_t beat_until);
void sluice__sem_acquire_item(sluice__args *a, const char *permit_id, const char *waiter,
                              int maybe_granted, int64_t until, int64_t own_until);

/* sem_release.lua: the head, then the permit ids.
 * Reply: {held per request}. */
#define SEM_RELEASE_ARGS_HEAD SEM_HEAD_ARGS
#define SEM_RELEASE_ARGS_PER 1
#define SEM_RELEASE_NUMS_HEAD SEM_HEAD_NUMS
#define SEM_RELEASE_NUMS_PER 0
#define SEM_RELEASE_REPLY_HEAD 0
#define SEM_RELEASE_REPLY_PER 1
void sluice__sem_release_head(sluice__args *a, const sluice__sem_call *s);
void sluice__sem_release_item(sluice__args *a, const char *permit_id);

/* sem_renew.lua
 * KEYS: 1 holders; ARGV: 1 ttl_ms, 2 keep_ms, then permit ids.
 * Reply: {ttl_ms or 0 per request}. */
#define SEM_RENEW_ARGS_HEAD 3
#define SEM_RENEW_ARGS_PER 1
#define SEM_RENEW_NUMS_HEAD 2
#define SEM_RENEW_NUMS_PER 0
#define SEM_RENEW_REPLY_HEAD 0
#define SEM_RENEW_REPLY_PER 1
void sluice__sem_renew_head(sluice__args *a, const sluice__sem_call *s);
void sluice__sem_renew_item(sluice__args *a, const char *permit_id);

/* sem_reassert.lua
 * KEYS: 1 holders, 2 meta, 3 restored; ARGV: 1 permits, 2 ttl_ms, 3 keep_ms,
 * then per permit: id, fencing token, lease left (ms), this attempt's number,
 * the first attempt since the last answer (0: the last one was answered).
 * Reply: {1 renewed, 2 restored or 0 lost, per request}. */
#define SEM_REASSERT_ARGS_HEAD 6
#define SEM_REASSERT_ARGS_PER 5
#define SEM_REASSERT_NUMS_HEAD 3
#define SEM_REASSERT_NUMS_PER 4
#define SEM_REASSERT_REPLY_HEAD 0
#define SEM_REASSERT_REPLY_PER 1
void sluice__sem_reassert_head(sluice__args *a, const sluice__sem_call *s);
void sluice__sem_reassert_item(sluice__args *a, const char *permit_id, uint64_t fence,
                               uint64_t lease_left_ms, uint64_t attempt, uint64_t unanswered_since);

/* sem_leave.lua: the head, then the waiter ("<handle id>:<waiter id>"). */
#define SEM_LEAVE_ARGS (SEM_HEAD_ARGS + 1)
#define SEM_LEAVE_NUMS SEM_HEAD_NUMS
void sluice__sem_leave_args(sluice__args *a, const sluice__sem_call *s, const char *waiter);

/* ---- delay queue --------------------------------------------------------- */

enum { DQ_KEY_DELAYED, DQ_KEY_FLIGHT, DQ_KEY_DEAD, DQ_KEY_HASH, DQ_KEY_CONSUMERS, DQ_NKEYS };

/* dq_take.lua
 * KEYS: the queue's five keys
 * ARGV: 1 retention_ms, 2 batch, 3 visibility_ms, 4 max_attempts (0: none),
 *       5 consumer id, 6 max_poll_ms, 7 the consumer's take number (0:
 *       none kept), 8 "1" to send again a take whose answer was lost.
 * Reply: {now us, next wake-up ms or -1, count, first delivery token, then
 * id, attempt, priority * DQ_PRIORITY_BAND + due ms, payload per message
 * (the k-th's token: first + k)}. */
#define DQ_PRIORITY_BAND (INT64_C(1) << 43) /* _dq_common.lua's DQ_BAND */
#define DQ_TAKE_ARGS (DQ_NKEYS + 8)
#define DQ_TAKE_NUMS 6
#define DQ_TAKE_HEAD 4 /* reply elements before the messages */
#define DQ_TAKE_PER 4  /* and per message */
void sluice__dq_take_args(sluice__args *a, char *const keys[DQ_NKEYS], uint64_t retention_ms,
                          unsigned batch, uint64_t visibility_ms, unsigned max_attempts,
                          const char *consumer_id, unsigned max_poll_ms, uint64_t take_seq,
                          int retry);

/* dq_ack.lua
 * KEYS: the queue's five keys
 * ARGV: 1 retention_ms, 2 max_attempts, then per settlement: id, attempt,
 *       op ('a' ack, 'r' retry, 'x' release), delay_ms, delivery token.
 * Reply: {result per settlement}. */
#define DQ_ACK_ARGS_HEAD (DQ_NKEYS + 2)
#define DQ_ACK_ARGS_PER 5
#define DQ_ACK_NUMS_HEAD 2
#define DQ_ACK_NUMS_PER 3
#define DQ_ACK_REPLY_HEAD 0
#define DQ_ACK_REPLY_PER 1
void sluice__dq_ack_head(sluice__args *a, char *const keys[DQ_NKEYS], uint64_t retention_ms,
                         unsigned max_attempts);
void sluice__dq_ack_item(sluice__args *a, const char *id, unsigned attempt, char op,
                         int64_t delay_ms, uint64_t token);

/* dq_extend.lua
 * KEYS: the queue's five keys
 * ARGV: 1 retention_ms, then per message: id, attempt, delivery token, ms.
 * Reply: {now ms, then the new deadline (ms) or -1 lost, -2 gone per
 * message}. */
#define DQ_EXTEND_ARGS_HEAD (DQ_NKEYS + 1)
#define DQ_EXTEND_ARGS_PER 4
#define DQ_EXTEND_NUMS_HEAD 1
#define DQ_EXTEND_NUMS_PER 3
#define DQ_EXTEND_REPLY_HEAD 1
#define DQ_EXTEND_REPLY_PER 1
void sluice__dq_extend_head(sluice__args *a, char *const keys[DQ_NKEYS], uint64_t retention_ms);
void sluice__dq_extend_item(sluice__args *a, const char *id, unsigned attempt, uint64_t token,
                            uint64_t ms);

/* ---- rate limiters ------------------------------------------------------- */

/* What every check script of one limiter shares. */
typedef struct sluice__rl_call {
  uint64_t limit, period_ms, burst; /* burst: GCRA's capacity (= limit otherwise) */
} sluice__rl_call;

/* rl_fixed.lua, rl_sliding_log.lua, rl_sliding_counter.lua, rl_gcra.lua
 * (their common part, _rl_common.lua, documents it too)
 * KEYS: one per request, the request's key (a key may repeat: the requests
 *       are decided in order and each sees what those before it took).
 * ARGV: 1 limit, 2 period_ms, 3 burst, then per request: cost, peek ("1":
 *       decide only, "0": take), deadline (ms on Redis's clock, rclock.h).
 * Reply: {now ms, then allowed (-1: read past its deadline, nothing
 * done), remaining, retry_after_ms, reset_after_ms per request}.
 * KEYS come before ARGV, so a call is built as: sluice__rl_check_key for
 * every request, then sluice__rl_check_head, then sluice__rl_check_item for
 * every request, in the same order. */
#define RL_CHECK_ARGS_HEAD 3
#define RL_CHECK_ARGS_PER 4
#define RL_CHECK_NUMS_HEAD 3
#define RL_CHECK_NUMS_PER 2
#define RL_CHECK_REPLY_HEAD 1
#define RL_CHECK_REPLY_PER 4
void sluice__rl_check_key(sluice__args *a, const char *key);
void sluice__rl_check_head(sluice__args *a, const sluice__rl_call *s);
void sluice__rl_check_item(sluice__args *a, unsigned cost, int peek, int64_t deadline);

#endif
