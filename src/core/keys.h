/*
 * Key names (keys.c): "<prefix><kind>:{<name>}:<part>". The primitives
 * build their keys here, and SCAN (`sluice top`) finds them by the same
 * parts, so the two cannot drift apart.
 */
#ifndef SLUICE_KEYS_H
#define SLUICE_KEYS_H

#include <sluice/client.h>

#include "core/script_args.h"

/* The parts of a semaphore's and a queue's keys, in the order their
 * scripts take them (script_args.h's SEM_KEY_* and DQ_KEY_*). */
extern const char *const sluice__sem_parts[SEM_NKEYS];
extern const char *const sluice__dq_parts[DQ_NKEYS];

/* "<prefix><kind>:{<name>}:<part>" (part may be NULL: no trailing
 * ":part"), malloc'd; NULL on OOM. */
char *sluice__key(const sluice_client *c, const char *kind, const char *name, const char *part);
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
