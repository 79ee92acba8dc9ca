/*
 * Held permits: the lease kept alive by renewals, and loss detection.
 *
 * Renewals go to Redis in rounds: a grid renew_ms / 2 apart on the
 * monotonic clock, the same for every permit of the handle. A lease is
 * renewed at the last round before its renewal is due (never later than
 * renew_ms after the step that granted or renewed it), so from its first
 * renewal on every permit renews every renew_ms in step with the others,
 * and the renewals of a round go in one script call per SEM_BATCH_MAX
 * (the handle's renewal batcher): N permits held one by one cost about
 * N / SEM_BATCH_MAX calls per renewal period, not N. Renewals off the
 * grid (a retry after an error, a handed-over lease's first) use the
 * permit's own timer.
 *
 * The local deadline is conservative: a lease granted or renewed by a script
 * sent at time S (monotonic) expires in Redis no earlier than S + ttl, since
 * Redis ran the script after S. We subtract a margin for clock-rate drift.
 * If that deadline passes without a confirmed renewal, the permit is lost
 * (UNCERTAIN): Redis may still hold it, but we can no longer promise it.
 */
#include <stdlib.h>
#include <string.h>

#include "sem/sem.h"

#define RENEW_RETRY_MIN_MS 10
#define RENEW_TIMEOUT_MIN_MS 10
/* A re-assertion that failed (the connection may stay up: a timeout, a
 * node still getting ready) goes again after REASSERT_RETRY_MIN_MS,
 * doubling up to REASSERT_RETRY_MAX_MS, and within a quarter of the
 * shortest lease left: the lease, not a reconnect, bounds the wait. */
#define REASSERT_RETRY_MIN_MS 20
#define REASSERT_RETRY_MAX_MS 1000

static uint64_t ms_left(const sluice_permit *p) {
  uint64_t now = sluice__mono_ms();
  return p->deadline_ms > now ? p->deadline_ms - now : 0;
}

static void round_leave(sluice_permit *p) {
  if (!p->in_round) return;
  sluice__list_remove(&p->sem->rounds[p->round % SEM_ROUNDS], &p->round_link);
  p->in_round = 0;
}

static void stop_renewing(sluice_permit *p) {
  evtimer_del(p->renew_timer);
  evtimer_del(p->lost_timer);
  round_leave(p);
  sluice__batcher_leave(&p->sem->renewals, &p->renewal);
  sluice__batcher_leave(&p->sem->reasserts, &p->reassert);
}

/* Lost: tell the holder once, last (the callback may release the permit). */
static void fire_lost(sluice_permit *p, int reason) {
  if (p->lost) return;
  p->lost = reason;
  if (reason == SLUICE_LOST_DEFINITE) p->sem->m.lost_definite++;
  else p->sem->m.lost_uncertain++;
  sluice__log(p->sem->c, SLUICE_LOG_WARN, "semaphore '%s': permit %s lost (%s)", p->sem->name,
              p->id,
              reason == SLUICE_LOST_DEFINITE ? "Redis says it is gone"
                                             : "lease ran out without a confirmed renewal");
  stop_renewing(p);
  if (!p->lost_cb) return;
  sluice__guard_enter(&p->guard);
  p->lost_cb(p, reason, p->lost_ud);
  sluice__guard_leave(&p->guard);
}

static void lost_timer_cb(evutil_socket_t fd, short what, void *arg) {
  fire_lost(arg, SLUICE_LOST_UNCERTAIN);
}

/* The margin for clock-rate drift grows with the span it covers: a twentieth
 * of the lease counted from base_ms (a handed-off permit's first lease is a
 * heartbeat, much shorter than ttl_ms). */
uint64_t sluice__permit_deadline(const sluice_sem *sem, uint64_t base_ms, uint64_t lease_ms) {
  uint64_t m = lease_ms / 20 ? lease_ms / 20 : 1;
  return base_ms + (lease_ms > m ? lease_ms - m : 0);
}

static void set_deadline(sluice_permit *p, uint64_t deadline_ms) {
  p->deadline_ms = deadline_ms;
  evtimer_del(p->lost_timer);
  sluice__timer_in(p->lost_timer, ms_left(p));
}

