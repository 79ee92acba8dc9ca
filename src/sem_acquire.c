/*
 * Acquisition: try_acquire (one attempt) and blocking acquire (attempts until
 * granted).
 *
 * A blocked waiter tries again when it is woken: by a release (its id popped
 * from the handle's wake list by the client's shared BRPOP), by the handle's
 * expiry timer at the earliest holder's lease expiry (a crashed holder), and
 * by the handle's heartbeat, which every heartbeat_ms / 3 re-runs the
 * attempts of all its blocked waiters together — one script call however
 * many wait, and what keeps their places in the queue.
 *
 * Attempts ready in the same loop turn go to Redis together, in order, in
 * one script call. An acquire decided while its attempt is in flight
 * (deadline, cancel, free) leaves the call at once; if Redis granted that
 * attempt anyway, its permit is released right behind it on the same
 * connection, so it never lingers for a whole lease.
 */
#include <stdlib.h>
#include <string.h>

#include "sem-internal.h"

#define RETRY_MIN_MS 25
#define RETRY_MAX_MS 1000

struct sluice_acquire {
  sluice_sem *sem;
  sluice__link link;              /* in sem->acquires */
  sluice__breq attempt;           /* in sem->attempts */
  sluice_acquire_cb *cb;
  void *ud;
  int blocking;
  char waiter_id[33];
  char member[68];                /* "<handle id>:<waiter id>" in the queue */
  char permit_id[33];             /* id the next attempt asks for */
  int maybe_granted;              /* an attempt with permit_id got no answer */
  struct event *timer;            /* retry after a failure, or deferred completion */
  struct event *deadline;
  int wake_pending;               /* woken while an attempt was under way */
  int last_error;                 /* last transport failure of an attempt */
  int final_status;               /* decided; reported from the timer */
  unsigned retry_ms;              /* backoff after transport failures */
};

static void listen_update(sluice_sem *sem);

/* ---- leaving ------------------------------------------------------------- */

/* Leave the call in flight (or the queue); a permit Redis may grant the
 * attempt in flight is released behind it, and the next attempt (if any)
 * asks under a fresh id. */
static void leave_attempt(sluice_acquire *a) {
  sluice_sem *sem = a->sem;
  int in_flight = a->attempt.batch != NULL;
  sluice__batcher_leave(&sem->attempts, &a->attempt);
  if (!in_flight) return;
  sluice__release_queue(sem, a->permit_id, NULL, NULL);
  sluice__random_hex(a->permit_id);
  a->maybe_granted = 0;
}

static void send_leave(sluice_acquire *a) {
  sluice_sem *sem = a->sem;
  sluice__args args;
  if (!a->blocking || sem->guard.closed) return;
  if (sluice__args_init(&args, SEM_LEAVE_ARGS, SEM_LEAVE_NUMS) != SLUICE_OK) return;
  sluice__sem_leave_args(&args, &sem->call, a->member);
  if (!args.failed)
    sluice__eval(sem->c, &sluice__lua_sem_leave, args.nkeys, args.argc, args.argv, args.lens,
                 sem->o.op_timeout_ms, sluice__ignore_reply, NULL, NULL);
  sluice__args_clear(&args);
}

static void acquire_free(sluice_acquire *a) {
  sluice__list_remove(&a->sem->acquires, &a->link);
  event_free(a->timer);
  event_free(a->deadline);
  sluice__free(a);
}

/* ---- completion ---------------------------------------------------------- */

/* Tell the user (once) and free the acquire first: the callback may free
 * the semaphore (the guard defers that until we are done). */
static void finish(sluice_acquire *a, int status, sluice_permit *permit) {
  sluice_sem *sem = a->sem;
  sluice_acquire_cb *cb = a->cb;
  void *ud = a->ud;
  leave_attempt(a);
  if (!permit && a->maybe_granted) /* an unanswered attempt may hold one */
    sluice__release_queue(sem, a->permit_id, NULL, NULL);
  if (!permit) send_leave(a); /* a grant already left the queue */
  if (a->blocking) sem->nblocking--;
  acquire_free(a);
  listen_update(sem);
  sluice__guard_enter(&sem->guard);
  cb(sem, status, permit, ud);
  sluice__guard_leave(&sem->guard);
}

/* Decide status now but report it from the loop (never inside the caller). */
static void finish_later(sluice_acquire *a, int status) {
  if (a->final_status) return;
  a->final_status = status;
  leave_attempt(a);
  evtimer_del(a->timer);
  sluice__timer_in(a->timer, 0);
}

static void queue_attempt(sluice_acquire *a) {
  sluice__batcher_queue(&a->sem->attempts, &a->attempt, a->sem->route);
}

