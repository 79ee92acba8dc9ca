/* Semaphores in one process: grants, waits, wake-ups, renewal, loss, fairness,
 * fencing, inspection, teardown and bad input. Multi-process invariants are
 * in test_sem_procs.c. */
#include <sys/wait.h>
#include <unistd.h>

#include "lua_scripts.h"
#include "sem_util.h"

/* sem_try, with the permit's loss reported in *l. */
static acq_result sem_try_watched(struct event_base *base, sluice_sem *s, lost_result *l) {
  acq_result a = sem_try(base, s);
  sluice_permit_set_lost_cb(a.permit, lost_cb, l);
  return a;
}

static void test_try_acquire_counts_permits(void) {
  sem_fx fx = sem_fx_open();
  sluice_sem *s = sem_test_new(fx.c, "t", 2, 5000, 0);
  acq_result a = sem_hold(fx.base, s), b = sem_try(fx.base, s), d = sem_try(fx.base, s);
  TH_ASSERT_EQ(b.status, SLUICE_OK);
  TH_ASSERT_EQ(d.status, SLUICE_EBUSY);
  TH_ASSERT(d.permit == NULL);
  TH_ASSERT(strcmp(sluice_permit_id(a.permit), sluice_permit_id(b.permit)) != 0);
  TH_ASSERT_EQ(strlen(sluice_permit_id(a.permit)), 32);
  TH_ASSERT_CMP(sluice_permit_remaining_ms(a.permit), >, 4000);
  TH_ASSERT_EQ(sluice_permit_lost(a.permit), 0);
  TH_ASSERT(sluice_permit_sem(a.permit) == s);
  TH_ASSERT_STR_EQ(sluice_sem_name(s), "t");
  TH_ASSERT_EQ(sluice_permit_release(a.permit, NULL, NULL), SLUICE_OK);
  acq_result e = sem_hold(fx.base, s);
  sluice_permit_release(b.permit, NULL, NULL);
  sluice_permit_release(e.permit, NULL, NULL);
  sem_case_close(&fx, s);
}

static void test_release_only_own_and_idempotent(void) {
  sem_fx fx = sem_fx_open();
  sluice_sem *s = sem_test_new(fx.c, "t", 1, 5000, 0);
  acq_result a = sem_hold(fx.base, s);
  char id[33];
  strcpy(id, sluice_permit_id(a.permit));
  th_status r1 = {0};
  TH_ASSERT_EQ(sluice_permit_release(a.permit, rel_cb, &r1), SLUICE_OK);
  TH_ASSERT_EQ(r1.done, 0);
  TH_ASSERT(th_loop_until(fx.base, &r1.done, 3000));
  TH_ASSERT_EQ(r1.status, SLUICE_OK);
  /* Someone else now holds it; releasing our old id again frees nothing. */
  acq_result b = sem_hold(fx.base, s);
  long long removed = th_redis_int(&th_server, "EVAL %s 1 %s %s",
                                   "return redis.call('ZREM', KEYS[1], ARGV[1])",
                                   "sluice:sem:{t}:holders", id);
  TH_ASSERT_EQ(removed, 0);
  TH_ASSERT_EQ(th_redis_int(&th_server, "ZCARD sluice:sem:{t}:holders"), 1);
  acq_result d = sem_try(fx.base, s);
  TH_ASSERT_EQ(d.status, SLUICE_EBUSY);
  sluice_permit_release(b.permit, NULL, NULL);
  sem_case_close(&fx, s);
}

static void test_blocking_acquire_woken_by_release(void) {
  sem_fx fx = sem_fx_open();
  sluice_sem *s = sem_test_new(fx.c, "t", 1, 10000, 0);
  acq_result a = sem_hold(fx.base, s);
  acq_result w = {0};
  sluice_acquire *h = NULL;
  TH_ASSERT_EQ(sluice_sem_acquire(s, 5000, acq_cb, &w, &h), SLUICE_OK);
  TH_ASSERT(h != NULL);
  th_loop_for(fx.base, 200); /* the waiter queues and blocks */
  TH_ASSERT_EQ(w.done, 0);
  /* Woken by the release, not by a poll: well under the heartbeat (1 s). */
  TH_ASSERT_CMP(sem_handoff_ms(fx.base, a.permit, &w, 3000), <, 100);
  sluice_permit_release(w.permit, NULL, NULL);
  sem_case_close(&fx, s);
}

static void test_blocking_acquire_times_out(void) {
  sem_fx fx = sem_fx_open();
  sluice_sem *s = sem_test_new(fx.c, "t", 1, 10000, 0);
  acq_result a = sem_try(fx.base, s);
  acq_result w = {0};
  uint64_t t0 = th_now_ms();
  TH_ASSERT_EQ(sluice_sem_acquire(s, 300, acq_cb, &w, NULL), SLUICE_OK);
  TH_ASSERT(th_loop_until(fx.base, &w.done, 3000));
  TH_ASSERT_EQ(w.status, SLUICE_ETIMEDOUT);
  TH_ASSERT_CMP(w.at_ms - t0, >=, 290); /* libevent measures from its cached loop time */
  TH_ASSERT_CMP(w.at_ms - t0, <, 600);
  th_loop_for(fx.base, 100); /* the leave script runs */
  TH_ASSERT_EQ(th_redis_int(&th_server, "ZCARD sluice:sem:{t}:queue"), 0);
  TH_ASSERT_EQ(w.done, 1);
  sluice_permit_release(a.permit, NULL, NULL);
  sem_case_close(&fx, s);
}

static void test_cancel(void) {
  sem_fx fx = sem_fx_open();
  sluice_sem *s = sem_test_new(fx.c, "t", 1, 10000, 0);
  acq_result a = sem_try(fx.base, s);
  acq_result w = {0};
  sluice_acquire *h = NULL;
  TH_ASSERT_EQ(sluice_sem_acquire(s, 0, acq_cb, &w, &h), SLUICE_OK);
  th_loop_for(fx.base, 50);
  TH_ASSERT_EQ(sluice_acquire_cancel(h), SLUICE_OK);
  TH_ASSERT_EQ(w.done, 0); /* never inside the call */
  TH_ASSERT(th_loop_until(fx.base, &w.done, 1000));
  TH_ASSERT_EQ(w.status, SLUICE_ECANCELED);
  TH_ASSERT_EQ(sluice_acquire_cancel(NULL), SLUICE_EINVAL);
  th_loop_for(fx.base, 100);
  TH_ASSERT_EQ(w.done, 1);
  TH_ASSERT_EQ(th_redis_int(&th_server, "ZCARD sluice:sem:{t}:queue"), 0);
  sluice_permit_release(a.permit, NULL, NULL);
  sem_case_close(&fx, s);
}

/* A holder whose process is gone (client closed without releasing) still
 * lets the waiter in once its lease ends, without any release. */