/* ---- renewal rounds ------------------------------------------------------ */

static uint64_t round_ms(const sluice_sem *sem) {
  return sem->o.renew_ms / 2 ? sem->o.renew_ms / 2 : 1;
}

static void queue_renewal(sluice_permit *p) {
  sluice__batcher_queue(&p->sem->renewals, &p->renewal, p->sem->route);
}

static void arm_round(sluice_sem *sem) {
  if (evtimer_pending(sem->round_timer, NULL)) return;
  uint64_t at = (sem->round_done + 1) * round_ms(sem), now = sluice__mono_ms();
  sluice__timer_in(sem->round_timer, at > now ? at - now : 0);
}

/* Renew p by due_ms: at the last round that starts no later. The lists
 * hold the SEM_ROUNDS rounds after the last one renewed; a round further
 * out (not seen: renewals are due within two rounds) uses p's timer. */
static void renew_by(sluice_permit *p, uint64_t due_ms) {
  sluice_sem *sem = p->sem;
  uint64_t r = due_ms / round_ms(sem), now = sluice__mono_ms();
  evtimer_del(p->renew_timer);
  round_leave(p);
  /* With no round pending every list is empty: the grid starts now. */
  if (!evtimer_pending(sem->round_timer, NULL)) sem->round_done = now / round_ms(sem);
  if (r <= sem->round_done) {
    queue_renewal(p);
  } else if (r > sem->round_done + SEM_ROUNDS) {
    sluice__timer_in(p->renew_timer, due_ms > now ? due_ms - now : 0);
  } else {
    p->round = r;
    p->in_round = 1;
    sluice__list_append(&sem->rounds[r % SEM_ROUNDS], &p->round_link);
    arm_round(sem);
  }
}

/* Renew every permit whose round has come (all of them when the timer is
 * late by the whole ring: a paused process). */
static void round_cb(evutil_socket_t fd, short what, void *arg) {
  sluice_sem *sem = arg;
  uint64_t cur = sluice__mono_ms() / round_ms(sem), from = sem->round_done + 1;
  if (cur >= from + SEM_ROUNDS) from = cur + 1 - SEM_ROUNDS;
  for (uint64_t r = from; r <= cur; r++) {
    sluice__list *l = &sem->rounds[r % SEM_ROUNDS];
    while (l->head) {
      sluice_permit *p = sluice__container_of(l->head, sluice_permit, round_link);
      round_leave(p);
      queue_renewal(p);
    }
  }
  if (cur > sem->round_done) sem->round_done = cur;
  for (int i = 0; i < SEM_ROUNDS; i++)
    if (sem->rounds[i].head) arm_round(sem);
}

/* ---- renewal batches ----------------------------------------------------- */

static int reassert_due(const sluice_permit *p) {
  return p->reassert_again || sluice__breq_busy(&p->reassert);
}

/* Re-assert p now, or once the one in flight is answered: the latest state
 * is asserted, never dropped behind an older one. */
static void reassert_queue(sluice_permit *p) {
  if (p->reassert.batch) p->reassert_more = 1;
  else sluice__batcher_queue(&p->sem->reasserts, &p->reassert, p->sem->route);
}

static void build(sluice__args *a, void *owner, sluice__breq *const *reqs, size_t n) {
  sluice_sem *sem = owner;
  sluice__sem_renew_head(a, &sem->call);
  for (size_t i = 0; i < n; i++)
    sluice__sem_renew_item(a, sluice__container_of(reqs[i], sluice_permit, renewal)->id);
}

static const sluice_permit *renewing(const sluice__breq *r) {
  return sluice__container_of(r, sluice_permit, renewal);
}

static const sluice_permit *reasserting(const sluice__breq *r) {
  return sluice__container_of(r, sluice_permit, reassert);
}

/* Waiting for an answer past a lease's deadline is pointless. of() finds
 * the permit of a request: each batcher has its own member. */