static int is_transport(int status) {
  return status == SLUICE_ETIMEDOUT || status == SLUICE_ECONNECTION || status == SLUICE_EINDOUBT;
}

static void on_attempt_failed(sluice_acquire *a, int status) {
  if (status == SLUICE_EINDOUBT && a->blocking) {
    /* It may have run before the connection went: the next attempt asks
     * for the same id, and gets that grant back if there was one. */
    a->maybe_granted = 1;
  } else if (status == SLUICE_ETIMEDOUT || status == SLUICE_EINDOUBT) {
    /* It may still run, or have run: release its id (the release is
     * retried until Redis confirms it) and ask under a fresh id. */
    sluice__release_queue(a->sem, a->permit_id, NULL, NULL);
    sluice__random_hex(a->permit_id);
    a->maybe_granted = 0;
  }
  if (!a->blocking || !is_transport(status)) {
    finish(a, status, NULL);
    return;
  }
  /* At the deadline a wait reports Redis as unreachable, not in doubt:
   * whatever an attempt may have been granted is released by us. */
  a->last_error = status == SLUICE_ETIMEDOUT ? SLUICE_ETIMEDOUT : SLUICE_ECONNECTION;
  evtimer_del(a->timer);
  sluice__timer_in(a->timer, a->retry_ms);
  a->retry_ms = a->retry_ms * 2 > RETRY_MAX_MS ? RETRY_MAX_MS : a->retry_ms * 2;
}

/* Wake every blocked waiter at the earliest lease expiry (wait ms). */
static void arm_expiry(sluice_sem *sem, int64_t wait) {
  if (wait < 0) return;
  uint64_t at = sluice__mono_ms() + (uint64_t)wait + 1;
  if (evtimer_pending(sem->expiry, NULL) && sem->expiry_at <= at) return;
  sem->expiry_at = at;
  evtimer_del(sem->expiry);
  sluice__timer_in(sem->expiry, (uint64_t)wait + 1);
}

/* Granted (value = fencing token) or not (value = queue position); wait =
 * ms until the earliest lease expires (-1: none). */
static void on_attempt(sluice_acquire *a, int granted, int64_t value, int64_t wait,
                       uint64_t sent_ms) {
  sluice_sem *sem = a->sem;
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
  arm_expiry(sem, wait);
  if (a->wake_pending) queue_attempt(a);
  a->wake_pending = 0;
}

/* ---- attempt batches ----------------------------------------------------- */

static void build(sluice__args *args, void *owner, sluice__breq *const *reqs, size_t n) {
  sluice_sem *sem = owner;
  sluice__sem_acquire_head(args, &sem->call);
  for (size_t i = 0; i < n; i++) {
    sluice_acquire *a = sluice__container_of(reqs[i], sluice_acquire, attempt);
    sluice__sem_acquire_item(args, a->permit_id, a->blocking ? a->member : "", a->maybe_granted);
  }
}

static void answer(void *owner, sluice__breq *r, int status, const sluice__batch_reply *br) {
  sluice_acquire *a = sluice__container_of(r, sluice_acquire, attempt);
  int64_t wait = -1, granted = 0, value = 0;
  if (status == SLUICE_OK &&
      (sluice__reply_i64(br->reply->element[0], &wait) ||
       sluice__reply_i64(br->reply->element[br->at], &granted) ||
       sluice__reply_i64(br->reply->element[br->at + 1], &value)))
    status = SLUICE_EPROTOCOL;
  if (status == SLUICE_OK) on_attempt(a, granted == 1, value, wait, br->sent_ms);
  else on_attempt_failed(a, status);
}

static const sluice__batch_kind attempt_kind = {
    &sluice__lua_sem_acquire, SEM_BATCH_MAX,
    SEM_ACQUIRE_ARGS_HEAD, SEM_ACQUIRE_ARGS_PER, SEM_ACQUIRE_NUMS_HEAD, SEM_ACQUIRE_NUMS_PER,
    1, 2, build, answer, NULL};

/* ---- wake-ups, heartbeats ------------------------------------------------ */

static void poke(sluice_acquire *a) {
  if (a->final_status) return;
  if (sluice__breq_busy(&a->attempt)) {
    a->wake_pending = 1;
    return;
  }
  evtimer_del(a->timer);
  queue_attempt(a);
}

static void poke_all(sluice_sem *sem) {
  for (sluice__link *l = sem->acquires.head; l; l = l->next) {
    sluice_acquire *a = sluice__container_of(l, sluice_acquire, link);
    if (a->blocking) poke(a);
  }
}

