/* Short faults must stay short: each case is one way a blip used to turn
 * into a long outage (connections killed during releases, a stalled Redis
 * that later ran abandoned steps, a handshake that failed half-way, a
 * consumer or waiter that lagged the connection's return), plus the
 * hand-off of a released permit to the next waiter. */
#include <signal.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "dq_util.h"
#include "sem_util.h"

/* Options for a client of th_server (over its unix socket). */
static void blip_options(sluice_client_options *o, unsigned op_timeout_ms,
                         unsigned reconnect_min_ms, unsigned reconnect_max_ms) {
  th_client_options(o, NULL);
  o->unix_path = th_server.sock;
  o->reconnect_min_ms = reconnect_min_ms;
  o->reconnect_max_ms = reconnect_max_ms;
  o->op_timeout_ms = op_timeout_ms;
}

static sluice_client *client_with_backoff(struct event_base *base, const char *user,
                                          const char *pass, unsigned op_timeout_ms,
                                          unsigned reconnect_max_ms) {
  sluice_client_options o;
  blip_options(&o, op_timeout_ms, 20, reconnect_max_ms);
  o.username = user;
  o.password = pass;
  return th_client_with(base, &o);
}

static sluice_client *client_with(struct event_base *base, const char *user, const char *pass,
                                  unsigned op_timeout_ms) {
  return client_with_backoff(base, user, pass, op_timeout_ms, 200);
}

/* Redis gone: connections refused until th_redis_restart brings it back on
 * the same socket. */
static void redis_kill(void) {
  kill(th_server.pid, SIGKILL);
  waitpid(th_server.pid, NULL, 0);
  th_server.pid = 0;
  unlink(th_server.sock);
}

static long long holders(const char *sem) {
  return th_redis_int(&th_server, "ZCARD sluice:sem:{%s}:holders", sem);
}

/* Run the loop until cond() holds or ms pass; 1 if it held. */
static int loop_until_cond(struct event_base *base, int (*cond)(void *), void *arg, unsigned ms) {
  uint64_t end = th_now_ms() + ms;
  while (!cond(arg)) {
    if (th_now_ms() >= end) return 0;
    int none = 0;
    th_loop_until(base, &none, 10);
  }
  return 1;
}

static int no_holders(void *name) { return holders(name) == 0; }

/* 1. Releases issued while the connection is killed are not lost: they are
 * sent again after the reconnect, so the permits come free in about a
 * reconnect, not a lease. */
static void test_releases_survive_kill(void) {
  sem_fx fx = sem_fx_open();
  sluice_sem *s = sem_test_new(fx.c, "kill", 16, 30000, 0);
  acq_result a[16];
  for (int i = 0; i < 16; i++) {
    a[i] = sem_try(fx.base, s);
    TH_ASSERT_EQ(a[i].status, SLUICE_OK);
  }
  for (int i = 0; i < 16; i++) sluice_permit_release(a[i].permit, NULL, NULL);
  /* The releases leave on the next loop turn: the connection is gone then. */
  th_redis_int(&th_server, "CLIENT KILL TYPE normal SKIPME yes");
  uint64_t t0 = th_now_ms();
  TH_ASSERT(loop_until_cond(fx.base, no_holders, (void *)"kill", 3000));
  TH_ASSERT_CMP(th_now_ms() - t0, <, 1500);
  acq_result n = sem_hold(fx.base, s);
  sluice_permit_release(n.permit, NULL, NULL);
  sem_case_close(&fx, s);
}

/* 2. A waiter gives up while Redis is stopped; when Redis resumes it runs
 * the attempts still unread on the dropped connection and may grant them.
 * Those grants belong to nobody: the library's releases, retried after the
 * reconnect, remove them, so no holder is left once the releases land. */
