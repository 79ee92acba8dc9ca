/*
 * Private layout of semaphores. The call graph runs one way:
 *
 *   sem.c (handles, inspection, teardown)
 *     -> sem_acquire.c (attempts, wake-ups, heartbeats)
 *     -> sem_release.c (releases)
 *     -> permit.c      (held permits: renewal and loss)
 *        -> batcher.c -> client.c
 *
 * The parts never call back into sem.c; acquire and permit queue releases
 * through sem_release.c. One call goes up: with local_handoff, permit.c
 * offers a released lease to a waiter of sem_acquire.c instead. Every Redis
 * step of a handle goes through one of its four batchers, which its one
 * flusher sends in a fixed order each loop turn: releases first (they free
 * permits for the attempts behind them), then re-assertions of held permits
 * on a new node, then renewals (a lease about to run out matters more),
 * then attempts.
 * While the handle's waiters are queued in Redis, attempts also wait for
 * the releases in flight to be answered (see sem_acquire.c).
 */
#ifndef SLUICE_SEM_INTERNAL_H
#define SLUICE_SEM_INTERNAL_H

#include <event2/event.h>
#include <sluice/sem.h>

#include "core/batcher.h"
#include "core/guard.h"
#include "base/histogram.h"
#include "base/list.h"
#include "sem/sem_args.h"
#include "core/engine.h"

/* Most requests sent in one script call. */
#define SEM_BATCH_MAX 256
/* Renewal rounds ahead that permit.c keeps lists for (see renew_by). */
#define SEM_ROUNDS 4

struct sluice_sem {
  sluice__guard guard; /* how the handle dies (guard.h) */
  sluice_client *c;
  char *name;
  sluice_sem_options o;
  char *keys[SEM_NKEYS];
  char *wake_base;    /* "<prefix>sem:{name}:wake:" */
  char *wake_key;     /* wake_base + handle_id: our BRPOP list */
  char *restored_key; /* which re-assertion restored which permit */
  char handle_id[33];
  sluice__sem_call call; /* what every script of the handle shares */
  unsigned route;        /* the hash slot of the semaphore's keys */

  sluice__flusher flusher;
  sluice__batcher releases;  /* flushed in this order */
  sluice__batcher reasserts; /* held permits, on a new node */
  uint64_t nreasserts;       /* sent: numbers them (a hand-off keeps the id) */
  sluice__batcher renewals;
  sluice__batcher attempts;

  /* sem_acquire.c */
  sluice__list acquires;      /* every live acquire */
  unsigned npending;          /* in acquires */
  sluice__listener *listener; /* while blocking acquires wait */
  unsigned nwaiting;          /* of them, queued in Redis (listening) */
  struct event *beat;         /* the handle's heartbeat, while any wait */
  sluice__op *beat_op;        /* a heartbeat step in flight */
  uint64_t beat_sent_ms;
  int beat_again;          /* another one once it is answered */
  struct event *requeue;   /* the heartbeat had stopped: queue again */
  uint64_t requeue_before; /* ... the waiters whose attempts left before */
  struct event *expiry;    /* earliest holder's lease expiry */
  uint64_t expiry_at;      /* monotonic ms, while expiry is pending */

  /* sem_release.c */
  sluice__list parked; /* releases waiting to be sent again */
  struct event *release_retry;
  unsigned retry_ms;

  /* permit.c */
  sluice__list permits;            /* held permits */
  sluice__list rounds[SEM_ROUNDS]; /* permits by the renewal round they wait for */
  struct event *round_timer;       /* the next round */
  uint64_t round_done;             /* the last round renewed */
  struct event *reassert_timer;    /* re-assertions that failed go again */
  unsigned reassert_backoff_ms;    /* its next delay (0: none failed yet) */
  uint64_t reassert_at_ms;         /* monotonic: when it fires, while pending */

  /* sem.c */
  sluice__list inspects;

  sluice_sem_metrics m; /* counters; m.wait is filled from wait_hist */
  sluice__hist wait_hist;
};

/* A held lease handed on in-process (local_handoff): what the waiter's
 * permit takes over, and the releaser's callback, answered SLUICE_OK. */
typedef struct sluice__pass {
  char id[33];
  uint64_t fence;
  uint64_t deadline_ms;
  uint64_t renew_in_ms; /* when the lease's next renewal is due */
  int replicated;
  unsigned handoffs;         /* in a row, this one included */
  int reassert;              /* a re-assertion of the lease is still due */
  uint64_t unanswered_since; /* as the permit's (sluice_permit) */
  sluice_release_cb *cb;
  void *ud;
} sluice__pass;

