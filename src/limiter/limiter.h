/*
 * Private pieces of the rate limiters: a small string-keyed hash map (wait
 * queues per key, local limiter state per key) and the in-process limiter
 * used by the SLUICE_RL_FAIL_LOCAL policy. Never installed.
 */
#ifndef SLUICE_LIMITER_INTERNAL_H
#define SLUICE_LIMITER_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include <sluice/limiter.h>

/* The client-wide cap on sluice_limiter_wait calls pending
 * (limiter_waits_max; core/engine.h). */
struct sluice__cap_def;
extern const struct sluice__cap_def sluice__rl_waits_cap;
/* What its guard's view shows (core/guard.h). */
extern const struct sluice__obj_kind sluice__limiter_obj;

/* ---- map ----------------------------------------------------------------- */

/* Embed as the first member of a struct stored in a map. key is borrowed
 * from the embedding struct and must outlive its membership. */
typedef struct sluice__rl_entry {
  struct sluice__rl_entry *next;
  uint64_t hash;
  const char *key;
  size_t klen;
} sluice__rl_entry;

typedef struct sluice__rl_map {
  sluice__rl_entry **slots;
  size_t nslots; /* power of two, or 0 before the first insert */
  size_t count;
} sluice__rl_map;

sluice__rl_entry *sluice__rl_map_find(const sluice__rl_map *m, const char *key, size_t klen);
/* e->key/klen must be set. Returns 0 or SLUICE_ENOMEM. */
int sluice__rl_map_insert(sluice__rl_map *m, sluice__rl_entry *e);
void sluice__rl_map_remove(sluice__rl_map *m, sluice__rl_entry *e);
/* Frees the slot array only; entries belong to their owners. */
void sluice__rl_map_clear(sluice__rl_map *m);

/* ---- local limiter ------------------------------------------------------- */

typedef struct sluice__rl_params {
  sluice_rl_algo algo;
  int64_t limit;
  int64_t period_ms;
  int64_t burst; /* GCRA capacity */
} sluice__rl_params;

typedef struct sluice__rl_local sluice__rl_local;

sluice__rl_local *sluice__rl_local_new(const sluice__rl_params *p);
void sluice__rl_local_free(sluice__rl_local *l);
/* Decide (and unless peek, take) cost units for key at now_us (a monotonic
 * clock). res->source is SLUICE_RL_LOCAL. Returns 0 or SLUICE_ENOMEM. */
int sluice__rl_local_check(sluice__rl_local *l, const char *key, unsigned cost, int peek,
                           uint64_t now_us, sluice_rl_result *res);
/* Keys currently tracked (idle ones are dropped as new keys arrive). */
size_t sluice__rl_local_keys(const sluice__rl_local *l);

/* ---- for tests ----------------------------------------------------------- */

/* The Redis key holding key's state, malloc'd (free()); NULL on OOM. */
char *sluice__rl_redis_key(const sluice_limiter *lim, const char *key);

#endif
