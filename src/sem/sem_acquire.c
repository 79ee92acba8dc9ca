/*
 * Acquisition: try_acquire (one attempt) and blocking acquire (attempts until
 * granted).
 *
 * A blocking acquire's first attempt already queues it in Redis; only if it
 * is refused does the handle listen on its wake list (a grant pushed there
 * meanwhile waits in the list), so an acquire that gets a permit at once
 * costs one call and no change to the client's BRPOP. A queued waiter is
 * served by hand-off: a release grants it the freed permit in the same
 * step and pushes the grant (its id is the waiter's id) onto the handle's
 * wake list, which the client's shared BRPOP pops.
 *
 * The handle's heartbeat keeps all its queued waiters alive in Redis: one
 * step every heartbeat_ms / 3 however many wait (the attempt script with no
 * requests), which also hands free permits to the queue's heads; the same
 * step runs at the earliest holder's lease expiry (a crashed holder). So an
 * idle crowd costs Redis one call a second per handle, not per waiter.
 * Waiters send their attempts again only when Redis may have lost their
 * places: the heartbeat had stopped (a stall longer than a heartbeat, a
 * restart), or the blocking connection came back (a hand-off popped on the
 * lost connection never arrived).
 *
 * Every attempt carries deadlines on Redis's clock (core/rclock.h): its own
 * (the caller's timeout, or its call's op timeout if that ends first) and
 * the waiter's in the queue (the caller's timeout); the heartbeat carries a
 * third of a beat. Redis acts on none of them later, so a stall, a paused
 * client or a process that exited may delay a grant but never makes one
 * to a caller that gave up.
 *
 * Attempts ready in the same loop turn go to Redis together, in order, in
 * one script call; while the handle's waiters are queued, only after the
 * answer to the releases in flight, so that Redis hands their permits on
 * (and answers the woken waiter) before it runs the attempts. An acquire
 * decided while its attempt is in flight (deadline, cancel, free) leaves
 * the call at once; if Redis granted that attempt anyway, its permit is
 * released right behind it on the same connection, so it never lingers for
 * a whole lease.
 */
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "core/rclock.h"
#include "sem/sem.h"

#define RETRY_MIN_MS 25
#define RETRY_MAX_MS 1000
#define PENDING_MAX_DEFAULT 100000

/* Acquires pending across all the client's handles (sluice_client_options
 * documents the option and its default). */
const sluice__cap_def sluice__sem_pending_cap = {
    .option = offsetof(sluice_client_options, sem_pending_max),
    .dflt = 250000,
};

struct sluice_acquire {
  sluice_sem *sem;
  sluice__link link;    /* in sem->acquires */
  sluice__breq attempt; /* in sem->attempts */
  sluice_acquire_cb *cb;
  void *ud;
  int blocking;
  char waiter_id[33];
  char member[68];      /* "<handle id>:<waiter id>" in the queue */
  char permit_id[33];   /* id the next attempt asks for */
  int maybe_granted;    /* an attempt with permit_id got no answer */
  int waiting;          /* refused once: queued in Redis */
  uint64_t deadline_ms; /* monotonic: the caller's timeout; 0 none */
  uint64_t sent_ms;     /* monotonic: the last attempt left */
  uint64_t started_us;  /* monotonic: the call (wait metrics) */
  struct event *timer;  /* retry after a failure, or deferred completion */
  struct event *deadline;
  int wake_pending;  /* woken while an attempt was under way */
  int last_error;    /* last transport failure of an attempt */
  int final_status;  /* decided; reported from the timer */
  unsigned retry_ms; /* backoff after transport failures */
  int passed;        /* handed a lease in-process, not yet told */
  sluice__pass pass;
};

static void listen_update(sluice_sem *sem);
static void send_beat(sluice_sem *sem);

/* The outcome is settled and waits for the timer to report it. */
static int decided(const sluice_acquire *a) { return a->final_status || a->passed; }

/* ---- leaving ------------------------------------------------------------- */

/* Leave the call in flight (or the queue); a permit Redis may grant the
 * attempt in flight is released behind it, and the next attempt (if any)
 * asks under a fresh id. */