static void test_stall_leaves_no_orphan(void) {
  sem_fx fx = sem_fx_open();
  sluice_client *wc = client_with(fx.base, NULL, NULL, 1000);
  sluice_sem *hs = sem_test_new(fx.c, "stall", 1, 3000, 0);
  sluice_sem *ws = sem_test_new(wc, "stall", 1, 30000, 0);
  acq_result w;
  acq_result h = sem_hold_with_waiter(fx.base, hs, ws, 3000, &w);
  th_loop_for(fx.base, 300);
  th_redis_pause(&th_server);
  TH_ASSERT(th_loop_until(fx.base, &w.done, 5000));
  TH_ASSERT(w.status == SLUICE_ECONNECTION || w.status == SLUICE_ETIMEDOUT);
  th_loop_for(fx.base, 1500); /* the holder's lease runs out meanwhile */
  th_redis_resume(&th_server);
  /* Stale attempts run now; our releases follow them after the reconnect. */
  TH_ASSERT(loop_until_cond(fx.base, no_holders, (void *)"stall", 4000));
  th_loop_for(fx.base, 300);
  TH_ASSERT_EQ(holders("stall"), 0);
  sluice_permit_release(h.permit, NULL, NULL);
  sluice_sem_free(hs);
  sluice_sem_free(ws);
  sluice_client_free(wc);
  sem_fx_close(&fx);
}

/* 3. "Not sent" and "sent, outcome unknown" are different statuses: a push
 * whose connection is dropped after it left answers SLUICE_EINDOUBT (and
 * may have been queued: here it was); a push while the client knows it is
 * disconnected answers SLUICE_ECONNECTION and queues nothing. */
static void on_info_done(sluice_dq *dq, int status, const sluice_dq_info *info, void *ud) {
  *(int *)ud = status == SLUICE_OK ? 1 : -1;
}

static void test_doubt_is_not_not_sent(void) {
  struct event_base *base = event_base_new();
  /* No record: its INFO polls could answer just before the pause and
   * count as a reply inside the 300 ms this case needs silent. */
  sluice_client_options o;
  blip_options(&o, 300, 20, 200);
  o.replay_off = 1;
  sluice_client *c = th_client_with(base, &o);
  sluice_dq_options qo;
  sluice_dq_options_init(&qo);
  qo.op_timeout_ms = 3000;
  sluice_dq *slow = NULL, *fast = NULL;
  TH_ASSERT_EQ(sluice_dq_new(c, "doubt", &qo, &slow), SLUICE_OK);
  TH_ASSERT_EQ(sluice_dq_new(c, "doubt", NULL, &fast), SLUICE_OK);
  dqt_push warm;
  TH_ASSERT_EQ(dqt_push_wait(base, slow, "w", "w", 600000, &warm), SLUICE_OK);
  th_redis_pause(&th_server);
  dqt_push p = {0};
  sluice_dq_item it = {"x", 1, 600000, 0, "sent"};
  TH_ASSERT_EQ(sluice_dq_push(slow, &it, dqt_on_push, &p), SLUICE_OK);
  /* A step with a 300 ms deadline gets nothing back: the client presumes
   * the connection dead and drops it, with the push on it. */
  int info = 0;
  TH_ASSERT_EQ(sluice_dq_inspect(fast, on_info_done, &info), SLUICE_OK);
  TH_ASSERT(th_loop_until(base, &p.done, 3000));
  TH_ASSERT_EQ(p.status, SLUICE_EINDOUBT);
  dqt_push q = {0};
  sluice_dq_item it2 = {"y", 1, 600000, 0, "unsent"};
  TH_ASSERT_EQ(sluice_dq_push(fast, &it2, dqt_on_push, &q), SLUICE_OK);
  TH_ASSERT(th_loop_until(base, &q.done, 3000));
  TH_ASSERT_EQ(q.status, SLUICE_ECONNECTION);
  th_redis_resume(&th_server);
  /* Redis read the push before the connection went: it was queued. */
  uint64_t end = th_now_ms() + 3000;
  while (th_redis_int(&th_server, "ZCARD sluice:dq:{doubt}:z") < 2 && th_now_ms() < end)
    th_loop_for(base, 20);
  TH_ASSERT_EQ(th_redis_int(&th_server, "HEXISTS sluice:dq:{doubt}:h psent"), 1);
  TH_ASSERT_EQ(th_redis_int(&th_server, "HEXISTS sluice:dq:{doubt}:h punsent"), 0);
  sluice_dq_free(slow);
  sluice_dq_free(fast);
  dqt_finish(base, c);
}

