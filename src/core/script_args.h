/*
 * What the primitives' script argument builders share (sem/sem_args.h,
 * limiter/rl_args.h, dq/dq_args.h): each primitive builds the KEYS and
 * ARGV of its own scripts, one place per script, from typed values, next to
 * the layout its Lua file documents. The benchmarks build their
 * redis-benchmark command lines through the same functions, so they send
 * exactly what the library sends.
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
 * in its primitive's header (SEM_RENEW in sem/sem_args.h for sem_renew.lua). */
#define SLUICE__BATCH_LAYOUT(P)                                                     \
  .args_head = P##_ARGS_HEAD, .args_per = P##_ARGS_PER, .nums_head = P##_NUMS_HEAD, \
  .nums_per = P##_NUMS_PER, .reply_head = P##_REPLY_HEAD, .reply_per = P##_REPLY_PER
/* A kind's script, requests per call at most, and layout. */
#define SLUICE__BATCH_SCRIPT(lua, most, P) .script = &(lua), .max = (most), SLUICE__BATCH_LAYOUT(P)

#endif
