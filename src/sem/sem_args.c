/* KEYS/ARGV of the semaphore's scripts: see sem_args.h for each layout. */
#include "sem/sem_args.h"

const char *const sluice__sem_parts[SEM_NKEYS] = {"holders", "queue", "beats", "meta"};

static void sem_head(sluice__args *a, const sluice__sem_call *s) {
  for (int i = 0; i < SEM_NKEYS; i++) sluice__args_key(a, s->keys[i]);
  sluice__args_u64(a, s->permits);
  sluice__args_u64(a, s->ttl_ms);
  sluice__args_u64(a, s->heartbeat_ms);
  sluice__args_str(a, s->fair ? "1" : "0");
  sluice__args_str(a, s->wake_base);
  sluice__args_u64(a, s->keep_ms);
}

void sluice__sem_acquire_head(sluice__args *a, const sluice__sem_call *s, const char *handle,
                              int64_t beat_until) {
  sem_head(a, s);
  sluice__args_str(a, handle ? handle : "");
  sluice__args_i64(a, beat_until);
}

void sluice__sem_acquire_item(sluice__args *a, const char *permit_id, const char *waiter,
                              int maybe_granted, int64_t until, int64_t own_until) {
  sluice__args_str(a, permit_id);
  sluice__args_str(a, waiter ? waiter : "");
  sluice__args_str(a, maybe_granted ? "1" : "0");
  sluice__args_i64(a, until);
  sluice__args_i64(a, own_until);
}

void sluice__sem_release_head(sluice__args *a, const sluice__sem_call *s) { sem_head(a, s); }

void sluice__sem_release_item(sluice__args *a, const char *permit_id) {
  sluice__args_str(a, permit_id);
}

void sluice__sem_renew_head(sluice__args *a, const sluice__sem_call *s) {
  sluice__args_key(a, s->keys[SEM_KEY_HOLDERS]);
  sluice__args_u64(a, s->ttl_ms);
  sluice__args_u64(a, s->keep_ms);
}

void sluice__sem_renew_item(sluice__args *a, const char *permit_id) {
  sluice__args_str(a, permit_id);
}

void sluice__sem_reassert_head(sluice__args *a, const sluice__sem_call *s) {
  sluice__args_key(a, s->keys[SEM_KEY_HOLDERS]);
  sluice__args_key(a, s->keys[SEM_KEY_META]);
  sluice__args_key(a, s->restored_key);
  sluice__args_u64(a, s->permits);
  sluice__args_u64(a, s->ttl_ms);
  sluice__args_u64(a, s->keep_ms);
}

void sluice__sem_reassert_item(sluice__args *a, const char *permit_id, uint64_t fence,
                               uint64_t lease_left_ms, uint64_t attempt,
                               uint64_t unanswered_since) {
  sluice__args_str(a, permit_id);
  sluice__args_u64(a, fence);
  sluice__args_u64(a, lease_left_ms);
  sluice__args_u64(a, attempt);
  sluice__args_u64(a, unanswered_since);
}

void sluice__sem_leave_args(sluice__args *a, const sluice__sem_call *s, const char *waiter) {
  sem_head(a, s);
  sluice__args_str(a, waiter);
}
