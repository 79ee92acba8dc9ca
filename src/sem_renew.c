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
  renew_batch *prev, *next;       /* in sem->renew_batches */
  sluice__op *op;
  uint64_t sent_ms;
  size_t n;
  sluice_permit *slots[];         /* NULL once that permit went */
};

static void queue_remove(sluice_permit *p) {
  sluice_sem *sem = p->sem;
  if (!p->renew_queued) return;
  if (p->rprev) p->rprev->rnext = p->rnext;
  else sem->renew_head = p->rnext;
  if (p->rnext) p->rnext->rprev = p->rprev;
  else sem->renew_tail = p->rprev;
  p->rprev = p->rnext = NULL;
  p->renew_queued = 0;
}

void sluice__renew_queue(sluice_permit *p) {
  sluice_sem *sem = p->sem;
  if (p->renew_queued || p->rbatch) return;
  p->renew_queued = 1;
  p->rnext = NULL;
  p->rprev = sem->renew_tail;
  if (sem->renew_tail) sem->renew_tail->rnext = p;
  else sem->renew_head = p;
  sem->renew_tail = p;
  sluice__sem_schedule_flush(sem);
}

void sluice__renew_forget(sluice_permit *p) {
  queue_remove(p);
  if (p->rbatch) {
    p->rbatch->slots[p->rslot] = NULL;
    p->rbatch = NULL;
  }
}

static void batch_unlink(renew_batch *b) {
  sluice_sem *sem = b->sem;
  if (b->prev) b->prev->next = b->next;
  else if (sem->renew_batches == b) sem->renew_batches = b->next;
  if (b->next) b->next->prev = b->prev;
  b->prev = b->next = NULL;
}

/* Lost callbacks may release other permits of this batch (their slots go
 * NULL) or free the semaphore (destruction waits for us). */
static void on_batch_reply(void *ud, int status, const redisReply *reply) {
  renew_batch *b = ud;
  sluice_sem *sem = b->sem;
  batch_unlink(b);
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
  while (sem->renew_head && !sem->closed) {
    size_t n = 0;
    uint64_t timeout = sluice__client_op_timeout(sem->c);
    if (sem->o.op_timeout_ms) timeout = sem->o.op_timeout_ms;
    for (sluice_permit *p = sem->renew_head; p && n < SEM_BATCH_MAX; p = p->rnext) {
      /* Waiting for an answer past a lease's deadline is pointless. */
      uint64_t left = sluice__permit_ms_left(p);
      if (left < timeout) timeout = left;
      n++;
    }
    if (timeout < RENEW_TIMEOUT_MIN_MS) timeout = RENEW_TIMEOUT_MIN_MS;
    renew_batch *b = sluice__calloc(1, sizeof *b + n * sizeof(sluice_permit *));
    const char **argv = malloc((3 + n) * sizeof *argv);
    if (!b || !argv) {
      sluice__free(b);
      free(argv);
      sluice__sem_schedule_flush(sem);
      return;
    }
    b->sem = sem;
    b->n = n;
    b->sent_ms = sluice__mono_ms();
    argv[0] = sem->keys[SEM_KEY_HOLDERS];
    argv[1] = sem->ttl_s;
    argv[2] = sem->keep_s;
    for (size_t i = 0; i < n; i++) {
      sluice_permit *p = sem->renew_head;
      queue_remove(p);
      p->rbatch = b;
      p->rslot = i;
      b->slots[i] = p;
      argv[3 + i] = p->id;
    }
    int rc = sluice__eval(sem->c, &sluice__lua_sem_renew, 1, (int)(3 + n), argv, NULL,
                          (unsigned)timeout, on_batch_reply, b, &b->op);
    free(argv);
    if (rc) {
      on_batch_reply(b, rc, NULL);
      continue;
    }
    b->next = sem->renew_batches;
    if (sem->renew_batches) sem->renew_batches->prev = b;
    sem->renew_batches = b;
  }
}

void sluice__renew_cancel_all(sluice_sem *sem) {
  while (sem->renew_head) queue_remove(sem->renew_head);
  while (sem->renew_batches) {
    renew_batch *b = sem->renew_batches;
    batch_unlink(b);
    sluice__op_detach(b->op);
    for (size_t i = 0; i < b->n; i++)
      if (b->slots[i]) b->slots[i]->rbatch = NULL;
    sluice__free(b);
  }
}
