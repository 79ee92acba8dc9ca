/*
 * KEYS and ARGV of the rate limiters' check scripts (rl_args.c), repeating
 * the layout their Lua files document: change both together.
 */
#ifndef SLUICE_RL_ARGS_H
#define SLUICE_RL_ARGS_H

#include <stddef.h>
#include <stdint.h>

#include <sluice/client.h>

#include "core/script_args.h"

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

/* ---- keys ---------------------------------------------------------------- */

/* A limiter's key for one caller key: the tag "<name length>:<name>:<key>"
 * and the algorithm's suffix as part; malloc'd, NULL on OOM. */
char *sluice__rl_key(const sluice_client *c, const char *name, const char *key, const char *suffix);

/* A limiter's keys differ only in the caller's key: the frame around it
 * is built once (by sluice__rl_key, so the layout stays in one place), and
 * a check's key is three copies into memory the check already has. */
typedef struct sluice__rl_frame {
  char *whole;       /* the key of an empty caller key (malloc) */
  size_t head, tail; /* its bytes before and after where a caller's key goes */
} sluice__rl_frame;
int sluice__rl_frame_init(sluice__rl_frame *f, const sluice_client *c, const char *name,
                          const char *suffix);
void sluice__rl_frame_clear(sluice__rl_frame *f);
/* Bytes the key of a caller key of klen bytes takes, its NUL included. */
static inline size_t sluice__rl_frame_size(const sluice__rl_frame *f, size_t klen) {
  return f->head + klen + f->tail + 1;
}
/* Write that key into out (sluice__rl_frame_size bytes). */
void sluice__rl_frame_key(const sluice__rl_frame *f, const char *key, size_t klen, char *out);

#endif
