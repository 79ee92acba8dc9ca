/* KEYS/ARGV of the delay queue's scripts: see dq_args.h for each layout. */
#include "dq/dq_args.h"

const char *const sluice__dq_parts[DQ_NKEYS] = {"z", "f", "d", "h", "c"};

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