/* 4. A handshake that fails reports the first failing step in Redis's own
 * words, and never "connected". */
static int ups, downs;
static void on_state(sluice_client *c, int connected, int status, void *ud) {
  if (connected) ups++;
  else downs++;
}

static void expect_handshake_error(const char *user, const char *pass, const char *words) {
  struct event_base *base = event_base_new();
  /* A backoff that may grow to 2 s: the number of attempts shows it grows. */
  sluice_client *c = client_with_backoff(base, user, pass, 2000, 2000);
  ups = downs = 0;
  sluice_client_set_state_cb(c, on_state, NULL);
  th_loop_for(base, 1000);
  TH_ASSERT_EQ(ups, 0);
  TH_ASSERT_CMP(downs, >=, 1);
  TH_ASSERT_CMP(downs, <=, 8); /* the backoff grows: 20, 40, 80 ... ms */
  TH_ASSERT(!sluice_client_is_connected(c));
  const char *err = sluice_client_last_error(c);
  if (!strstr(err, words)) th_fail(__FILE__, __LINE__, "\"%s\" lacks \"%s\"", err, words);
  th_free_client_and_loop(base, c, 3000);
}

static void test_handshake_errors(void) {
  th_redis_int(&th_server, "ACL SETUSER noscript on >pw ~* &* +@all -evalsha -eval -script");
  expect_handshake_error("noscript", "pw", "NOPERM");
  expect_handshake_error("noscript", "wrong", "WRONGPASS");
  th_redis_int(&th_server, "ACL DELUSER noscript");
}

/* 5. A consumer takes as soon as the connection is back, not after the
 * backoff its failed takes built up during the outage. (A take whose answer
 * was lost is another matter: its messages stay in flight until their
 * visibility timeout, as at-least-once delivery requires.) */
static uint64_t up_at;
static void note_up(sluice_client *c, int connected, int status, void *ud) {
  if (connected) up_at = th_now_ms();
}

/* When the last message came, beside up_at (ud: dqt_ack_counted's count). */
static uint64_t msg_at;
static void on_msg(sluice_dq_consumer *con, sluice_dq_msg *m, void *ud) {
  msg_at = th_now_ms();
  dqt_ack_counted(con, m, ud);
}

static void test_consumer_resumes_at_once(void) {
  struct event_base *base = event_base_new();
  sluice_client *c = client_with(base, NULL, NULL, 200);
  sluice_client_set_state_cb(c, note_up, NULL);
  sluice_dq *dq = dqt_queue(c, "resume");
  dqt_push p;
  TH_ASSERT_EQ(dqt_push_wait(base, dq, "m", "m", 600, &p), SLUICE_OK);
  int n = 0;
  sluice_dq_consumer *con = NULL;
  TH_ASSERT_EQ(sluice_dq_consumer_new(c, "resume", NULL, on_msg, &n, &con), SLUICE_OK);
  th_loop_for(base, 100);
  th_redis_int(&th_server, "SAVE"); /* the restart below brings the message back */
  redis_kill();                     /* the message falls due while Redis is away; takes fail */
  th_loop_for(base, 2500);
  TH_ASSERT_EQ(n, 0);
  up_at = 0;
  th_redis_restart(&th_server);
  TH_ASSERT(th_loop_until(base, &n, 5000));
  TH_ASSERT(up_at != 0);
  TH_ASSERT_CMP(msg_at - up_at, <, 150);
  sluice_dq_consumer_free(con);
  sluice_dq_free(dq);
  dqt_finish(base, c);
}

/* 5b. The connections to one node come back together: once the blocking
 * connection is up, the command connection stops waiting out the backoff
 * of its refused attempts (a minute here, which no step could wait) and
 * connects too, so steps flow and the consumer takes. */
