/* Delay queue leases: extending a taken message's visibility by hand and
 * automatically, delivery tokens, loss reports, and a killed consumer's
 * message coming back within the visibility timeout. */
#include <errno.h>
#include <signal.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <event2/event.h>
#include <sluice/sluice.h>

#include "dq_util.h"
#include "harness.h"

enum { HELD_MAX = 64 }; /* a 100 ms visibility redelivers often under valgrind */

/* A handler that keeps every message it gets (the test settles them) and
 * counts losses. */
typedef struct keeper {
  int n;
  sluice_dq_msg *held[HELD_MAX];
  unsigned attempts[HELD_MAX];
  uint64_t tokens[HELD_MAX];
  uint64_t at_ms[HELD_MAX];
  int lost, lost_reason;
  sluice_dq_msg *lost_msg;
} keeper;

static void keep(sluice_dq_consumer *con, sluice_dq_msg *m, void *ud) {
  keeper *k = ud;
  TH_ASSERT(k->n < HELD_MAX);
  k->held[k->n] = m;
  k->attempts[k->n] = sluice_dq_msg_attempt(m);
  k->tokens[k->n] = sluice_dq_msg_delivery(m);
  k->at_ms[k->n] = th_now_ms();
  k->n++;
}

static void on_lost(sluice_dq_consumer *con, sluice_dq_msg *m, int reason, void *ud) {
  keeper *k = ud;
  k->lost++;
  k->lost_reason = reason;
  k->lost_msg = m;
}

static void on_settle(sluice_dq_consumer *con, int status, const char *id, void *ud) {
  th_status_set(ud, status);
}

static sluice_dq_consumer *keeper_consumer(sluice_client *c, unsigned vis, int renew, keeper *k) {
  sluice_dq_consumer_options o = dqt_options(16, 16, vis, 0);
  sluice_dq_consumer *con = NULL;
  TH_ASSERT_EQ(sluice_dq_consumer_new(c, "lease", &o, keep, k, &con), SLUICE_OK);
  TH_ASSERT_EQ(sluice_dq_consumer_set_auto_renew(con, renew), SLUICE_OK);
  sluice_dq_consumer_set_lost_cb(con, on_lost, k);
  return con;
}

/* A call whose callback reports into st (it must accept): run the loop
 * until the callback ran, and return its status. */
static int answered(struct event_base *base, int rc, th_status *st) {
  TH_ASSERT_EQ(rc, SLUICE_OK);
  TH_ASSERT(th_loop_until(base, &st->done, 5000));
  return st->status;
}

static int ack_wait(struct event_base *base, sluice_dq_msg *m) {
  th_status st = {0, 0};
  return answered(base, sluice_dq_ack(m, on_settle, &st), &st);
}

static int extend_wait(struct event_base *base, sluice_dq_msg *m, int64_t ms) {
  th_status st = {0, 0};
  return answered(base, sluice_dq_msg_extend(m, ms, on_settle, &st), &st);
}

/* Queue "lease" holding one message, "job". */
static sluice_dq *queue_with_job(dq_fx *fx) {
  sluice_dq *dq = dqt_queue(fx->c, "lease");
  dqt_push p;
  TH_ASSERT_EQ(dqt_push_wait(fx->base, dq, "job", "work", 0, &p), SLUICE_OK);
  return dq;
}

/* A keeper_consumer, once it has taken its first message. */
static sluice_dq_consumer *first_taker(dq_fx *fx, unsigned vis, int renew, keeper *k) {
  sluice_dq_consumer *con = keeper_consumer(fx->c, vis, renew, k);
  TH_ASSERT(th_loop_until(fx->base, &k->n, 5000));
  return con;
}

/* A case's scene: queue "lease" holding "job", taken by consumer ca
 * (keeper a); a case may start a second one, cb (keeper b), which never
 * renews. */
typedef struct lease_case {
  dq_fx fx;
  sluice_dq *dq;
  keeper a, b;
  sluice_dq_consumer *ca, *cb;
} lease_case;

