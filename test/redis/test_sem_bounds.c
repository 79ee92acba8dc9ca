/* Semaphore costs that must not grow with the crowd: idle waiters cost one
 * heartbeat step per handle, permits held one by one renew together, local
 * queues are capped (SLUICE_EFULL), and waiters queued the way an earlier
 * version queued them are still served in order. */
#include <string.h>

#include "sem_util.h"

/* Script calls of one kind ("sem_acquire", "sem_renew") the client made. */
static uint64_t calls(sluice_client *c, const char *kind) {
  sluice_client_metrics m;
  sluice_client_get_metrics(c, &m);
  for (size_t i = 0; i < m.nkinds; i++)
    if (strcmp(m.kinds[i].name, kind) == 0) return m.kinds[i].ops;
  return 0;
}

static sluice_sem *sem_with(sluice_client *c, const char *name, unsigned permits, unsigned ttl,
                            unsigned heartbeat, unsigned max_pending) {
  sluice_sem_options o = sem_test_options(permits, ttl);
  o.heartbeat_ms = heartbeat;
  o.max_pending = max_pending;
  return sem_test_new_opts(c, name, &o);
}

static void count_cb(sluice_sem *sem, int status, sluice_permit *p, void *ud) {
  int *n = ud;
  (*n)++;
  if (p) sluice_permit_release(p, NULL, NULL);
}

/* 2000 waiters of one handle wait: the handle's heartbeat (every 200 ms
 * here) is one step for all of them, not one attempt each. */
static void test_idle_waiters_one_step(void) {
  enum { N = 2000 };
  sem_fx fx = sem_fx_open();
  sluice_sem *hs = sem_with(fx.c, "iw", 1, 60000, 600, 0);
  acq_result h = sem_hold(fx.base, hs);
  sluice_client *wc = sem_test_client(fx.base);
  sluice_sem *ws = sem_with(wc, "iw", 1, 60000, 600, 0);
  int done = 0;
  for (int i = 0; i < N; i++) TH_ASSERT_EQ(sluice_sem_acquire(ws, 0, count_cb, &done, NULL), 0);
  sluice_sem_metrics m;
  uint64_t end = th_now_ms() + 10000;
  do {
    th_loop_for(fx.base, 20);
    sluice_sem_get_metrics(ws, &m);
  } while (m.queued < N && th_now_ms() < end);
  TH_ASSERT_EQ(m.queued, N);
  TH_ASSERT_EQ(m.pending, N);
  uint64_t before = calls(wc, "sem_acquire");
  th_loop_for(fx.base, 2000);
  uint64_t steps = calls(wc, "sem_acquire") - before;
  th_note("%d idle waiters: %llu steps in 2 s (heartbeat every 200 ms)\n", N,
          (unsigned long long)steps);
  TH_ASSERT_CMP(steps, <=, 12);
  TH_ASSERT_EQ(done, 0);
  /* Still queued and alive: the release hands the permit on at once. */
  sluice_permit_release(h.permit, NULL, NULL);
  TH_ASSERT(th_loop_until(fx.base, &done, 3000));
  sluice_sem_free(ws);
  sluice_sem_free(hs);
  sluice_client_free(wc);
  sem_fx_close(&fx);
}

/* 300 permits granted one by one, a millisecond apart, renew in rounds:
 * a few calls per renewal period, not one per permit. */
static void test_renewals_in_rounds(void) {
  enum { N = 300 };
  sem_fx fx = sem_fx_open();
  sluice_sem *s = sem_with(fx.c, "rr", N, 600, 0, 0); /* renewed every 200 ms */
  sluice_permit *held[N];
  for (int i = 0; i < N; i++) {
    acq_result r = sem_hold(fx.base, s);
    held[i] = r.permit;
    th_loop_for(fx.base, 1);
  }
  th_loop_for(fx.base, 400); /* every permit has renewed once: in step now */
  uint64_t before = calls(fx.c, "sem_renew");
  th_loop_for(fx.base, 1000);
  uint64_t renewals = calls(fx.c, "sem_renew") - before;
  th_note("%d permits held: %llu renewal calls in 1 s (each renews every 200 ms)\n", N,
          (unsigned long long)renewals);
  TH_ASSERT_CMP(renewals, <=, 5 * 2 * 2 + 2); /* 5 periods, 2 rounds, 2 batches */
  sluice_sem_metrics m;
  sluice_sem_get_metrics(s, &m);
  TH_ASSERT_EQ(m.lost_definite + m.lost_uncertain, 0);
  for (int i = 0; i < N; i++) TH_ASSERT_EQ(sluice_permit_lost(held[i]), 0);
  for (int i = 0; i < N; i++) sluice_permit_release(held[i], NULL, NULL);
  sem_case_close(&fx, s);
}

/* Pending acquires are capped per handle and per client: past the cap a
 * call fails at once with SLUICE_EFULL and its callback never runs. */