static void leave_attempt(sluice_acquire *a) {
  sluice_sem *sem = a->sem;
  int in_flight = a->attempt.batch != NULL;
  sluice__batcher_leave(&sem->attempts, &a->attempt);
  if (!in_flight) return;
  sluice__log(sem->c, SLUICE_LOG_DEBUG,
              "semaphore '%s': attempt for permit %.32s left in flight: "
              "released behind it",
              sem->name, a->permit_id);
  sluice__release_queue(sem, a->permit_id, NULL, NULL);
  sluice__random_hex(a->permit_id);
  a->maybe_granted = 0;
}

/* Leave the queue in Redis (and return a permit handed to us meanwhile);
 * also while the client closes, so a closing process never blocks a fair
 * queue until its heartbeat runs out. */
static void send_leave(sluice_acquire *a) {
  sluice_sem *sem = a->sem;
  sluice__args args;
  if (!a->blocking) return;
  if (sluice__args_init(&args, SEM_LEAVE_ARGS, SEM_LEAVE_NUMS) != SLUICE_OK) return;
  sluice__sem_leave_args(&args, &sem->call, a->member);
  if (!args.failed)
    sluice__eval(sem->c, &sluice__lua_sem_leave, args.nkeys, args.argc, args.argv, args.lens,
                 sem->o.op_timeout_ms, sluice__ignore_reply, NULL, NULL);
  sluice__args_clear(&args);
}

static void acquire_free(sluice_acquire *a) {
  sluice__list_remove(&a->sem->acquires, &a->link);
  a->sem->npending--;
  sluice__client_release(a->sem->c, &sluice__sem_pending_cap, 1);
  if (a->timer) event_free(a->timer); /* missing when start_acquire failed */
  if (a->deadline) event_free(a->deadline);
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
  /* An unanswered attempt may hold a permit that is not the one granted. */
  if (a->maybe_granted && (!permit || strcmp(permit->id, a->permit_id) != 0)) {
    sluice__log(sem->c, SLUICE_LOG_DEBUG,
                "semaphore '%s': permit %.32s may have been granted to "
                "an unanswered attempt: released",
                sem->name, a->permit_id);
    sluice__release_queue(sem, a->permit_id, NULL, NULL);
  }
  if (a->passed) {
    /* A lease handed to us in-process that never reached the caller goes
     * back to Redis; its releaser hears that release's answer. */
    a->passed = 0;
    if (sluice__release_queue(sem, a->pass.id, a->pass.cb, a->pass.ud) != SLUICE_OK && a->pass.cb) {
      sluice__guard_enter(&sem->guard);
      a->pass.cb(sem, SLUICE_ECANCELED, a->pass.ud);
      sluice__guard_leave(&sem->guard);
    }
  }
  if (!permit) send_leave(a); /* a grant already left the queue */
  if (status == SLUICE_OK) sem->m.grants++;
  else if (status == SLUICE_EBUSY) sem->m.busy++;
  else if (status == SLUICE_ETIMEDOUT && a->blocking) sem->m.timeouts++;
  else sem->m.failures++;
  if (status == SLUICE_OK && a->blocking)
    sluice__hist_record(&sem->wait_hist, sluice__mono_us() - a->started_us);
  if (a->waiting) sem->nwaiting--;
  acquire_free(a);
  listen_update(sem);
  sluice__guard_enter(&sem->guard);
  cb(sem, status, permit, ud);
  sluice__guard_leave(&sem->guard);
}

