/*
 * Releases. Every release ready in one loop turn goes to Redis in one script
 * call (the release script takes a list of permit ids): under load this is
 * what keeps Redis's cost per release low. Releases are also how the
 * library returns permits it was granted after the caller gave up; those
 * have no callback.
 */
#include <stdlib.h>
#include <string.h>

#include "sem-internal.h"

struct rel_req {
  sluice__link link;              /* in sem->rel_queue */
  char id[33];
  sluice_release_cb *cb;          /* NULL: nobody waits for the answer */
  void *ud;
};

struct rel_batch {
  sluice_sem *sem;
  sluice__link link;              /* in sem->rel_batches */
  sluice__op *op;
  size_t n;
  rel_req *reqs[];
};

int sluice__release_queue(sluice_sem *sem, const char *id, sluice_release_cb *cb, void *ud) {
  if (sem->closed) return SLUICE_ECLOSED;
  rel_req *r = sluice__calloc(1, sizeof *r);
  if (!r) return SLUICE_ENOMEM;
  memcpy(r->id, id, 32);
  r->cb = cb;
  r->ud = ud;
  sluice__list_append(&sem->rel_queue, &r->link);
  sluice__sem_schedule_flush(sem);
  return SLUICE_OK;
}

/* Answer each request of b (ECANCELED once the handle is being freed: no
 * other callback may fire then) and free it all. */
static void batch_complete(rel_batch *b, int status, const redisReply *reply) {
  sluice_sem *sem = b->sem;
  int shape_ok = status != SLUICE_OK ||
                 (reply->type == REDIS_REPLY_ARRAY && reply->elements == b->n);
  sem->dispatching++;
  for (size_t i = 0; i < b->n; i++) {
    rel_req *r = b->reqs[i];
    int st = shape_ok ? status : SLUICE_EPROTOCOL;
    int64_t held = 0;
    if (st == SLUICE_OK)
      st = sluice__reply_i64(reply->element[i], &held) ? SLUICE_EPROTOCOL
           : held                                      ? SLUICE_OK
                                                       : SLUICE_ENOTFOUND;
    if (r->cb) r->cb(sem, sem->freeing ? SLUICE_ECANCELED : st, r->ud);
    sluice__free(r);
  }
  sluice__free(b);
  sem->dispatching--;
  sluice__sem_dispatch_done(sem);
}

static void on_batch_reply(void *ud, int status, const redisReply *reply) {
  rel_batch *b = ud;
  sluice__list_remove(&b->sem->rel_batches, &b->link);
  batch_complete(b, status, reply);
}

void sluice__release_flush(sluice_sem *sem) {
  while (sem->rel_queue.head && !sem->closed) {
    size_t n = 0;
    for (sluice__link *l = sem->rel_queue.head; l && n < SEM_BATCH_MAX; l = l->next) n++;
    rel_batch *b = sluice__calloc(1, sizeof *b + n * sizeof(rel_req *));
    const char *argv[7 + SEM_BATCH_MAX];
    if (!b) {
      sluice__sem_schedule_flush(sem); /* try again next turn */
      return;
    }
    b->sem = sem;
    b->n = n;
    argv[0] = sem->keys[SEM_KEY_HOLDERS];
    argv[1] = sem->keys[SEM_KEY_QUEUE];
    argv[2] = sem->keys[SEM_KEY_BEATS];
    argv[3] = sem->permits_s;
    argv[4] = sem->wake_base;
    argv[5] = sem->hb_s;
    argv[6] = sem->o.fair ? "1" : "0";
    for (size_t i = 0; i < n; i++) {
      rel_req *r = sluice__container_of(sem->rel_queue.head, rel_req, link);
      sluice__list_remove(&sem->rel_queue, &r->link);
      b->reqs[i] = r;
      argv[7 + i] = r->id;
    }
    int rc = sluice__eval(sem->c, &sluice__lua_sem_release, 3, (int)(7 + n), argv, NULL,
                          sem->o.op_timeout_ms, on_batch_reply, b, &b->op);
    if (rc) {
      batch_complete(b, rc, NULL);
      continue;
    }
    sluice__list_append(&sem->rel_batches, &b->link);
  }
}

void sluice__release_cancel_all(sluice_sem *sem) {
  sluice__release_flush(sem); /* still send what is queued, if we can */
  while (sem->rel_queue.head) { /* client closed: nothing can be sent */
    rel_req *r = sluice__container_of(sem->rel_queue.head, rel_req, link);
    sluice__list_remove(&sem->rel_queue, &r->link);
    if (r->cb) r->cb(sem, SLUICE_ECANCELED, r->ud);
    sluice__free(r);
  }
  while (sem->rel_batches.head) {
    rel_batch *b = sluice__container_of(sem->rel_batches.head, rel_batch, link);
    sluice__list_remove(&sem->rel_batches, &b->link);
    sluice__op_detach(b->op);
    batch_complete(b, SLUICE_ECANCELED, NULL);
  }
}