static void test_crashed_holder_expires(void) {
  struct event_base *base = event_base_new();
  sluice_client *c1 = sem_test_client(base), *c2 = sem_test_client(base);
  sluice_sem *s1 = sem_test_new(c1, "t", 1, 400, 0);
  sluice_sem *s2 = sem_test_new(c2, "t", 1, 400, 0);
  acq_result a = sem_hold(base, s1);
  uint64_t t0 = th_now_ms();
  sluice_client_free(c1); /* stops renewing; nobody releases */
  acq_result w = {0};
  TH_ASSERT_EQ(sluice_sem_acquire(s2, 5000, acq_cb, &w, NULL), SLUICE_OK);
  TH_ASSERT(th_loop_until(base, &w.done, 5000));
  TH_ASSERT_EQ(w.status, SLUICE_OK);
  TH_ASSERT_CMP(w.at_ms - t0, >=, 300);
  TH_ASSERT_CMP(w.at_ms - t0, <, 1200);        /* at the lease expiry, not a heartbeat later */
  sluice_permit_release(a.permit, NULL, NULL); /* after close: just frees */
  sluice_permit_release(w.permit, NULL, NULL);
  sluice_sem_free(s1);
  sluice_sem_free(s2);
  th_free_client_and_loop(base, c2, 5000);
}

static void test_renewal_keeps_permit(void) {
  sem_fx fx = sem_fx_open();
  sluice_sem *s = sem_test_new(fx.c, "t", 1, 500, 0);
  acq_result a = sem_hold(fx.base, s);
  lost_result l = {0};
  sluice_permit_set_lost_cb(a.permit, lost_cb, &l);
  th_loop_for(fx.base, 2750); /* five and a half TTLs */
  TH_ASSERT_EQ(l.done, 0);
  TH_ASSERT_EQ(sluice_permit_lost(a.permit), 0);
  acq_result b = sem_try(fx.base, s);
  TH_ASSERT_EQ(b.status, SLUICE_EBUSY);
  TH_ASSERT_CMP(th_redis_int(&th_server, "PTTL sluice:sem:{t}:holders"), >, 0);
  sluice_permit_release(a.permit, NULL, NULL);
  sem_case_close(&fx, s);
}

static long long evalsha_calls(void) {
  return th_redis_info_sum("commandstats", "cmdstat_evalsha:calls=");
}

/* Fifty permits granted together renew together: a handful of script calls
 * per renewal round, not fifty, and every lease stays alive. */
static void test_renewals_batched(void) {
  enum { N = 50 };
  sem_fx fx = sem_fx_open();
  sluice_sem *s = sem_test_new(fx.c, "t", N, 600, 0); /* renewed every 200 ms */
  static acq_result r[N];
  memset(r, 0, sizeof r);
  for (int i = 0; i < N; i++) TH_ASSERT_EQ(sluice_sem_try_acquire(s, acq_cb, &r[i]), 0);
  uint64_t end = th_now_ms() + 3000;
  int done = 0;
  while (done < N && th_now_ms() < end) {
    event_base_loop(fx.base, EVLOOP_ONCE);
    done = 0;
    for (int i = 0; i < N; i++) done += r[i].done;
  }
  TH_ASSERT_EQ(done, N);
  long long before = evalsha_calls();
  th_loop_for(fx.base, 1300); /* about six renewal rounds */
  long long calls = evalsha_calls() - before;
  th_note("%d permits, %lld renewal script calls in 1.3 s\n", N, calls);
  TH_ASSERT_CMP(calls, >=, 4);
  TH_ASSERT_CMP(calls, <=, 30); /* unbatched: ~300 */
  for (int i = 0; i < N; i++) {
    TH_ASSERT_EQ(r[i].status, SLUICE_OK);
    TH_ASSERT_EQ(sluice_permit_lost(r[i].permit), 0);
    sluice_permit_release(r[i].permit, NULL, NULL);
  }
  sem_case_close(&fx, s);
}

static void test_lost_definite(void) {
  sem_fx fx = sem_fx_open();
  sluice_sem *s = sem_test_new(fx.c, "t", 1, 300, 0);
  lost_result l = {0};
  acq_result a = sem_try_watched(fx.base, s, &l);
  th_redis_int(&th_server, "DEL sluice:sem:{t}:holders");
  TH_ASSERT(th_loop_until(fx.base, &l.done, 2000));
  TH_ASSERT_EQ(l.reason, SLUICE_LOST_DEFINITE);
  TH_ASSERT_EQ(sluice_permit_lost(a.permit), SLUICE_LOST_DEFINITE);
  TH_ASSERT_EQ(sluice_permit_remaining_ms(a.permit), 0);
  /* The renewal did not re-create it. */
  TH_ASSERT_EQ(th_redis_int(&th_server, "EXISTS sluice:sem:{t}:holders"), 0);
  th_loop_for(fx.base, 300);
  TH_ASSERT_EQ(l.done, 1);
  sluice_permit_release(a.permit, NULL, NULL);
  sem_case_close(&fx, s);
}

typedef struct lease_check {
  const lost_result *lost;
  int over, lost_before;
} lease_check;

static void lease_over_cb(evutil_socket_t fd, short what, void *arg) {
  lease_check *k = arg;
  k->over = 1;
  k->lost_before = k->lost->done;
}

/* Redis stopped (SIGSTOP): renewals go unanswered and the permit is reported
 * UNCERTAIN before its lease could have ended in Redis. Checked as the loop
 * sees time, not by the wall clock: a timer for the lease's end, counted
 * from after the grant (so no earlier than Redis's expiry), must find the
 * callback already run, however late a loaded machine runs both. */
static void test_lost_uncertain(void) {
  sem_fx fx = sem_fx_open();
  sluice_sem *s = sem_test_new(fx.c, "t", 1, 400, 0);
  lost_result l = {0};
  acq_result a = sem_try_watched(fx.base, s, &l);
  lease_check k = {&l, 0, 0};
  struct event *lease_end = evtimer_new(fx.base, lease_over_cb, &k);
  struct timeval ttl = {0, 400 * 1000};
  evtimer_add(lease_end, &ttl);
  th_redis_pause(&th_server);
  TH_ASSERT(th_loop_until(fx.base, &k.over, 3000));
  th_redis_resume(&th_server);
  event_free(lease_end);
  TH_ASSERT_EQ(k.lost_before, 1);
  TH_ASSERT_EQ(l.reason, SLUICE_LOST_UNCERTAIN);
  th_loop_for(fx.base, 200);
  TH_ASSERT_EQ(l.done, 1); /* once */
  sluice_permit_release(a.permit, NULL, NULL);
  sem_case_close(&fx, s);
}

/* A handle freed while Redis is unreachable, holding a permit whose lease
 * ran out (released or not), then the client closed: every pending step
 * ends without touching the freed handle. */
static void free_lapsed(int release) {
  sem_fx fx = sem_fx_open();
  sluice_sem *s = sem_test_new(fx.c, "t", 1, 400, 0);
  lost_result l = {0};
  acq_result a = sem_try_watched(fx.base, s, &l);
  th_redis_pause(&th_server);
  TH_ASSERT(th_loop_until(fx.base, &l.done, 3000));
  if (release) sluice_permit_release(a.permit, NULL, NULL);
  sluice_sem_free(s);
  th_loop_for(fx.base, 300);
  sluice_client_close(fx.c, NULL, NULL);
  th_loop_for(fx.base, 300);
  th_redis_resume(&th_server);
  TH_ASSERT(th_loop_drain(fx.base, 5000));
  event_base_free(fx.base);
}

static void test_free_lapsed_released(void) { free_lapsed(1); }
static void test_free_lapsed_held(void) { free_lapsed(0); }

static uint64_t permits_restored(const sluice_client *c) {
  sluice_client_metrics m;
  sluice_client_get_metrics(c, &m);
  return m.permits_restored;
}

/* A restart without persistence empties Redis; the client sees another
 * run_id, and re-asserts the permit it holds: put back, with its fencing
 * token, so the semaphore is full again and the next grant's token is
 * higher. */
