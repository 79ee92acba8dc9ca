/*
 * Acquisition: try_acquire (one attempt) and blocking acquire (attempts until
 * granted, woken by releases through the client's shared blocking
 * connection, by a local timer at the earliest lease expiry, and at each
 * heartbeat).
 *
 * Attempts ready in the same loop turn go to Redis together, in order, in
 * one script call (a batch). An acquire whose outcome is decided while its
 * attempt is in flight (deadline, cancel, free) leaves the batch at once; if
 * Redis granted that attempt anyway, its permit is released right behind it
 * on the same connection, so it never lingers for a whole lease.
 */
#include <stdlib.h>
#include <string.h>

#include "sem-internal.h"

#define RETRY_MIN_MS 25
#define RETRY_MAX_MS 1000

struct sluice_acquire {
  sluice_sem *sem;
  sluice__link link;              /* in sem->acquires */
  sluice__link plink;             /* in sem->pending */
  int pending;                    /* in that list */
  acq_batch *batch;               /* attempt in flight, in slot `slot` */
  size_t slot;
  sluice_acquire_cb *cb;
  void *ud;
  int blocking;
  char waiter_id[33];
  char member[68];                /* "<handle id>:<waiter id>" in the queue */
  char permit_id[33];             /* id the next attempt asks for */
  int maybe_granted;              /* an attempt with permit_id got no answer */
  struct event *timer;            /* next attempt, or deferred completion */
  struct event *deadline;
  int wake_pending;               /* woken while an attempt was under way */
  int last_error;                 /* last transport failure of an attempt */
  int final_status;               /* decided; reported from the timer */
  unsigned retry_ms;              /* backoff after transport failures */
};

struct acq_batch {
  sluice_sem *sem;
  sluice__link link;              /* in sem->acq_batches */
  sluice__op *op;
  uint64_t sent_ms;
  size_t n;
  struct {
    sluice_acquire *a;            /* NULL once that acquire left */
    char id[33];
  } slots[];
};

/* ---- lists --------------------------------------------------------------- */

static void pend_add(sluice_acquire *a) {
  sluice_sem *sem = a->sem;
  if (a->pending) return;
  a->pending = 1;
  sluice__list_append(&sem->pending, &a->plink);
  sluice__sem_schedule_flush(sem);
}

static void pend_remove(sluice_acquire *a) {
  sluice_sem *sem = a->sem;
  if (!a->pending) return;
  sluice__list_remove(&sem->pending, &a->plink);
  a->pending = 0;
}

/* Leave the batch in flight, returning the permit it may have been granted. */
static void leave_batch(sluice_acquire *a) {
  if (!a->batch) return;
  a->batch->slots[a->slot].a = NULL;
  a->batch = NULL;
  sluice__release_queue(a->sem, a->permit_id, NULL, NULL);
  sluice__random_hex(a->permit_id);
  a->maybe_granted = 0;
}

static void send_leave(sluice_acquire *a) {
  sluice_sem *sem = a->sem;
  if (!a->blocking || sem->closed) return;
  const char *argv[] = {sem->keys[SEM_KEY_HOLDERS], sem->keys[SEM_KEY_QUEUE],
                        sem->keys[SEM_KEY_BEATS], a->member, sem->permits_s,
                        sem->wake_base, sem->hb_s, sem->o.fair ? "1" : "0"};
  sluice__eval(sem->c, &sluice__lua_sem_leave, 3, 8, argv, NULL, sem->o.op_timeout_ms,
               sluice__sem_ignore_reply, NULL, NULL);
}

static void acquire_free(sluice_acquire *a) {
  sluice_sem *sem = a->sem;
  pend_remove(a);
  sluice__list_remove(&sem->acquires, &a->link);
  event_free(a->timer);
  event_free(a->deadline);
  sluice__free(a);
}

/* ---- completion ---------------------------------------------------------- */

/* Tell the user (once) and free the acquire first: the callback may free
 * the semaphore. */
