/* Shared by dq.c (producer, inspection) and dq_consumer.c. */
#ifndef SLUICE_DQ_INTERNAL_H
#define SLUICE_DQ_INTERNAL_H

#include <sluice/dq.h>

#include "core/guard.h"
#include "core/script_args.h" /* the queue's five keys (every dq script takes them) */
#include "core/engine.h"

#define DQ_DEFAULT_RETENTION_MS (7ull * 24 * 3600 * 1000)

/* Build the keys of queue name; 0, or SLUICE_ENOMEM (nothing to free). */
int sluice__dq_keys(const sluice_client *c, const char *name, char *keys[DQ_NKEYS]);
void sluice__dq_keys_free(char *keys[DQ_NKEYS]);
/* 1 if id is a valid caller-given message id. */
int sluice__dq_valid_id(const char *id);

#endif