static void test_restart_restores_permits(void) {
  sem_fx fx = sem_fx_open();
  sluice_sem *s = sem_test_new(fx.c, "t", 1, 1500, 0);
  lost_result l = {0};
  acq_result a = sem_try_watched(fx.base, s, &l);
  th_redis_restart(&th_server);
  uint64_t end = th_now_ms() + 3000;
  while (permits_restored(fx.c) == 0 && th_now_ms() < end) th_loop_for(fx.base, 10);
  TH_ASSERT_EQ(permits_restored(fx.c), 1);
  TH_ASSERT_EQ(th_redis_int(&th_server, "ZCARD sluice:sem:{t}:holders"), 1);
  th_loop_for(fx.base, 1600); /* past the lease it had before: renewed since */
  TH_ASSERT_EQ(l.done, 0);
  TH_ASSERT_EQ(sem_try(fx.base, s).status, SLUICE_EBUSY);
  uint64_t fence = sluice_permit_fence(a.permit); /* the release frees the permit */
  sluice_permit_release(a.permit, NULL, NULL);
  acq_result b = sem_hold(fx.base, s);
  TH_ASSERT_CMP(sluice_permit_fence(b.permit), >, fence);
  sluice_permit_release(b.permit, NULL, NULL);
  sem_case_close(&fx, s);
}

/* Without the record (replay_off), a restart without persistence loses
 * the permits held: the next renewal finds them gone. */
static void test_restart_loses_permits_without_replay(void) {
  sem_fx fx;
  fx.base = event_base_new();
  sluice_client_options o;
  th_client_options(&o, th_server.url);
  o.replay_off = 1;
  fx.c = th_client_with(fx.base, &o);
  sluice_sem *s = sem_test_new(fx.c, "t", 1, 1500, 0);
  lost_result l = {0};
  acq_result a = sem_try_watched(fx.base, s, &l);
  th_redis_restart(&th_server); /* no persistence: the holders are gone */
  TH_ASSERT(th_loop_until(fx.base, &l.done, 3000));
  TH_ASSERT_EQ(l.reason, SLUICE_LOST_DEFINITE);
  /* ...and the semaphore works again. */
  acq_result b = {0};
  uint64_t end = th_now_ms() + 3000;
  do { b = sem_try(fx.base, s); } while (b.status == SLUICE_ECONNECTION && th_now_ms() < end);
  TH_ASSERT_EQ(b.status, SLUICE_OK);
  TH_ASSERT_CMP(sluice_permit_fence(b.permit), >, sluice_permit_fence(a.permit));
  sluice_permit_release(a.permit, NULL, NULL);
  sluice_permit_release(b.permit, NULL, NULL);
  sem_case_close(&fx, s);
}

static void test_fencing_increases(void) {
  sem_fx fx = sem_fx_open();
  sluice_sem *s = sem_test_new(fx.c, "t", 3, 5000, 0);
  uint64_t last = 0;
  for (int i = 0; i < 20; i++) {
    acq_result a = sem_hold(fx.base, s);
    TH_ASSERT_CMP(sluice_permit_fence(a.permit), >, last);
    last = sluice_permit_fence(a.permit);
    sluice_permit_release(a.permit, NULL, NULL);
  }
  /* Still increasing after the meta key vanished (abandoned semaphore). */
  th_redis_int(&th_server, "DEL sluice:sem:{t}:meta");
  acq_result a = sem_try(fx.base, s);
  TH_ASSERT_CMP(sluice_permit_fence(a.permit), >, last);
  sluice_permit_release(a.permit, NULL, NULL);
  sem_case_close(&fx, s);
}

static int order_log[8], order_n;
static void order_cb(sluice_sem *s, int status, sluice_permit *p, void *ud) {
  TH_ASSERT_EQ(status, SLUICE_OK);
  order_log[order_n++] = (int)(intptr_t)ud;
  sluice_permit_release(p, NULL, NULL); /* hand over to the next */
}

static void test_fair_fifo_and_try_refused(void) {
  sem_fx fx = sem_fx_open();
  sluice_sem *s = sem_test_new(fx.c, "t", 1, 5000, 1);
  acq_result a = sem_hold(fx.base, s);
  for (int i = 0; i < 4; i++) {
    TH_ASSERT_EQ(sluice_sem_acquire(s, 5000, order_cb, (void *)(intptr_t)i, NULL), SLUICE_OK);
    th_loop_for(fx.base, 30); /* arrival order is queue order */
  }
  th_loop_for(fx.base, 100);
  TH_ASSERT_EQ(th_redis_int(&th_server, "ZCARD sluice:sem:{t}:queue"), 4);
  sluice_permit_release(a.permit, NULL, NULL);
  /* While they wait, try_acquire is refused even in a free moment. */
  acq_result t = sem_try(fx.base, s);
  if (t.status == SLUICE_OK) sluice_permit_release(t.permit, NULL, NULL);
  TH_ASSERT_EQ(t.status, SLUICE_EBUSY);
  uint64_t end = th_now_ms() + 3000;
  while (order_n < 4 && th_now_ms() < end) event_base_loop(fx.base, EVLOOP_ONCE);
  TH_ASSERT_EQ(order_n, 4);
  for (int i = 0; i < 4; i++) TH_ASSERT_EQ(order_log[i], i);
  sem_case_close(&fx, s);
}

/* A blocking acquirer in a child process that dies (no close, so no leave)
 * once it is queued. */
static void dead_waiter(const char *name, const sluice_sem_options *o) {
  pid_t pid = fork();
  TH_ASSERT(pid >= 0);
  if (pid == 0) {
    struct event_base *b = event_base_new();
    sluice_client *c = sem_test_client(b);
    sluice_sem *s;
    acq_result r = {0};
    if (sluice_sem_new(c, name, o, &s) != 0 || sluice_sem_acquire(s, 0, acq_cb, &r, NULL) != 0)
      _exit(1);
    th_loop_for(b, 50);
    _exit(r.done ? 1 : 0);
  }
  int st;
  TH_ASSERT_EQ(waitpid(pid, &st, 0), pid);
  TH_ASSERT(WIFEXITED(st) && WEXITSTATUS(st) == 0);
}

/* The dead-waiter cases' scene on "t" with options o: two clients' handles,
 * s2 holding the permit, a waiter whose process died queued first, and a
 * live waiter of s2 queued behind it. */
typedef struct dead_scene {
  struct event_base *base;
  sluice_client *c1, *c2;
  sluice_sem *s1, *s2;
  acq_result holder, live;
} dead_scene;

static void dead_scene_open(dead_scene *d, const sluice_sem_options *o, unsigned live_timeout_ms) {
  memset(d, 0, sizeof *d);
  d->base = event_base_new();
  d->c1 = sem_test_client(d->base);
  d->c2 = sem_test_client(d->base);
  TH_ASSERT_EQ(sluice_sem_new(d->c1, "t", o, &d->s1), 0);
  TH_ASSERT_EQ(sluice_sem_new(d->c2, "t", o, &d->s2), 0);
  d->holder = sem_try(d->base, d->s2);
  dead_waiter("t", o);
  TH_ASSERT_EQ(sluice_sem_acquire(d->s2, live_timeout_ms, acq_cb, &d->live, NULL), 0);
}

