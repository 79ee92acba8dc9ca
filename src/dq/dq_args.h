/*
 * KEYS and ARGV of the delay queue's batched scripts (dq_args.c), one block
 * per script repeating the layout its Lua file documents: change both
 * together. The key parts are the names SCAN finds them by too.
 */
#ifndef SLUICE_DQ_ARGS_H
#define SLUICE_DQ_ARGS_H

#include <stddef.h>
#include <stdint.h>

#include "core/script_args.h"

enum { DQ_KEY_DELAYED, DQ_KEY_FLIGHT, DQ_KEY_DEAD, DQ_KEY_HASH, DQ_KEY_CONSUMERS, DQ_NKEYS };
/* Their parts: "<prefix>dq:{<name>}:<part>" (core/keys.h). */
extern const char *const sluice__dq_parts[DQ_NKEYS];

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

#endif
