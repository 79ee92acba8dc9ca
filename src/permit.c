/*
 * Held permits: the lease kept alive by a renewal timer, and loss detection.
 *
 * The local deadline is conservative: a lease granted or renewed by a script
 * sent at time S (monotonic) expires in Redis no earlier than S + ttl, since
 * Redis ran the script after S. We subtract a margin for clock-rate drift.
 * If that deadline passes without a confirmed renewal, the permit is lost
 * (UNCERTAIN): Redis may still hold it, but we can no longer promise it.
 */
#include <stdlib.h>
#include <string.h>

#include "sem-internal.h"

#define RENEW_RETRY_MIN_MS 10

static void stop_renewing(sluice_permit *p) {
  evtimer_del(p->renew_timer);
  evtimer_del(p->lost_timer);
  sluice__renew_forget(p);
}

uint64_t sluice__permit_ms_left(const sluice_permit *p) {
  uint64_t now = sluice__mono_ms();
  return p->deadline_ms > now ? p->deadline_ms - now : 0;
}


/* Lost: tell the holder once, last (the callback may release the permit). */
static void fire_lost(sluice_permit *p, int reason) {
  if (p->lost) return;
  p->lost = reason;
  stop_renewing(p);
  if (p->lost_cb) p->lost_cb(p, reason, p->lost_ud);
}

static void lost_timer_cb(evutil_socket_t fd, short what, void *arg) {
  fire_lost(arg, SLUICE_LOST_UNCERTAIN);
}

static void arm_deadline(sluice_permit *p, uint64_t sent_ms) {
  const sluice_sem *sem = p->sem;
  p->deadline_ms = sent_ms + sem->o.ttl_ms - sluice__sem_margin_ms(sem);
  evtimer_del(p->lost_timer);
  sluice__timer_in(p->lost_timer, sluice__permit_ms_left(p));
}

void sluice__permit_renewed(sluice_permit *p, int status, int64_t ttl, uint64_t sent_ms) {
  if (p->lost) return;
  if (status == SLUICE_OK && ttl == 0) {
    fire_lost(p, SLUICE_LOST_DEFINITE);
    return;
  }
  if (status == SLUICE_OK) {
    arm_deadline(p, sent_ms);
    sluice__timer_in(p->renew_timer, p->sem->o.renew_ms);
    return;
  }
  /* Redis unreachable or slow: try again soon, well before the deadline. */
  uint64_t again = sluice__permit_ms_left(p) / 4;
  if (again > p->sem->o.renew_ms) again = p->sem->o.renew_ms;
  if (again < RENEW_RETRY_MIN_MS) again = RENEW_RETRY_MIN_MS;
  sluice__timer_in(p->renew_timer, again);
}

static void renew_timer_cb(evutil_socket_t fd, short what, void *arg) {
  sluice_permit *p = arg;
  if (!p->lost) sluice__renew_queue(p);
}

sluice_permit *sluice__permit_new(sluice_sem *sem, const char *id, uint64_t fence,
                                  uint64_t granted_at_ms) {
  struct event_base *base = sluice__client_base(sem->c);
  sluice_permit *p = sluice__calloc(1, sizeof *p);
  if (!p) return NULL;
  p->sem = sem;
  memcpy(p->id, id, 33);
  p->fence = fence;
  p->renew_timer = evtimer_new(base, renew_timer_cb, p);
  p->lost_timer = evtimer_new(base, lost_timer_cb, p);
  if (!p->renew_timer || !p->lost_timer) {
    if (p->renew_timer) event_free(p->renew_timer);
    if (p->lost_timer) event_free(p->lost_timer);
    sluice__free(p);
    return NULL;
  }
  sluice__list_append(&sem->permits, &p->link);
  arm_deadline(p, granted_at_ms);
  if (sem->o.auto_renew) sluice__timer_in(p->renew_timer, sem->o.renew_ms);
  return p;
}

void sluice__permit_drop(sluice_permit *p) {
  stop_renewing(p);
  sluice__list_remove(&p->sem->permits, &p->link);
  event_free(p->renew_timer);
  event_free(p->lost_timer);
  sluice__free(p);
}

void sluice__permit_client_closed(sluice_permit *p) { stop_renewing(p); }

void sluice_permit_set_lost_cb(sluice_permit *p, sluice_lost_cb *cb, void *ud) {
  if (!p) return;
  p->lost_cb = cb;
  p->lost_ud = ud;
}

sluice_sem *sluice_permit_sem(const sluice_permit *p) { return p ? p->sem : NULL; }
const char *sluice_permit_id(const sluice_permit *p) { return p ? p->id : NULL; }
uint64_t sluice_permit_fence(const sluice_permit *p) { return p ? p->fence : 0; }
int sluice_permit_lost(const sluice_permit *p) { return p ? p->lost : SLUICE_LOST_DEFINITE; }

int64_t sluice_permit_remaining_ms(const sluice_permit *p) {
  if (!p || p->lost) return 0;
  return (int64_t)sluice__permit_ms_left(p);
}

int sluice_permit_release(sluice_permit *p, sluice_release_cb *cb, void *ud) {
  if (!p) return SLUICE_EINVAL;
  sluice_sem *sem = p->sem;
  int rc = SLUICE_OK;
  if (sem->closed) rc = SLUICE_ECLOSED; /* the lease will simply expire */
  else rc = sluice__release_queue(sem, p->id, cb, ud);
  sluice__permit_drop(p);
  return rc;
}