/* The scene with a first taker of visibility vis, renewing or not. */
static void lease_open(lease_case *lc, unsigned vis, int renew) {
  memset(lc, 0, sizeof *lc);
  lc->fx = dq_fx_open();
  lc->dq = queue_with_job(&lc->fx);
  lc->ca = first_taker(&lc->fx, vis, renew, &lc->a);
}

/* Start cb, of visibility vis (it takes nothing yet). */
static void lease_second(lease_case *lc, unsigned vis) {
  lc->cb = keeper_consumer(lc->fx.c, vis, 0, &lc->b);
}

/* The consumers still open (a case frees its own and sets them NULL), the
 * queue, the fixture. */
static void lease_close(lease_case *lc) {
  sluice_dq_consumer_free(lc->ca);
  sluice_dq_consumer_free(lc->cb);
  sluice_dq_free(lc->dq);
  dq_fx_close(&lc->fx);
}

/* A handler running 10x its 300 ms visibility timeout (3 s) with
 * auto-renewal is never redelivered: a second consumer, idle all along,
 * gets nothing; the lease never lapses; the ack then counts. */
static void test_long_handler_not_redelivered(void) {
  lease_case lc;
  lease_open(&lc, 300, 1);
  lease_second(&lc, 300);
  uint64_t end = th_now_ms() + 3000;
  int64_t least = INT64_MAX;
  while (th_now_ms() < end && !lc.b.n && !lc.a.lost) {
    th_loop_for(lc.fx.base, 20);
    int64_t left = sluice_dq_msg_remaining_ms(lc.a.held[0]);
    if (left < least) least = left;
  }
  th_note("least visibility left seen over 3 s: %lld ms\n", (long long)least);
  TH_ASSERT_EQ(lc.b.n, 0);
  TH_ASSERT_EQ(lc.a.n, 1);
  TH_ASSERT_EQ(lc.a.lost, 0);
  TH_ASSERT_CMP(least, >, 0);
  TH_ASSERT_EQ(ack_wait(lc.fx.base, lc.a.held[0]), SLUICE_OK);
  dqt_info in;
  TH_ASSERT_EQ(dqt_inspect(lc.fx.base, lc.dq, &in).in_flight + in.info.delayed, 0);
  lease_close(&lc);
}

/* An extension by hand: held far past its 100 ms visibility, the message
 * is not redelivered; remaining_ms counts from the new deadline. */
static void test_extend_by_hand(void) {
  lease_case lc;
  lease_open(&lc, 100, 0);
  TH_ASSERT_EQ(extend_wait(lc.fx.base, lc.a.held[0], 2000), SLUICE_OK);
  TH_ASSERT_CMP(sluice_dq_msg_remaining_ms(lc.a.held[0]), >, 1000);
  lease_second(&lc, 100);
  th_loop_for(lc.fx.base, 600);
  TH_ASSERT_EQ(lc.b.n, 0);
  TH_ASSERT_EQ(lc.a.lost, 0);
  /* A shorter extension keeps the later deadline. */
  TH_ASSERT_EQ(extend_wait(lc.fx.base, lc.a.held[0], 1), SLUICE_OK);
  th_loop_for(lc.fx.base, 200);
  TH_ASSERT_EQ(lc.b.n, 0);
  TH_ASSERT_EQ(ack_wait(lc.fx.base, lc.a.held[0]), SLUICE_OK);
  lease_close(&lc);
}

/* Held past its deadline and taken by another consumer, the first
 * delivery can neither extend nor settle: both are refused with
 * SLUICE_ELATE, the lost callback fires once, and the new delivery's token
 * is larger; it extends and acks. */
