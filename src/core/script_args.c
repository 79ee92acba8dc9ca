/* KEYS/ARGV of the batched scripts: see script_args.h for each layout. */
#include "core/script_args.h"

/* ---- semaphores ---------------------------------------------------------- */

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

/* ---- delay queue --------------------------------------------------------- */

void sluice__dq_take_args(sluice__args *a, char *const keys[DQ_NKEYS], uint64_t retention_ms,
                          unsigned batch, uint64_t visibility_ms, unsigned max_attempts,
                          const char *consumer_id, unsigned max_poll_ms, uint64_t take_seq,
                          int retry) {
  for (int i = 0; i < DQ_NKEYS; i++) sluice__args_key(a, keys[i]);
  sluice__args_u64(a, retention_ms);
  sluice__args_u64(a, batch);
  sluice__args_u64(a, visibility_ms);
  sluice__args_u64(a, max_attempts);
  sluice__args_str(a, consumer_id);
  sluice__args_u64(a, max_poll_ms);
  sluice__args_u64(a, take_seq);
  sluice__args_str(a, retry ? "1" : "0");
}

void sluice__dq_ack_head(sluice__args *a, char *const keys[DQ_NKEYS], uint64_t retention_ms,
                         unsigned max_attempts) {
  for (int i = 0; i < DQ_NKEYS; i++) sluice__args_key(a, keys[i]);
  sluice__args_u64(a, retention_ms);
  sluice__args_u64(a, max_attempts);
}

void sluice__dq_ack_item(sluice__args *a, const char *id, unsigned attempt, char op,
                         int64_t delay_ms, uint64_t token) {
  static const char ops[] = "arx";
  sluice__args_str(a, id);
  sluice__args_u64(a, attempt);
  sluice__args_bin(a, op == 'a' ? ops : op == 'r' ? ops + 1 : ops + 2, 1);
  sluice__args_i64(a, delay_ms);
  sluice__args_u64(a, token);
}

void sluice__dq_extend_head(sluice__args *a, char *const keys[DQ_NKEYS], uint64_t retention_ms) {
  for (int i = 0; i < DQ_NKEYS; i++) sluice__args_key(a, keys[i]);
  sluice__args_u64(a, retention_ms);
}

void sluice__dq_extend_item(sluice__args *a, const char *id, unsigned attempt, uint64_t token,
                            uint64_t ms) {
  sluice__args_str(a, id);
  sluice__args_u64(a, attempt);
  sluice__args_u64(a, token);
  sluice__args_u64(a, ms);
}

/* ---- rate limiters ------------------------------------------------------- */

void sluice__rl_check_key(sluice__args *a, const char *key) { sluice__args_key(a, key); }

void sluice__rl_check_head(sluice__args *a, const sluice__rl_call *s) {
  sluice__args_u64(a, s->limit);
  sluice__args_u64(a, s->period_ms);
  sluice__args_u64(a, s->burst);
}

void sluice__rl_check_item(sluice__args *a, unsigned cost, int peek, int64_t deadline) {
  sluice__args_u64(a, cost);
  sluice__args_bin(a, peek ? "1" : "0", 1);
  sluice__args_i64(a, deadline);
}
