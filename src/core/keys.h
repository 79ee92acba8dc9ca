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

#endif