static void dead_scene_close(dead_scene *d) {
  sluice_permit_release(d->live.permit, NULL, NULL);
  sluice_sem_free(d->s1);
  sluice_sem_free(d->s2);
  sluice_client_free(d->c1);
  th_free_client_and_loop(d->base, d->c2, 5000);
}

/* A queued waiter that dies (its process vanishes without leaving) is
 * evicted after the heartbeat timeout, so it cannot block a fair queue. */
static void test_fair_dead_waiter_evicted(void) {
  sluice_sem_options o = sem_test_options(1, 5000);
  o.fair = 1;
  o.heartbeat_ms = 300;
  dead_scene d;
  dead_scene_open(&d, &o, 5000);
  th_loop_for(d.base, 50);
  sluice_permit_release(d.holder.permit, NULL, NULL);
  uint64_t t0 = th_now_ms();
  TH_ASSERT(th_loop_until(d.base, &d.live.done, 3000));
  TH_ASSERT_EQ(d.live.status, SLUICE_OK);
  TH_ASSERT_CMP(th_now_ms() - t0, <, 1500);
  dead_scene_close(&d);
}

/* Non-fair: a queued waiter whose process died is skipped by wake-ups once
 * it missed a heartbeat, so the live waiter behind it is woken at once. */
static void test_dead_waiter_skipped_by_wakeups(void) {
  sluice_sem_options o = sem_test_options(1, 10000);
  o.heartbeat_ms = 3000; /* live waiters re-check only once a second */
  dead_scene d;
  dead_scene_open(&d, &o, 10000);
  th_loop_for(d.base, 1700); /* the dead one misses its heartbeats */
  TH_ASSERT_EQ(th_redis_int(&th_server, "ZCARD sluice:sem:{t}:queue"), 2);
  TH_ASSERT_CMP(sem_handoff_ms(d.base, d.holder.permit, &d.live, 3000), <, 150);
  dead_scene_close(&d);
}

typedef struct info_result {
  int done, status;
  unsigned permits;
  size_t nholders, nwaiters;
  int64_t left0;
} info_result;
static void info_cb(sluice_sem *s, int status, const sluice_sem_info *info, void *ud) {
  info_result *r = ud;
  r->done++;
  r->status = status;
  if (info) {
    r->permits = info->permits;
    r->nholders = info->nholders;
    r->nwaiters = info->nwaiters;
    r->left0 = info->nholders ? info->holders[0].remaining_ms : -1;
  }
}

static void test_inspect(void) {
  sem_fx fx = sem_fx_open();
  sluice_sem *s = sem_test_new(fx.c, "t", 2, 5000, 0);
  acq_result a = sem_try(fx.base, s), b = sem_try(fx.base, s);
  acq_result w = {0};
  TH_ASSERT_EQ(sluice_sem_acquire(s, 5000, acq_cb, &w, NULL), 0);
  th_loop_for(fx.base, 100);
  info_result r = {0};
  TH_ASSERT_EQ(sluice_sem_inspect(s, info_cb, &r), 0);
  TH_ASSERT(th_loop_until(fx.base, &r.done, 2000));
  TH_ASSERT_EQ(r.status, SLUICE_OK);
  TH_ASSERT_EQ(r.permits, 2);
  TH_ASSERT_EQ(r.nholders, 2);
  TH_ASSERT_EQ(r.nwaiters, 1);
  TH_ASSERT_CMP(r.left0, >, 4000);
  TH_ASSERT_CMP(r.left0, <=, 5000);
  /* Every key of the semaphore expires when abandoned. */
  TH_ASSERT_CMP(th_redis_int(&th_server, "PTTL sluice:sem:{t}:holders"), >, 0);
  TH_ASSERT_CMP(th_redis_int(&th_server, "PTTL sluice:sem:{t}:queue"), >, 0);
  TH_ASSERT_CMP(th_redis_int(&th_server, "PTTL sluice:sem:{t}:beats"), >, 0);
  TH_ASSERT_CMP(th_redis_int(&th_server, "PTTL sluice:sem:{t}:meta"), >, 0);
  sluice_permit_release(a.permit, NULL, NULL);
  TH_ASSERT(th_loop_until(fx.base, &w.done, 2000));
  sluice_permit_release(b.permit, NULL, NULL);
  sluice_permit_release(w.permit, NULL, NULL);
  sem_case_close(&fx, s);
}

static sluice_sem *freed_in_cb;
static void free_in_cb(sluice_sem *s, int status, sluice_permit *p, void *ud) {
  int *done = ud;
  (*done)++;
  sluice_sem_free(s); /* also releases p */
  freed_in_cb = s;
}

static void test_free_inside_callback_and_close_cancels(void) {
  sem_fx fx = sem_fx_open();
  sluice_sem *s = sem_test_new(fx.c, "t", 1, 5000, 0);
  int done = 0;
  TH_ASSERT_EQ(sluice_sem_try_acquire(s, free_in_cb, &done), 0);
  TH_ASSERT(th_loop_until(fx.base, &done, 2000));
  th_loop_for(fx.base, 50);
  TH_ASSERT_EQ(th_redis_int(&th_server, "ZCARD sluice:sem:{t}:holders"), 0);
  /* Client close cancels pending acquires, from the loop. */
  sluice_sem *s2 = sem_test_new(fx.c, "u", 1, 5000, 0);
  acq_result a = sem_try(fx.base, s2);
  acq_result w = {0}, t = {0};
  TH_ASSERT_EQ(sluice_sem_acquire(s2, 0, acq_cb, &w, NULL), 0);
  TH_ASSERT_EQ(sluice_sem_try_acquire(s2, acq_cb, &t), 0);
  sluice_client_free(fx.c);
  TH_ASSERT_EQ(w.done + t.done, 0);
  TH_ASSERT(th_loop_drain(fx.base, 3000));
  TH_ASSERT_EQ(w.status, SLUICE_ECANCELED);
  TH_ASSERT_EQ(t.status, SLUICE_ECANCELED);
  /* Use after close: a clear status. */
  acq_result z = {0};
  TH_ASSERT_EQ(sluice_sem_try_acquire(s2, acq_cb, &z), SLUICE_ECLOSED);
  TH_ASSERT_EQ(sluice_sem_acquire(s2, 10, acq_cb, &z, NULL), SLUICE_ECLOSED);
  TH_ASSERT_EQ(sluice_permit_release(a.permit, NULL, NULL), SLUICE_ECLOSED);
  sluice_sem *s3 = NULL;
  TH_ASSERT_EQ(sluice_sem_new(fx.c, "v", NULL, &s3), SLUICE_ECLOSED);
  sluice_sem_free(s2);
  event_base_free(fx.base);
}

/* close_cb may free the client's last object (the client's memory goes
 * with it): no use after free. */
typedef struct close_ctx {
  sluice_sem *sem;
  int closed;
} close_ctx;
static void free_sem_on_close(void *ud) {
  close_ctx *cc = ud;
  sluice_sem_free(cc->sem);
  cc->closed = 1;
}

static void test_close_cb_frees_last_object(void) {
  sem_fx fx = sem_fx_open();
  close_ctx cc = {sem_test_new(fx.c, "t", 1, 5000, 0), 0};
  sem_hold(fx.base, cc.sem);
  sluice_client_close(fx.c, free_sem_on_close, &cc);
  TH_ASSERT(th_loop_drain(fx.base, 3000));
  TH_ASSERT_EQ(cc.closed, 1);
  event_base_free(fx.base);
}

