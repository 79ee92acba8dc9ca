/*
 * Lease renewals. Like attempts and releases, every renewal that falls due
 * in one loop turn goes to Redis in one script call; permits granted
 * together (one acquire batch) renew together from then on.
 */
#include <stdlib.h>
#include <string.h>

#include "sem-internal.h"

#define RENEW_TIMEOUT_MIN_MS 10

struct renew_batch {
  sluice_sem *sem;
  sluice__link link;              /* in sem->renew_batches */
  sluice__op *op;
  uint64_t sent_ms;
  size_t n;
  sluice_permit *slots[];         /* NULL once that permit went */
};

static void queue_remove(sluice_permit *p) {
  sluice_sem *sem = p->sem;
  if (!p->renew_queued) return;
  sluice__list_remove(&sem->renew_queue, &p->rlink);
  p->renew_queued = 0;
}

void sluice__renew_queue(sluice_permit *p) {
  sluice_sem *sem = p->sem;
  if (p->renew_queued || p->rbatch) return;
  p->renew_queued = 1;
  sluice__list_append(&sem->renew_queue, &p->rlink);
  sluice__sem_schedule_flush(sem);
}

void sluice__renew_forget(sluice_permit *p) {
  queue_remove(p);
  if (p->rbatch) {
    p->rbatch->slots[p->rslot] = NULL;
    p->rbatch = NULL;
  }
}

/* Lost callbacks may release other permits of this batch (their slots go
 * NULL) or free the semaphore (destruction waits for us). */
static void on_batch_reply(void *ud, int status, const redisReply *reply) {
  renew_batch *b = ud;
  sluice_sem *sem = b->sem;
  sluice__list_remove(&sem->renew_batches, &b->link);
  if (status == SLUICE_OK && (reply->type != REDIS_REPLY_ARRAY || reply->elements != b->n))
    status = SLUICE_EPROTOCOL;
  sem->dispatching++;
  for (size_t i = 0; i < b->n; i++) {
    sluice_permit *p = b->slots[i];
    if (!p) continue;
    int64_t ttl = 0;
    int st = status;
    if (st == SLUICE_OK && sluice__reply_i64(reply->element[i], &ttl)) st = SLUICE_EPROTOCOL;
    b->slots[i] = NULL;
    p->rbatch = NULL;
    sluice__permit_renewed(p, st, ttl, b->sent_ms);
  }
  sluice__free(b);
  sem->dispatching--;
  sluice__sem_dispatch_done(sem);
}

void sluice__renew_flush(sluice_sem *sem) {
  while (sem->renew_queue.head && !sem->closed) {
    size_t n = 0;
    uint64_t timeout = sluice__client_op_timeout(sem->c);
    if (sem->o.op_timeout_ms) timeout = sem->o.op_timeout_ms;
    for (sluice__link *l = sem->renew_queue.head; l && n < SEM_BATCH_MAX; l = l->next) {
      /* Waiting for an answer past a lease's deadline is pointless. */
      uint64_t left = sluice__permit_ms_left(sluice__container_of(l, sluice_permit, rlink));
      if (left < timeout) timeout = left;
      n++;
    }
    if (timeout < RENEW_TIMEOUT_MIN_MS) timeout = RENEW_TIMEOUT_MIN_MS;
    renew_batch *b = sluice__calloc(1, sizeof *b + n * sizeof(sluice_permit *));
    const char *argv[3 + SEM_BATCH_MAX];
    if (!b) {
      sluice__sem_schedule_flush(sem); /* try again next turn */
      return;
    }
    b->sem = sem;
    b->n = n;
    b->sent_ms = sluice__mono_ms();
    argv[0] = sem->keys[SEM_KEY_HOLDERS];
    argv[1] = sem->ttl_s;
    argv[2] = sem->keep_s;
    for (size_t i = 0; i < n; i++) {
      sluice_permit *p = sluice__container_of(sem->renew_queue.head, sluice_permit, rlink);
      queue_remove(p);
      p->rbatch = b;
      p->rslot = i;
      b->slots[i] = p;
      argv[3 + i] = p->id;
    }
    int rc = sluice__eval(sem->c, &sluice__lua_sem_renew, 1, (int)(3 + n), argv, NULL,
                          (unsigned)timeout, on_batch_reply, b, &b->op);
    if (rc) {
      on_batch_reply(b, rc, NULL);
      continue;
    }
    sluice__list_append(&sem->renew_batches, &b->link);
  }
}

void sluice__renew_cancel_all(sluice_sem *sem) {
  while (sem->renew_queue.head)
    queue_remove(sluice__container_of(sem->renew_queue.head, sluice_permit, rlink));
  while (sem->renew_batches.head) {
    renew_batch *b = sluice__container_of(sem->renew_batches.head, renew_batch, link);
    sluice__list_remove(&sem->renew_batches, &b->link);
    sluice__op_detach(b->op);
    for (size_t i = 0; i < b->n; i++)
      if (b->slots[i]) b->slots[i]->rbatch = NULL;
    sluice__free(b);
  }
}