static int client_up, client_down;
static void note_client_up(sluice_client *c, int connected, int status, void *ud) {
  client_up = connected;
  client_down = !connected;
}

static void test_sibling_up_ends_backoff(void) {
  struct event_base *base = event_base_new();
  sluice_client_options o;
  blip_options(&o, 2000, 60000, 60000);
  sluice_client *c = th_client_with(base, &o);
  sluice_client_set_state_cb(c, note_client_up, NULL);
  sluice_dq *dq = dqt_queue(c, "sibling");
  dqt_push p;
  TH_ASSERT_EQ(dqt_push_wait(base, dq, NULL, "before", 0, &p), SLUICE_OK);
  TH_ASSERT_EQ(client_up, 1);
  redis_kill();
  TH_ASSERT(th_loop_until(base, &client_down, 5000));
  th_redis_restart(&th_server);
  /* The command connection waits out at least 30 s: steps fail fast. */
  TH_ASSERT_EQ(dqt_push_wait(base, dq, NULL, "refused", 0, &p), SLUICE_ECONNECTION);
  /* A consumer's blocking connection is new: it connects at once. */
  int n = 0;
  sluice_dq_consumer *con = NULL;
  TH_ASSERT_EQ(sluice_dq_consumer_new(c, "sibling", NULL, dqt_ack_counted, &n, &con), SLUICE_OK);
  TH_ASSERT(th_loop_until(base, &client_up, 10000));
  TH_ASSERT_EQ(dqt_push_wait(base, dq, NULL, "after", 0, &p), SLUICE_OK);
  TH_ASSERT(th_loop_until(base, &n, 10000));
  sluice_dq_consumer_free(con);
  sluice_dq_free(dq);
  dqt_finish(base, c);
}

/* 6. With fail_fast a blocking acquire answers "unavailable" within about a
 * heartbeat when Redis is down, instead of waiting out its timeout; the
 * blocking connection's state is visible. */
static void test_fail_fast_and_health(void) {
  sem_fx fx = sem_fx_open();
  sluice_sem_options o;
  sluice_sem_options_init(&o);
  o.ttl_ms = 5000;
  o.fail_fast = 1;
  sluice_sem *s;
  TH_ASSERT_EQ(sluice_sem_new(fx.c, "ff", &o, &s), SLUICE_OK);
  acq_result h = sem_try(fx.base, s);
  acq_result w = {0};
  TH_ASSERT_EQ(sluice_sem_acquire(s, 10000, acq_cb, &w, NULL), SLUICE_OK);
  th_loop_for(fx.base, 200);
  sluice_client_health hl;
  sluice_client_get_health(fx.c, &hl);
  TH_ASSERT_EQ(hl.command_up, 1);
  TH_ASSERT_EQ(hl.blocking_up, 1);
  uint64_t t0 = th_now_ms();
  redis_kill();
  TH_ASSERT(th_loop_until(fx.base, &w.done, 3000));
  TH_ASSERT_EQ(w.status, SLUICE_ECONNECTION);
  TH_ASSERT_CMP(th_now_ms() - t0, <, 2000);
  sluice_client_get_health(fx.c, &hl);
  TH_ASSERT_EQ(hl.command_up, 0);
  TH_ASSERT(hl.blocking_up != 1);
  th_redis_restart(&th_server);
  sluice_permit_release(h.permit, NULL, NULL);
  sem_case_close(&fx, s);
}

/* 7. Hand-off: a release gives the freed permit to the queued waiter in
 * the same step — when the release is answered the waiter already holds
 * it — and the waiter owns it without another attempt. */
typedef struct handoff {
  long long holders_at_release;
  int released;
} handoff;

static void on_released(sluice_sem *sem, int status, void *ud) {
  handoff *h = ud;
  h->holders_at_release = holders("ho");
  h->released = status == SLUICE_OK ? 1 : -1;
}

