/* The consumer and its messages, shared by dq_consumer.c (taking,
 * settling) and dq_lease.c (extending, renewing, loss). */
#ifndef SLUICE_DQ_CONSUMER_H
#define SLUICE_DQ_CONSUMER_H

#include "core/batcher.h"
#include "dq/dq.h"
#include "base/histogram.h"

#define DQ_SETTLE_MAX 1000 /* settlements (or extensions) per script call */

struct sluice_dq_msg {
  sluice_dq_consumer *con;
  sluice__link link; /* in con->held */
  unsigned attempt;
  uint64_t token; /* delivery token (dq_take.lua) */
  int64_t due_ms;
  unsigned priority;
  uint64_t deadline_ms; /* monotonic, conservative */
  /* lease (dq_lease.c) */
  sluice__list exts;     /* extensions sent for it, not answered */
  struct event *timer;   /* auto-renewal: next renewal, else the deadline */
  uint64_t renew_at_ms;  /* monotonic: when the next renewal is due */
  unsigned renewing : 1; /* an automatic extension is queued or in flight */
  int lost;              /* 0, or SLUICE_LOST_* once reported */
  size_t len;
  char *id;       /* points after the payload */
  char payload[]; /* len bytes + NUL, then the id + NUL */
};

struct sluice_dq_consumer {
  sluice__guard guard; /* how the consumer dies (guard.h) */
  sluice_client *c;
  char *name; /* the queue's (metrics) */
  char *keys[DQ_NKEYS];
  sluice_dq_consumer_options o;
  sluice_dq_handler *handler;
  void *ud;
  sluice_dq_error_cb *err_cb;
  void *err_ud;
  sluice_dq_lost_cb *lost_cb;
  void *lost_ud;
  int auto_renew;
  char cid[33];         /* this consumer's id in the queue's set c */
  char *wake_key;       /* its wake list, "<c key>:<cid>" */
  struct event *timer;  /* next take */
  uint64_t timer_at_us; /* monotonic time it is armed for; 0: not armed */
  uint64_t woken_us;    /* earliest wake-up heard while a take was out; 0: none */
  int64_t offset_us;    /* Redis's clock minus ours, as of the last take */
  int have_offset;
  struct event *kick; /* take on the next loop turn */
  sluice__flusher flusher;
  sluice__batcher settles;
  sluice__batcher extends; /* dq_lease.c */
  sluice__list held;       /* messages delivered, not settled */
  sluice__listener *listener;
  unsigned route;
  unsigned in_flight; /* delivered, not settled */
  unsigned asked;     /* batch size of the take in flight */
  unsigned backoff_ms;
  uint64_t take_sent_ms;
  uint64_t take_seq; /* the number of the last take sent (dq_take.lua) */
  int take_lost;     /* its answer was lost: the next take sends it again */
  int taking, again, starved;
  sluice_dq_consumer_metrics m; /* counters; m.lateness from lateness */
  sluice__hist lateness;        /* in µs, from ms on Redis's clock */
};

/* dq_lease.c */
void sluice__dq_lease_init(sluice_dq_consumer *con);
/* A message was just delivered: with auto-renewal, start its lease. 0 or
 * SLUICE_ENOMEM (then it is simply not renewed). */
int sluice__dq_lease_start(sluice_dq_msg *m);
/* No more automatic renewal of m (the consumer is freed or closed). */
void sluice__dq_lease_stop(sluice_dq_msg *m);
/* m is being settled (its memory goes): renewal stops, and the extensions
 * still out for it are answered without it. */
void sluice__dq_lease_end(sluice_dq_msg *m);
/* Renew every held message now (another node serves the queue: the
 * extensions, not in the record of unreplicated writes, may be missing). */
void sluice__dq_lease_renew_all(sluice_dq_consumer *con);

#endif
