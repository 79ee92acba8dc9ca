/*
 * KEYS and ARGV of the semaphore's batched scripts (sem_args.c), one block
 * per script repeating the layout its Lua file documents: change both
 * together. The key parts are the names SCAN finds them by too.
 */
#ifndef SLUICE_SEM_ARGS_H
#define SLUICE_SEM_ARGS_H

#include <stddef.h>
#include <stdint.h>

#include "core/script_args.h"

enum { SEM_KEY_HOLDERS, SEM_KEY_QUEUE, SEM_KEY_BEATS, SEM_KEY_META, SEM_NKEYS };
/* Their parts: "<prefix>sem:{<name>}:<part>" (core/keys.h). */
extern const char *const sluice__sem_parts[SEM_NKEYS];

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

#endif