static unsigned lease_timeout(const sluice_sem *sem, sluice__breq *const *reqs, size_t n,
                              const sluice_permit *(*of)(const sluice__breq *)) {
  uint64_t t = sem->o.op_timeout_ms ? sem->o.op_timeout_ms : sluice__client_op_timeout(sem->c);
  for (size_t i = 0; i < n; i++) {
    uint64_t left = ms_left(of(reqs[i]));
    if (left < t) t = left;
  }
  return t < RENEW_TIMEOUT_MIN_MS ? RENEW_TIMEOUT_MIN_MS : (unsigned)t;
}

static unsigned timeout(void *owner, sluice__breq *const *reqs, size_t n) {
  return lease_timeout(owner, reqs, n, renewing);
}

/* Renew again well before the deadline, off the rounds. */
static void renew_later(sluice_permit *p) {
  uint64_t again = ms_left(p) / 4;
  if (again > p->sem->o.renew_ms) again = p->sem->o.renew_ms;
  if (again < RENEW_RETRY_MIN_MS) again = RENEW_RETRY_MIN_MS;
  round_leave(p);
  sluice__timer_in(p->renew_timer, again);
}

/* ttl > 0: extended; 0: gone, unless a re-assertion is still due (a new
 * node that has not seen it yet). Errors: try again well before the
 * deadline. */
static void answer(void *owner, sluice__breq *r, int status, const sluice__batch_reply *br) {
  sluice_permit *p = sluice__container_of(r, sluice_permit, renewal);
  int64_t ttl = 0;
  if (p->lost || status == SLUICE_ECANCELED) return;
  if (status == SLUICE_OK && sluice__reply_i64(br->reply->element[br->at], &ttl))
    status = SLUICE_EPROTOCOL;
  if (status == SLUICE_OK && ttl == 0 && reassert_due(p)) {
    reassert_queue(p); /* missing on a new node: the re-assertion decides */
    renew_later(p);
    return;
  }
  if (status == SLUICE_OK && ttl == 0) {
    fire_lost(p, SLUICE_LOST_DEFINITE);
    return;
  }
  if (status == SLUICE_OK && sluice__client_unconfirmed(p->sem->c, p->sem->route, br->replicated)) {
    /* Redis extended the lease, but no replica had it in time: a replica
     * promoted now would end it at the last confirmed one, so ours stays
     * there (stats.writes_not_replicated counts it); again soon. */
    p->replicated = 0;
    renew_later(p);
    return;
  }
  if (status == SLUICE_OK) {
    p->sem->m.renewals++;
    p->replicated = br->replicated;
    set_deadline(p, sluice__permit_deadline(p->sem, br->sent_ms, (uint64_t)ttl));
    /* Without auto_renew only a hand-off's first renewal runs. */
    if (p->sem->o.auto_renew) renew_by(p, br->sent_ms + p->sem->o.renew_ms);
    return;
  }
  p->sem->m.renew_errors++;
  renew_later(p);
}

static const sluice__batch_kind renew_kind = {
    SLUICE__BATCH_SCRIPT(sluice__lua_sem_renew, SEM_BATCH_MAX, SEM_RENEW), .build = build,
    .answer = answer, .timeout = timeout};

/* ---- re-assertion on a new node ------------------------------------------ */

static void reassert_build(sluice__args *a, void *owner, sluice__breq *const *reqs, size_t n) {
  sluice_sem *sem = owner;
  sluice__sem_reassert_head(a, &sem->call);
  for (size_t i = 0; i < n; i++) {
    sluice_permit *p = sluice__container_of(reqs[i], sluice_permit, reassert);
    p->reassert_sent = ++sem->nreasserts;
    sluice__sem_reassert_item(a, p->id, p->fence, ms_left(p), p->reassert_sent,
                              p->unanswered_since);
  }
}

static unsigned reassert_timeout(void *owner, sluice__breq *const *reqs, size_t n) {
  return lease_timeout(owner, reqs, n, reasserting);
}

/* Failed re-assertions go again after a backoff, within a quarter of the
 * shortest lease left among them. */