static sluice_acquire *find_waiter(sluice_sem *sem, const char *waiter_id) {
  for (sluice__link *l = sem->acquires.head; l; l = l->next) {
    sluice_acquire *a = sluice__container_of(l, sluice_acquire, link);
    if (a->blocking && memcmp(a->waiter_id, waiter_id, 32) == 0) return a;
  }
  return NULL;
}

/* An id popped from our wake list, or NULL after the blocking connection
 * came back (wake-ups may have been lost: everyone looks again). */
static void on_wake(void *ud, const char *data, size_t len) {
  sluice_sem *sem = ud;
  if (!data) {
    poke_all(sem);
  } else if (len == 32) {
    sluice_acquire *a = find_waiter(sem, data);
    if (a) poke(a);
  }
}

static void wake_all_cb(evutil_socket_t fd, short what, void *arg) { poke_all(arg); }

/* Listen and beat while blocking acquires wait. */
static void listen_update(sluice_sem *sem) {
  int want = sluice__guard_live(&sem->guard) && sem->nblocking > 0;
  if (want && !sem->listener) {
    /* On failure waiters still progress on the heartbeat. */
    sluice__listen(sem->c, sem->wake_key, on_wake, sem, &sem->listener);
    sluice__timer_every(sem->beat, sem->o.heartbeat_ms / 3);
  } else if (!want && sem->listener) {
    sluice__unlisten(sem->listener);
    sem->listener = NULL;
  }
  if (!want) {
    evtimer_del(sem->beat);
    evtimer_del(sem->expiry);
  }
}

/* ---- timers -------------------------------------------------------------- */

static void acquire_timer_cb(evutil_socket_t fd, short what, void *arg) {
  sluice_acquire *a = arg;
  if (a->final_status) finish(a, a->final_status, NULL);
  else queue_attempt(a);
}

static void acquire_deadline_cb(evutil_socket_t fd, short what, void *arg) {
  sluice_acquire *a = arg;
  if (a->final_status) return;
  finish(a, a->last_error ? a->last_error : SLUICE_ETIMEDOUT, NULL);
}

/* ---- setup and teardown -------------------------------------------------- */

int sluice__acquire_setup(sluice_sem *sem) {
  struct event_base *base = sluice__client_base(sem->c);
  sluice__batcher_init(&sem->attempts, &attempt_kind, sem->c, sem, &sem->guard, &sem->flusher,
                       sem->o.op_timeout_ms);
  sem->beat = event_new(base, -1, EV_PERSIST, wake_all_cb, sem);
  sem->expiry = evtimer_new(base, wake_all_cb, sem);
  return sem->beat && sem->expiry ? SLUICE_OK : SLUICE_ENOMEM;
}

void sluice__acquire_teardown(sluice_sem *sem) {
  if (sem->listener) sluice__unlisten(sem->listener);
  sem->listener = NULL;
  if (sem->beat) event_free(sem->beat);
  if (sem->expiry) event_free(sem->expiry);
  sem->beat = sem->expiry = NULL;
}

void sluice__acquire_resume(sluice_sem *sem) { poke_all(sem); }

void sluice__acquire_quiesce(sluice_sem *sem) {
  for (sluice__link *l = sem->acquires.head; l; l = l->next) {
    sluice_acquire *a = sluice__container_of(l, sluice_acquire, link);
    leave_attempt(a);
    evtimer_del(a->timer);
    evtimer_del(a->deadline);
  }
  listen_update(sem);
}

int sluice__acquire_idle(const sluice_sem *sem) { return sem->acquires.head == NULL; }

void sluice__acquire_cancel_all(sluice_sem *sem) {
  /* Attempts in flight leave their calls (returning what they may be
   * granted) before anyone is told. */
  for (sluice__link *l = sem->acquires.head; l; l = l->next)
    leave_attempt(sluice__container_of(l, sluice_acquire, link));
  while (sem->acquires.head)
    finish(sluice__container_of(sem->acquires.head, sluice_acquire, link), SLUICE_ECANCELED, NULL);
  listen_update(sem);
}

/* ---- public API ---------------------------------------------------------- */

static int start_acquire(sluice_sem *sem, int blocking, unsigned timeout_ms,
                         sluice_acquire_cb *cb, void *ud, sluice_acquire **handle) {
  if (!sem || !cb) return SLUICE_EINVAL;
  if (!sluice__guard_live(&sem->guard)) return SLUICE_ECLOSED;
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
    sem->nblocking++;
    listen_update(sem);
    if (timeout_ms) sluice__timer_in(a->deadline, timeout_ms);
  }
  if (handle) *handle = a;
  queue_attempt(a);
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