static void test_release_hands_off(void) {
  sem_fx fx = sem_fx_open();
  sluice_client *wc = sem_test_client(fx.base);
  sluice_sem *hs = sem_test_new(fx.c, "ho", 1, 5000, 0);
  sluice_sem *ws = sem_test_new(wc, "ho", 1, 5000, 0);
  acq_result w;
  acq_result h = sem_hold_with_waiter(fx.base, hs, ws, 5000, &w);
  th_loop_for(fx.base, 100);
  TH_ASSERT_EQ(w.done, 0);
  handoff ho = {-1, 0};
  TH_ASSERT_EQ(sluice_permit_release(h.permit, on_released, &ho), SLUICE_OK);
  TH_ASSERT(th_loop_until(fx.base, &ho.released, 2000));
  TH_ASSERT_EQ(ho.released, 1);
  TH_ASSERT_EQ(ho.holders_at_release, 1); /* already the waiter's */
  TH_ASSERT(th_loop_until(fx.base, &w.done, 2000));
  TH_ASSERT_EQ(w.status, SLUICE_OK);
  /* Its short first lease was renewed to a full one. */
  th_loop_for(fx.base, 200);
  TH_ASSERT_CMP(sluice_permit_remaining_ms(w.permit), >, 4000);
  TH_ASSERT_EQ(holders("ho"), 1);
  acq_result again = sem_try(fx.base, hs);
  TH_ASSERT_EQ(again.status, SLUICE_EBUSY);
  sluice_permit_release(w.permit, NULL, NULL);
  sluice_sem_free(ws);
  sluice_client_free(wc);
  sem_case_close(&fx, hs);
}

/* A handed permit's first lease is a heartbeat; with a lease much longer
 * than that (60 s against 3 s) the permit must still be held, not lost the
 * moment it arrives, and then renewed to its full lease. */
static void test_hand_off_long_lease(void) {
  sem_fx fx = sem_fx_open();
  sluice_sem *hs = sem_test_new(fx.c, "long", 1, 60000, 0);
  sluice_sem *ws = sem_test_new(fx.c, "long", 1, 60000, 0);
  acq_result w;
  acq_result h = sem_hold_with_waiter(fx.base, hs, ws, 5000, &w);
  th_loop_for(fx.base, 100);
  sluice_permit_release(h.permit, NULL, NULL);
  TH_ASSERT(th_loop_until(fx.base, &w.done, 2000));
  TH_ASSERT_EQ(w.status, SLUICE_OK);
  th_loop_for(fx.base, 300);
  TH_ASSERT_EQ(sluice_permit_lost(w.permit), 0);
  TH_ASSERT_CMP(sluice_permit_remaining_ms(w.permit), >, 50000);
  sluice_permit_release(w.permit, NULL, NULL);
  sluice_sem_free(ws);
  sem_case_close(&fx, hs);
}

/* A release by id, for a holder that lost its handle. */
static void on_rel_status(sluice_sem *sem, int status, void *ud) {
  *(int *)ud = status ? status : 1;
}

static void test_release_by_id(void) {
  sem_fx fx = sem_fx_open();
  sluice_client *other = sem_test_client(fx.base);
  sluice_sem *a = sem_test_new(fx.c, "byid", 1, 30000, 0);
  sluice_sem *b = sem_test_new(other, "byid", 1, 30000, 0);
  acq_result h = sem_try(fx.base, a);
  char id[33];
  memcpy(id, sluice_permit_id(h.permit), 33);
  int st = 0;
  TH_ASSERT_EQ(sluice_sem_release_id(b, id, on_rel_status, &st), SLUICE_OK);
  TH_ASSERT(th_loop_until(fx.base, &st, 2000));
  TH_ASSERT_EQ(st, 1);
  TH_ASSERT_EQ(holders("byid"), 0);
  st = 0;
  TH_ASSERT_EQ(sluice_sem_release_id(b, id, on_rel_status, &st), SLUICE_OK);
  TH_ASSERT(th_loop_until(fx.base, &st, 2000));
  TH_ASSERT_EQ(st, SLUICE_ENOTFOUND);
  TH_ASSERT_EQ(sluice_sem_release_id(b, "xyz", NULL, NULL), SLUICE_EINVAL);
  TH_ASSERT_EQ(sluice_sem_release_id(b, NULL, NULL, NULL), SLUICE_EINVAL);
  TH_ASSERT_EQ(sluice_sem_release_id(NULL, id, NULL, NULL), SLUICE_EINVAL);
  sluice_permit_release(h.permit, NULL, NULL);
  sluice_sem_free(a);
  sluice_sem_free(b);
  sluice_client_free(other);
  sem_fx_close(&fx);
}