static void test_bad_input(void) {
  sem_fx fx = sem_fx_open();
  sluice_sem_options o;
  sluice_sem *s = NULL;
  char big[SLUICE_NAME_MAX + 2];
  memset(big, 'x', sizeof big - 1);
  big[sizeof big - 1] = '\0';
  sluice_sem_options_init(&o);
  TH_ASSERT_EQ(sluice_sem_new(NULL, "a", &o, &s), SLUICE_EINVAL);
  TH_ASSERT_EQ(sluice_sem_new(fx.c, NULL, &o, &s), SLUICE_EINVAL);
  TH_ASSERT_EQ(sluice_sem_new(fx.c, "", &o, &s), SLUICE_EINVAL);
  TH_ASSERT_EQ(sluice_sem_new(fx.c, big, &o, &s), SLUICE_EINVAL);
  TH_ASSERT_EQ(sluice_sem_new(fx.c, "a", &o, NULL), SLUICE_EINVAL);
  o.permits = 0;
  TH_ASSERT_EQ(sluice_sem_new(fx.c, "a", &o, &s), SLUICE_EINVAL);
  sluice_sem_options_init(&o);
  o.ttl_ms = 0;
  TH_ASSERT_EQ(sluice_sem_new(fx.c, "a", &o, &s), SLUICE_EINVAL);
  sluice_sem_options_init(&o);
  o.ttl_ms = 1000;
  o.renew_ms = 1000;
  TH_ASSERT_EQ(sluice_sem_new(fx.c, "a", &o, &s), SLUICE_EINVAL);
  TH_ASSERT(s == NULL);
  /* Names are binary-tolerant text: braces and colons are fine. */
  sluice_sem_options_init(&o);
  TH_ASSERT_EQ(sluice_sem_new(fx.c, "a}{:b", &o, &s), SLUICE_OK);
  acq_result a = sem_hold(fx.base, s);
  TH_ASSERT_EQ(sluice_sem_try_acquire(s, NULL, NULL), SLUICE_EINVAL);
  TH_ASSERT_EQ(sluice_sem_try_acquire(NULL, acq_cb, NULL), SLUICE_EINVAL);
  TH_ASSERT_EQ(sluice_sem_inspect(s, NULL, NULL), SLUICE_EINVAL);
  TH_ASSERT_EQ(sluice_permit_release(NULL, NULL, NULL), SLUICE_EINVAL);
  TH_ASSERT(sluice_permit_id(NULL) == NULL);
  sluice_sem_free(NULL);
  sluice_permit_release(a.permit, NULL, NULL);
  sem_case_close(&fx, s);
}

/* A waiter keeps waiting through a Redis outage shorter than its timeout,
 * and gets a permit once Redis is back (the holder, restored there, lets
 * it go). */
static void test_wait_survives_restart(void) {
  sem_fx fx = sem_fx_open();
  sluice_sem *s = sem_test_new(fx.c, "t", 1, 5000, 0);
  acq_result a = sem_try(fx.base, s);
  acq_result w = {0};
  TH_ASSERT_EQ(sluice_sem_acquire(s, 8000, acq_cb, &w, NULL), 0);
  th_loop_for(fx.base, 100);
  th_redis_restart(&th_server); /* the data gone; the holder is put back */
  uint64_t end = th_now_ms() + 3000;
  while (permits_restored(fx.c) == 0 && th_now_ms() < end) th_loop_for(fx.base, 10);
  TH_ASSERT_EQ(w.done, 0);
  TH_ASSERT_EQ(sluice_permit_release(a.permit, NULL, NULL), SLUICE_OK);
  TH_ASSERT(th_loop_until(fx.base, &w.done, 4000));
  TH_ASSERT_EQ(w.status, SLUICE_OK);
  sluice_permit_release(w.permit, NULL, NULL);
  sem_case_close(&fx, s);
}

/* Many local waiters share the client's one blocking connection: a client
 * never holds more than two connections, and all waiters get through. */
static int granted_count;
static void count_and_release(sluice_sem *s, int status, sluice_permit *p, void *ud) {
  TH_ASSERT_EQ(status, SLUICE_OK);
  granted_count++;
  sluice_permit_release(p, NULL, NULL);
}

static sluice_sem_metrics sem_metrics(const sluice_sem *s);

static void test_waiters_share_one_connection(void) {
  enum { WAITERS = 50 };
  sem_fx fx = sem_fx_open();
  sluice_sem *s = sem_test_new(fx.c, "t", 1, 5000, 0);
  sluice_sem *s2 = sem_test_new(fx.c, "t2", 1, 5000, 0);
  acq_result a = sem_try(fx.base, s), b = sem_try(fx.base, s2);
  for (int i = 0; i < WAITERS; i++) {
    TH_ASSERT_EQ(sluice_sem_acquire(i % 2 ? s : s2, 10000, count_and_release, NULL, NULL), 0);
  }
  /* Each acquire counts as a wait when Redis has queued it. */
  TH_LOOP_UNTIL(fx.base, sem_metrics(s).waits + sem_metrics(s2).waits >= WAITERS, 5000);
  TH_ASSERT_EQ(th_redis_int(&th_server, "ZCARD sluice:sem:{t}:queue") +
                   th_redis_int(&th_server, "ZCARD sluice:sem:{t2}:queue"),
               WAITERS);
  /* This process's connections: the command one and one blocking one. On
   * a cluster: one blocking connection per slot waited on ({t}, {t2}), and
   * a command connection per master at most. A blocking connection opens
   * (connect, handshake, BRPOP) only once its first waiter was refused:
   * wait for the BRPOPs before counting. */
  long long expect_blocked = th_server_topo() == TH_TOPO_CLUSTER ? 2 : 1;
  TH_LOOP_UNTIL(fx.base, th_redis_clients(1) >= expect_blocked, 5000);
  long long blocked = th_redis_clients(1), conns = th_redis_clients(0);
  th_note("%lld connections, %lld of them blocked\n", conns, blocked);
  TH_ASSERT_EQ(blocked, expect_blocked);
  if (th_server_topo() == TH_TOPO_CLUSTER) TH_ASSERT_CMP(conns, <=, th_redis_masters() + 2);
  else TH_ASSERT_EQ(conns, 2);
  sluice_permit_release(a.permit, NULL, NULL);
  sluice_permit_release(b.permit, NULL, NULL);
  uint64_t end = th_now_ms() + 8000;
  while (granted_count < WAITERS && th_now_ms() < end) event_base_loop(fx.base, EVLOOP_ONCE);
  TH_ASSERT_EQ(granted_count, WAITERS);
  sluice_sem_free(s);
  sluice_sem_free(s2);
  sem_fx_close(&fx);
}

/* Freed while its attempt's script call is in flight: the semaphore goes
 * from the loop after the cancellation, before that call's reply arrives,
 * which must then reach nothing of it (ASan/valgrind check). The permit
 * Redis granted meanwhile is released behind it. */
