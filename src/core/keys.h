/*
 * Key names (keys.c): "<prefix><kind>:{<name>}:<part>", the hash tag keeping
 * one primitive's keys in one slot. Each primitive names its own parts
 * (sem/sem_args.h, dq/dq_args.h, limiter/rl_args.h), and SCAN (inspect/scan.c)
 * finds them by the same parts, so the two cannot drift apart.
 */
#ifndef SLUICE_KEYS_H
#define SLUICE_KEYS_H

#include <sluice/client.h>

/* "<prefix><kind>:{<name>}:<part>" (part may be NULL: no trailing
 * ":part"), malloc'd; NULL on OOM. */
char *sluice__key(const sluice_client *c, const char *kind, const char *name, const char *part);

#endif