static void on_rel_done(sluice_sem *sem, int status, void *ud) {
  *(int *)ud = status == SLUICE_OK ? 1 : -1;
}

static uint64_t release_calls(sluice_client *c) {
  sluice_client_metrics m;
  sluice_client_get_metrics(c, &m);
  for (unsigned k = 0; k < m.nkinds; k++)
    if (strcmp(m.kinds[k].name, "sem_release") == 0) return m.kinds[k].ops;
  return 0;
}

static uint64_t reconnects(const sluice_client *c) {
  sluice_client_metrics m;
  sluice_client_get_metrics(c, &m);
  return m.reconnects;
}

/* A release Redis answered is kept (no replica here: for the time window)
 * and sent again only to another node: not after a reconnect to the same
 * one, but after a restart (another run_id), where it may be gone. With
 * wait_replicas too (every write falls short here). */
static void test_unreplicated_release_repeated(void) {
  struct event_base *base = event_base_new();
  sluice_client_options o;
  th_client_quick_options(&o, th_server.url, 2000);
  o.wait_replicas = 1;
  o.wait_timeout_ms = 50;
  sluice_client *c = th_client_with(base, &o);
  sluice_sem *s = sem_test_new(c, "unrep", 1, 30000, 0);
  acq_result a = sem_hold(base, s);
  TH_ASSERT_EQ(sluice_permit_replicated(a.permit), 0);
  int done = 0;
  TH_ASSERT_EQ(sluice_permit_release(a.permit, on_rel_done, &done), SLUICE_OK);
  TH_ASSERT(th_loop_until(base, &done, 3000));
  TH_ASSERT_EQ(done, 1); /* it ran: answered as usual */
  TH_ASSERT_EQ(release_calls(c), 1);
  th_redis_int(&th_server, "CLIENT KILL TYPE normal SKIPME yes");
  uint64_t until = th_now_ms() + 3000;
  while (reconnects(c) < 1 && th_now_ms() < until) th_loop_for(base, 10);
  TH_ASSERT_EQ(reconnects(c), 1);
  th_loop_for(base, 200);
  TH_ASSERT_EQ(release_calls(c), 1); /* the same node: nothing to send again */
  th_redis_restart(&th_server);
  until = th_now_ms() + 3000;
  while (release_calls(c) < 2 && th_now_ms() < until) th_loop_for(base, 10);
  TH_ASSERT_EQ(release_calls(c), 2);
  th_loop_for(base, 200);
  TH_ASSERT_EQ(release_calls(c), 2); /* once per new node */
  sluice_sem_free(s);
  th_free_client_and_loop(base, c, 5000);
}

static const th_case cases[] = {
    TH_CASE(releases_survive_kill, 0),
    TH_CASE(stall_leaves_no_orphan, 0),
    TH_CASE(doubt_is_not_not_sent, 0),
    TH_CASE(handshake_errors, 0),
    TH_CASE(consumer_resumes_at_once, 0),
    TH_CASE(sibling_up_ends_backoff, 0, .standalone_only = "kills and restarts the one server"),
    TH_CASE(fail_fast_and_health, 0),
    TH_CASE(release_hands_off, 0),
    TH_CASE(hand_off_long_lease, 0),
    TH_CASE(release_by_id, 0),
    TH_CASE(unreplicated_release_repeated, 0,
            .standalone_only = "kills the one server's clients and restarts it"),
};
TH_MAIN(cases)