static void test_free_with_attempt_in_flight(void) {
  sem_fx fx = sem_fx_open();
  sluice_sem *s = sem_test_new(fx.c, "t", 1, 5000, 0);
  acq_result r = {0};
  acq_result first = sem_try(fx.base, s); /* connected: later steps go out at once */
  sluice_permit_release(first.permit, NULL, NULL);
  th_redis_pause(&th_server); /* no reply can come back before the free */
  TH_ASSERT_EQ(sluice_sem_try_acquire(s, acq_cb, &r), SLUICE_OK);
  th_loop_for(fx.base, 50); /* the attempt goes out */
  sluice_sem_free(s);
  TH_ASSERT(th_loop_until(fx.base, &r.done, 2000));
  TH_ASSERT_EQ(r.status, SLUICE_ECANCELED);
  th_redis_resume(&th_server);
  th_loop_for(fx.base, 300); /* the attempt's reply comes back */
  TH_ASSERT_EQ(r.done, 1);
  TH_ASSERT_EQ(th_redis_int(&th_server, "ZCARD sluice:sem:{t}:holders"), 0);
  sem_fx_close(&fx);
}

/* One step hands out more permits than Lua can unpack into one Redis call
 * (the hand-off writes each key with few calls, in slices), and no more
 * than it reads of the queue, 1024 waiters (the rest go with the next
 * steps): the release script run by hand on a queue of 4500 live waiters
 * of one handle (queued the way an earlier version of sluice queued them,
 * so that layout is served too). */
static void test_hand_off_many_in_one_step(void) {
  enum { N = 4500, STEP = 1024 };
  static const char H[] = "hs:{big}:holders", Q[] = "hs:{big}:queue", B[] = "hs:{big}:beats",
                    M[] = "hs:{big}:meta", WAKE[] = "hs:{big}:wake:";
  char handle[33], member[80], wake[80];
  snprintf(handle, sizeof handle, "%032x", 0xabcu);
  snprintf(wake, sizeof wake, "%s%s", WAKE, handle);
  redisContext *rc = th_redis_connect(&th_server);
  TH_ASSERT(rc != NULL);
  freeReplyObject(redisCommand(rc, "HSET %s t:%s 3000", M, handle));
  for (int i = 0; i < N; i++) { /* pipelined */
    snprintf(member, sizeof member, "%s:%032x", handle, i + 1);
    redisAppendCommand(rc, "ZADD %s %d %s", Q, i + 1, member);
    redisAppendCommand(rc, "ZADD %s 99999999999999 %s", B, member);
  }
  for (int i = 0; i < 2 * N; i++) {
    void *ok = NULL;
    TH_ASSERT_EQ(redisGetReply(rc, &ok), REDIS_OK);
    freeReplyObject(ok);
  }
  const char *argv[] = {"EVAL",   sluice__lua_sem_release.body,
                        "4",      H,
                        Q,        B,
                        M,        "4500",
                        "30000",  "3000",
                        "0",      WAKE,
                        "120000", "0123456789abcdef0123456789abcdef"};
  redisReply *r = redisCommandArgv(rc, 14, argv, NULL);
  TH_ASSERT(r != NULL);
  TH_ASSERT_EQ(r->type, REDIS_REPLY_ARRAY);
  TH_ASSERT_EQ(r->elements, 1);
  TH_ASSERT_EQ(r->element[0]->integer, 0); /* that id was not held */
  freeReplyObject(r);
  r = redisCommand(rc, "LINDEX %s 0", wake);
  TH_ASSERT(r != NULL && r->type == REDIS_REPLY_STRING);
  int grants = 1;
  for (size_t i = 0; i < r->len; i++) grants += r->str[i] == ',';
  TH_ASSERT_EQ(grants, STEP); /* every grant in the handle's one wake-up */
  freeReplyObject(r);
  redisFree(rc);
  TH_ASSERT_EQ(th_redis_int(&th_server, "ZCARD %s", H), STEP);
  TH_ASSERT_EQ(th_redis_int(&th_server, "ZCARD %s", Q), N - STEP);
  TH_ASSERT_EQ(th_redis_int(&th_server, "ZCARD %s", B), N - STEP);
  TH_ASSERT_EQ(th_redis_int(&th_server, "HEXISTS %s g:%032x", M, STEP), 1);
  TH_ASSERT_EQ(th_redis_int(&th_server, "HEXISTS %s g:%032x", M, STEP + 1), 0);
  TH_ASSERT_EQ(th_redis_int(&th_server, "LLEN %s", wake), 1);
}

/* ---- local hand-off ------------------------------------------------------ */

static sluice_sem *sem_local_handoff(sluice_client *c, const char *name, unsigned permits,
                                     int fair) {
  sluice_sem_options o = sem_test_options(permits, 10000);
  o.fair = fair;
  o.local_handoff = 1;
  return sem_test_new_opts(c, name, &o);
}

static sluice_sem_metrics sem_metrics(const sluice_sem *s) {
  sluice_sem_metrics m;
  sluice_sem_get_metrics(s, &m);
  return m;
}

/* Run the loop until n blocking acquires of s were refused once (queued). */
static void loop_until_queued(struct event_base *base, const sluice_sem *s, uint64_t n) {
  uint64_t until = th_now_ms() + 5000;
  while (sem_metrics(s).waits < n && th_now_ms() < until) th_loop_for(base, 5);
  TH_ASSERT_EQ(sem_metrics(s).waits, n);
}

/* Run the loop until the sorted set key holds want members. */
static void loop_until_zcard(struct event_base *base, const char *key, long long want) {
  uint64_t until = th_now_ms() + 5000;
  while (th_redis_int(&th_server, "ZCARD %s", key) != want && th_now_ms() < until)
    th_loop_for(base, 5);
  TH_ASSERT_EQ(th_redis_int(&th_server, "ZCARD %s", key), want);
}

typedef struct handoff_log {
  int next;
  int released_at, granted_at, release_status;
} handoff_log;

static void handoff_released(sluice_sem *sem, int status, void *ud) {
  handoff_log *o = ud;
  o->released_at = ++o->next;
  o->release_status = status;
}

typedef struct handoff_acq {
  acq_result r;
  handoff_log *log;
} handoff_acq;

static void handoff_granted(sluice_sem *sem, int status, sluice_permit *permit, void *ud) {
  handoff_acq *a = ud;
  a->log->granted_at = ++a->log->next;
  acq_cb(sem, status, permit, &a->r);
}

/* The lease goes to the queued waiter of the same handle without a Redis
 * step: same id and token, the releaser answered first, the waiter out of
 * Redis's queue, one holder in Redis throughout. */
