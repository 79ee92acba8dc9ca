/* Helpers shared by the delay-queue tests. */
#ifndef SLUICE_TEST_DQ_UTIL_H
#define SLUICE_TEST_DQ_UTIL_H

#include <stdlib.h>
#include <string.h>

#include <event2/event.h>
#include <sluice/sluice.h>

#include "harness.h"

static inline sluice_client *dqt_client(struct event_base *base) {
  return th_client(base, th_server.url, 3000);
}

static inline sluice_dq_consumer_options dqt_options(unsigned batch, unsigned max_in_flight,
                                                     unsigned visibility_ms,
                                                     unsigned max_attempts) {
  sluice_dq_consumer_options o;
  sluice_dq_consumer_options_init(&o);
  o.batch = batch;
  o.max_in_flight = max_in_flight;
  o.visibility_ms = visibility_ms;
  o.max_attempts = max_attempts;
  return o;
}

static inline sluice_dq *dqt_queue(sluice_client *c, const char *name) {
  sluice_dq *dq = NULL;
  TH_ASSERT_EQ(sluice_dq_new(c, name, NULL, &dq), SLUICE_OK);
  return dq;
}

/* Close the client and run the loop until everything is released. */
static inline void dqt_finish(struct event_base *base, sluice_client *c) {
  th_fx fx = {base, c};
  th_fx_close(&fx);
}

/* One case's loop and a dqt_client. */
typedef th_fx dq_fx;
static inline dq_fx dq_fx_open(void) { return th_fx_open(3000); }
static inline void dq_fx_close(dq_fx *fx) { th_fx_close(fx); }
/* The same with a client of options co (th_client_with). */
static inline dq_fx dq_fx_open_with(const sluice_client_options *co) {
  struct event_base *base = event_base_new();
  TH_ASSERT(base != NULL);
  return (dq_fx){base, th_client_with(base, co)};
}
/* How most queue cases end, in this order: the consumer, the queue, the
 * fixture. */
static inline void dq_case_close(dq_fx *fx, sluice_dq_consumer *con, sluice_dq *dq) {
  sluice_dq_consumer_free(con);
  sluice_dq_free(dq);
  dq_fx_close(fx);
}

/* A handler that acks every message and counts it in *(int *)ud. */
static inline void dqt_ack_counted(sluice_dq_consumer *con, sluice_dq_msg *m, void *ud) {
  (*(int *)ud)++;
  sluice_dq_ack(m, NULL, NULL);
}

/* The occurrence (unix ms) of a repeating schedule's message, from its id
 * "<name>@<ms>"; -1 if the id is not one. */
static inline int64_t dqt_occurrence(const sluice_dq_msg *m) {
  const char *at = strrchr(sluice_dq_msg_id(m), '@');
  return at ? strtoll(at + 1, NULL, 10) : -1;
}

/* What a schedule's consumer saw: each delivery's occurrence, with the
 * phase of the test it came in (a number the test sets), and how many
 * deliveries were not as expected. */
typedef struct dqt_ticks {
  int n, bad, phase;
  int64_t at[256];
  int in_phase[256];
} dqt_ticks;

static inline void dqt_tick(dqt_ticks *t, const sluice_dq_msg *m) {
  if (t->n == 256) return;
  t->in_phase[t->n] = t->phase;
  t->at[t->n++] = dqt_occurrence(m);
}

/* A callback that reports only a status (ud: a th_status). */
static inline void dqt_status_cb(sluice_dq *dq, int status, void *ud) { th_status_set(ud, status); }

/* A settle (ack, retry, extend) callback whose ud is a th_status. */
static inline void dqt_settled_cb(sluice_dq_consumer *con, int status, const char *id, void *ud) {
  th_status_set(ud, status);
}

typedef struct dqt_push {
  int done;
  int status;
  int64_t due;
  char id[SLUICE_DQ_ID_MAX + 1];
} dqt_push;