static void test_extend_after_redelivery_refused(void) {
  lease_case lc;
  lease_open(&lc, 100, 0);
  sluice_dq_consumer_free(lc.ca); /* takes nothing more; its message stays valid */
  lc.ca = NULL;
  lease_second(&lc, 100);
  TH_ASSERT(th_loop_until(lc.fx.base, &lc.b.n, 5000));
  TH_ASSERT_EQ(lc.b.attempts[0], 2);
  TH_ASSERT_CMP(lc.b.tokens[0], >, lc.a.tokens[0]);
  /* a's consumer is freed, but its delivered message is still its own:
   * refusals come back, and the loss is reported. */
  TH_ASSERT_EQ(extend_wait(lc.fx.base, lc.a.held[0], 5000), SLUICE_ELATE);
  TH_ASSERT_EQ(lc.a.lost, 1);
  TH_ASSERT_EQ(lc.a.lost_reason, SLUICE_ELATE);
  TH_ASSERT_EQ(ack_wait(lc.fx.base, lc.a.held[0]), SLUICE_ELATE);
  TH_ASSERT_EQ(extend_wait(lc.fx.base, lc.b.held[0], 5000), SLUICE_OK);
  TH_ASSERT_CMP(sluice_dq_msg_remaining_ms(lc.b.held[0]), >, 1000);
  TH_ASSERT_EQ(ack_wait(lc.fx.base, lc.b.held[0]), SLUICE_OK);
  lease_close(&lc);
}

/* The same with both consumers alive: the stale one's lost callback fires
 * once, with the message and SLUICE_ELATE, however often it extends. */
static void test_lost_callback_once(void) {
  lease_case lc;
  lease_open(&lc, 100, 0);
  /* Redelivered every 100 ms, to a or to b, until b has it: b keeps it
   * (5 s), however slow the client is (valgrind). */
  lease_second(&lc, 5000);
  uint64_t end = th_now_ms() + 5000;
  while (lc.b.n < 1 && th_now_ms() < end) th_loop_for(lc.fx.base, 5);
  TH_ASSERT_EQ(lc.b.n, 1);
  sluice_dq_msg *stale = lc.a.held[0];
  TH_ASSERT_EQ(extend_wait(lc.fx.base, stale, 1000), SLUICE_ELATE);
  TH_ASSERT_EQ(lc.a.lost, 1);
  TH_ASSERT_EQ(lc.a.lost_reason, SLUICE_ELATE);
  TH_ASSERT(lc.a.lost_msg == stale);
  TH_ASSERT_EQ(sluice_dq_msg_remaining_ms(stale), 0);
  TH_ASSERT_EQ(extend_wait(lc.fx.base, stale, 1000), SLUICE_ELATE);
  th_loop_for(lc.fx.base, 50);
  TH_ASSERT_EQ(lc.a.lost, 1);
  TH_ASSERT_EQ(ack_wait(lc.fx.base, stale), SLUICE_ELATE);
  sluice_dq_msg *fresh = lc.b.held[0];
  TH_ASSERT_CMP(sluice_dq_msg_delivery(fresh), >, lc.a.tokens[lc.a.n - 1]);
  TH_ASSERT_EQ(ack_wait(lc.fx.base, fresh), SLUICE_OK);
  /* a may have had "job" again before b kept it: those deliveries end
   * when settled, and find it acked (gone). */
  for (int i = 1; i < lc.a.n; i++)
    TH_ASSERT_EQ(ack_wait(lc.fx.base, lc.a.held[i]), SLUICE_ENOTFOUND);
  /* A cancelled message's extension finds it gone (a alone takes now). */
  sluice_dq_consumer_free(lc.cb);
  lc.cb = NULL;
  dqt_push p;
  TH_ASSERT_EQ(dqt_push_wait(lc.fx.base, lc.dq, "gone", "x", 0, &p), SLUICE_OK);
  int had = lc.a.n;
  end = th_now_ms() + 5000;
  while (lc.a.n == had && th_now_ms() < end) th_loop_for(lc.fx.base, 5);
  TH_ASSERT_EQ(lc.a.n, had + 1);
  keeper *who = &lc.a;
  sluice_dq_msg *gone = who->held[who->n - 1];
  TH_ASSERT_STR_EQ(sluice_dq_msg_id(gone), "gone");
  th_status st = {0, 0};
  TH_ASSERT_EQ(answered(lc.fx.base, sluice_dq_cancel(lc.dq, "gone", dqt_status_cb, &st), &st),
               SLUICE_OK);
  int lost_before = who->lost;
  TH_ASSERT_EQ(extend_wait(lc.fx.base, gone, 1000), SLUICE_ENOTFOUND);
  TH_ASSERT_EQ(who->lost, lost_before + 1);
  TH_ASSERT_EQ(who->lost_reason, SLUICE_ENOTFOUND);
  TH_ASSERT_EQ(ack_wait(lc.fx.base, gone), SLUICE_ENOTFOUND);
  lease_close(&lc);
}

