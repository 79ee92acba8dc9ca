/* Private layout of semaphores and permits, shared by sem.c and permit.c. */
#ifndef SLUICE_SEM_INTERNAL_H
#define SLUICE_SEM_INTERNAL_H

#include <event2/event.h>
#include <sluice/sem.h>

#include "sluice-internal.h"

enum { SEM_KEY_HOLDERS, SEM_KEY_QUEUE, SEM_KEY_BEATS, SEM_KEY_META, SEM_NKEYS };

typedef struct sem_release_req sem_release_req;
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
  sluice_acquire *acquires;       /* pending try/blocking acquires */
  sluice_permit *permits;         /* held permits */
  sem_release_req *releases;      /* releases awaiting their reply */
  sem_inspect_req *inspects;
  int closed;                     /* client closed: calls get ECLOSED */
  int freeing;                    /* inside sluice_sem_free */
};

struct sluice_permit {
  sluice_sem *sem;
  sluice_permit *prev, *next;     /* in sem->permits */
  char id[33];
  uint64_t fence;
  uint64_t deadline_ms;           /* monotonic: lease surely valid until */
  struct event *renew_timer;
  struct event *lost_timer;
  sluice__op *renew_op;
  uint64_t renew_sent_ms;
  sluice_lost_cb *lost_cb;
  void *lost_ud;
  int lost;                       /* 0 or a sluice_lost_reason */
};

/* permit.c */
sluice_permit *sluice__permit_new(sluice_sem *sem, const char *id, uint64_t fence,
                                  uint64_t granted_at_ms);
/* Forget a permit without telling Redis (its lease simply expires). */
void sluice__permit_drop(sluice_permit *p);
/* Release a permit in Redis without a callback and free the handle. */
void sluice__permit_release_quiet(sluice_permit *p);
/* Client closed: stop renewing (the lease can no longer be confirmed). */
void sluice__permit_client_closed(sluice_permit *p);
/* Fire-and-forget release of permit id (e.g. granted after the caller gave up). */
void sluice__sem_release_id(sluice_sem *sem, const char *id);
/* Margin subtracted from the local lease deadline. */
uint64_t sluice__sem_margin_ms(const sluice_sem *sem);

/* sem.c */
void sluice__sem_ignore_reply(void *ud, int status, const redisReply *reply);
/* Release permit id; cb (required) gets OK, ENOTFOUND or a transport error. */
int sluice__sem_release_tracked(sluice_sem *sem, const char *id, sluice_release_cb *cb, void *ud);

#endif