static inline void dqt_on_push(sluice_dq *dq, int status, const char *id, int64_t due, void *ud) {
  dqt_push *p = ud;
  p->done++;
  p->status = status;
  p->due = due;
  snprintf(p->id, sizeof p->id, "%s", id);
}

/* Push synchronously (runs the loop); returns the status, id into p. */
static inline int dqt_push_wait(struct event_base *base, sluice_dq *dq, const char *id,
                                const char *payload, int64_t delay, dqt_push *p) {
  sluice_dq_item it = {payload, payload ? strlen(payload) : 0, delay, 0, id};
  memset(p, 0, sizeof *p);
  TH_ASSERT_EQ(sluice_dq_push(dq, &it, dqt_on_push, p), SLUICE_OK);
  TH_ASSERT(th_loop_until(base, &p->done, 5000));
  return p->status;
}

/* Pushes "x" until one is accepted (during a failover a push may fail
 * fast: tried again every 50 ms, for push_ms at most), then runs the loop
 * until *delivered, the consumer's count, grows (deliver_ms at most). */
static inline void dqt_push_until_delivered(struct event_base *base, sluice_dq *dq,
                                            const int *delivered, unsigned push_ms,
                                            unsigned deliver_ms) {
  int before = *delivered;
  dqt_push p;
  uint64_t end = th_now_ms() + push_ms;
  while (dqt_push_wait(base, dq, NULL, "x", 0, &p) != SLUICE_OK && th_now_ms() < end)
    th_loop_for(base, 50);
  TH_ASSERT_EQ(p.status, SLUICE_OK);
  end = th_now_ms() + deliver_ms;
  while (*delivered == before && th_now_ms() < end) th_loop_for(base, 5);
  TH_ASSERT_CMP(*delivered, >, before);
}

typedef struct dqt_info {
  int done;
  int status;
  sluice_dq_info info;
  char next_id[SLUICE_DQ_ID_MAX + 1];
} dqt_info;

static inline void dqt_on_info(sluice_dq *dq, int status, const sluice_dq_info *info, void *ud) {
  dqt_info *r = ud;
  r->done++;
  r->status = status;
  if (info) {
    r->info = *info;
    snprintf(r->next_id, sizeof r->next_id, "%s", info->next_id ? info->next_id : "");
    r->info.next_id = r->next_id;
  }
}

static inline sluice_dq_info dqt_inspect(struct event_base *base, sluice_dq *dq, dqt_info *r) {
  memset(r, 0, sizeof *r);
  TH_ASSERT_EQ(sluice_dq_inspect(dq, dqt_on_info, r), SLUICE_OK);
  TH_ASSERT(th_loop_until(base, &r->done, 5000));
  TH_ASSERT_EQ(r->status, SLUICE_OK);
  return r->info;
}

/* What a dead-letter list or requeue answered: the list's total and its
 * first entry, or the count requeued. */
typedef struct dqt_dead {
  int done, status;
  size_t total, n;
  char id[40];
  unsigned attempts;
  char payload[16];
  uint64_t count;
} dqt_dead;

static inline void dqt_on_dead(sluice_dq *dq, int status, size_t total,
                               const sluice_dq_dead_entry *e, size_t n, void *ud) {
  dqt_dead *d = ud;
  d->done++;
  d->status = status;
  d->total = total;
  d->n = n;
  if (n) {
    snprintf(d->id, sizeof d->id, "%s", e[0].id);
    d->attempts = e[0].attempts;
    snprintf(d->payload, sizeof d->payload, "%.*s", (int)e[0].len, (const char *)e[0].payload);
  }
}

static inline void dqt_on_dead_count(sluice_dq *dq, int status, uint64_t count, void *ud) {
  dqt_dead *d = ud;
  d->done++;
  d->status = status;
  d->count = count;
}

/* Wall clock in ms: Redis runs on this machine, so it matches its TIME. */
static inline int64_t dqt_unix_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

#endif