/* Delivery tokens grow: across messages of one take, across takes, and
 * across the redeliveries of one message (retries here). */
static void retry_all(sluice_dq_consumer *con, sluice_dq_msg *m, void *ud) {
  keeper *k = ud;
  TH_ASSERT(k->n < HELD_MAX);
  k->tokens[k->n++] = sluice_dq_msg_delivery(m);
  if (sluice_dq_msg_attempt(m) < 3) TH_ASSERT_EQ(sluice_dq_retry(m, 0, NULL, NULL), SLUICE_OK);
  else TH_ASSERT_EQ(sluice_dq_ack(m, NULL, NULL), SLUICE_OK);
}

static void test_delivery_tokens_increase(void) {
  dq_fx fx = dq_fx_open();
  sluice_dq *dq = dqt_queue(fx.c, "lease");
  dqt_push p;
  TH_ASSERT_EQ(dqt_push_wait(fx.base, dq, "one", "x", 0, &p), SLUICE_OK);
  TH_ASSERT_EQ(dqt_push_wait(fx.base, dq, "two", "x", 0, &p), SLUICE_OK);
  keeper k = {0};
  sluice_dq_consumer_options o = dqt_options(16, 16, 1000, 0);
  sluice_dq_consumer *con = NULL;
  TH_ASSERT_EQ(sluice_dq_consumer_new(fx.c, "lease", &o, retry_all, &k, &con), SLUICE_OK);
  uint64_t end = th_now_ms() + 5000;
  while (k.n < 6 && th_now_ms() < end) th_loop_for(fx.base, 5);
  TH_ASSERT_EQ(k.n, 6);
  for (int i = 0; i < 6; i++) {
    th_note("delivery %d: token %llu\n", i, (unsigned long long)k.tokens[i]);
    TH_ASSERT_CMP(k.tokens[i], >, 0);
    if (i) TH_ASSERT_CMP(k.tokens[i], >, k.tokens[i - 1]);
  }
  dq_case_close(&fx, con, dq);
}

/* Bad input gets a clear status, never a crash. */
static void test_bad_input(void) {
  lease_case lc;
  lease_open(&lc, 1000, 0);
  sluice_dq_msg *m = lc.a.held[0];
  TH_ASSERT_EQ(sluice_dq_msg_extend(NULL, 1000, NULL, NULL), SLUICE_EINVAL);
  TH_ASSERT_EQ(sluice_dq_msg_extend(m, 0, NULL, NULL), SLUICE_EINVAL);
  TH_ASSERT_EQ(sluice_dq_msg_extend(m, -1, NULL, NULL), SLUICE_EINVAL);
  TH_ASSERT_EQ(sluice_dq_msg_extend(m, SLUICE_DQ_TIME_MAX + 1, NULL, NULL), SLUICE_EINVAL);
  TH_ASSERT_EQ(sluice_dq_msg_extend(m, INT64_MAX, NULL, NULL), SLUICE_EINVAL);
  TH_ASSERT_EQ(sluice_dq_msg_extend(m, SLUICE_DQ_TIME_MAX, NULL, NULL), SLUICE_OK);
  TH_ASSERT_EQ(sluice_dq_consumer_set_auto_renew(NULL, 1), SLUICE_EINVAL);
  TH_ASSERT_EQ(sluice_dq_consumer_set_auto_renew(lc.ca, 2), SLUICE_EINVAL);
  TH_ASSERT_EQ(sluice_dq_consumer_set_auto_renew(lc.ca, -1), SLUICE_EINVAL);
  sluice_dq_consumer_set_lost_cb(NULL, on_lost, &lc.a);
  TH_ASSERT_EQ(sluice_dq_msg_delivery(NULL), 0);
  TH_ASSERT_EQ(ack_wait(lc.fx.base, m), SLUICE_OK);
  lease_close(&lc);
}