static void finish(sluice_acquire *a, int status, sluice_permit *permit) {
  sluice_sem *sem = a->sem;
  sluice_acquire_cb *cb = a->cb;
  void *ud = a->ud;
  leave_batch(a);
  if (!permit) send_leave(a); /* a grant already left the queue */
  if (a->blocking) sluice__sem_blocking_changed(sem, -1);
  acquire_free(a);
  cb(sem, status, permit, ud);
}

/* Decide status now but report it from the loop (never inside the caller). */
static void finish_later(sluice_acquire *a, int status) {
  if (a->final_status) return;
  a->final_status = status;
  pend_remove(a);
  evtimer_del(a->timer);
  sluice__timer_in(a->timer, 0);
}

static void schedule_attempt(sluice_acquire *a, uint64_t ms) {
  evtimer_del(a->timer);
  sluice__timer_in(a->timer, ms);
}

static void on_attempt_failed(sluice_acquire *a, int status) {
  if (status == SLUICE_ETIMEDOUT) {
    /* The attempt may still run in Redis: release its id behind it (same
     * connection, so in order) and ask under a fresh id next time. */
    sluice__release_queue(a->sem, a->permit_id, NULL, NULL);
    sluice__random_hex(a->permit_id);
    a->maybe_granted = 0;
  } else if (status == SLUICE_ECONNECTION) {
    a->maybe_granted = 1; /* it may have run before the connection went */
  }
  if (!a->blocking || (status != SLUICE_ETIMEDOUT && status != SLUICE_ECONNECTION)) {
    finish(a, status, NULL);
    return;
  }
  a->last_error = status;
  schedule_attempt(a, a->retry_ms);
  a->retry_ms = a->retry_ms * 2 > RETRY_MAX_MS ? RETRY_MAX_MS : a->retry_ms * 2;
}

/* One request's answer: granted (value = fencing token) or not (value =
 * queue position); wait = ms until the earliest lease expires (-1: none). */
static void on_attempt(sluice_acquire *a, int status, int granted, int64_t value, int64_t wait,
                       uint64_t sent_ms) {
  sluice_sem *sem = a->sem;
  if (a->final_status) { /* cancelled meanwhile; the timer reports it */
    if (status == SLUICE_OK && granted) sluice__release_queue(sem, a->permit_id, NULL, NULL);
    return;
  }
  if (status != SLUICE_OK) {
    on_attempt_failed(a, status);
    return;
  }
  a->last_error = 0;
  a->maybe_granted = 0;
  a->retry_ms = RETRY_MIN_MS;
  if (granted) {
    sluice_permit *p = sluice__permit_new(sem, a->permit_id, (uint64_t)value, sent_ms);
    if (!p) {
      sluice__release_queue(sem, a->permit_id, NULL, NULL);
      finish(a, SLUICE_ENOMEM, NULL);
      return;
    }
    finish(a, SLUICE_OK, p);
    return;
  }
  if (!a->blocking) {
    finish(a, SLUICE_EBUSY, NULL);
    return;
  }
  /* Wait for a wake-up, bounded by the earliest lease expiry (a crashed
   * holder) and by our heartbeat (which keeps our place in the queue). */
  uint64_t next = sem->o.heartbeat_ms / 3;
  if (wait >= 0 && (uint64_t)wait + 1 < next) next = (uint64_t)wait + 1;
  if (a->wake_pending) next = 0;
  a->wake_pending = 0;
  schedule_attempt(a, next);
}

/* ---- batches ------------------------------------------------------------- */

static int parse_slot(const redisReply *r, size_t i, int *granted, int64_t *value) {
  const redisReply *g = sluice__reply_at(r, 1 + 2 * i), *v = sluice__reply_at(r, 2 + 2 * i);
  int64_t gi;
  if (!g || !v || sluice__reply_i64(g, &gi) || sluice__reply_i64(v, value)) return SLUICE_EPROTOCOL;
  *granted = gi == 1;
  return SLUICE_OK;
}

/* Hand each request its answer. Callbacks may free acquires of this batch
 * (their slots go NULL) or the semaphore (destruction waits for us). */