static void test_pending_caps(void) {
  struct event_base *base = event_base_new();
  sluice_client_options co;
  th_client_options(&co, th_server.url);
  co.sem_pending_max = 5;
  sluice_client *c = th_client_with(base, &co);
  sluice_sem *a = sem_with(c, "cap", 1, 10000, 0, 3), *b = sem_with(c, "cap", 1, 10000, 0, 0);
  int done = 0;
  for (int i = 0; i < 3; i++) TH_ASSERT_EQ(sluice_sem_acquire(a, 0, count_cb, &done, NULL), 0);
  TH_ASSERT_EQ(sluice_sem_acquire(a, 0, count_cb, &done, NULL), SLUICE_EFULL);
  TH_ASSERT_EQ(sluice_sem_try_acquire(a, count_cb, &done), SLUICE_EFULL);
  TH_ASSERT_EQ(sluice_sem_try_acquire(b, count_cb, &done), SLUICE_OK);
  TH_ASSERT_EQ(sluice_sem_acquire(b, 0, count_cb, &done, NULL), SLUICE_OK);
  TH_ASSERT_EQ(sluice_sem_acquire(b, 0, count_cb, &done, NULL), SLUICE_EFULL); /* the client's */
  sluice_sem_metrics m;
  sluice_sem_get_metrics(a, &m);
  TH_ASSERT_EQ(m.pending, 3);
  /* Answered ones make room again. */
  TH_ASSERT(th_loop_until(base, &done, 3000));
  sluice_sem_get_metrics(b, &m);
  TH_ASSERT_CMP(m.pending, <, 2);
  TH_ASSERT_EQ(sluice_sem_acquire(b, 0, count_cb, &done, NULL), SLUICE_OK);
  sluice_sem_free(a);
  sluice_sem_free(b);
  th_free_client_and_loop(base, c, 5000);
}

/* ---- waiters of an earlier version --------------------------------------- */

/* Queue a waiter the way sluice did before handle heartbeats: its handle's
 * first lease in meta ("t:<handle>"), its own heartbeat in beats. */
static void queue_legacy(const char *name, const char *handle, const char *waiter, long seq,
                         long long beat_ms_from_now) {
  long long now = th_redis_int(
      &th_server, "EVAL %s 0",
      "local t = redis.call('TIME') return t[1] * 1000 + math.floor(t[2] / 1000)");
  th_redis_int(&th_server, "HSET sluice:sem:{%s}:meta t:%s 3000 seq %ld", name, handle, seq);
  th_redis_int(&th_server, "ZADD sluice:sem:{%s}:queue %ld %s:%s", name, seq, handle, waiter);
  th_redis_int(&th_server, "ZADD sluice:sem:{%s}:beats %lld %s:%s", name, now + beat_ms_from_now,
               handle, waiter);
}

/* A rolling upgrade: the old version's queued waiters keep their places in
 * fair order (a live one is handed the permit on its wake list, as that
 * version expects), and one whose heartbeat stopped is passed over. */
static void test_legacy_waiters_served(void) {
  static const char H1[] = "11111111111111111111111111111111",
                    W1[] = "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
                    H2[] = "22222222222222222222222222222222",
                    W2[] = "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb";
  sem_fx fx = sem_fx_open();
  sluice_sem *s = sem_test_new(fx.c, "lg", 1, 10000, 1);
  acq_result h = sem_hold(fx.base, s);
  queue_legacy("lg", H1, W1, 1, 60000); /* alive */
  queue_legacy("lg", H2, W2, 2, -1);    /* its heartbeat stopped */
  acq_result w = {0};
  TH_ASSERT_EQ(sluice_sem_acquire(s, 10000, acq_cb, &w, NULL), SLUICE_OK);
  sluice_sem_metrics m = {0};
  uint64_t end = th_now_ms() + 5000;
  while (!m.queued && th_now_ms() < end) {
    th_loop_for(fx.base, 5);
    sluice_sem_get_metrics(s, &m);
  }
  /* Queued behind the live old waiter; the dead one has been swept. */
  TH_ASSERT_EQ(th_redis_int(&th_server, "ZCARD sluice:sem:{lg}:queue"), 2);
  /* The old waiter is first in line: the release hands it the permit. */
  sluice_permit_release(h.permit, NULL, NULL);
  th_loop_for(fx.base, 100);
  TH_ASSERT_EQ(w.done, 0);
  redisReply *r = th_redis_command(&th_server, "LINDEX sluice:sem:{lg}:wake:%s 0", H1);
  TH_ASSERT(r && r->type == REDIS_REPLY_STRING && strncmp(r->str, W1, 32) == 0);
  freeReplyObject(r);
  /* It returns the permit: the dead one is passed over, ours gets it. */
  th_redis_int(&th_server, "ZREM sluice:sem:{lg}:holders %s", W1);
  TH_ASSERT(th_loop_until(fx.base, &w.done, 3000));
  TH_ASSERT_EQ(w.status, SLUICE_OK);
  TH_ASSERT_EQ(th_redis_int(&th_server, "ZCARD sluice:sem:{lg}:queue"), 0);
  sluice_permit_release(w.permit, NULL, NULL);
  sem_case_close(&fx, s);
}

static const th_case cases[] = {
    TH_CASE(idle_waiters_one_step, 60),
    TH_CASE(renewals_in_rounds, 60),
    TH_CASE(pending_caps, 0),
    TH_CASE(legacy_waiters_served, 0),
};
TH_MAIN(cases)