static void test_local_handoff_passes_lease(void) {
  sem_fx fx = sem_fx_open();
  sluice_sem *s = sem_local_handoff(fx.c, "lh", 1, 0);
  acq_result a = sem_hold(fx.base, s);
  char id[33];
  memcpy(id, sluice_permit_id(a.permit), sizeof id);
  uint64_t fence = sluice_permit_fence(a.permit);
  handoff_log log = {0};
  handoff_acq w = {{0}, &log};
  TH_ASSERT_EQ(sluice_sem_acquire(s, 5000, handoff_granted, &w, NULL), SLUICE_OK);
  loop_until_queued(fx.base, s, 1);
  TH_ASSERT_EQ(th_redis_int(&th_server, "ZCARD sluice:sem:{lh}:queue"), 1);
  TH_ASSERT_EQ(sluice_permit_release(a.permit, handoff_released, &log), SLUICE_OK);
  TH_ASSERT_EQ(log.next, 0); /* nothing inside the call */
  TH_ASSERT(th_loop_until(fx.base, &w.r.done, 1000));
  TH_ASSERT_EQ(w.r.status, SLUICE_OK);
  TH_ASSERT_EQ(log.release_status, SLUICE_OK);
  TH_ASSERT_EQ(log.released_at, 1);
  TH_ASSERT_EQ(log.granted_at, 2);
  TH_ASSERT_STR_EQ(sluice_permit_id(w.r.permit), id);
  TH_ASSERT_EQ(sluice_permit_fence(w.r.permit), fence);
  TH_ASSERT_CMP(sluice_permit_remaining_ms(w.r.permit), >, 5000);
  TH_ASSERT_EQ(sem_metrics(s).local_handoffs, 1);
  TH_ASSERT_EQ(th_redis_int(&th_server, "ZCARD sluice:sem:{lh}:holders"), 1);
  TH_ASSERT_CMP(th_redis_int(&th_server, "ZSCORE sluice:sem:{lh}:holders %s", id), >, 0);
  loop_until_zcard(fx.base, "sluice:sem:{lh}:queue", 0);
  /* The lease renews under its new holder. */
  TH_ASSERT_EQ(sluice_permit_lost(w.r.permit), 0);
  /* Nobody waits now: the release goes to Redis. */
  TH_ASSERT_EQ(sluice_permit_release(w.r.permit, NULL, NULL), SLUICE_OK);
  loop_until_zcard(fx.base, "sluice:sem:{lh}:holders", 0);
  acq_result r = sem_hold(fx.base, s);
  TH_ASSERT(strcmp(sluice_permit_id(r.permit), id) != 0);
  TH_ASSERT_CMP(sluice_permit_fence(r.permit), >, fence);
  sluice_permit_release(r.permit, NULL, NULL);
  TH_ASSERT_EQ(sem_metrics(s).local_handoffs, 1);
  sem_case_close(&fx, s);
}

/* A chain of waiters, each releasing as soon as it is granted: a lease is
 * handed on SLUICE_LOCAL_HANDOFFS_MAX times in a row, then its release goes
 * through Redis, whose queue serves the oldest waiter with a new lease. That
 * one's first lease is short until its renewal lands (released before, it
 * goes through Redis too). */
enum { CHAIN = SLUICE_LOCAL_HANDOFFS_MAX + 2 };
typedef struct chain_link {
  int done, status;
  char id[33];
} chain_link;

static void chain_granted(sluice_sem *sem, int status, sluice_permit *permit, void *ud) {
  chain_link *l = ud;
  l->done++;
  l->status = status;
  if (status != SLUICE_OK) return;
  memcpy(l->id, sluice_permit_id(permit), sizeof l->id);
  sluice_permit_release(permit, NULL, NULL);
}

static void test_local_handoff_bounded(void) {
  sem_fx fx = sem_fx_open();
  sluice_sem *s = sem_local_handoff(fx.c, "lhb", 1, 0);
  acq_result a = sem_hold(fx.base, s);
  chain_link w[CHAIN];
  memset(w, 0, sizeof w);
  for (int i = 0; i < CHAIN; i++) {
    TH_ASSERT_EQ(sluice_sem_acquire(s, 5000, chain_granted, &w[i], NULL), SLUICE_OK);
    loop_until_queued(fx.base, s, (uint64_t)i + 1); /* arrival order in Redis too */
  }
  const char *first = sluice_permit_id(a.permit);
  char id[33];
  memcpy(id, first, sizeof id);
  sluice_permit_release(a.permit, NULL, NULL);
  TH_ASSERT(th_loop_until(fx.base, &w[CHAIN - 1].done, 5000));
  for (int i = 0; i < CHAIN; i++) {
    TH_ASSERT_EQ(w[i].done, 1);
    TH_ASSERT_EQ(w[i].status, SLUICE_OK);
  }
  for (int i = 0; i < SLUICE_LOCAL_HANDOFFS_MAX; i++) TH_ASSERT_STR_EQ(w[i].id, id);
  TH_ASSERT(strcmp(w[CHAIN - 2].id, id) != 0); /* through Redis: a new lease */
  /* (The last gets a lease of its own, or the one before's in a new chain
   * once that one is sound: on a master with replicas a hand-off is whole
   * as soon as its waiter has it confirmed.) */
  TH_ASSERT(strcmp(w[CHAIN - 1].id, id) != 0);
  int new_chain = strcmp(w[CHAIN - 1].id, w[CHAIN - 2].id) == 0;
  TH_ASSERT_EQ(sem_metrics(s).local_handoffs, SLUICE_LOCAL_HANDOFFS_MAX + new_chain);
  loop_until_zcard(fx.base, "sluice:sem:{lhb}:holders", 0);
  loop_until_zcard(fx.base, "sluice:sem:{lhb}:queue", 0);
  sem_case_close(&fx, s);
}

/* Two releases in one loop turn go to two different waiters. */
static void test_local_handoff_two_in_one_turn(void) {
  sem_fx fx = sem_fx_open();
  sluice_sem *s = sem_local_handoff(fx.c, "lh2", 2, 0);
  acq_result h[2], w[2];
  memset(w, 0, sizeof w);
  h[0] = sem_try(fx.base, s);
  h[1] = sem_try(fx.base, s);
  TH_ASSERT_EQ(h[0].status, SLUICE_OK);
  TH_ASSERT_EQ(h[1].status, SLUICE_OK);
  char id[2][33];
  for (int i = 0; i < 2; i++) {
    memcpy(id[i], sluice_permit_id(h[i].permit), sizeof id[i]);
    TH_ASSERT_EQ(sluice_sem_acquire(s, 5000, acq_cb, &w[i], NULL), SLUICE_OK);
  }
  loop_until_queued(fx.base, s, 2);
  for (int i = 0; i < 2; i++) sluice_permit_release(h[i].permit, NULL, NULL);
  TH_ASSERT(th_loop_until(fx.base, &w[1].done, 1000));
  TH_ASSERT(th_loop_until(fx.base, &w[0].done, 1000));
  for (int i = 0; i < 2; i++) {
    TH_ASSERT_EQ(w[i].done, 1);
    TH_ASSERT_EQ(w[i].status, SLUICE_OK);
    TH_ASSERT_STR_EQ(sluice_permit_id(w[i].permit), id[i]); /* oldest waiter first */
  }
  TH_ASSERT_EQ(sem_metrics(s).local_handoffs, 2);
  loop_until_zcard(fx.base, "sluice:sem:{lh2}:queue", 0);
  TH_ASSERT_EQ(th_redis_int(&th_server, "ZCARD sluice:sem:{lh2}:holders"), 2);
  for (int i = 0; i < 2; i++) sluice_permit_release(w[i].permit, NULL, NULL);
  loop_until_zcard(fx.base, "sluice:sem:{lh2}:holders", 0);
  sem_case_close(&fx, s);
}

/* Fair order belongs to Redis's queue: no local hand-off. */
static void test_local_handoff_not_fair(void) {
  sem_fx fx = sem_fx_open();
  sluice_sem *s = sem_local_handoff(fx.c, "lhf", 1, 1);
  acq_result a = sem_hold(fx.base, s);
  char id[33];
  memcpy(id, sluice_permit_id(a.permit), sizeof id);
  acq_result w = {0};
  TH_ASSERT_EQ(sluice_sem_acquire(s, 5000, acq_cb, &w, NULL), SLUICE_OK);
  loop_until_queued(fx.base, s, 1);
  sluice_permit_release(a.permit, NULL, NULL);
  TH_ASSERT(th_loop_until(fx.base, &w.done, 3000));
  TH_ASSERT_EQ(w.status, SLUICE_OK);
  TH_ASSERT(strcmp(sluice_permit_id(w.permit), id) != 0);
  TH_ASSERT_EQ(sem_metrics(s).local_handoffs, 0);
  sluice_permit_release(w.permit, NULL, NULL);
  sem_case_close(&fx, s);
}