static void reassert_retry_arm(sluice_sem *sem, const sluice_permit *p) {
  unsigned b = sem->reassert_backoff_ms ? sem->reassert_backoff_ms : REASSERT_RETRY_MIN_MS;
  sem->reassert_backoff_ms = b * 2 < REASSERT_RETRY_MAX_MS ? b * 2 : REASSERT_RETRY_MAX_MS;
  uint64_t in = ms_left(p) / 4;
  if (in > b) in = b;
  if (in < RENEW_RETRY_MIN_MS) in = RENEW_RETRY_MIN_MS;
  uint64_t at = sluice__mono_ms() + in;
  if (evtimer_pending(sem->reassert_timer, NULL) && sem->reassert_at_ms <= at) return;
  sem->reassert_at_ms = at;
  evtimer_del(sem->reassert_timer);
  sluice__timer_in(sem->reassert_timer, in);
}

static void reassert_retry_cb(evutil_socket_t fd, short what, void *arg) {
  sluice__permits_resume(arg);
}

/* 1 still held, 2 put back: either way with the rest of the lease the
 * client counts on (its deadline stands: Redis's lease now ends later); 0
 * taken by someone else meanwhile: lost, now rather than at the next
 * renewal. Unanswered or refused for now: again after a backoff, or when
 * the connection is back (meanwhile a renewal that finds it gone asks for
 * it again); the next answer says 2 if one of the unanswered ones put it
 * back, so a restore counts once. One asked for while this was in flight
 * goes now. */
static void reassert_answer(void *owner, sluice__breq *r, int status,
                            const sluice__batch_reply *br) {
  sluice_permit *p = sluice__container_of(r, sluice_permit, reassert);
  sluice_sem *sem = owner;
  uint64_t sent = p->reassert_sent; /* 0: this request was never sent */
  int more = p->reassert_more;
  int64_t v = 0;
  p->reassert_sent = 0;
  p->reassert_more = 0;
  if (p->lost || status == SLUICE_ECANCELED) return;
  if (status == SLUICE_OK && sluice__reply_i64(br->reply->element[br->at], &v))
    status = SLUICE_EPROTOCOL;
  p->reassert_again = status != SLUICE_OK;
  if (status != SLUICE_OK) {
    if (!p->unanswered_since) p->unanswered_since = sent; /* it may have run */
    if (more) reassert_queue(p);
    else reassert_retry_arm(sem, p);
    return;
  }
  p->unanswered_since = 0;
  sem->reassert_backoff_ms = 0;
  sluice__record_permits(sem->c, v == 2, v == 0);
  if (v == 0) {
    fire_lost(p, SLUICE_LOST_DEFINITE);
    return;
  }
  if (v == 2)
    sluice__log(sem->c, SLUICE_LOG_INFO, "semaphore '%s': permit %s restored on the new node",
                sem->name, p->id);
  p->replicated = br->replicated;
  if (more) reassert_queue(p);
}

static const sluice__batch_kind reassert_kind = {
    SLUICE__BATCH_SCRIPT(sluice__lua_sem_reassert, SEM_BATCH_MAX, SEM_REASSERT),
    .build = reassert_build, .answer = reassert_answer, .timeout = reassert_timeout};

void sluice__permits_reassert(sluice_sem *sem) {
  for (sluice__link *l = sem->permits.head; l; l = l->next) {
    sluice_permit *p = sluice__container_of(l, sluice_permit, link);
    if (!p->lost) reassert_queue(p);
  }
}

void sluice__permits_resume(sluice_sem *sem) {
  evtimer_del(sem->reassert_timer);
  for (sluice__link *l = sem->permits.head; l; l = l->next) {
    sluice_permit *p = sluice__container_of(l, sluice_permit, link);
    if (p->reassert_again && !p->lost) reassert_queue(p);
  }
}