/* An extension still out when the message is settled or the consumer
 * freed is answered as usual, and freeing inside the lost callback is
 * safe (the live-object check after the case finds no leak). */
static void settle_on_lost(sluice_dq_consumer *con, sluice_dq_msg *m, int reason, void *ud) {
  keeper *k = ud;
  k->lost++;
  TH_ASSERT_EQ(sluice_dq_ack(m, NULL, NULL), SLUICE_OK);
  sluice_dq_consumer_free(con);
}

static void test_settle_with_extension_out(void) {
  lease_case lc;
  lease_open(&lc, 1000, 1);
  th_status ext = {0, 0};
  TH_ASSERT_EQ(sluice_dq_msg_extend(lc.a.held[0], 5000, on_settle, &ext), SLUICE_OK);
  TH_ASSERT_EQ(ack_wait(lc.fx.base, lc.a.held[0]), SLUICE_OK);
  TH_ASSERT(th_loop_until(lc.fx.base, &ext.done, 5000));
  /* Settlements of a turn go first: the extension finds it acknowledged,
   * and a message already settled is lost to nobody. */
  TH_ASSERT_EQ(ext.status, SLUICE_ENOTFOUND);
  TH_ASSERT_EQ(lc.a.lost, 0);
  /* Lost inside: settled and the consumer freed from its own callback. */
  dqt_push p;
  TH_ASSERT_EQ(dqt_push_wait(lc.fx.base, lc.dq, "two", "x", 0, &p), SLUICE_OK);
  uint64_t end = th_now_ms() + 5000;
  while (lc.a.n < 2 && th_now_ms() < end) th_loop_for(lc.fx.base, 5);
  TH_ASSERT_EQ(lc.a.n, 2);
  sluice_dq_consumer_set_lost_cb(lc.ca, settle_on_lost, &lc.a);
  th_status st = {0, 0};
  TH_ASSERT_EQ(answered(lc.fx.base, sluice_dq_cancel(lc.dq, "two", dqt_status_cb, &st), &st),
               SLUICE_OK);
  TH_ASSERT_EQ(sluice_dq_msg_extend(lc.a.held[1], 1000, NULL, NULL), SLUICE_OK);
  TH_ASSERT(th_loop_until(lc.fx.base, &lc.a.lost, 5000));
  lc.ca = NULL; /* freed in its lost callback */
  lease_close(&lc);
}

/* With Redis paused past the deadline no renewal is confirmed: the
 * delivery is lost with SLUICE_ETIMEDOUT, once, while Redis is still away;
 * once it is back, the message is delivered again and the old delivery's
 * ack is late (or, if Redis ran the renewal sent before the pause late
 * enough, the ack counts). */
static void test_lost_when_renewals_stall(void) {
  lease_case lc;
  lease_open(&lc, 300, 1);
  th_loop_for(lc.fx.base, 400); /* renewed at least once */
  TH_ASSERT_EQ(lc.a.lost, 0);
  th_redis_pause(&th_server);
  int lost = th_loop_until(lc.fx.base, &lc.a.lost, 2000);
  th_redis_resume(&th_server);
  TH_ASSERT(lost);
  TH_ASSERT_EQ(lc.a.lost_reason, SLUICE_ETIMEDOUT);
  TH_ASSERT_EQ(sluice_dq_msg_remaining_ms(lc.a.held[0]), 0);
  th_loop_for(lc.fx.base, 500);
  TH_ASSERT_EQ(lc.a.lost, 1);
  int st = ack_wait(lc.fx.base, lc.a.held[0]);
  th_note("ack after the loss: %s\n", sluice_err_name(st));
  TH_ASSERT(st == SLUICE_ELATE || st == SLUICE_OK); /* Redis may have taken the renewal */
  if (st == SLUICE_ELATE) { /* it came back: to this consumer, the only one */
    TH_LOOP_UNTIL(lc.fx.base, lc.a.n >= 2, 3000);
    TH_ASSERT_CMP(lc.a.n, >=, 2);
    TH_ASSERT_EQ(lc.a.attempts[1], 2);
    TH_ASSERT_EQ(ack_wait(lc.fx.base, lc.a.held[1]), SLUICE_OK);
  }
  lease_close(&lc);
}

