/* Small fixtures shared by the semaphore tests. */
#ifndef SLUICE_TEST_SEM_UTIL_H
#define SLUICE_TEST_SEM_UTIL_H

#include <string.h>

#include <event2/event.h>
#include <sluice/sluice.h>

#include "harness.h"

/* Outcome of one acquire. */
typedef struct acq_result {
  int done;
  int status;
  sluice_permit *permit;
  uint64_t at_ms;
} acq_result;

static inline void acq_cb(sluice_sem *sem, int status, sluice_permit *permit, void *ud) {
  acq_result *r = ud;
  r->done++;
  r->status = status;
  r->permit = permit;
  r->at_ms = th_now_ms();
}

/* What a permit's lost callback reported, and when. */
typedef struct lost_result {
  int done, reason;
  uint64_t at_ms;
} lost_result;

static inline void lost_cb(sluice_permit *p, int reason, void *ud) {
  lost_result *l = ud;
  l->done++;
  l->reason = reason;
  l->at_ms = th_now_ms();
}

/* A client of url that reconnects quickly (20-200 ms), each operation
 * bounded by op_timeout_ms. */
static inline sluice_client *sem_test_client_at(struct event_base *base, const char *url,
                                                unsigned op_timeout_ms) {
  return th_client(base, url, op_timeout_ms);
}

static inline sluice_client *sem_test_client(struct event_base *base) {
  return sem_test_client_at(base, th_server.url, 2000);
}

/* A handle with options o, which must be accepted. */
static inline sluice_sem *sem_test_new_opts(sluice_client *c, const char *name,
                                            const sluice_sem_options *o) {
  sluice_sem *s = NULL;
  TH_ASSERT_EQ(sluice_sem_new(c, name, o, &s), SLUICE_OK);
  return s;
}

/* The defaults with permits and ttl; callers set the rest. */
static inline sluice_sem_options sem_test_options(unsigned permits, unsigned ttl) {
  sluice_sem_options o;
  sluice_sem_options_init(&o);
  o.permits = permits;
  o.ttl_ms = ttl;
  return o;
}

static inline sluice_sem *sem_test_new(sluice_client *c, const char *name, unsigned permits,
                                       unsigned ttl, int fair) {
  sluice_sem_options o = sem_test_options(permits, ttl);
  o.fair = fair;
  return sem_test_new_opts(c, name, &o);
}

/* A release's callback (ud: a th_status). */
static inline void rel_cb(sluice_sem *s, int status, void *ud) { th_status_set(ud, status); }

/* try_acquire and wait for its answer. */
static inline acq_result sem_try(struct event_base *base, sluice_sem *s) {
  acq_result r = {0};
  TH_ASSERT_EQ(sluice_sem_try_acquire(s, acq_cb, &r), SLUICE_OK);
  TH_ASSERT_EQ(r.done, 0);
  TH_ASSERT(th_loop_until(base, &r.done, 5000));
  TH_ASSERT_EQ(r.done, 1);
  return r;
}

/* A permit of s, which must be granted at once (sem_try). */
static inline acq_result sem_hold(struct event_base *base, sluice_sem *s) {
  acq_result r = sem_try(base, s);
  TH_ASSERT_EQ(r.status, SLUICE_OK);
  return r;
}

/* A permit of hs held (sem_hold) and, behind it, an acquire of ws that
 * may wait wait_ms started into w (it must be accepted). */
static inline acq_result sem_hold_with_waiter(struct event_base *base, sluice_sem *hs,
                                              sluice_sem *ws, unsigned wait_ms, acq_result *w) {
  acq_result h = sem_hold(base, hs);
  memset(w, 0, sizeof *w);
  TH_ASSERT_EQ(sluice_sem_acquire(ws, wait_ms, acq_cb, w, NULL), SLUICE_OK);
  return h;
}

/* Release held and run the loop until waiter is granted (timeout_ms at
 * most), which must succeed: how long after the release the grant came. */
static inline uint64_t sem_handoff_ms(struct event_base *base, sluice_permit *held,
                                      const acq_result *waiter, unsigned timeout_ms) {
  uint64_t t0 = th_now_ms();
  sluice_permit_release(held, NULL, NULL);
  TH_ASSERT(th_loop_until(base, &waiter->done, timeout_ms));
  TH_ASSERT_EQ(waiter->status, SLUICE_OK);
  return waiter->at_ms - t0;
}

static inline void client_close_drain(struct event_base *base, sluice_client *c) {
  sluice_client_free(c);
  TH_ASSERT(th_loop_drain(base, 5000));
}

/* One case's loop and a sem_test_client. */
typedef th_fx sem_fx;
static inline sem_fx sem_fx_open(void) { return th_fx_open(2000); }
static inline void sem_fx_close(sem_fx *fx) { th_fx_close(fx); }
/* How most semaphore cases end: the semaphore, then the fixture. */
static inline void sem_case_close(sem_fx *fx, sluice_sem *s) {
  sluice_sem_free(s);
  sem_fx_close(fx);
}

#endif