/* Flushed in this order: re-assertions before renewals. */
int sluice__permit_setup(sluice_sem *sem) {
  sluice__batcher_init(&sem->reasserts, &reassert_kind, sem->c, sem, &sem->guard, &sem->flusher,
                       sem->o.op_timeout_ms);
  sluice__batcher_init(&sem->renewals, &renew_kind, sem->c, sem, &sem->guard, &sem->flusher,
                       sem->o.op_timeout_ms);
  sem->round_done = sluice__mono_ms() / round_ms(sem);
  sem->round_timer = evtimer_new(sluice__client_base(sem->c), round_cb, sem);
  sem->reassert_timer = evtimer_new(sluice__client_base(sem->c), reassert_retry_cb, sem);
  return sem->round_timer && sem->reassert_timer ? SLUICE_OK : SLUICE_ENOMEM;
}

void sluice__permit_teardown(sluice_sem *sem) {
  if (sem->round_timer) event_free(sem->round_timer);
  if (sem->reassert_timer) event_free(sem->reassert_timer);
  sem->round_timer = sem->reassert_timer = NULL;
}

void sluice__permit_renew_now(sluice_permit *p) {
  evtimer_del(p->renew_timer);
  round_leave(p);
  queue_renewal(p);
}

static void renew_timer_cb(evutil_socket_t fd, short what, void *arg) {
  sluice_permit *p = arg;
  if (!p->lost) queue_renewal(p);
}

/* ---- lifetime ------------------------------------------------------------ */

/* Leave the handle: no renewal, no timers, no place in its lists. */
static void detach(sluice_permit *p) {
  if (!p->sem) return;
  stop_renewing(p);
  sluice__list_remove(&p->sem->permits, &p->link);
  p->sem = NULL;
}

/* Client closed: stop renewing (the lease can no longer be confirmed). */
static void permit_cancel(sluice__guard *g) {
  sluice_permit *p = sluice__container_of(g, sluice_permit, guard);
  if (p->sem) stop_renewing(p);
}

/* The memory, also of a permit half built (a timer may be missing). */
static void permit_free_memory(sluice_permit *p) {
  if (p->renew_timer) event_free(p->renew_timer);
  if (p->lost_timer) event_free(p->lost_timer);
  sluice__free(p);
}

static void permit_destroy(sluice__guard *g) {
  sluice_permit *p = sluice__container_of(g, sluice_permit, guard);
  detach(p);
  permit_free_memory(p);
}

static const sluice__guard_ops permit_guard_ops = {.cancel = permit_cancel,
                                                   .destroy = permit_destroy};

sluice_permit *sluice__permit_new(sluice_sem *sem, const char *id, uint64_t fence,
                                  uint64_t deadline_ms, int replicated) {
  struct event_base *base = sluice__client_base(sem->c);
  sluice_permit *p = sluice__calloc(1, sizeof *p);
  if (!p) return NULL;
  p->sem = sem;
  memcpy(p->id, id, 33);
  p->fence = fence;
  p->replicated = replicated;
  p->renew_timer = evtimer_new(base, renew_timer_cb, p);
  p->lost_timer = evtimer_new(base, lost_timer_cb, p);
  if (!p->renew_timer || !p->lost_timer) {
    permit_free_memory(p);
    return NULL;
  }
  sluice__list_append(&sem->permits, &p->link);
  sluice__guard_attach(&p->guard, sluice__client_home(sem->c), &permit_guard_ops);
  set_deadline(p, deadline_ms);
  if (sem->o.auto_renew) renew_by(p, sluice__mono_ms() + sem->o.renew_ms);
  return p;
}

sluice_permit *sluice__permit_from_pass(sluice_sem *sem, const sluice__pass *pass) {
  sluice_permit *p = sluice__permit_new(sem, pass->id, pass->fence, pass->deadline_ms,
                                        pass->replicated);
  if (!p) return NULL;
  p->handoffs = pass->handoffs;
  p->unanswered_since = pass->unanswered_since;
  if (pass->reassert) reassert_queue(p);
  if (pass->renew_in_ms) renew_by(p, sluice__mono_ms() + pass->renew_in_ms);
  else sluice__permit_renew_now(p);
  return p;
}

/* local_handoff: give the lease to a waiter of this handle if one is queued
 * and the lease is sound (not lost, renewals on time), keeping its renewal
 * cadence: the next one is due when a lease renewed on time has renew_ms
 * less left than a fresh one. 1 when a waiter took it. */