/* The releaser frees the handle in its callback, before the waiter is told:
 * the waiter hears SLUICE_ECANCELED and the lease goes back to Redis. */
typedef struct free_on_release {
  sluice_sem *sem;
  int done, status;
} free_on_release;

static void release_then_free(sluice_sem *sem, int status, void *ud) {
  free_on_release *f = ud;
  f->done++;
  f->status = status;
  sluice_sem_free(f->sem);
}

static void test_local_handoff_free_in_release_cb(void) {
  sem_fx fx = sem_fx_open();
  sluice_sem *s = sem_local_handoff(fx.c, "lhx", 1, 0);
  acq_result w;
  acq_result a = sem_hold_with_waiter(fx.base, s, s, 5000, &w);
  loop_until_queued(fx.base, s, 1);
  free_on_release f = {s, 0, 0};
  sluice_permit_release(a.permit, release_then_free, &f);
  TH_ASSERT(th_loop_until(fx.base, &w.done, 3000));
  TH_ASSERT_EQ(f.done, 1);
  TH_ASSERT_EQ(f.status, SLUICE_OK);
  TH_ASSERT_EQ(w.done, 1);
  TH_ASSERT_EQ(w.status, SLUICE_ECANCELED);
  TH_ASSERT(w.permit == NULL);
  loop_until_zcard(fx.base, "sluice:sem:{lhx}:holders", 0);
  loop_until_zcard(fx.base, "sluice:sem:{lhx}:queue", 0);
  sem_fx_close(&fx);
}

/* The fence of one try on s, released at once. */
static uint64_t fence_of_try(struct event_base *base, sluice_sem *s) {
  acq_result a = sem_hold(base, s);
  uint64_t f = sluice_permit_fence(a.permit);
  th_status rel = {0};
  TH_ASSERT_EQ(sluice_permit_release(a.permit, rel_cb, &rel), SLUICE_OK);
  TH_ASSERT(th_loop_until(base, &rel.done, 5000));
  return f;
}

/* A replica promoted while its old master lives on (a partition): every
 * token of the new master outranks the old one's, issued before or after,
 * so a fenced resource refuses the deposed side from the new side's first
 * write; a restart that lost the data starts above both. */
static void test_fence_outranks_deposed_master(void) {
  th_redis old_m, new_m;
  th_redis_start_pair(&old_m, &new_m, NULL);
  struct event_base *base = th_precise_base();
  /* Both sides answer their grants at once: the order of tokens alone is
   * tested (a grant the old side could not confirm would fail). */
  sluice_client_options o;
  th_client_quick_options(&o, old_m.url, 2000);
  sluice_client *co = th_client_with(base, &o);
  o.url = new_m.url;
  sluice_client *cn = th_client_with(base, &o);
  TH_ASSERT_EQ(sluice_client_set_replica_ack(co, 0), SLUICE_OK);
  TH_ASSERT_EQ(sluice_client_set_replica_ack(cn, 0), SLUICE_OK);
  sluice_sem *so = sem_test_new(co, "fx", 1, 5000, 0), *sn = sem_test_new(cn, "fx", 1, 5000, 0);

  uint64_t before = fence_of_try(base, so);
  uint64_t end = th_now_ms() + 5000; /* the replica has the grant */
  while (!th_redis_int(&new_m, "EXISTS sluice:sem:{fx}:meta") && th_now_ms() < end) continue;
  TH_ASSERT_EQ(th_redis_int(&new_m, "EXISTS sluice:sem:{fx}:meta"), 1);
  redisReply *r = th_redis_command(&new_m, "REPLICAOF NO ONE");
  freeReplyObject(r);

  uint64_t old_side = fence_of_try(base, so);
  TH_ASSERT_CMP(old_side, >, before);
  uint64_t new_side = fence_of_try(base, sn);
  TH_ASSERT_CMP(new_side, >, old_side);
  for (int i = 0; i < 50; i++) TH_ASSERT_CMP(fence_of_try(base, so), <, new_side);
  TH_ASSERT_CMP(fence_of_try(base, sn), >, new_side);

  th_redis_restart(&new_m); /* empty */
  uint64_t t0 = th_now_ms(), reborn = 0;
  while (!reborn && th_now_ms() - t0 < 5000) {
    acq_result a = {0};
    TH_ASSERT_EQ(sluice_sem_try_acquire(sn, acq_cb, &a), SLUICE_OK);
    TH_ASSERT(th_loop_until(base, &a.done, 5000));
    if (a.status == SLUICE_OK) reborn = sluice_permit_fence(a.permit);
    if (a.permit) sluice_permit_release(a.permit, NULL, NULL);
  }
  TH_ASSERT_CMP(reborn, >, new_side);

  sluice_sem_free(so);
  sluice_sem_free(sn);
  sluice_client_free(co);
  sluice_client_free(cn);
  TH_ASSERT(th_loop_drain(base, 5000));
  event_base_free(base);
  th_redis_stop(&new_m);
  th_redis_stop(&old_m);
}

static const th_case cases[] = {
    TH_CASE(try_acquire_counts_permits, 0),
    TH_CASE(release_only_own_and_idempotent, 0),
    TH_CASE(blocking_acquire_woken_by_release, 0),
    TH_CASE(blocking_acquire_times_out, 0),
    TH_CASE(cancel, 0),
    TH_CASE(crashed_holder_expires, 0),
    TH_CASE(renewal_keeps_permit, 0),
    TH_CASE(renewals_batched, 0),
    TH_CASE(lost_definite, 0),
    TH_CASE(free_lapsed_released, 0, .standalone_only = "pauses the server"),
    TH_CASE(free_lapsed_held, 0, .standalone_only = "pauses the server"),
    TH_CASE(lost_uncertain, 0, .standalone_only = "pauses the server"),
    TH_CASE(restart_restores_permits, 0, .standalone_only = "restarts the server"),
    TH_CASE(restart_loses_permits_without_replay, 0, .standalone_only = "restarts the server"),
    TH_CASE(fencing_increases, 0),
    TH_CASE(fence_outranks_deposed_master, 0, .standalone_only = "starts a master and replica"),
    TH_CASE(fair_fifo_and_try_refused, 0),
    TH_CASE(fair_dead_waiter_evicted, 0),
    TH_CASE(dead_waiter_skipped_by_wakeups, 0),
    TH_CASE(inspect, 0),
    TH_CASE(free_inside_callback_and_close_cancels, 0),
    TH_CASE(close_cb_frees_last_object, 0),
    TH_CASE(bad_input, 0),
    TH_CASE(wait_survives_restart, 0, .standalone_only = "restarts the server"),
    TH_CASE(waiters_share_one_connection, 0),
    TH_CASE(free_with_attempt_in_flight, 0, .standalone_only = "pauses the server"),
    TH_CASE(hand_off_many_in_one_step, 0,
            .standalone_only = "runs the release script by hand on one node"),
    TH_CASE(local_handoff_passes_lease, 0),
    TH_CASE(local_handoff_bounded, 0),
    TH_CASE(local_handoff_two_in_one_turn, 0),
    TH_CASE(local_handoff_not_fair, 0),
    TH_CASE(local_handoff_free_in_release_cb, 0),
};
TH_MAIN(cases)