static void batch_complete(acq_batch *b, int status, const redisReply *reply) {
  sluice_sem *sem = b->sem;
  int64_t wait = -1;
  if (status == SLUICE_OK &&
      (reply->type != REDIS_REPLY_ARRAY || reply->elements != 1 + 2 * b->n ||
       sluice__reply_i64(reply->element[0], &wait)))
    status = SLUICE_EPROTOCOL;
  sem->dispatching++;
  for (size_t i = 0; i < b->n; i++) {
    int granted = 0, st = status;
    int64_t value = 0;
    if (st == SLUICE_OK) st = parse_slot(reply, i, &granted, &value);
    sluice_acquire *a = b->slots[i].a;
    if (!a) { /* gave up meanwhile: return what Redis granted it */
      if (st == SLUICE_OK && granted) sluice__release_queue(sem, b->slots[i].id, NULL, NULL);
      continue;
    }
    b->slots[i].a = NULL;
    a->batch = NULL;
    on_attempt(a, st, granted, value, wait, b->sent_ms);
  }
  sluice__free(b);
  sem->dispatching--;
  sluice__sem_dispatch_done(sem);
}

static void on_batch_reply(void *ud, int status, const redisReply *reply) {
  acq_batch *b = ud;
  sluice__list_remove(&b->sem->acq_batches, &b->link);
  batch_complete(b, status, reply);
}

void sluice__acquire_flush(sluice_sem *sem) {
  while (sem->pending.head) {
    size_t n = 0;
    for (sluice__link *l = sem->pending.head; l && n < SEM_BATCH_MAX; l = l->next) n++;
    acq_batch *b = sluice__calloc(1, sizeof *b + n * sizeof b->slots[0]);
    const char *argv[10 + 3 * SEM_BATCH_MAX];
    if (!b) {
      sluice__sem_schedule_flush(sem); /* try again next turn */
      return;
    }
    b->sem = sem;
    b->n = n;
    b->sent_ms = sluice__mono_ms();
    const char *head[10] = {sem->keys[SEM_KEY_HOLDERS], sem->keys[SEM_KEY_QUEUE],
                            sem->keys[SEM_KEY_BEATS],   sem->keys[SEM_KEY_META],
                            sem->permits_s,             sem->ttl_s,
                            sem->hb_s,                  sem->o.fair ? "1" : "0",
                            sem->wake_base,             sem->keep_s};
    memcpy(argv, head, sizeof head);
    for (size_t i = 0; i < n; i++) {
      sluice_acquire *a = sluice__container_of(sem->pending.head, sluice_acquire, plink);
      pend_remove(a);
      a->batch = b;
      a->slot = i;
      b->slots[i].a = a;
      memcpy(b->slots[i].id, a->permit_id, 33);
      argv[10 + 3 * i] = b->slots[i].id;
      argv[11 + 3 * i] = a->blocking ? a->member : "";
      argv[12 + 3 * i] = a->maybe_granted ? "1" : "0";
    }
    int rc = sluice__eval(sem->c, &sluice__lua_sem_acquire, SEM_NKEYS, (int)(10 + 3 * n), argv,
                          NULL, sem->o.op_timeout_ms, on_batch_reply, b, &b->op);
    if (rc) {
      for (size_t i = 0; i < n; i++) {
        b->slots[i].a->batch = NULL;
        finish_later(b->slots[i].a, rc);
      }
      sluice__free(b);
      continue;
    }
    sluice__list_append(&sem->acq_batches, &b->link);
  }
}

/* ---- timers and wake-ups ------------------------------------------------- */

void sluice__acquire_poke(sluice_acquire *a) {
  if (a->final_status) return;
  if (a->batch || a->pending) {
    a->wake_pending = 1;
    return;
  }
  evtimer_del(a->timer);
  pend_add(a);
}

void sluice__acquire_poke_all(sluice_sem *sem) {
  for (sluice__link *l = sem->acquires.head; l; l = l->next) {
    sluice_acquire *a = sluice__container_of(l, sluice_acquire, link);
    if (a->blocking) sluice__acquire_poke(a);
  }
}