/* Decide status now but report it from the loop (never inside the caller). */
static void finish_later(sluice_acquire *a, int status) {
  if (decided(a)) return;
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
  sluice__log(a->sem->c, SLUICE_LOG_DEBUG, "semaphore '%s': attempt for permit %.32s: %s",
              a->sem->name, a->permit_id, sluice_err_name(status));
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
  if (a->sem->o.fail_fast) { /* whatever it may hold is released */
    finish(a, SLUICE_ECONNECTION, NULL);
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

/* A grant of permit id with fence, surely valid until deadline_ms. A
 * hand-off (id is the waiter's) comes with a short first lease: renew it to
 * a full one at once. */
static void granted(sluice_acquire *a, const char *id, uint64_t fence, uint64_t deadline_ms,
                    int replicated) {
  sluice_permit *p = sluice__permit_new(a->sem, id, fence, deadline_ms, replicated);
  if (!p) {
    sluice__release_queue(a->sem, id, NULL, NULL);
    finish(a, SLUICE_ENOMEM, NULL);
    return;
  }
  if (strcmp(id, a->waiter_id) == 0) sluice__permit_renew_now(p);
  finish(a, SLUICE_OK, p);
}

/* Granted, but no replica had the grant in time (a master cut off from its
 * replicas, or a link too slow): a replica promoted now would not know it,
 * so it is not the caller's to use. A try_acquire gives it back and fails.
 * A wait asks again after a backoff under the same id, so an attempt a
 * replica confirms keeps it; at the deadline finish() gives it back (a
 * hand-off, with the waiter's place, through sem_leave). */
static void unconfirmed(sluice_acquire *a, const char *id) {
  sluice_sem *sem = a->sem;
  sluice__log(sem->c, SLUICE_LOG_DEBUG,
              "semaphore '%s': permit %.32s granted but no replica had it in time", sem->name, id);
  if (!a->blocking) {
    sluice__release_queue(sem, id, NULL, NULL);
    finish(a, SLUICE_ENOREPLICA, NULL);
    return;
  }
  if (id == a->permit_id) a->maybe_granted = 1;
  a->last_error = SLUICE_ENOREPLICA;
  evtimer_del(a->timer);
  sluice__timer_in(a->timer, a->retry_ms);
  a->retry_ms = a->retry_ms * 2 > RETRY_MAX_MS ? RETRY_MAX_MS : a->retry_ms * 2;
}

/* Refused: wait in the queue, listening for a hand-off; wait = ms until
 * the earliest lease expires (-1: none). */
static void refused(sluice_acquire *a, int64_t wait) {
  sluice_sem *sem = a->sem;
  if (!a->blocking) {
    finish(a, SLUICE_EBUSY, NULL);
    return;
  }
  if (!a->waiting) {
    a->waiting = 1;
    sem->m.waits++;
    sem->nwaiting++;
    listen_update(sem);
  }
  arm_expiry(sem, wait);
  if (a->wake_pending) queue_attempt(a);
  a->wake_pending = 0;
}

/* ---- deadlines ----------------------------------------------------------- */

static uint64_t op_timeout(const sluice_sem *sem) {
  return sem->o.op_timeout_ms ? sem->o.op_timeout_ms : sluice__client_op_timeout(sem->c);
}

/* A heartbeat that reaches Redis later than a third of a beat after it left
 * is not counted: its process may be gone by then, and the next one left
 * meanwhile. */
static int64_t beat_until(sluice_sem *sem, uint64_t now) {
  uint64_t window = sem->o.heartbeat_ms / 3;
  if (window > op_timeout(sem)) window = op_timeout(sem);
  return sluice__rclock_deadline(sluice__client_rclock(sem->c), now + window, now);
}

/* ---- attempt batches ----------------------------------------------------- */

/* An attempt wants a permit until its caller's timeout, and its call's
 * answer only until the call's own timeout: Redis grants it by the earlier
 * one. Its place in the queue lasts until the caller's timeout. The clock
 * is known here: the batcher probes it before the first call. */
static void build(sluice__args *args, void *owner, sluice__breq *const *reqs, size_t n) {
  sluice_sem *sem = owner;
  const sluice__rclock *k = sluice__client_rclock(sem->c);
  uint64_t now = sluice__mono_ms(), call_end = now + op_timeout(sem);
  int beat = 0;
  for (size_t i = 0; i < n && !beat; i++)
    beat = sluice__container_of(reqs[i], sluice_acquire, attempt)->blocking;
  sluice__sem_acquire_head(args, &sem->call, beat ? sem->handle_id : "", beat_until(sem, now));
  for (size_t i = 0; i < n; i++) {
    sluice_acquire *a = sluice__container_of(reqs[i], sluice_acquire, attempt);
    uint64_t end = a->deadline_ms && a->deadline_ms < call_end ? a->deadline_ms : call_end;
    a->sent_ms = now;
    sluice__sem_acquire_item(args, a->permit_id, a->blocking ? a->member : "", a->maybe_granted,
                             sluice__rclock_deadline(k, end, now),
                             a->deadline_ms ? sluice__rclock_deadline(k, a->deadline_ms, now) : 0);
  }
}

/* Redis's clock in an attempt batch's reply (the batcher checked its shape). */
static int reply_time(const redisReply *reply, int64_t *ms) {
  return sluice__reply_i64(reply->element[1], ms);
}

/* The heartbeat had stopped when the step that sent at sent_ms beat it: the
 * waiters whose attempts left before then may have left the queue. */
static void requeue_before(sluice_sem *sem, uint64_t sent_ms) {
  if (sent_ms > sem->requeue_before) sem->requeue_before = sent_ms;
  event_active(sem->requeue, EV_TIMEOUT, 1);
}

/* What a step said of the handle's heartbeat (see sem_acquire.lua): 2, it
 * had stopped; 3, a permit is free for our waiters that could not be handed
 * to them (requeue_before now: they all ask); 0 from a step that carried
 * it, it came too late: beat now. */
static void note_beat(sluice_sem *sem, int64_t beat, int carried, uint64_t sent_ms) {
  if (beat == 2) requeue_before(sem, sent_ms);
  else if (beat == 3) requeue_before(sem, sluice__mono_ms() + 1);
  else if (beat == 0 && carried) send_beat(sem);
}

/* Redis read the attempt after its deadline and did nothing for it (it left
 * the queue). A try_acquire's answer came too late to matter; a wait whose
 * caller's timeout has not passed on Redis's clock asks again (its call was
 * slow), else its own deadline timer ends it, a margin from now. */
static void too_late(sluice_acquire *a, int64_t redis_now) {
  sluice_sem *sem = a->sem;
  sem->m.late++;
  sluice__log(sem->c, SLUICE_LOG_DEBUG,
              "semaphore '%s': attempt for permit %.32s read past its deadline, nothing done "
              "(Redis's clock known to +-%lld ms)",
              sem->name, a->permit_id,
              (long long)sluice__rclock_error(sluice__client_rclock(sem->c)) / 2);
  if (!a->blocking) {
    finish(a, SLUICE_ETIMEDOUT, NULL);
    return;
  }
  if (a->deadline_ms && redis_now >= sluice__rclock_deadline(sluice__client_rclock(sem->c),
                                                             a->deadline_ms, sluice__mono_ms()))
    return;
  queue_attempt(a);
}

/* g 1: granted under our permit id; 2: handed a permit (the waiter's id)
 * by a release; 3: read past its deadline; 0: refused. lease: ms the lease
 * has left. */
static void answer(void *owner, sluice__breq *r, int status, const sluice__batch_reply *br) {
  sluice_acquire *a = sluice__container_of(r, sluice_acquire, attempt);
  const redisReply *rep = br->reply;
  int64_t wait = -1, now = 0, beat = 0, g = 0, value = 0, lease = 0;
  if (status == SLUICE_OK &&
      (sluice__reply_i64(rep->element[0], &wait) || sluice__reply_i64(rep->element[1], &now) ||
       sluice__reply_i64(rep->element[2], &beat) || sluice__reply_i64(rep->element[br->at], &g) ||
       sluice__reply_i64(rep->element[br->at + 1], &value) ||
       sluice__reply_i64(rep->element[br->at + 2], &lease) || lease < 0))
    status = SLUICE_EPROTOCOL;
  if (status != SLUICE_OK) {
    on_attempt_failed(a, status);
    return;
  }
  note_beat(a->sem, beat, a->blocking, br->sent_ms);
  if ((g == 1 || (g == 2 && a->blocking)) &&
      sluice__client_unconfirmed(a->sem->c, a->sem->route, br->replicated)) {
    unconfirmed(a, g == 1 ? a->permit_id : a->waiter_id);
    return;
  }
  a->last_error = 0;
  a->retry_ms = RETRY_MIN_MS;
  uint64_t deadline = sluice__permit_deadline(a->sem, br->sent_ms, (uint64_t)lease);
  if (a->maybe_granted)
    sluice__log(a->sem->c, SLUICE_LOG_DEBUG, "semaphore '%s': retried attempt for permit %.32s: %s",
                a->sem->name, a->permit_id,
                g == 1   ? "granted"
                : g == 2 ? "handed"
                         : "refused");
  if (g == 1) {
    a->maybe_granted = 0;
    granted(a, a->permit_id, (uint64_t)value, deadline, br->replicated);
  } else if (g == 2 && a->blocking) {
    granted(a, a->waiter_id, (uint64_t)value, deadline, br->replicated);
  } else if (g == 3) {
    too_late(a, now);
  } else {
    a->maybe_granted = 0;
    refused(a, wait);
  }
}

static const sluice__batch_kind attempt_kind = {
    SLUICE__BATCH_SCRIPT(sluice__lua_sem_acquire, SEM_BATCH_MAX, SEM_ACQUIRE), .build = build,
    .answer = answer};

/* ---- wake-ups, heartbeats ------------------------------------------------ */

static void poke(sluice_acquire *a) {
  if (decided(a)) return;
  if (sluice__breq_busy(&a->attempt)) {
    a->wake_pending = 1;
    return;
  }
  evtimer_del(a->timer);
  queue_attempt(a);
}

/* Every waiter queued in Redis sends its attempt again (they ask for their
 * places back, or for a permit handed to them). */
static void poke_waiting(sluice_sem *sem) {
  for (sluice__link *l = sem->acquires.head; l; l = l->next) {
    sluice_acquire *a = sluice__container_of(l, sluice_acquire, link);
    if (a->blocking && a->waiting) poke(a);
  }
}

/* The heartbeat had stopped (requeue_before): the waiters whose attempts
 * left before it was beaten again ask for their places back. */
static void requeue_cb(evutil_socket_t fd, short what, void *arg) {
  sluice_sem *sem = arg;
  for (sluice__link *l = sem->acquires.head; l; l = l->next) {
    sluice_acquire *a = sluice__container_of(l, sluice_acquire, link);
    if (a->blocking && a->waiting && a->sent_ms < sem->requeue_before) poke(a);
  }
}

static sluice_acquire *find_waiter(sluice_sem *sem, const char *waiter_id) {
  for (sluice__link *l = sem->acquires.head; l; l = l->next) {
    sluice_acquire *a = sluice__container_of(l, sluice_acquire, link);
    if (a->blocking && memcmp(a->waiter_id, waiter_id, 32) == 0) return a;
  }
  return NULL;
}

/* A hand-off popped from our wake list: "<waiter id>:<fence>:<expiry>",
 * the expiry on Redis's clock, mapped to ours conservatively (the waiter
 * was refused before, so the clock is known). */
static void handed(sluice_sem *sem, const char *data, size_t len) {
  char buf[80];
  if (len < 34 || len >= sizeof buf) return;
  memcpy(buf, data, len);
  buf[len] = '\0';
  char *end;
  unsigned long long fence = strtoull(buf + 33, &end, 10);
  long long expiry = *end == ':' ? strtoll(end + 1, &end, 10) : -1;
  sluice_acquire *a = find_waiter(sem, buf);
  if (!a || decided(a) || buf[32] != ':' || *end || expiry < 0) return;
  /* Another client's step made this grant: only an attempt of ours (which
   * finds it, and makes its lease a whole one) can have a WAIT confirm it. */
  if (sluice__client_confirms(sem->c, sem->route)) {
    poke(a);
    return;
  }
  const sluice__rclock *k = sluice__client_rclock(sem->c);
  uint64_t deadline = sluice__rclock_known(k) ? sluice__rclock_local(k, expiry) : 0;
  buf[32] = '\0';
  /* The release that handed it was another client's step: its renewal
   * (sent at once) reports on replication. */
  granted(a, buf, fence, deadline, -1);
}

/* Hand-offs (one or more, joined by ","), a bare waiter id (a wake-up:
 * look again), or NULL after the blocking connection came back (wake-ups
 * may have been lost). */
static void on_wake(void *ud, const char *data, size_t len) {
  sluice_sem *sem = ud;
  if (!data) {
    poke_waiting(sem);
  } else if (len == 32) {
    sluice_acquire *a = find_waiter(sem, data);
    if (a) poke(a);
  } else {
    while (len) {
      const char *comma = memchr(data, ',', len);
      size_t n = comma ? (size_t)(comma - data) : len;
      handed(sem, data, n);
      data += n;
      len -= n;
      if (comma) data++, len--;
    }
  }
}

/* A holder's lease ran out: the heartbeat step hands its permit on. */
static void expiry_cb(evutil_socket_t fd, short what, void *arg) { send_beat(arg); }

/* ---- the heartbeat ------------------------------------------------------- */

static void on_beat(void *ud, int status, const redisReply *reply) {
  sluice_sem *sem = ud;
  int64_t wait, now, beat;
  sem->beat_op = NULL;
  /* fail_fast waiters learn it from their own attempts' failures. */
  if (is_transport(status) && sem->o.fail_fast) poke_waiting(sem);
  if (status != SLUICE_OK || reply->type != REDIS_REPLY_ARRAY ||
      reply->elements != SEM_ACQUIRE_REPLY_HEAD || sluice__reply_i64(reply->element[0], &wait) ||
      sluice__reply_i64(reply->element[1], &now) || sluice__reply_i64(reply->element[2], &beat))
    return; /* the next beat tries again */
  sluice__rclock_sample(sluice__client_rclock(sem->c), sem->beat_sent_ms, sluice__mono_ms(), now);
  if (beat == 0 || sem->beat_again) {
    sem->beat_again = 0;
    send_beat(sem);
  } else {
    note_beat(sem, beat, 1, sem->beat_sent_ms);
  }
  if (sem->nwaiting) arm_expiry(sem, wait);
}

/* One step for every waiter of the handle: see the top of this file. */
static void send_beat(sluice_sem *sem) {
  sluice__args args;
  if (!sem->nwaiting || !sluice__guard_live(&sem->guard)) return;
  if (sem->beat_op) {
    sem->beat_again = 1; /* this one may have left before the reason for it */
    return;
  }
  if (sluice__args_init(&args, SEM_ACQUIRE_ARGS_HEAD, SEM_ACQUIRE_NUMS_HEAD) != SLUICE_OK) return;
  sem->beat_sent_ms = sluice__mono_ms();
  sluice__sem_acquire_head(&args, &sem->call, sem->handle_id, beat_until(sem, sem->beat_sent_ms));
  if (args.failed ||
      sluice__eval(sem->c, &sluice__lua_sem_acquire, args.nkeys, args.argc, args.argv, args.lens,
                   sem->o.op_timeout_ms, on_beat, sem, &sem->beat_op) != SLUICE_OK)
    sem->beat_op = NULL;
  sluice__args_clear(&args);
}

static void drop_beat(sluice_sem *sem) {
  sluice__op_detach(sem->beat_op);
  sem->beat_op = NULL;
  sem->beat_again = 0;
}

/* Listen and beat while waiters are queued. The listener lingers for one
 * heartbeat after the last one went, so a busy handle does not make the
 * client re-issue its BRPOP for every acquire. */
static void listen_update(sluice_sem *sem) {
  int live = sluice__guard_live(&sem->guard);
  if (live && sem->nwaiting > 0) {
    if (!sem->listener) sluice__listen(sem->c, sem->wake_key, on_wake, sem, &sem->listener);
    sluice__timer_every(sem->beat, sem->o.heartbeat_ms / 3);
    return;
  }
  if (!live || !sem->listener) {
    if (sem->listener) sluice__unlisten(sem->listener);
    sem->listener = NULL;
    evtimer_del(sem->beat);
  }
  evtimer_del(sem->expiry);
}

/* Without a listener (out of memory) no hand-off reaches the waiters: they
 * ask themselves on every beat instead. */
static void beat_cb(evutil_socket_t fd, short what, void *arg) {
  sluice_sem *sem = arg;
  if (sem->nwaiting) {
    if (sem->listener) send_beat(sem);
    else poke_waiting(sem);
    return;
  }
  if (sem->listener) sluice__unlisten(sem->listener);
  sem->listener = NULL;
  evtimer_del(sem->beat);
}

/* ---- timers -------------------------------------------------------------- */

/* A lease handed on in-process: its releaser hears SLUICE_OK first, then
 * the waiter gets it (unless the releaser freed the handle meanwhile: then
 * the cancellation returns it to Redis). */
static void deliver_pass(sluice_acquire *a) {
  sluice_sem *sem = a->sem;
  sluice_release_cb *cb = a->pass.cb;
  a->pass.cb = NULL;
  sluice__guard_enter(&sem->guard);
  if (cb) cb(sem, SLUICE_OK, a->pass.ud);
  if (sluice__guard_live(&sem->guard)) {
    sluice_permit *p = sluice__permit_from_pass(sem, &a->pass);
    if (p) a->passed = 0;
    finish(a, p ? SLUICE_OK : SLUICE_ENOMEM, p);
  }
  sluice__guard_leave(&sem->guard);
}

static void acquire_timer_cb(evutil_socket_t fd, short what, void *arg) {
  sluice_acquire *a = arg;
  if (a->passed) deliver_pass(a);
  else if (a->final_status) finish(a, a->final_status, NULL);
  else queue_attempt(a);
}

static void acquire_deadline_cb(evutil_socket_t fd, short what, void *arg) {
  sluice_acquire *a = arg;
  if (decided(a)) return;
  finish(a, a->last_error ? a->last_error : SLUICE_ETIMEDOUT, NULL);
}

/* ---- setup and teardown -------------------------------------------------- */

/* Our waiters are queued in Redis, so a permit our releases free goes to
 * the queue's head by hand-off, not to an attempt sent beside them: those
 * attempts wait for the releases' answers (one round trip at most), so
 * Redis answers the woken waiter's BRPOP before it runs them. */
static int attempts_wait_for_releases(void *owner) {
  const sluice_sem *sem = owner;
  return sem->nwaiting > 0;
}

int sluice__acquire_setup(sluice_sem *sem) {
  struct event_base *base = sluice__client_base(sem->c);
  sluice__batcher_init(&sem->attempts, &attempt_kind, sem->c, sem, &sem->guard, &sem->flusher,
                       sem->o.op_timeout_ms);
  sluice__batcher_follow(&sem->attempts, &sem->releases, attempts_wait_for_releases);
  sluice__batcher_clock(&sem->attempts, reply_time);
  sem->beat = event_new(base, -1, EV_PERSIST, beat_cb, sem);
  sem->expiry = evtimer_new(base, expiry_cb, sem);
  sem->requeue = event_new(base, -1, 0, requeue_cb, sem);
  return sem->beat && sem->expiry && sem->requeue ? SLUICE_OK : SLUICE_ENOMEM;
}

void sluice__acquire_teardown(sluice_sem *sem) {
  if (sem->listener) sluice__unlisten(sem->listener);
  sem->listener = NULL;
  drop_beat(sem);
  if (sem->beat) event_free(sem->beat);
  if (sem->expiry) event_free(sem->expiry);
  if (sem->requeue) event_free(sem->requeue);
  sem->beat = sem->expiry = sem->requeue = NULL;
}

/* The connection is back: a heartbeat at once (it says whether the
 * waiters' places survived, and hands on what is free). */
/* The blocking acquires waiting out the backoff of a transport failure
 * try at once: it was the outage's, and the outage is over. */
static void retry_failed(sluice_sem *sem) {
  for (sluice__link *l = sem->acquires.head; l; l = l->next) {
    sluice_acquire *a = sluice__container_of(l, sluice_acquire, link);
    if (!a->blocking || !a->last_error || !evtimer_pending(a->timer, NULL)) continue;
    a->retry_ms = RETRY_MIN_MS;
    poke(a);
  }
}

void sluice__acquire_resume(sluice_sem *sem) {
  retry_failed(sem);
  send_beat(sem);
}

void sluice__acquire_quiesce(sluice_sem *sem) {
  for (sluice__link *l = sem->acquires.head; l; l = l->next) {
    sluice_acquire *a = sluice__container_of(l, sluice_acquire, link);
    leave_attempt(a);
    evtimer_del(a->timer);
    evtimer_del(a->deadline);
  }
  drop_beat(sem);
  event_del(sem->requeue);
  listen_update(sem);
}

int sluice__acquire_idle(const sluice_sem *sem) { return sem->acquires.head == NULL; }

int sluice__acquire_take_pass(sluice_sem *sem, const sluice__pass *pass) {
  sluice_acquire *a = NULL;
  for (sluice__link *l = sem->acquires.head; l && !a; l = l->next) {
    sluice_acquire *w = sluice__container_of(l, sluice_acquire, link);
    if (w->blocking && w->waiting && !decided(w)) a = w;
  }
  if (!a) return 0;
  /* It leaves Redis's queue now, so no release hands it a second permit
   * (one handed meanwhile is returned by the leave step). */
  leave_attempt(a);
  send_leave(a);
  a->pass = *pass;
  a->passed = 1;
  /* Told from the loop as soon as the releaser's code returns: activated,
   * not a zero timer (no extra trip through the poll and the timer fd). */
  evtimer_del(a->timer);
  event_active(a->timer, EV_TIMEOUT, 1);
  sem->m.local_handoffs++;
  return 1;
}

void sluice__acquire_cancel_all(sluice_sem *sem) {
  /* Attempts in flight leave their calls (returning what they may be
   * granted) before anyone is told. */
  for (sluice__link *l = sem->acquires.head; l; l = l->next)
    leave_attempt(sluice__container_of(l, sluice_acquire, link));
  while (sem->acquires.head)
    finish(sluice__container_of(sem->acquires.head, sluice_acquire, link), SLUICE_ECANCELED, NULL);
  drop_beat(sem);
  event_del(sem->requeue);
  listen_update(sem);
}

/* ---- public API ---------------------------------------------------------- */

static int start_acquire(sluice_sem *sem, int blocking, unsigned timeout_ms, sluice_acquire_cb *cb,
                         void *ud, sluice_acquire **handle) {
  if (!sem || !cb) return SLUICE_EINVAL;
  if (!sluice__guard_live(&sem->guard)) return SLUICE_ECLOSED;
  unsigned cap = sem->o.max_pending ? sem->o.max_pending : PENDING_MAX_DEFAULT;
  if (sem->npending >= cap ||
      sluice__client_reserve(sem->c, &sluice__sem_pending_cap, 1) != SLUICE_OK)
    return SLUICE_EFULL;
  struct event_base *base = sluice__client_base(sem->c);
  sluice_acquire *a = sluice__calloc(1, sizeof *a);
  if (!a) {
    sluice__client_release(sem->c, &sluice__sem_pending_cap, 1);
    return SLUICE_ENOMEM;
  }
  a->sem = sem;
  a->cb = cb;
  a->ud = ud;
  a->blocking = blocking;
  a->retry_ms = RETRY_MIN_MS;
  if (blocking) a->started_us = sluice__mono_us(); /* try_acquire needs no clock */
  sluice__list_append(&sem->acquires, &a->link);
  sem->npending++;
  a->timer = evtimer_new(base, acquire_timer_cb, a);
  a->deadline = evtimer_new(base, acquire_deadline_cb, a);
  if (!a->timer || !a->deadline) {
    acquire_free(a);
    return SLUICE_ENOMEM;
  }
  sluice__random_hex(a->waiter_id);
  sluice__random_hex(a->permit_id);
  memcpy(a->member, sem->handle_id, 32);
  a->member[32] = ':';
  memcpy(a->member + 33, a->waiter_id, 33);
  if (blocking && timeout_ms) {
    a->deadline_ms = sluice__mono_ms() + timeout_ms;
    sluice__timer_in(a->deadline, timeout_ms);
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
