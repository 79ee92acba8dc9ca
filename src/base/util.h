/*
 * Small utilities every layer uses: clocks, randomness, number formatting,
 * reply accessors, timers and the live-object count the tests check.
 * Depends on nothing in sluice but the public status codes.
 */
#ifndef SLUICE_UTIL_H
#define SLUICE_UTIL_H

#include <stddef.h>
#include <stdint.h>

#include <hiredis/hiredis.h>
#include <sluice/common.h>

struct event;

/* Monotonic clock in milliseconds / microseconds. */
uint64_t sluice__mono_ms(void);
uint64_t sluice__mono_us(void);
/* 32 lowercase hex characters of fresh randomness + NUL. */
void sluice__random_hex(char out[33]);
/* Uniform in [0, n). */
uint32_t sluice__random_below(uint32_t n);
/* A backoff step d made a wait uniform in [d/2, d] ("equal jitter"). */
uint32_t sluice__jittered(uint32_t d);
/* 1 if name is a valid primitive name (1..SLUICE_NAME_MAX bytes). */
int sluice__valid_name(const char *name);
/* Decimal text of v into buf (>= 24 bytes); returns the length. */
size_t sluice__fmt_i64(char *buf, int64_t v);
size_t sluice__fmt_u64(char *buf, uint64_t v);
/* Integer value of an integer reply, or of a string reply holding one.
 * Returns 0 on success, SLUICE_EPROTOCOL otherwise. */
int sluice__reply_i64(const redisReply *r, int64_t *out);
/* A deep copy of a reply (NULL on OOM), freed with sluice__reply_free. */
redisReply *sluice__reply_dup(const redisReply *r);
void sluice__reply_free(redisReply *r);
/* Element i of an array reply, or NULL if r is not an array that long. */
const redisReply *sluice__reply_at(const redisReply *r, size_t i);
/* Arm/schedule a one-shot timer in ms (0: next loop turn). */
void sluice__timer_in(struct event *ev, uint64_t ms);
/* Arm a persistent (EV_PERSIST) timer every ms, unless already armed. */
void sluice__timer_every(struct event *ev, uint64_t ms);

/* Live internal objects (ops, handles), for leak checks in tests. */
extern long sluice__live_objects;
void *sluice__calloc(size_t n, size_t size);
void sluice__free(void *p);

#endif /* SLUICE_UTIL_H */