sluice_acquire *sluice__acquire_find(sluice_sem *sem, const char *waiter_id) {
  for (sluice__link *l = sem->acquires.head; l; l = l->next) {
    sluice_acquire *a = sluice__container_of(l, sluice_acquire, link);
    if (a->blocking && memcmp(a->waiter_id, waiter_id, 32) == 0) return a;
  }
  return NULL;
}

static void acquire_timer_cb(evutil_socket_t fd, short what, void *arg) {
  sluice_acquire *a = arg;
  if (a->final_status) finish(a, a->final_status, NULL);
  else pend_add(a);
}

static void acquire_deadline_cb(evutil_socket_t fd, short what, void *arg) {
  sluice_acquire *a = arg;
  if (a->final_status) return;
  finish(a, a->last_error ? a->last_error : SLUICE_ETIMEDOUT, NULL);
}

/* ---- public API ---------------------------------------------------------- */

static int start_acquire(sluice_sem *sem, int blocking, unsigned timeout_ms,
                         sluice_acquire_cb *cb, void *ud, sluice_acquire **handle) {
  if (!sem || !cb) return SLUICE_EINVAL;
  if (sem->closed || sem->freeing) return SLUICE_ECLOSED;
  struct event_base *base = sluice__client_base(sem->c);
  sluice_acquire *a = sluice__calloc(1, sizeof *a);
  if (!a) return SLUICE_ENOMEM;
  a->sem = sem;
  a->cb = cb;
  a->ud = ud;
  a->blocking = blocking;
  a->retry_ms = RETRY_MIN_MS;
  a->timer = evtimer_new(base, acquire_timer_cb, a);
  a->deadline = evtimer_new(base, acquire_deadline_cb, a);
  if (!a->timer || !a->deadline) {
    if (a->timer) event_free(a->timer);
    if (a->deadline) event_free(a->deadline);
    sluice__free(a);
    return SLUICE_ENOMEM;
  }
  sluice__random_hex(a->waiter_id);
  sluice__random_hex(a->permit_id);
  memcpy(a->member, sem->handle_id, 32);
  a->member[32] = ':';
  memcpy(a->member + 33, a->waiter_id, 33);
  sluice__list_append(&sem->acquires, &a->link);
  if (blocking) {
    sluice__sem_blocking_changed(sem, +1);
    if (timeout_ms) sluice__timer_in(a->deadline, timeout_ms);
  }
  if (handle) *handle = a;
  pend_add(a);
  return SLUICE_OK;
}

int sluice_sem_try_acquire(sluice_sem *sem, sluice_acquire_cb *cb, void *ud) {
  return start_acquire(sem, 0, 0, cb, ud, NULL);
}

int sluice_sem_acquire(sluice_sem *sem, unsigned timeout_ms, sluice_acquire_cb *cb, void *ud,
                       sluice_acquire **handle) {
  return start_acquire(sem, 1, timeout_ms, cb, ud, handle);
}

int sluice_acquire_cancel(sluice_acquire *a) {
  if (!a) return SLUICE_EINVAL;
  finish_later(a, SLUICE_ECANCELED);
  return SLUICE_OK;
}

void sluice__acquire_cancel_all(sluice_sem *sem) {
  /* Batches in flight: stop listening, and return whatever they were
   * granted (the releases queue behind them on the same connection). */
  while (sem->acq_batches.head) {
    acq_batch *b = sluice__container_of(sem->acq_batches.head, acq_batch, link);
    sluice__list_remove(&sem->acq_batches, &b->link);
    sluice__op_detach(b->op);
    for (size_t i = 0; i < b->n; i++) {
      if (b->slots[i].a) b->slots[i].a->batch = NULL;
      sluice__release_queue(sem, b->slots[i].id, NULL, NULL);
    }
    sluice__free(b);
  }
  while (sem->acquires.head)
    finish(sluice__container_of(sem->acquires.head, sluice_acquire, link), SLUICE_ECANCELED, NULL);
}
