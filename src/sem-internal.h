/* Private layout of semaphores, shared by sem.c (handles, wake-ups,
 * inspection, teardown), sem_acquire.c, sem_release.c and permit.c. */
#ifndef SLUICE_SEM_INTERNAL_H
#define SLUICE_SEM_INTERNAL_H

#include <event2/event.h>
#include <sluice/sem.h>

#include "list.h"
#include "sluice-internal.h"

enum { SEM_KEY_HOLDERS, SEM_KEY_QUEUE, SEM_KEY_BEATS, SEM_KEY_META, SEM_NKEYS };

/* Most requests sent in one script call. */
#define SEM_BATCH_MAX 256

typedef struct acq_batch acq_batch;
typedef struct rel_req rel_req;
typedef struct rel_batch rel_batch;
typedef struct renew_batch renew_batch;
typedef struct sem_inspect_req sem_inspect_req;

struct sluice_sem {
  sluice__child child;            /* first: client close reaches us here */
  sluice_client *c;
  char *name;
  sluice_sem_options o;
  char *keys[SEM_NKEYS];
  char *wake_base;                /* "<prefix>sem:{name}:wake:" */
  char *wake_key;                 /* wake_base + handle_id: our BRPOP list */
  char handle_id[33];
  char permits_s[24], ttl_s[24], hb_s[24], keep_s[24];
  sluice__listener *listener;     /* while blocking acquires wait */
  unsigned nblocking;             /* blocking acquires the user waits for */

  sluice__list acquires;          /* every live acquire */
  sluice__list pending;           /* attempts ready to send, in order */
  sluice__list acq_batches;       /* attempt batches in flight */
  sluice__list rel_queue;         /* releases ready to send, in order */
  sluice__list rel_batches;       /* release batches in flight */
  sluice__list renew_queue;       /* renewals due, in order */
  sluice__list renew_batches;     /* renewal batches in flight */
  struct event *flush_ev;         /* sends what is ready, once per loop turn */
  int flush_scheduled;

  sluice__list permits;           /* held permits */
  sem_inspect_req *inspects;
  int closed;                     /* client closed: calls get ECLOSED */
  int freeing;                    /* sluice_sem_free was called */
  unsigned dispatching;           /* inside a batch's callbacks */
};

struct sluice_permit {
  sluice_sem *sem;
  sluice__link link;              /* in sem->permits */
  char id[33];
  uint64_t fence;
  uint64_t deadline_ms;           /* monotonic: lease surely valid until */
  struct event *renew_timer;
  struct event *lost_timer;
  sluice__link rlink;             /* in sem->renew_queue */
  int renew_queued;               /* in that list */
  renew_batch *rbatch;            /* renewal in flight, in slot rslot */
  size_t rslot;
  sluice_lost_cb *lost_cb;
  void *lost_ud;
  int lost;                       /* 0 or a sluice_lost_reason */
};

/* sem.c */
void sluice__sem_ignore_reply(void *ud, int status, const redisReply *reply);
/* Arrange for sluice__sem_flush to run this loop turn. */
void sluice__sem_schedule_flush(sluice_sem *sem);
/* Register / drop interest in wake-ups (counts blocking acquires). */
void sluice__sem_blocking_changed(sluice_sem *sem, int delta);
/* A batch's callbacks are done: finish a sluice_sem_free deferred meanwhile. */
void sluice__sem_dispatch_done(sluice_sem *sem);
/* Wake-up for waiter id (32 hex), or NULL for everyone. */
void sluice__sem_wake(sluice_sem *sem, const char *waiter_id);

/* sem_acquire.c */
void sluice__acquire_flush(sluice_sem *sem);
/* Cancel every acquire with ECANCELED (close or free). */
void sluice__acquire_cancel_all(sluice_sem *sem);
void sluice__acquire_poke(sluice_acquire *a);
void sluice__acquire_poke_all(sluice_sem *sem);
sluice_acquire *sluice__acquire_find(sluice_sem *sem, const char *waiter_id);

/* sem_release.c */
/* Queue a release of permit id; cb may be NULL. */
int sluice__release_queue(sluice_sem *sem, const char *id, sluice_release_cb *cb, void *ud);
void sluice__release_flush(sluice_sem *sem);
/* Send queued releases now; in-flight ones report ECANCELED (free/close). */
void sluice__release_cancel_all(sluice_sem *sem);

/* sem_renew.c */
void sluice__renew_queue(sluice_permit *p);
/* The permit goes or stops renewing: leave the queue or its batch. */
void sluice__renew_forget(sluice_permit *p);
void sluice__renew_flush(sluice_sem *sem);
void sluice__renew_cancel_all(sluice_sem *sem);

/* permit.c */
/* A renewal's answer: ttl > 0 extended, 0 gone; sent_ms when it was sent. */
void sluice__permit_renewed(sluice_permit *p, int status, int64_t ttl, uint64_t sent_ms);
/* Local lease time left (conservative). */
uint64_t sluice__permit_ms_left(const sluice_permit *p);
sluice_permit *sluice__permit_new(sluice_sem *sem, const char *id, uint64_t fence,
                                  uint64_t granted_at_ms);
/* Forget a permit without telling Redis (its lease simply expires). */
void sluice__permit_drop(sluice_permit *p);
/* Client closed: stop renewing (the lease can no longer be confirmed). */
void sluice__permit_client_closed(sluice_permit *p);
/* Margin subtracted from the local lease deadline. */
uint64_t sluice__sem_margin_ms(const sluice_sem *sem);

#endif