struct sluice_permit {
  sluice__guard guard;         /* its lost callback may release it */
  sluice_sem *sem;             /* NULL once released */
  sluice__link link;           /* in sem->permits */
  sluice__breq renewal;        /* in sem->renewals */
  sluice__breq reassert;       /* in sem->reasserts */
  unsigned reassert_again : 1; /* the last one went unanswered */
  unsigned reassert_more : 1;  /* another one asked for while one was in flight */
  uint64_t reassert_sent;      /* the number of its last re-assertion */
  uint64_t unanswered_since;   /* its first one since the last answer (0: none) */
  char id[33];
  uint64_t fence;
  uint64_t deadline_ms;      /* monotonic: lease surely valid until */
  struct event *renew_timer; /* renewals off the rounds: retries, hand-offs */
  sluice__link round_link;   /* in sem->rounds[round % SEM_ROUNDS] */
  uint64_t round;
  int in_round;
  struct event *lost_timer;
  sluice_lost_cb *lost_cb;
  void *lost_ud;
  int lost;          /* 0 or a sluice_lost_reason */
  int replicated;    /* last grant or renewal: 1, 0, -1 not asked */
  unsigned handoffs; /* local hand-offs of this lease in a row */
};

/* sem_acquire.c */
int sluice__acquire_setup(sluice_sem *sem);
/* Complete every acquire with ECANCELED (from the loop). */
void sluice__acquire_cancel_all(sluice_sem *sem);
void sluice__acquire_teardown(sluice_sem *sem);
/* The connection is back: every blocked waiter tries at once. */
void sluice__acquire_resume(sluice_sem *sem);
/* Leave calls in flight and stop timers, without callbacks. */
void sluice__acquire_quiesce(sluice_sem *sem);
int sluice__acquire_idle(const sluice_sem *sem);
/* Hand a released lease to the oldest of our queued blocking waiters; 0
 * when none waits. The grant and pass->cb are answered from the loop. */
int sluice__acquire_take_pass(sluice_sem *sem, const sluice__pass *pass);

/* sem_release.c */
int sluice__release_setup(sluice_sem *sem);
void sluice__release_teardown(sluice_sem *sem);
/* The connection is back: parked releases go now. */
void sluice__release_resume(sluice_sem *sem);
/* Queue a release of permit id for this loop turn; cb may be NULL. */
int sluice__release_queue(sluice_sem *sem, const char *id, sluice_release_cb *cb, void *ud);
/* Freed: send what is queued (parked ones keep trying). Closed: a last
 * try, then everything is answered with ECANCELED. */
void sluice__release_cancel_all(sluice_sem *sem);
int sluice__release_idle(const sluice_sem *sem);

/* permit.c */
int sluice__permit_setup(sluice_sem *sem);
void sluice__permit_teardown(sluice_sem *sem);
/* A held permit whose lease surely lasts until deadline_ms (monotonic). */
sluice_permit *sluice__permit_new(sluice_sem *sem, const char *id, uint64_t fence,
                                  uint64_t deadline_ms, int replicated);
/* The conservative local deadline of a lease of lease_ms that began no
 * earlier than base_ms: minus a margin for clock-rate drift (lease / 20). */
uint64_t sluice__permit_deadline(const sluice_sem *sem, uint64_t base_ms, uint64_t lease_ms);
/* Renew on this loop turn (a handed-off permit's short first lease). */
void sluice__permit_renew_now(sluice_permit *p);
/* The permit a local hand-off gives its waiter (NULL: out of memory). */
sluice_permit *sluice__permit_from_pass(sluice_sem *sem, const sluice__pass *pass);
/* Stop renewing, without callbacks (inside sluice_sem_free). */
void sluice__permits_quiesce(sluice_sem *sem);
/* The node behind the semaphore changed: every held permit is re-asserted
 * there (sem_reassert.lua): renewed, restored, or lost at once. */
void sluice__permits_reassert(sluice_sem *sem);
/* The connection is back: re-assertions that went unanswered go again
 * (also after a backoff while it stays up). */
void sluice__permits_resume(sluice_sem *sem);
/* Client closed: stop renewing. Handle freed: release and drop permits. */
void sluice__permits_cancel_all(sluice_sem *sem);

/* The client-wide cap on acquires pending (sem_pending_max). */
extern const sluice__cap_def sluice__sem_pending_cap;
/* What its guard's view shows (core/guard.h). */
extern const struct sluice__obj_kind sluice__sem_obj;

#endif