/* ---- a consumer in another process, killed ---------------------------------- */

static int token_pipe[2];

static void child_keep(sluice_dq_consumer *con, sluice_dq_msg *m, void *ud) {
  uint64_t t = sluice_dq_msg_delivery(m);
  if (write(token_pipe[1], &t, sizeof t) != (ssize_t)sizeof t) _exit(3);
}

static void child_consumer(void) {
  struct event_base *base = th_precise_base();
  if (!base) _exit(2);
  sluice_client *c = dqt_client(base);
  sluice_dq_consumer_options o = dqt_options(16, 16, 300, 0);
  sluice_dq_consumer *con = NULL;
  if (sluice_dq_consumer_new(c, "lease", &o, child_keep, NULL, &con) != 0 ||
      sluice_dq_consumer_set_auto_renew(con, 1) != 0)
    _exit(2);
  event_base_dispatch(base);
  _exit(0);
}

/* Killing the process whose consumer renews a message makes it come back
 * within the visibility timeout (300 ms), to a consumer that saw nothing
 * of it while the first one lived (1.5 s, 5x the timeout). */
static void test_killed_consumer_message_returns(void) {
  dq_fx fx = dq_fx_open();
  sluice_dq *dq = queue_with_job(&fx);
  TH_ASSERT_EQ(pipe(token_pipe), 0);
  pid_t pid = fork();
  TH_ASSERT(pid >= 0);
  if (pid == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL); /* never outlive a failed case */
    if (getppid() == 1) _exit(1);
    child_consumer();
  }
  uint64_t child_token = 0;
  TH_ASSERT_EQ(read(token_pipe[0], &child_token, sizeof child_token), (ssize_t)sizeof child_token);
  keeper k = {0};
  sluice_dq_consumer *con = keeper_consumer(fx.c, 300, 1, &k);
  th_loop_for(fx.base, 1500);
  TH_ASSERT_EQ(k.n, 0);
  kill(pid, SIGKILL);
  while (waitpid(pid, NULL, 0) < 0 && errno == EINTR) {}
  uint64_t killed = th_now_ms();
  TH_ASSERT(th_loop_until(fx.base, &k.n, 5000));
  uint64_t back = k.at_ms[0] - killed;
  th_note("back %llu ms after the kill (visibility 300 ms)\n", (unsigned long long)back);
  /* Its deadline was at most 300 ms away; the take follows the deadline
   * within a timer's slack (more under valgrind). */
  TH_ASSERT_CMP(back, <=, 300 + 200);
  TH_ASSERT_EQ(k.attempts[0], 2);
  TH_ASSERT_CMP(k.tokens[0], >, child_token);
  TH_ASSERT_EQ(ack_wait(fx.base, k.held[0]), SLUICE_OK);
  close(token_pipe[0]);
  close(token_pipe[1]);
  dq_case_close(&fx, con, dq);
}

static const th_case cases[] = {
    TH_CASE(long_handler_not_redelivered, 30),
    TH_CASE(extend_by_hand, 30),
    TH_CASE(extend_after_redelivery_refused, 30),
    TH_CASE(lost_callback_once, 30),
    TH_CASE(delivery_tokens_increase, 30),
    TH_CASE(bad_input, 30),
    TH_CASE(settle_with_extension_out, 30),
    TH_CASE(lost_when_renewals_stall, 30, .standalone_only = "pauses the server"),
    TH_CASE(killed_consumer_message_returns, 30),
};
TH_MAIN(cases)