static int hand_on(sluice_permit *p, sluice_release_cb *cb, void *ud) {
  sluice_sem *sem = p->sem;
  if (!sem->o.local_handoff || sem->o.fair || !sem->o.auto_renew || p->lost ||
      p->handoffs >= SLUICE_LOCAL_HANDOFFS_MAX)
    return 0;
  uint64_t left = ms_left(p);
  if (left < sem->o.renew_ms) return 0;
  uint64_t fresh = sluice__permit_deadline(sem, 0, sem->o.ttl_ms);
  uint64_t due_at = fresh > sem->o.renew_ms ? fresh - sem->o.renew_ms : 0;
  sluice__pass pass = {
      .fence = p->fence,
      .deadline_ms = p->deadline_ms,
      .renew_in_ms = left > due_at ? left - due_at : 0,
      .replicated = p->replicated,
      .handoffs = p->handoffs + 1,
      .reassert = reassert_due(p),
      /* one in flight may run: a restore it made counts */
      .unanswered_since = p->unanswered_since ? p->unanswered_since : p->reassert_sent,
      .cb = cb,
      .ud = ud};
  memcpy(pass.id, p->id, sizeof pass.id);
  return sluice__acquire_take_pass(sem, &pass);
}

void sluice__permits_quiesce(sluice_sem *sem) {
  sluice__batcher_cancel(&sem->renewals, SLUICE_ECANCELED); /* no callback */
  sluice__batcher_cancel(&sem->reasserts, SLUICE_ECANCELED);
  for (sluice__link *l = sem->permits.head; l; l = l->next)
    stop_renewing(sluice__container_of(l, sluice_permit, link));
  evtimer_del(sem->round_timer);
  evtimer_del(sem->reassert_timer);
}

void sluice__permits_cancel_all(sluice_sem *sem) {
  sluice__batcher_cancel(&sem->renewals, SLUICE_ECANCELED);
  evtimer_del(sem->round_timer);
  sluice__batcher_cancel(&sem->reasserts, SLUICE_ECANCELED);
  evtimer_del(sem->reassert_timer);
  for (sluice__link *l = sem->permits.head, *next; l; l = next) {
    next = l->next;
    sluice_permit *p = sluice__container_of(l, sluice_permit, link);
    stop_renewing(p);
    if (!sem->guard.freeing) continue;
    /* The handle goes: its permits are returned and their handles freed. */
    sluice__release_queue(sem, p->id, NULL, NULL); /* no-op once closed */
    detach(p);
    sluice__guard_free(&p->guard);
  }
}

/* ---- public API ---------------------------------------------------------- */

void sluice_permit_set_lost_cb(sluice_permit *p, sluice_lost_cb *cb, void *ud) {
  if (!p) return;
  p->lost_cb = cb;
  p->lost_ud = ud;
}

sluice_sem *sluice_permit_sem(const sluice_permit *p) { return p ? p->sem : NULL; }
const char *sluice_permit_id(const sluice_permit *p) { return p ? p->id : NULL; }
uint64_t sluice_permit_fence(const sluice_permit *p) { return p ? p->fence : 0; }
int sluice_permit_lost(const sluice_permit *p) { return p ? p->lost : SLUICE_LOST_DEFINITE; }
int sluice_permit_replicated(const sluice_permit *p) { return p ? p->replicated : -1; }

int64_t sluice_permit_remaining_ms(const sluice_permit *p) {
  if (!p || p->lost) return 0;
  return (int64_t)ms_left(p);
}

int sluice_permit_release(sluice_permit *p, sluice_release_cb *cb, void *ud) {
  if (!p || !p->sem || p->guard.freeing) return SLUICE_EINVAL;
  sluice_sem *sem = p->sem;
  int rc = SLUICE_OK;
  if (p->guard.closed || !sluice__guard_live(&sem->guard))
    rc = SLUICE_ECLOSED; /* the lease will simply expire */
  else if (!hand_on(p, cb, ud)) rc = sluice__release_queue(sem, p->id, cb, ud);
  detach(p);
  sluice__guard_free(&p->guard);
  return rc;
}
