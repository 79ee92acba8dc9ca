/* Shared by dq.c (producer, inspection) and dq_consumer.c. */
#ifndef SLUICE_DQ_INTERNAL_H
#define SLUICE_DQ_INTERNAL_H

#include <sluice/dq.h>

#include "core/guard.h"
#include "dq/dq_args.h" /* the queue's five keys (every dq script takes them) */
#include "core/engine.h"

#define DQ_DEFAULT_RETENTION_MS (7ull * 24 * 3600 * 1000)

/* Build the keys of queue name; 0, or SLUICE_ENOMEM (nothing to free). */
int sluice__dq_keys(const sluice_client *c, const char *name, char *keys[DQ_NKEYS]);
void sluice__dq_keys_free(char *keys[DQ_NKEYS]);
/* 1 if id is a valid caller-given message id. */
int sluice__dq_valid_id(const char *id);

/* A step of another file on the queue (dq_sched.c): script s with the
 * queue's keys, then args, of which the first `extra` are keys too. fn
 * runs once, from the loop, inside the handle's guard (SLUICE_ECANCELED
 * when the handle is freed or the client closes); on an error return it
 * never runs. reply is NULL unless status is SLUICE_OK. */
typedef void sluice__dq_ext_fn(sluice_dq *dq, int status, const redisReply *reply, void *ud);
int sluice__dq_ext_send(sluice_dq *dq, const sluice__script *s, int extra, int nargs,
                        const char *const *args, const size_t *lens, sluice__dq_ext_fn *fn,
                        void *ud);
sluice_client *sluice__dq_client(const sluice_dq *dq);
uint64_t sluice__dq_retention(const sluice_dq *dq);
/* Where the handle keeps its schedules (dq_sched.h). */
typedef struct sluice__dq_sched sluice__dq_sched;
sluice__dq_sched **sluice__dq_sched_of(sluice_dq *dq);

/* The client-wide cap on messages pushed, not answered
 * (max_pending_pushes). */
extern const sluice__cap_def sluice__dq_pushes_cap;
/* What the guards' views of a queue and of a consumer show (core/guard.h). */
extern const struct sluice__obj_kind sluice__dq_obj, sluice__dq_consumer_obj;

#endif
