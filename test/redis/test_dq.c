/* Delay queue: ordering, batches, cancel, de-duplication, settling, dead
 * letters, bad input, lifetime, key expiry, wake-ups and idle cost. */
#include <string.h>

#include <event2/event.h>
#include <sluice/sluice.h>

#include "dq/dq_args.h" /* DQ_NKEYS */
#include "dq_util.h"
#include "harness.h"
#include "lua_scripts.h"

enum { REC_MAX = 256 };

/* A consumer handler that records what it gets; acks at once if auto_ack,
 * else keeps the handles in held[] for the test to settle. */
typedef struct rec {
  int n, target, reached, auto_ack;
  char ids[REC_MAX][SLUICE_DQ_ID_MAX + 1];
  unsigned attempts[REC_MAX];
  size_t lens[REC_MAX];
  char payloads[REC_MAX][64];
  int64_t late_ms[REC_MAX];
  uint64_t at_ms[REC_MAX];
  sluice_dq_msg *held[REC_MAX];
  unsigned in_flight_seen[REC_MAX];
  int settled, settle_status[REC_MAX];
} rec;

static void on_settled(sluice_dq_consumer *con, int status, const char *id, void *ud) {
  rec *r = ud;
  if (r->settled < REC_MAX) r->settle_status[r->settled] = status;
  r->settled++;
}

static void record(sluice_dq_consumer *con, sluice_dq_msg *m, void *ud) {
  rec *r = ud;
  int i = r->n++;
  TH_ASSERT(i < REC_MAX);
  size_t len;
  const char *p = sluice_dq_msg_payload(m, &len);
  snprintf(r->ids[i], sizeof r->ids[i], "%s", sluice_dq_msg_id(m));
  r->attempts[i] = sluice_dq_msg_attempt(m);
  r->lens[i] = len;
  memcpy(r->payloads[i], p, len < 64 ? len : 64);
  r->late_ms[i] = dqt_unix_ms() - sluice_dq_msg_due_ms(m);
  r->at_ms[i] = th_now_ms();
  r->in_flight_seen[i] = sluice_dq_consumer_in_flight(con);
  if (r->auto_ack) TH_ASSERT_EQ(sluice_dq_ack(m, on_settled, r), SLUICE_OK);
  else r->held[i] = m;
  if (r->n >= r->target) r->reached = 1;
}

/* Run the loop until *v >= n (up to 15 s: generous for valgrind on a busy box). */
static void wait_n(struct event_base *base, const int *v, int n) {
  uint64_t end = th_now_ms() + 15000;
  while (*v < n && th_now_ms() < end) th_loop_for(base, 2);
  TH_ASSERT_CMP(*v, >=, n);
}

static sluice_dq_consumer *consumer(sluice_client *c, const char *name,
                                    const sluice_dq_consumer_options *o, rec *r) {
  sluice_dq_consumer *con = NULL;
  TH_ASSERT_EQ(sluice_dq_consumer_new(c, name, o, record, r, &con), SLUICE_OK);
  return con;
}

/* dqt_options with the default max_in_flight. */
static sluice_dq_consumer_options opts(unsigned batch, unsigned vis, unsigned maxa) {
  sluice_dq_consumer_options o;
  sluice_dq_consumer_options_init(&o);
  return dqt_options(batch, o.max_in_flight, vis, maxa);
}

/* The settling cases' start: message ID (PAYLOAD, due in DELAY ms) pushed
 * and answered, then a consumer of the queue NAME with options o. */
static sluice_dq_consumer *push_then_consume(dq_fx *fx, sluice_dq *dq, const char *name,
                                             const char *id, const char *payload, int64_t delay,
                                             sluice_dq_consumer_options o, rec *r) {
  dqt_push p;
  TH_ASSERT_EQ(dqt_push_wait(fx->base, dq, id, payload, delay, &p), SLUICE_OK);
  return consumer(fx->c, name, &o, r);
}

/* ---- ordering, batches, payloads ------------------------------------------- */

/* A consumer of name (opts(batch, vis, maxa)) into r, once r has reached
 * its target (15 s at most). */
static sluice_dq_consumer *consumed(dq_fx *fx, const char *name, unsigned batch, unsigned vis,
                                    unsigned maxa, rec *r) {
  sluice_dq_consumer_options o = opts(batch, vis, maxa);
  sluice_dq_consumer *con = consumer(fx->c, name, &o, r);
  TH_ASSERT(th_loop_until(fx->base, &r->reached, 15000));
  return con;
}

static void test_order_by_due_then_push(void) {
  dq_fx fx = dq_fx_open();
  sluice_dq *dq = dqt_queue(fx.c, "order");
  dqt_info in;
  int64_t at = dqt_inspect(fx.base, dq, &in).now_ms + 300;
  /* e1..e20 share one due time and must keep push order; a and b differ. */
  sluice_dq_item items[22] = {{0}};
  char ids[22][8];
  for (int i = 0; i < 20; i++) {
    snprintf(ids[i], sizeof ids[i], "e%02d", i + 1);
    items[i] = (sluice_dq_item){ids[i], 3, 0, at, ids[i]};
  }
  items[20] = (sluice_dq_item){"late", 4, 0, at + 100, "b"};
  items[21] = (sluice_dq_item){"early", 5, 0, at - 100, "a"};
  TH_ASSERT_EQ(sluice_dq_push_batch(dq, items, 22, NULL, NULL), SLUICE_OK);
  rec r = {.target = 22, .auto_ack = 1};
  sluice_dq_consumer *con = consumed(&fx, "order", 4, 30000, 5, &r);
  TH_ASSERT_STR_EQ(r.ids[0], "a");
  for (int i = 0; i < 20; i++) TH_ASSERT_STR_EQ(r.ids[1 + i], ids[i]);
  TH_ASSERT_STR_EQ(r.ids[21], "b");
  for (int i = 0; i < 22; i++) {
    TH_ASSERT_EQ(r.attempts[i], 1);
    TH_ASSERT_CMP(r.late_ms[i], >=, -2); /* never early (clock read granularity) */
  }
  wait_n(fx.base, &r.settled, 22);
  for (int i = 0; i < 22; i++) TH_ASSERT_EQ(r.settle_status[i], SLUICE_OK);
  TH_ASSERT_EQ(dqt_inspect(fx.base, dq, &in).in_flight, 0);
  dq_case_close(&fx, con, dq);
}

static void test_batch_and_max_in_flight(void) {
  dq_fx fx = dq_fx_open();
  sluice_dq *dq = dqt_queue(fx.c, "batch");
  sluice_dq_item items[50];
  for (int i = 0; i < 50; i++) items[i] = (sluice_dq_item){"x", 1, 0, 0, NULL};
  TH_ASSERT_EQ(sluice_dq_push_batch(dq, items, 50, NULL, NULL), SLUICE_OK);
  rec r = {.target = 10};
  sluice_dq_consumer_options o = opts(4, 30000, 5);
  o.max_in_flight = 10;
  sluice_dq_consumer *con = consumer(fx.c, "batch", &o, &r);
  TH_ASSERT(th_loop_until(fx.base, &r.reached, 15000));
  th_loop_for(fx.base, 200);
  TH_ASSERT_EQ(r.n, 10); /* capped by max_in_flight */
  TH_ASSERT_EQ(sluice_dq_consumer_in_flight(con), 10);
  /* Deliveries came in takes of at most 4: the first take's handler calls
   * saw in-flight 1..4, then the second take started from 4. */
  TH_ASSERT_EQ(r.in_flight_seen[3], 4);
  TH_ASSERT_EQ(r.in_flight_seen[4], 5);
  dqt_info in;
  TH_ASSERT_EQ(dqt_inspect(fx.base, dq, &in).in_flight, 10);
  TH_ASSERT_EQ(in.info.delayed, 40);
  for (int i = 0; i < 10; i++) TH_ASSERT_EQ(sluice_dq_ack(r.held[i], on_settled, &r), SLUICE_OK);
  r.auto_ack = 1;
  r.target = 50;
  r.reached = 0;
  TH_ASSERT(th_loop_until(fx.base, &r.reached, 15000));
  wait_n(fx.base, &r.settled, 50);
  TH_ASSERT_EQ(dqt_inspect(fx.base, dq, &in).in_flight, 0);
  TH_ASSERT_EQ(in.info.delayed, 0);
  dq_case_close(&fx, con, dq);
}

static void test_binary_payload(void) {
  dq_fx fx = dq_fx_open();
  sluice_dq *dq = dqt_queue(fx.c, "bin");
  static const char bin[] = {'a', 0, 'b', 0, 0, '\xff', '\n'};
  sluice_dq_item items[2] = {{bin, sizeof bin, 0, 0, "bin"}, {NULL, 0, 0, 0, "empty"}};
  TH_ASSERT_EQ(sluice_dq_push_batch(dq, items, 2, NULL, NULL), SLUICE_OK);
  rec r = {.target = 2, .auto_ack = 1};
  sluice_dq_consumer *con = consumed(&fx, "bin", 16, 30000, 5, &r);
  TH_ASSERT_STR_EQ(r.ids[0], "bin");
  TH_ASSERT_EQ(r.lens[0], sizeof bin);
  TH_ASSERT(memcmp(r.payloads[0], bin, sizeof bin) == 0);
  TH_ASSERT_EQ(r.lens[1], 0);
  dq_case_close(&fx, con, dq);
}

/* ---- cancel, de-duplication ------------------------------------------------ */

static int cancel_wait(struct event_base *base, sluice_dq *dq, const char *id) {
  th_status s = {0};
  TH_ASSERT_EQ(sluice_dq_cancel(dq, id, dqt_status_cb, &s), SLUICE_OK);
  TH_ASSERT(th_loop_until(base, &s.done, 5000));
  return s.status;
}

static void test_cancel(void) {
  dq_fx fx = dq_fx_open();
  sluice_dq *dq = dqt_queue(fx.c, "cancel");
  dqt_push p;
  TH_ASSERT_EQ(dqt_push_wait(fx.base, dq, NULL, "one", 150, &p), SLUICE_OK);
  TH_ASSERT_EQ(strlen(p.id), 32); /* random id */
  char id1[40];
  snprintf(id1, sizeof id1, "%s", p.id);
  TH_ASSERT_EQ(dqt_push_wait(fx.base, dq, "two", "two", 150, &p), SLUICE_OK);
  TH_ASSERT_EQ(cancel_wait(fx.base, dq, id1), SLUICE_OK);
  TH_ASSERT_EQ(cancel_wait(fx.base, dq, id1), SLUICE_ENOTFOUND);
  rec r = {.target = 1};
  sluice_dq_consumer *con = consumed(&fx, "cancel", 16, 30000, 5, &r);
  th_loop_for(fx.base, 200);
  TH_ASSERT_EQ(r.n, 1);
  TH_ASSERT_STR_EQ(r.ids[0], "two");
  /* Cancel while in flight: the consumer's ack then finds nothing. */
  TH_ASSERT_EQ(cancel_wait(fx.base, dq, "two"), SLUICE_OK);
  TH_ASSERT_EQ(sluice_dq_ack(r.held[0], on_settled, &r), SLUICE_OK);
  TH_ASSERT_EQ(r.settled, 0);
  while (!r.settled) TH_ASSERT(th_loop_until(fx.base, &r.settled, 5000));
  TH_ASSERT_EQ(r.settle_status[0], SLUICE_ENOTFOUND);
  dqt_info in;
  sluice_dq_info info = dqt_inspect(fx.base, dq, &in);
  TH_ASSERT_EQ(info.delayed + info.in_flight + info.dead, 0);
  dq_case_close(&fx, con, dq);
}

typedef struct batch_res {
  int done, status;
  size_t n;
  int st[8];
  char ids[8][40];
} batch_res;

static void on_batch(sluice_dq *dq, int status, const sluice_dq_push_result *res, size_t n,
                     void *ud) {
  batch_res *b = ud;
  b->done++;
  b->status = status;
  b->n = n;
  for (size_t i = 0; i < n && i < 8; i++) {
    b->st[i] = res[i].status;
    snprintf(b->ids[i], sizeof b->ids[i], "%s", res[i].id);
  }
}

static void test_dedup(void) {
  dq_fx fx = dq_fx_open();
  sluice_dq *dq = dqt_queue(fx.c, "dedup");
  dqt_push p;
  TH_ASSERT_EQ(dqt_push_wait(fx.base, dq, "job-1", "first", 0, &p), SLUICE_OK);
  TH_ASSERT_CMP(p.due, >, 1600000000000LL);
  TH_ASSERT_EQ(dqt_push_wait(fx.base, dq, "job-1", "second", 0, &p), SLUICE_EEXIST);
  TH_ASSERT_STR_EQ(p.id, "job-1");
  TH_ASSERT_EQ(p.due, -1);
  /* Duplicates inside one batch, and against the queue. */
  sluice_dq_item items[3] = {
      {"a", 1, 0, 0, "job-2"}, {"b", 1, 0, 0, "job-2"}, {"c", 1, 0, 0, "job-1"}};
  batch_res b = {0};
  TH_ASSERT_EQ(sluice_dq_push_batch(dq, items, 3, on_batch, &b), SLUICE_OK);
  TH_ASSERT(th_loop_until(fx.base, &b.done, 5000));
  TH_ASSERT_EQ(b.status, SLUICE_OK);
  TH_ASSERT_EQ(b.n, 3);
  TH_ASSERT_EQ(b.st[0], SLUICE_OK);
  TH_ASSERT_EQ(b.st[1], SLUICE_EEXIST);
  TH_ASSERT_EQ(b.st[2], SLUICE_EEXIST);
  rec r = {.target = 2, .auto_ack = 1};
  sluice_dq_consumer *con = consumed(&fx, "dedup", 16, 30000, 5, &r);
  TH_ASSERT_STR_EQ(r.payloads[0], "first");
  TH_ASSERT_STR_EQ(r.payloads[1], "a");
  wait_n(fx.base, &r.settled, 2);
  /* Once acknowledged the id may be used again. */
  TH_ASSERT_EQ(dqt_push_wait(fx.base, dq, "job-1", "again", 0, &p), SLUICE_OK);
  r.target = 3;
  r.reached = 0;
  TH_ASSERT(th_loop_until(fx.base, &r.reached, 15000));
  TH_ASSERT_STR_EQ(r.payloads[2], "again");
  dq_case_close(&fx, con, dq);
}

/* The largest batch goes in one call (the script slices its writes). */
static void test_largest_batch(void) {
  dq_fx fx = dq_fx_open();
  sluice_dq *dq = dqt_queue(fx.c, "big");
  static sluice_dq_item items[SLUICE_DQ_BATCH_MAX];
  for (int i = 0; i < SLUICE_DQ_BATCH_MAX; i++) items[i] = (sluice_dq_item){"p", 1, 60000, 0, NULL};
  items[SLUICE_DQ_BATCH_MAX - 1].delay_ms = 0;
  batch_res b = {0};
  TH_ASSERT_EQ(sluice_dq_push_batch(dq, items, SLUICE_DQ_BATCH_MAX + 1, on_batch, &b),
               SLUICE_EINVAL);
  TH_ASSERT_EQ(sluice_dq_push_batch(dq, items, SLUICE_DQ_BATCH_MAX, on_batch, &b), SLUICE_OK);
  TH_ASSERT(th_loop_until(fx.base, &b.done, 10000));
  TH_ASSERT_EQ(b.status, SLUICE_OK);
  TH_ASSERT_EQ(b.n, SLUICE_DQ_BATCH_MAX);
  dqt_info in;
  sluice_dq_info info = dqt_inspect(fx.base, dq, &in);
  TH_ASSERT_EQ(info.delayed, SLUICE_DQ_BATCH_MAX);
  TH_ASSERT_EQ(info.ready, 1);
  sluice_dq_free(dq);
  dq_fx_close(&fx);
}

/* ---- settling: late acks, retry, dead letters ------------------------------ */

static void test_late_ack_reported(void) {
  dq_fx fx = dq_fx_open();
  sluice_dq *dq = dqt_queue(fx.c, "late");
  rec r = {.target = 2};
  sluice_dq_consumer *con = push_then_consume(&fx, dq, "late", "m", "m", 0, opts(16, 100, 5), &r);
  /* Held past its 100 ms deadline, it comes back as attempt 2. */
  TH_ASSERT(th_loop_until(fx.base, &r.reached, 3000));
  TH_ASSERT_STR_EQ(r.ids[1], "m");
  TH_ASSERT_EQ(r.attempts[0], 1);
  TH_ASSERT_EQ(r.attempts[1], 2);
  /* Not redelivered early: 100 ms after the server's take, and the first
   * handler call may itself run a little after that take (valgrind). */
  TH_ASSERT_CMP(r.at_ms[1] - r.at_ms[0], >=, 60);
  TH_ASSERT_CMP(sluice_dq_msg_remaining_ms(r.held[0]), ==, 0);
  TH_ASSERT_EQ(sluice_dq_ack(r.held[0], on_settled, &r), SLUICE_OK);
  TH_ASSERT_EQ(sluice_dq_ack(r.held[1], on_settled, &r), SLUICE_OK);
  wait_n(fx.base, &r.settled, 2);
  TH_ASSERT_EQ(r.settle_status[0], SLUICE_ELATE);
  TH_ASSERT_EQ(r.settle_status[1], SLUICE_OK);
  dqt_info in;
  TH_ASSERT_EQ(dqt_inspect(fx.base, dq, &in).in_flight + in.info.delayed, 0);
  dq_case_close(&fx, con, dq);
}

static void retrying(sluice_dq_consumer *con, sluice_dq_msg *m, void *ud) {
  rec *r = ud;
  int i = r->n++;
  r->attempts[i] = sluice_dq_msg_attempt(m);
  r->at_ms[i] = th_now_ms();
  if (r->auto_ack) TH_ASSERT_EQ(sluice_dq_ack(m, on_settled, r), SLUICE_OK);
  else TH_ASSERT_EQ(sluice_dq_retry(m, 50, on_settled, r), SLUICE_OK);
  if (r->n >= r->target) r->reached = 1;
}

static void test_retry_dead_letter_requeue(void) {
  dq_fx fx = dq_fx_open();
  sluice_dq *dq = dqt_queue(fx.c, "dead");
  dqt_push p;
  TH_ASSERT_EQ(dqt_push_wait(fx.base, dq, "poison", "pill", 0, &p), SLUICE_OK);
  rec r = {.target = 3};
  sluice_dq_consumer_options o = opts(16, 30000, 3);
  sluice_dq_consumer *con = NULL;
  TH_ASSERT_EQ(sluice_dq_consumer_new(fx.c, "dead", &o, retrying, &r, &con), SLUICE_OK);
  TH_ASSERT(th_loop_until(fx.base, &r.reached, 3000));
  wait_n(fx.base, &r.settled, 3);
  for (int i = 0; i < 3; i++) {
    TH_ASSERT_EQ(r.attempts[i], (unsigned)i + 1);
    TH_ASSERT_EQ(r.settle_status[i], SLUICE_OK);
  }
  TH_ASSERT_CMP(r.at_ms[1] - r.at_ms[0], >=, 45); /* retry delay honoured */
  th_loop_for(fx.base, 150);
  TH_ASSERT_EQ(r.n, 3); /* third retry dead-lettered it */
  dqt_info in;
  TH_ASSERT_EQ(dqt_inspect(fx.base, dq, &in).dead, 1);
  dqt_dead d = {0};
  TH_ASSERT_EQ(sluice_dq_dead_list(dq, 0, 10, dqt_on_dead, &d), SLUICE_OK);
  TH_ASSERT(th_loop_until(fx.base, &d.done, 3000));
  TH_ASSERT_EQ(d.status, SLUICE_OK);
  TH_ASSERT_EQ(d.total, 1);
  TH_ASSERT_STR_EQ(d.id, "poison");
  TH_ASSERT_EQ(d.attempts, 3);
  TH_ASSERT_STR_EQ(d.payload, "pill");
  /* Requeue: delivered again from attempt 1. */
  r.auto_ack = 1;
  r.target = 4;
  r.reached = 0;
  memset(&d, 0, sizeof d);
  TH_ASSERT_EQ(sluice_dq_dead_requeue(dq, "nope", dqt_on_dead_count, &d), SLUICE_OK);
  TH_ASSERT(th_loop_until(fx.base, &d.done, 3000));
  TH_ASSERT_EQ(d.count, 0);
  memset(&d, 0, sizeof d);
  TH_ASSERT_EQ(sluice_dq_dead_requeue(dq, NULL, dqt_on_dead_count, &d), SLUICE_OK);
  TH_ASSERT(th_loop_until(fx.base, &d.done, 3000));
  TH_ASSERT_EQ(d.count, 1);
  TH_ASSERT(th_loop_until(fx.base, &r.reached, 3000));
  TH_ASSERT_EQ(r.attempts[3], 1);
  wait_n(fx.base, &r.settled, 4);
  sluice_dq_info info = dqt_inspect(fx.base, dq, &in);
  TH_ASSERT_EQ(info.dead + info.delayed + info.in_flight, 0);
  dq_case_close(&fx, con, dq);
}

/* Messages held past their deadline with max_attempts reached go dead. */
static void test_expired_dead_letter(void) {
  dq_fx fx = dq_fx_open();
  sluice_dq *dq = dqt_queue(fx.c, "expdead");
  rec r = {.target = 2};
  sluice_dq_consumer *con = push_then_consume(&fx, dq, "expdead", "slow", "s", 0, opts(16, 60, 2),
                                              &r);
  TH_ASSERT(th_loop_until(fx.base, &r.reached, 3000));
  dqt_info in;
  uint64_t end = th_now_ms() + 2000;
  while (dqt_inspect(fx.base, dq, &in).dead == 0 && th_now_ms() < end) th_loop_for(fx.base, 20);
  TH_ASSERT_EQ(in.info.dead, 1);
  TH_ASSERT_EQ(r.n, 2);
  for (int i = 0; i < 2; i++) TH_ASSERT_EQ(sluice_dq_ack(r.held[i], on_settled, &r), SLUICE_OK);
  wait_n(fx.base, &r.settled, 2);
  TH_ASSERT_EQ(r.settle_status[0], SLUICE_ELATE);
  TH_ASSERT_EQ(r.settle_status[1], SLUICE_ELATE);
  dq_case_close(&fx, con, dq);
}

/* ---- the layout before sequence-prefixed payloads ----------------------------- */

/* Records what it gets (payloads are short: record leaves them
 * NUL-terminated); "f1"'s second attempt is retried, the rest acked. */
static void old_layout_handler(sluice_dq_consumer *con, sluice_dq_msg *m, void *ud) {
  rec *r = ud;
  record(con, m, r);
  int i = r->n - 1;
  if (strcmp(r->ids[i], "f1") == 0 && r->attempts[i] == 2)
    TH_ASSERT_EQ(sluice_dq_retry(m, 0, on_settled, r), SLUICE_OK);
  else TH_ASSERT_EQ(sluice_dq_ack(m, on_settled, r), SLUICE_OK);
}

static int rec_find(const rec *r, const char *id, unsigned attempt) {
  for (int i = 0; i < r->n; i++)
    if (strcmp(r->ids[i], id) == 0 && r->attempts[i] == attempt) return i;
  return -1;
}

/* A queue written by the previous layout (z members "<12 hex digits><id>",
 * raw payloads, s<id> fields) drains with this one: delayed messages in
 * order, an expired in-flight one redelivered and retried, a dead letter
 * listed and requeued, a far one cancelled; nothing is left behind. */
static void test_old_layout_drains(void) {
  dq_fx fx = dq_fx_open();
  sluice_dq *dq = dqt_queue(fx.c, "old");
  long long now = dqt_unix_ms();
  const char *z = "sluice:dq:{old}:z", *f = "sluice:dq:{old}:f", *d = "sluice:dq:{old}:d",
             *h = "sluice:dq:{old}:h";
  freeReplyObject(th_redis_command(&th_server,
                                   "ZADD %s %lld 000000000001a1 %lld 000000000002a2 "
                                   "%lld 000000000003c1",
                                   z, now - 1000, now - 1000, now + 600000));
  freeReplyObject(th_redis_command(&th_server, "ZADD %s %lld f1", f, now - 1));
  freeReplyObject(th_redis_command(&th_server, "ZADD %s %lld d1", d, now - 5000));
  freeReplyObject(th_redis_command(&th_server,
                                   "HSET %s pa1 one sa1 000000000001 pa2 two sa2 000000000002 "
                                   "pc1 far sc1 000000000003 pf1 flight af1 1 sf1 000000000004 "
                                   "pd1 dead ad1 5 sd1 000000000005 #seq 5 #exp %lld",
                                   h, now + 86400000));
  dqt_info in;
  sluice_dq_info info = dqt_inspect(fx.base, dq, &in);
  TH_ASSERT_STR_EQ(info.next_id, "a1");
  TH_ASSERT_EQ(info.delayed, 3);
  dqt_dead dl = {0};
  TH_ASSERT_EQ(sluice_dq_dead_list(dq, 0, 10, dqt_on_dead, &dl), SLUICE_OK);
  TH_ASSERT(th_loop_until(fx.base, &dl.done, 3000));
  TH_ASSERT_STR_EQ(dl.id, "d1");
  TH_ASSERT_EQ(dl.attempts, 5);
  TH_ASSERT_STR_EQ(dl.payload, "dead");
  TH_ASSERT_EQ(cancel_wait(fx.base, dq, "c1"), SLUICE_OK);

  static rec r;
  memset(&r, 0, sizeof r);
  r.target = 4;
  sluice_dq_consumer_options o = opts(16, 30000, 0);
  sluice_dq_consumer *con = NULL;
  TH_ASSERT_EQ(sluice_dq_consumer_new(fx.c, "old", &o, old_layout_handler, &r, &con), SLUICE_OK);
  TH_ASSERT(th_loop_until(fx.base, &r.reached, 3000));
  TH_ASSERT_CMP(rec_find(&r, "a1", 1), <, rec_find(&r, "a2", 1));
  TH_ASSERT_STR_EQ(r.payloads[rec_find(&r, "a1", 1)], "one");
  TH_ASSERT_STR_EQ(r.payloads[rec_find(&r, "a2", 1)], "two");
  TH_ASSERT_STR_EQ(r.payloads[rec_find(&r, "f1", 2)], "flight");
  TH_ASSERT_STR_EQ(r.payloads[rec_find(&r, "f1", 3)], "flight"); /* after its retry */
  memset(&dl, 0, sizeof dl);
  r.target = 5; /* before the requeue: d1 may come before its answer */
  r.reached = 0;
  TH_ASSERT_EQ(sluice_dq_dead_requeue(dq, NULL, dqt_on_dead_count, &dl), SLUICE_OK);
  TH_ASSERT(th_loop_until(fx.base, &dl.done, 3000));
  TH_ASSERT_EQ(dl.count, 1);
  TH_ASSERT(th_loop_until(fx.base, &r.reached, 3000));
  TH_ASSERT_STR_EQ(r.payloads[rec_find(&r, "d1", 1)], "dead");
  wait_n(fx.base, &r.settled, 5);
  for (int i = 0; i < 5; i++) TH_ASSERT_EQ(r.settle_status[i], SLUICE_OK);
  info = dqt_inspect(fx.base, dq, &in);
  TH_ASSERT_EQ(info.delayed + info.in_flight + info.dead, 0);
  TH_ASSERT_EQ(th_redis_int(&th_server, "HLEN %s", h), 3); /* #seq, #dlv, #exp: nothing left */
  dq_case_close(&fx, con, dq);
}

/* ---- the cap on pushes in flight ------------------------------------------------ */

static void count_push(sluice_dq *dq, int status, const char *id, int64_t due, void *ud) {
  TH_ASSERT_EQ(status, SLUICE_OK);
  (*(int *)ud)++;
}

static sluice_dq_metrics metrics_of(const sluice_dq *dq) {
  sluice_dq_metrics m;
  sluice_dq_get_metrics(dq, &m);
  return m;
}

/* max_pending_pushes counts messages in flight over every queue of the
 * client: beyond it a push or batch fails at once with SLUICE_EFULL, and
 * room comes back as answers arrive. The metrics show both. */
static void test_pending_pushes_capped(void) {
  sluice_client_options co;
  th_client_options(&co, th_server.url);
  co.max_pending_pushes = 10;
  dq_fx fx = dq_fx_open_with(&co);
  sluice_dq *a = dqt_queue(fx.c, "cap-a"), *b = dqt_queue(fx.c, "cap-b");
  sluice_dq_item it = {"x", 1, 60000, 0, NULL}, items[4] = {it, it, it, it};
  int answered = 0;
  for (int i = 0; i < 7; i++)
    TH_ASSERT_EQ(sluice_dq_push(a, &it, count_push, &answered), SLUICE_OK);
  TH_ASSERT_EQ(sluice_dq_push_batch(b, items, 4, NULL, NULL), SLUICE_EFULL); /* 7 + 4 > 10 */
  TH_ASSERT_EQ(sluice_dq_push_batch(b, items, 3, NULL, NULL), SLUICE_OK);
  TH_ASSERT_EQ(sluice_dq_push(a, &it, count_push, &answered), SLUICE_EFULL);
  sluice_dq_metrics ma = metrics_of(a), mb = metrics_of(b);
  TH_ASSERT_EQ(ma.in_flight, 7);
  TH_ASSERT_EQ(ma.full, 1);
  TH_ASSERT_EQ(mb.in_flight, 3);
  TH_ASSERT_EQ(mb.full, 4);
  wait_n(fx.base, &answered, 7);
  TH_LOOP_UNTIL(fx.base, metrics_of(b).in_flight == 0, 5000); /* b's batch */
  ma = metrics_of(a);
  mb = metrics_of(b);
  TH_ASSERT_EQ(ma.in_flight + mb.in_flight, 0);
  TH_ASSERT_EQ(ma.pushed + mb.pushed, 10);
  TH_ASSERT_EQ(sluice_dq_push_batch(b, (sluice_dq_item[10]){it, it, it, it, it, it, it, it, it, it},
                                    10, NULL, NULL),
               SLUICE_OK);
  sluice_dq_free(a);
  sluice_dq_free(b);
  dq_fx_close(&fx);
}

/* The record of unreplicated writes keeps a push request as one entry,
 * however many messages it carries: with room for two entries, two
 * batches of 100 go (each once the other is answered), a third is refused
 * while the first two are kept (a standalone Redis keeps them 3 s). */
static void test_record_counts_requests(void) {
  sluice_client_options co;
  th_client_options(&co, th_server.url);
  co.replay_max_entries = 2;
  dq_fx fx = dq_fx_open_with(&co);
  sluice_dq *dq = dqt_queue(fx.c, "rec");
  sluice_dq_item it = {"x", 1, 60000, 0, NULL}, items[100];
  for (int i = 0; i < 100; i++) items[i] = it;
  for (int i = 0; i < 2; i++) {
    batch_res b = {0};
    TH_ASSERT_EQ(sluice_dq_push_batch(dq, items, 100, on_batch, &b), SLUICE_OK);
    TH_ASSERT(th_loop_until(fx.base, &b.done, 5000));
    TH_ASSERT_EQ(b.status, SLUICE_OK);
  }
  TH_ASSERT_EQ(sluice_dq_push_batch(dq, items, 100, NULL, NULL), SLUICE_EFULL);
  sluice_client_metrics m;
  sluice_client_get_metrics(fx.c, &m);
  TH_ASSERT_EQ(m.record_entries, 2);
  sluice_dq_free(dq);
  dq_fx_close(&fx);
}

/* ---- scripts called directly --------------------------------------------------- */

/* EVAL of script s on the queue {raw} with extra ARGV (n of them, from
 * fill(i)); returns the reply (the caller frees it). */
static redisReply *raw_eval(redisContext *rc, const sluice__script *s, size_t n,
                            const char *(*fill)(size_t i, size_t *len)) {
  size_t argc = 3 + DQ_NKEYS + n;
  const char **argv = malloc(argc * sizeof *argv);
  size_t *lens = malloc(argc * sizeof *lens);
  TH_ASSERT(argv && lens);
  static const char *const keys[DQ_NKEYS] = {"sluice:dq:{raw}:z", "sluice:dq:{raw}:f",
                                             "sluice:dq:{raw}:d", "sluice:dq:{raw}:h",
                                             "sluice:dq:{raw}:c"};
  argv[0] = "EVAL", argv[1] = s->body, argv[2] = "5";
  for (int k = 0; k < DQ_NKEYS; k++) argv[3 + k] = keys[k];
  for (size_t i = 0; i < argc; i++) lens[i] = i < 3 + DQ_NKEYS ? strlen(argv[i]) : 0;
  for (size_t i = 0; i < n; i++) argv[3 + DQ_NKEYS + i] = fill(i, &lens[3 + DQ_NKEYS + i]);
  redisReply *r = redisCommandArgv(rc, (int)argc, argv, lens);
  free(argv);
  free(lens);
  TH_ASSERT(r != NULL);
  return r;
}

static const char *push_arg(size_t i, size_t *len) { /* retention, then id 'd' 0 payload */
  static const char *const cyc[4] = {"x", "d", "0", "p"};
  const char *a = i == 0 ? "1000" : cyc[(i - 1) % 4];
  *len = strlen(a);
  return a;
}
static char *huge;
static const char *huge_arg(size_t i, size_t *len) {
  if (i == 4) {
    *len = SLUICE_DQ_PAYLOAD_MAX + 1;
    return huge;
  }
  return push_arg(i, len);
}
static const char *take_arg(size_t i, size_t *len) { /* retention, batch, vis, attempts, id, poll */
  static const char *const a[6] = {"1000", "1001", "1000", "0", "c", "1000"};
  *len = strlen(a[i]);
  return a[i];
}
static const char *ack_arg(size_t i, size_t *len) { /* retention, attempts, then id 1 'a' 0 0 */
  static const char *const cyc[5] = {"x", "1", "a", "0", "0"};
  const char *a = i < 2 ? "0" : cyc[(i - 2) % 5];
  *len = strlen(a);
  return a;
}
static const char *extend_arg(size_t i, size_t *len) { /* retention, then id 1 0 1000 */
  static const char *const cyc[4] = {"x", "1", "0", "1000"};
  const char *a = i < 1 ? "1000" : cyc[(i - 1) % 4];
  *len = strlen(a);
  return a;
}
static const char *extend_zero_arg(size_t i, size_t *len) { /* one extension by 0 ms */
  const char *a = i == 4 ? "0" : extend_arg(i, len);
  *len = strlen(a);
  return a;
}
static const char *page_arg(size_t i, size_t *len) { /* offset, limit */
  const char *a = i == 0 ? "0" : "1001";
  *len = strlen(a);
  return a;
}
static const char *requeue_arg(size_t i, size_t *len) { /* retention, id, limit */
  const char *a = i == 0 ? "1000" : i == 1 ? "" : "1001";
  *len = strlen(a);
  return a;
}

static void expect_refused(redisContext *rc, const sluice__script *s, size_t n,
                           const char *(*fill)(size_t, size_t *)) {
  redisReply *r = raw_eval(rc, s, n, fill);
  th_note("%s with %zu arguments: %s\n", s->name, n,
          r->type == REDIS_REPLY_ERROR ? r->str : "accepted");
  TH_ASSERT_EQ(r->type, REDIS_REPLY_ERROR);
  TH_ASSERT(strstr(r->str, "sluice:") != NULL);
  freeReplyObject(r);
}

/* Every script's work is bounded whatever its caller sends: what the
 * client never sends (more than 10,000 pushes, a payload over 1 MiB, a take
 * of more than 1000, more than 1000 settlements or extensions, an
 * extension by 0 ms, a dead-letter page or
 * requeue of more than 1000) is refused before any write. */
static void test_scripts_refuse_oversize(void) {
  redisContext *rc = th_redis_connect(&th_server);
  TH_ASSERT(rc && !rc->err);
  huge = malloc(SLUICE_DQ_PAYLOAD_MAX + 1);
  TH_ASSERT(huge != NULL);
  memset(huge, 'p', SLUICE_DQ_PAYLOAD_MAX + 1);
  expect_refused(rc, &sluice__lua_dq_push, 1 + 4 * (SLUICE_DQ_BATCH_MAX + 1), push_arg);
  expect_refused(rc, &sluice__lua_dq_push, 1 + 4, huge_arg);
  expect_refused(rc, &sluice__lua_dq_take, 6, take_arg);
  expect_refused(rc, &sluice__lua_dq_ack, 2 + 5 * 1001, ack_arg);
  expect_refused(rc, &sluice__lua_dq_extend, 1 + 4 * 1001, extend_arg);
  expect_refused(rc, &sluice__lua_dq_extend, 1 + 4, extend_zero_arg);
  expect_refused(rc, &sluice__lua_dq_dead, 2, page_arg);
  expect_refused(rc, &sluice__lua_dq_requeue, 3, requeue_arg);
  free(huge);
  redisFree(rc);
  TH_ASSERT_EQ(th_redis_int_all("DBSIZE"), 0); /* nothing written */
}

/* ---- memory -------------------------------------------------------------------- */

enum { MEM_N = 100000, MEM_BATCH = 10000 };

static void on_mem_batch(sluice_dq *dq, int status, const sluice_dq_push_result *res, size_t n,
                         void *ud) {
  TH_ASSERT_EQ(status, SLUICE_OK);
  (*(int *)ud)++;
}

static long long mem_usage(const char *key) {
  return th_redis_int(&th_server, "MEMORY USAGE %s SAMPLES 0", key);
}

/* Redis memory per queued message (16-byte payload, 32-character id), by
 * MEMORY USAGE of the queue's keys and by used_memory's growth, against the
 * same ids, due times and payloads in a bare sorted set and hash. */
static void test_memory_per_message(void) {
  dq_fx fx = dq_fx_open();
  sluice_dq *dq = dqt_queue(fx.c, "mem");
  static sluice_dq_item items[MEM_BATCH];
  static char ids[MEM_BATCH][33];
  long long before = th_redis_info_sum("memory", "used_memory:");
  int done = 0;
  for (int b = 0; b < MEM_N / MEM_BATCH; b++) {
    for (int i = 0; i < MEM_BATCH; i++) {
      snprintf(ids[i], sizeof ids[i], "%032x", b * MEM_BATCH + i);
      items[i] = (sluice_dq_item){"0123456789abcdef", 16, 600000 + i, 0, ids[i]};
    }
    TH_ASSERT_EQ(sluice_dq_push_batch(dq, items, MEM_BATCH, on_mem_batch, &done), SLUICE_OK);
    wait_n(fx.base, &done, b + 1);
  }
  long long grown = th_redis_info_sum("memory", "used_memory:") - before;
  long long keys = mem_usage("sluice:dq:{mem}:z") + mem_usage("sluice:dq:{mem}:h");
  /* The bare data: member = id, score = due; field = id, value = payload. */
  before = th_redis_info_sum("memory", "used_memory:");
  char script[256];
  snprintf(script, sizeof script,
           "for i = 0, %d do local id = string.format('%%032x', i) "
           "redis.call('ZADD', KEYS[1], 1795000000000 + i %% 10000, id) "
           "redis.call('HSET', KEYS[2], id, '0123456789abcdef') end",
           MEM_N - 1);
  freeReplyObject(th_redis_command(&th_server, "EVAL %s 2 {mem}bz {mem}bh", script));
  long long bare_grown = th_redis_info_sum("memory", "used_memory:") - before;
  long long bare = mem_usage("{mem}bz") + mem_usage("{mem}bh");
  th_note(
      "per queued 16-byte message: %.1f B by MEMORY USAGE (bare zset + hash: %.1f B), "
      "%.1f B by used_memory (bare: %.1f B)\n",
      (double)keys / MEM_N, (double)bare / MEM_N, (double)grown / MEM_N,
      (double)bare_grown / MEM_N);
  TH_ASSERT_CMP(keys / MEM_N, <=, 290);
  sluice_dq_free(dq);
  dq_fx_close(&fx);
}

/* ---- bad input --------------------------------------------------------------- */

static void noop_handler(sluice_dq_consumer *con, sluice_dq_msg *m, void *ud) {
  sluice_dq_ack(m, NULL, NULL);
}

static void test_bad_input(void) {
  dq_fx fx = dq_fx_open();
  sluice_dq *dq = NULL;
  sluice_dq_consumer *con = NULL;
  static char big_name[SLUICE_NAME_MAX + 2];
  memset(big_name, 'n', SLUICE_NAME_MAX + 1);
  TH_ASSERT_EQ(sluice_dq_new(fx.c, NULL, NULL, &dq), SLUICE_EINVAL);
  TH_ASSERT_EQ(sluice_dq_new(fx.c, "", NULL, &dq), SLUICE_EINVAL);
  TH_ASSERT_EQ(sluice_dq_new(fx.c, big_name, NULL, &dq), SLUICE_EINVAL);
  TH_ASSERT_EQ(sluice_dq_new(NULL, "q", NULL, &dq), SLUICE_EINVAL);
  TH_ASSERT(dq == NULL);
  TH_ASSERT_EQ(sluice_dq_consumer_new(fx.c, NULL, NULL, noop_handler, NULL, &con), SLUICE_EINVAL);
  TH_ASSERT_EQ(sluice_dq_consumer_new(fx.c, "", NULL, noop_handler, NULL, &con), SLUICE_EINVAL);
  TH_ASSERT_EQ(sluice_dq_consumer_new(fx.c, big_name, NULL, noop_handler, NULL, &con),
               SLUICE_EINVAL);
  TH_ASSERT_EQ(sluice_dq_consumer_new(fx.c, "q", NULL, NULL, NULL, &con), SLUICE_EINVAL);
  sluice_dq_consumer_options o = opts(0, 30000, 5);
  TH_ASSERT_EQ(sluice_dq_consumer_new(fx.c, "q", &o, noop_handler, NULL, &con), SLUICE_EINVAL);
  o = opts(16, 5, 5);
  TH_ASSERT_EQ(sluice_dq_consumer_new(fx.c, "q", &o, noop_handler, NULL, &con), SLUICE_EINVAL);
  TH_ASSERT(con == NULL);
  /* A name of exactly SLUICE_NAME_MAX bytes is fine. */
  big_name[SLUICE_NAME_MAX] = '\0';
  TH_ASSERT_EQ(sluice_dq_new(fx.c, big_name, NULL, &dq), SLUICE_OK);
  sluice_dq_free(dq);
  dq = dqt_queue(fx.c, "bad");
  static char big[SLUICE_DQ_PAYLOAD_MAX + 1];
  static char long_id[SLUICE_DQ_ID_MAX + 2];
  memset(long_id, 'i', SLUICE_DQ_ID_MAX + 1);
  sluice_dq_item it = {big, sizeof big, 0, 0, NULL};
  TH_ASSERT_EQ(sluice_dq_push(dq, &it, NULL, NULL), SLUICE_ETOOBIG);
  it = (sluice_dq_item){"x", 1, -1, 0, NULL};
  TH_ASSERT_EQ(sluice_dq_push(dq, &it, NULL, NULL), SLUICE_EINVAL);
  it = (sluice_dq_item){"x", 1, SLUICE_DQ_TIME_MAX + 1, 0, NULL};
  TH_ASSERT_EQ(sluice_dq_push(dq, &it, NULL, NULL), SLUICE_EINVAL);
  it = (sluice_dq_item){"x", 1, 0, -5, NULL};
  TH_ASSERT_EQ(sluice_dq_push(dq, &it, NULL, NULL), SLUICE_EINVAL);
  it = (sluice_dq_item){"x", 1, 0, 0, ""};
  TH_ASSERT_EQ(sluice_dq_push(dq, &it, NULL, NULL), SLUICE_EINVAL);
  it = (sluice_dq_item){"x", 1, 0, 0, long_id};
  TH_ASSERT_EQ(sluice_dq_push(dq, &it, NULL, NULL), SLUICE_EINVAL);
  it = (sluice_dq_item){NULL, 3, 0, 0, NULL};
  TH_ASSERT_EQ(sluice_dq_push(dq, &it, NULL, NULL), SLUICE_EINVAL);
  TH_ASSERT_EQ(sluice_dq_push(dq, NULL, NULL, NULL), SLUICE_EINVAL);
  TH_ASSERT_EQ(sluice_dq_push(NULL, &it, NULL, NULL), SLUICE_EINVAL);
  sluice_dq_item two[2] = {{"ok", 2, 0, 0, NULL}, {big, sizeof big, 0, 0, NULL}};
  TH_ASSERT_EQ(sluice_dq_push_batch(dq, two, 2, NULL, NULL), SLUICE_ETOOBIG);
  TH_ASSERT_EQ(sluice_dq_push_batch(dq, two, 0, NULL, NULL), SLUICE_EINVAL);
  TH_ASSERT_EQ(sluice_dq_cancel(dq, NULL, NULL, NULL), SLUICE_EINVAL);
  TH_ASSERT_EQ(sluice_dq_cancel(dq, "", NULL, NULL), SLUICE_EINVAL);
  TH_ASSERT_EQ(sluice_dq_inspect(dq, NULL, NULL), SLUICE_EINVAL);
  TH_ASSERT_EQ(sluice_dq_dead_list(dq, 0, 0, dqt_on_dead, NULL), SLUICE_EINVAL);
  TH_ASSERT_EQ(sluice_dq_ack(NULL, NULL, NULL), SLUICE_EINVAL);
  TH_ASSERT_EQ(sluice_dq_retry(NULL, 0, NULL, NULL), SLUICE_EINVAL);
  /* Unknown id: cancel says so. */
  TH_ASSERT_EQ(cancel_wait(fx.base, dq, "never-pushed"), SLUICE_ENOTFOUND);
  /* A payload of exactly the limit goes through. */
  dqt_push p = {0};
  it = (sluice_dq_item){big, SLUICE_DQ_PAYLOAD_MAX, 1000, 0, "big"};
  TH_ASSERT_EQ(sluice_dq_push(dq, &it, dqt_on_push, &p), SLUICE_OK);
  TH_ASSERT(th_loop_until(fx.base, &p.done, 5000));
  TH_ASSERT_EQ(p.status, SLUICE_OK);
  /* A retry with a bad delay is refused but still releases the handle. */
  TH_ASSERT_EQ(cancel_wait(fx.base, dq, "big"), SLUICE_OK);
  TH_ASSERT_EQ(dqt_push_wait(fx.base, dq, "r", "r", 0, &p), SLUICE_OK);
  rec r = {.target = 1};
  o = opts(16, 30000, 5);
  con = consumer(fx.c, "bad", &o, &r);
  TH_ASSERT(th_loop_until(fx.base, &r.reached, 3000));
  TH_ASSERT_EQ(sluice_dq_retry(r.held[0], -1, on_settled, &r), SLUICE_EINVAL);
  TH_ASSERT_EQ(sluice_dq_consumer_in_flight(con), 0);
  th_loop_for(fx.base, 50);
  TH_ASSERT_EQ(r.settled, 0);
  dq_case_close(&fx, con, dq);
}

/* ---- lifetime ---------------------------------------------------------------- */

/* A case's object freed from its own callback: the consumer (its handle),
 * callbacks run, the ack's answer. */
typedef struct free_ctx {
  sluice_dq_consumer *con;
  int n;
  th_status ack;
} free_ctx;

/* Frees its own consumer on the first message of a batch of 5, then acks. */
static void freeing_handler(sluice_dq_consumer *con, sluice_dq_msg *m, void *ud) {
  free_ctx *f = ud;
  f->n++;
  sluice_dq_consumer_free(con);
  TH_ASSERT_EQ(sluice_dq_ack(m, dqt_settled_cb, &f->ack), SLUICE_OK);
}

static void free_dq_in_cb(sluice_dq *dq, int status, const char *id, int64_t due, void *ud) {
  free_ctx *f = ud;
  f->n++;
  sluice_dq_free(dq);
}

static void test_free_inside_callbacks(void) {
  dq_fx fx = dq_fx_open();
  sluice_dq *dq = dqt_queue(fx.c, "selffree");
  sluice_dq_item items[5];
  for (int i = 0; i < 5; i++) items[i] = (sluice_dq_item){"m", 1, 0, 0, NULL};
  TH_ASSERT_EQ(sluice_dq_push_batch(dq, items, 5, NULL, NULL), SLUICE_OK);
  free_ctx f = {0};
  sluice_dq_consumer_options o = opts(16, 30000, 5);
  TH_ASSERT_EQ(sluice_dq_consumer_new(fx.c, "selffree", &o, freeing_handler, &f, &f.con),
               SLUICE_OK);
  TH_ASSERT(th_loop_until(fx.base, &f.ack.done, 3000));
  TH_ASSERT_EQ(f.n, 1);
  TH_ASSERT_EQ(f.ack.status, SLUICE_OK);
  /* The other four went straight back to the queue, uncounted. */
  dqt_info in;
  uint64_t end = th_now_ms() + 2000;
  while (dqt_inspect(fx.base, dq, &in).in_flight && th_now_ms() < end) th_loop_for(fx.base, 10);
  TH_ASSERT_EQ(in.info.in_flight, 0);
  TH_ASSERT_EQ(in.info.delayed, 4);
  rec r = {.target = 4, .auto_ack = 1};
  sluice_dq_consumer *con = consumer(fx.c, "selffree", &o, &r);
  TH_ASSERT(th_loop_until(fx.base, &r.reached, 3000));
  for (int i = 0; i < 4; i++) TH_ASSERT_EQ(r.attempts[i], 1);
  sluice_dq_consumer_free(con);
  /* A producer freed in its own push callback. */
  free_ctx g = {0};
  sluice_dq_item it = {"x", 1, 0, 0, NULL};
  TH_ASSERT_EQ(sluice_dq_push(dq, &it, free_dq_in_cb, &g), SLUICE_OK);
  TH_ASSERT(th_loop_until(fx.base, &g.n, 3000));
  dq_fx_close(&fx);
}

static void test_close_cancels_pending(void) {
  dq_fx fx = dq_fx_open();
  sluice_dq *dq = dqt_queue(fx.c, "close");
  rec r = {.target = 1};
  sluice_dq_consumer *con = push_then_consume(&fx, dq, "close", "m", "m", 0, opts(16, 30000, 5),
                                              &r);
  TH_ASSERT(th_loop_until(fx.base, &r.reached, 3000));
  /* An ack queued, a push and an inspect in flight, then close. */
  TH_ASSERT_EQ(sluice_dq_ack(r.held[0], on_settled, &r), SLUICE_OK);
  sluice_dq_item it = {"y", 1, 0, 0, NULL};
  dqt_push p;
  memset(&p, 0, sizeof p);
  TH_ASSERT_EQ(sluice_dq_push(dq, &it, dqt_on_push, &p), SLUICE_OK);
  sluice_client_close(fx.c, NULL, NULL);
  TH_ASSERT_EQ(r.settled, 0);
  TH_ASSERT(th_loop_until(fx.base, &p.done, 3000));
  TH_ASSERT_EQ(p.status, SLUICE_ECANCELED);
  while (!r.settled) TH_ASSERT(th_loop_until(fx.base, &r.settled, 3000));
  TH_ASSERT_EQ(r.settle_status[0], SLUICE_ECANCELED);
  TH_ASSERT_EQ(sluice_dq_push(dq, &it, NULL, NULL), SLUICE_ECLOSED);
  sluice_dq_consumer_free(con);
  sluice_dq_free(dq);
  TH_ASSERT(th_loop_drain(fx.base, 3000));
  event_base_free(fx.base);
}

static void test_free_cancels_pending(void) {
  dq_fx fx = dq_fx_open();
  sluice_dq *dq = dqt_queue(fx.c, "dqfree");
  dqt_push p = {0};
  sluice_dq_item it = {"y", 1, 0, 0, NULL};
  TH_ASSERT_EQ(sluice_dq_push(dq, &it, dqt_on_push, &p), SLUICE_OK);
  sluice_dq_free(dq);
  TH_ASSERT_EQ(p.done, 0);
  TH_ASSERT(th_loop_until(fx.base, &p.done, 3000));
  TH_ASSERT_EQ(p.status, SLUICE_ECANCELED);
  dq_fx_close(&fx);
}

/* ---- keys expire with the queue, never before its messages ------------------ */

/* record(), after reading the in-flight set's TTL while this message is
 * in it: an ack sent from the handler may be written in the same loop
 * turn, so after the loop returns the set may be gone already. */
static long long in_flight_pttl = -3;
static void record_in_flight_pttl(sluice_dq_consumer *con, sluice_dq_msg *m, void *ud) {
  in_flight_pttl = th_redis_int(&th_server, "PTTL sluice:dq:{exp}:f");
  record(con, m, ud);
}

static void test_keys_expire(void) {
  dq_fx fx = dq_fx_open();
  sluice_dq_options qo;
  sluice_dq_options_init(&qo);
  qo.retention_ms = 300;
  sluice_dq *dq = NULL;
  TH_ASSERT_EQ(sluice_dq_new(fx.c, "exp", &qo, &dq), SLUICE_OK);
  dqt_push p;
  sluice_dq_item it = {"x", 1, 3000, 0, "far"};
  memset(&p, 0, sizeof p);
  TH_ASSERT_EQ(sluice_dq_push(dq, &it, dqt_on_push, &p), SLUICE_OK);
  TH_ASSERT(th_loop_until(fx.base, &p.done, 3000));
  it = (sluice_dq_item){"x", 1, 0, 0, "near"};
  memset(&p, 0, sizeof p);
  TH_ASSERT_EQ(sluice_dq_push(dq, &it, dqt_on_push, &p), SLUICE_OK);
  TH_ASSERT(th_loop_until(fx.base, &p.done, 3000));
  /* The later push did not shorten the life of the earlier one. */
  TH_ASSERT_CMP(th_redis_int(&th_server, "PTTL sluice:dq:{exp}:z"), >, 3000);
  TH_ASSERT_CMP(th_redis_int(&th_server, "PTTL sluice:dq:{exp}:h"), >, 3000);
  sluice_dq_consumer_options o = opts(16, 200, 5);
  o.retention_ms = 300;
  rec r = {.target = 2, .auto_ack = 1};
  sluice_dq_consumer *con = NULL;
  TH_ASSERT_EQ(sluice_dq_consumer_new(fx.c, "exp", &o, record_in_flight_pttl, &r, &con), SLUICE_OK);
  TH_ASSERT(th_loop_until(fx.base, &r.reached, 6000));
  TH_ASSERT_CMP(in_flight_pttl, >, 0);
  sluice_dq_consumer_free(con);
  wait_n(fx.base, &r.settled, 2);
  /* Idle now: everything is gone within retention + 1/8 of it. */
  th_loop_for(fx.base, 700);
  TH_ASSERT_EQ(th_redis_int_all("DBSIZE"), 0);
  sluice_dq_free(dq);
  dq_fx_close(&fx);
}

/* ---- wake-ups, timing, idle cost -------------------------------------------- */

static void test_early_push_wakes_consumer(void) {
  dq_fx fx = dq_fx_open();
  sluice_dq *dq = dqt_queue(fx.c, "wake");
  dqt_push p;
  TH_ASSERT_EQ(dqt_push_wait(fx.base, dq, "later", "l", 2000, &p), SLUICE_OK);
  rec r = {.target = 1, .auto_ack = 1};
  sluice_dq_consumer_options o = opts(16, 30000, 5);
  o.max_poll_ms = 10000;
  sluice_dq_consumer *con = consumer(fx.c, "wake", &o, &r);
  th_loop_for(fx.base, 200); /* consumer's timer now armed for "later" */
  TH_ASSERT_EQ(r.n, 0);
  /* From another client, as another process would. */
  struct event_base *base2 = event_base_new();
  sluice_client *c2 = dqt_client(base2);
  sluice_dq *dq2 = dqt_queue(c2, "wake");
  TH_ASSERT_EQ(dqt_push_wait(base2, dq2, "sooner", "s", 100, &p), SLUICE_OK);
  sluice_dq_free(dq2);
  dqt_finish(base2, c2);
  TH_ASSERT(th_loop_until(fx.base, &r.reached, 1500));
  TH_ASSERT_STR_EQ(r.ids[0], "sooner");
  th_note("early-inserted message delivered %lld ms late\n", (long long)r.late_ms[0]);
  TH_ASSERT_CMP(r.late_ms[0], >=, -2);
  TH_ASSERT_CMP(r.late_ms[0], <, 50);
  /* A due-now push wakes an idle consumer at once too. */
  r.target = 2;
  r.reached = 0;
  TH_ASSERT_EQ(dqt_push_wait(fx.base, dq, "now", "n", 0, &p), SLUICE_OK);
  TH_ASSERT(th_loop_until(fx.base, &r.reached, 1500));
  TH_ASSERT_STR_EQ(r.ids[1], "now");
  TH_ASSERT_CMP(r.late_ms[1], <, 50);
  dq_case_close(&fx, con, dq);
}

/* A producer on its own client pushes a due-now message every 20 ms, then
 * stops: the stream's LAST message has no later push to hide a missed
 * wake-up behind, so the idle consumer (polling only every 60 s) must be
 * woken for it. Many short streams, each one's last message within 1 s. */
typedef struct stream {
  struct event *tick;
  sluice_dq *dq;
  int round, pushed, acked, failed, delivered, want, last_in;
  char last[32];
} stream;

enum { STREAM_MSGS = 25, STREAM_ROUNDS = 20, STREAM_PUSH_MS = 20 };

static void stream_pushed(sluice_dq *dq, int status, const char *id, int64_t due, void *ud) {
  stream *s = ud;
  if (status == SLUICE_OK) s->acked++;
  else s->failed++;
}

static void stream_tick(evutil_socket_t fd, short what, void *arg) {
  stream *s = arg;
  char id[32];
  snprintf(id, sizeof id, "r%d-%d", s->round, s->pushed);
  sluice_dq_item it = {"x", 1, 0, 0, id};
  TH_ASSERT_EQ(sluice_dq_push(s->dq, &it, stream_pushed, s), SLUICE_OK);
  if (++s->pushed == STREAM_MSGS) {
    evtimer_del(s->tick);
    memcpy(s->last, id, sizeof id);
  }
}

static void stream_take(sluice_dq_consumer *con, sluice_dq_msg *m, void *ud) {
  stream *s = ud;
  s->delivered++;
  if (s->last[0] && strcmp(sluice_dq_msg_id(m), s->last) == 0) s->last_in = 1;
  TH_ASSERT_EQ(sluice_dq_ack(m, NULL, NULL), SLUICE_OK);
}

static void test_stream_end_wakes_consumer(void) {
  dq_fx fx = dq_fx_open();
  sluice_client *pc = dqt_client(fx.base);
  stream s = {.dq = dqt_queue(pc, "stream")};
  s.tick = event_new(fx.base, -1, EV_PERSIST, stream_tick, &s);
  sluice_dq_consumer_options o = opts(16, 30000, 5); /* max_poll_ms: the default 60 s */
  sluice_dq_consumer *con = NULL;
  TH_ASSERT_EQ(sluice_dq_consumer_new(fx.c, "stream", &o, stream_take, &s, &con), SLUICE_OK);
  uint64_t worst = 0;
  for (s.round = 0; s.round < STREAM_ROUNDS; s.round++) {
    s.pushed = s.acked = s.last_in = 0;
    s.last[0] = '\0';
    struct timeval tv = {0, STREAM_PUSH_MS * 1000};
    evtimer_add(s.tick, &tv);
    uint64_t end = th_now_ms() + 10000;
    while (s.acked + s.failed < STREAM_MSGS && th_now_ms() < end) th_loop_for(fx.base, 2);
    TH_ASSERT_EQ(s.acked, STREAM_MSGS);
    uint64_t t0 = th_now_ms();
    if (!th_loop_until(fx.base, &s.last_in, 1000))
      th_fail(__FILE__, __LINE__, "round %d: last push %s not delivered within 1 s", s.round,
              s.last);
    if (th_now_ms() - t0 > worst) worst = th_now_ms() - t0;
  }
  th_note("%d streams: last message delivered at most %llu ms after its push's answer\n",
          STREAM_ROUNDS, (unsigned long long)worst);
  TH_ASSERT_EQ(s.delivered, STREAM_ROUNDS * STREAM_MSGS);
  event_free(s.tick);
  sluice_dq_consumer_free(con);
  sluice_dq_free(s.dq);
  sluice_client_free(pc);
  dq_fx_close(&fx);
}

/* Commands the masters ran. Under Sentinel, less the sentinels'
 * monitoring (INFO, PING, PUBLISH every second or faster) and the
 * replica's acks (REPLCONF), which the library never sends on an idle
 * connection. */
static long long total_commands(void) {
  long long n = th_redis_info_sum("stats", "total_commands_processed:");
  if (th_server_topo() == TH_TOPO_SENTINEL) {
    static const char *const monitoring[] = {"info", "ping", "publish", "replconf"};
    char field[64];
    for (size_t i = 0; i < sizeof monitoring / sizeof *monitoring; i++) {
      snprintf(field, sizeof field, "cmdstat_%s:calls=", monitoring[i]);
      n -= th_redis_info_sum("commandstats", field);
    }
  }
  return n;
}

static void test_idle_cost(void) {
  dq_fx fx = dq_fx_open();
  sluice_dq *dq = dqt_queue(fx.c, "idle");
  rec r = {.target = 1, .auto_ack = 1};
  sluice_dq_consumer *con = push_then_consume(&fx, dq, "idle", "far", "f", 600000,
                                              opts(16, 30000, 5), &r);
  th_loop_for(fx.base, 300);
  long long before = total_commands();
  th_loop_for(fx.base, 4000);
  /* Less the first count's INFO calls (one a master; under Sentinel no
   * INFO is counted). */
  long long own = th_server_topo() == TH_TOPO_SENTINEL ? 0 : th_redis_masters();
  long long used = total_commands() - before - own;
  th_note("idle consumer: %lld Redis commands in 4 s\n", used);
  /* Default max_poll 60 s, BRPOP blocks 30 s: at most one of each. */
  TH_ASSERT_CMP(used, <=, 4);
  TH_ASSERT_EQ(r.n, 0);
  dq_case_close(&fx, con, dq);
}

static void test_inspect_counts(void) {
  dq_fx fx = dq_fx_open();
  sluice_dq *dq = dqt_queue(fx.c, "counts");
  dqt_info in;
  sluice_dq_info info = dqt_inspect(fx.base, dq, &in);
  TH_ASSERT_EQ(info.delayed + info.in_flight + info.dead, 0);
  TH_ASSERT(info.next_id == NULL || info.next_id[0] == '\0');
  TH_ASSERT_EQ(info.next_due_ms, -1);
  dqt_push p;
  TH_ASSERT_EQ(dqt_push_wait(fx.base, dq, "b", "b", 60000, &p), SLUICE_OK);
  /* An absolute time in the past: due at once, and reported as given. */
  sluice_dq_item it = {"a", 1, 0, 1000, "a"};
  memset(&p, 0, sizeof p);
  TH_ASSERT_EQ(sluice_dq_push(dq, &it, dqt_on_push, &p), SLUICE_OK);
  TH_ASSERT(th_loop_until(fx.base, &p.done, 3000));
  TH_ASSERT_EQ(p.due, 1000);
  int64_t due_a = p.due;
  info = dqt_inspect(fx.base, dq, &in);
  TH_ASSERT_EQ(info.delayed, 2);
  TH_ASSERT_EQ(info.ready, 1);
  TH_ASSERT_STR_EQ(info.next_id, "a");
  TH_ASSERT_EQ(info.next_due_ms, due_a);
  sluice_dq_free(dq);
  dq_fx_close(&fx);
}

/* A take that cannot reach Redis in time is reported to the error callback
 * (informational), and the consumer carries on once Redis answers again. */
static void on_consumer_error(sluice_dq_consumer *con, int status, void *ud) {
  int *last = ud;
  *last = status;
}

/* ---- a take whose answer was lost ----------------------------------------- */

/* dq_take of queue "tk" by consumer "c1", numbered seq, sent again or not. */
static redisReply *take_numbered(redisContext *rc, const char *seq, int retry) {
  const char *argv[] = {"EVAL",
                        sluice__lua_dq_take.body,
                        "5",
                        "sluice:dq:{tk}:z",
                        "sluice:dq:{tk}:f",
                        "sluice:dq:{tk}:d",
                        "sluice:dq:{tk}:h",
                        "sluice:dq:{tk}:c",
                        "60000",
                        "10",
                        "60000",
                        "0",
                        "c1",
                        "1000",
                        seq,
                        retry ? "1" : "0"};
  redisReply *r = redisCommandArgv(rc, (int)(sizeof argv / sizeof argv[0]), argv, NULL);
  TH_ASSERT(r && r->type == REDIS_REPLY_ARRAY && r->elements >= DQ_TAKE_HEAD);
  return r;
}

static long long reply_count(const redisReply *r) { return r->element[2]->integer; }

/* The take record: a take sent again with its number hands back what its
 * first run took (same ids and attempts, new tokens); a first run that
 * arrives after its retry, or after a later take, does nothing (count -1). */
static void test_take_sent_again(void) {
  dq_fx fx = dq_fx_open();
  sluice_dq *dq = dqt_queue(fx.c, "tk");
  dqt_push p;
  const char *ids[] = {"m1", "m2", "m3"};
  for (int i = 0; i < 3; i++)
    TH_ASSERT_EQ(dqt_push_wait(fx.base, dq, ids[i], "x", 0, &p), SLUICE_OK);
  redisContext *rc = th_redis_connect(&th_server);
  TH_ASSERT(rc && !rc->err);

  /* Until all three are due on Redis's clock (a push's due time may be a
   * ms or two ahead of it). */
  uint64_t end = th_now_ms() + 5000;
  for (;;) {
    redisReply *t = redisCommand(rc, "TIME");
    TH_ASSERT(t && t->type == REDIS_REPLY_ARRAY && t->elements == 2);
    long long now_ms = atoll(t->element[0]->str) * 1000 + atoll(t->element[1]->str) / 1000;
    freeReplyObject(t);
    if (th_redis_int(&th_server, "ZCOUNT sluice:dq:{tk}:z -inf %lld", now_ms) == 3) break;
    TH_ASSERT(th_now_ms() < end);
    th_loop_for(fx.base, 1);
  }
  redisReply *first = take_numbered(rc, "5", 0);
  long long n = reply_count(first);
  TH_ASSERT_EQ(n, 3);
  long long tok = first->element[3]->integer;
  redisReply *r = take_numbered(rc, "5", 0); /* the first run, late: nothing */
  TH_ASSERT_EQ(reply_count(r), -1);
  freeReplyObject(r);
  r = take_numbered(rc, "4", 1); /* an older one: nothing */
  TH_ASSERT_EQ(reply_count(r), -1);
  freeReplyObject(r);
  r = take_numbered(rc, "5", 1); /* sent again: the same messages */
  TH_ASSERT_EQ(reply_count(r), n);
  TH_ASSERT_CMP(r->element[3]->integer, >=, tok + n);
  for (size_t k = 0; k < (size_t)n; k++) {
    size_t i = DQ_TAKE_HEAD + DQ_TAKE_PER * k;
    TH_ASSERT_STR_EQ(r->element[i]->str, first->element[i]->str);
    TH_ASSERT_EQ(r->element[i + 1]->integer, 1);
    TH_ASSERT_STR_EQ(r->element[i + 3]->str, "x");
  }
  freeReplyObject(r);
  r = take_numbered(rc, "6", 1); /* a retry of a take that never ran */
  TH_ASSERT_EQ(reply_count(r), 0);
  freeReplyObject(r);
  r = take_numbered(rc, "6", 1); /* whose record holds nothing */
  TH_ASSERT_EQ(reply_count(r), 0);
  freeReplyObject(r);
  freeReplyObject(first);
  TH_ASSERT(th_redis_int(&th_server, "PTTL sluice:dq:{tk}:c:c1:t") > 0);
  redisFree(rc);
  sluice_dq_free(dq);
  dq_fx_close(&fx);
}

/* A consumer whose takes time out while the server is stopped gets the
 * messages its first take took once the server is back, not after their
 * visibility deadline (60 s here). */
static void test_lost_take_handed_back(void) {
  sluice_client_options co;
  th_client_options(&co, th_server.url);
  co.op_timeout_ms = 200;
  dq_fx fx = dq_fx_open_with(&co);
  sluice_dq *dq = dqt_queue(fx.c, "lostq");
  dqt_push p;
  for (int i = 0; i < 5; i++) TH_ASSERT_EQ(dqt_push_wait(fx.base, dq, NULL, "x", 0, &p), SLUICE_OK);
  th_redis_pause(&th_server);
  int last_error = 0;
  rec r = {.target = 5, .auto_ack = 1};
  sluice_dq_consumer_options o = opts(10, 60000, 0);
  sluice_dq_consumer *con = consumer(fx.c, "lostq", &o, &r);
  sluice_dq_consumer_set_error_cb(con, on_consumer_error, &last_error);
  int reported = th_loop_until(fx.base, &last_error, 3000);
  th_redis_resume(&th_server);
  TH_ASSERT(reported);
  TH_ASSERT_EQ(last_error, SLUICE_ETIMEDOUT);
  uint64_t t0 = th_now_ms();
  wait_n(fx.base, &r.n, 5);
  th_note("delivered %d, %llu ms after the server came back\n", r.n,
          (unsigned long long)(th_now_ms() - t0));
  TH_ASSERT_CMP(th_now_ms() - t0, <, 10000);
  for (int i = 0; i < 5; i++) {
    TH_ASSERT_EQ(r.attempts[i], 1);
    for (int j = 0; j < i; j++) TH_ASSERT(strcmp(r.ids[i], r.ids[j]) != 0);
  }
  wait_n(fx.base, &r.settled, 5);
  for (int i = 0; i < 5; i++) TH_ASSERT_EQ(r.settle_status[i], SLUICE_OK);
  dq_case_close(&fx, con, dq);
}

static void test_error_callback_and_names(void) {
  sluice_client_options co;
  th_client_options(&co, th_server.url);
  co.op_timeout_ms = 200;
  dq_fx fx = dq_fx_open_with(&co);
  sluice_dq *dq = dqt_queue(fx.c, "errq");
  TH_ASSERT_STR_EQ(sluice_dq_name(dq), "errq");
  TH_ASSERT(strlen(sluice_version()) > 0);
  dqt_push p;
  TH_ASSERT_EQ(dqt_push_wait(fx.base, dq, NULL, "x", 0, &p), SLUICE_OK); /* connected */
  th_redis_pause(&th_server);
  int last_error = 0;
  sluice_dq_consumer *con = NULL;
  TH_ASSERT_EQ(sluice_dq_consumer_new(fx.c, "errq", NULL, noop_handler, NULL, &con), SLUICE_OK);
  sluice_dq_consumer_set_error_cb(con, on_consumer_error, &last_error);
  int reported = th_loop_until(fx.base, &last_error, 3000);
  th_redis_resume(&th_server);
  TH_ASSERT(reported);
  TH_ASSERT_EQ(last_error, SLUICE_ETIMEDOUT);
  dq_case_close(&fx, con, dq);
}

static const th_case cases[] = {
    TH_CASE(error_callback_and_names, 30, .standalone_only = "pauses the server"),
    TH_CASE(order_by_due_then_push, 30),
    TH_CASE(take_sent_again, 30, .standalone_only = "calls the script on one node"),
    TH_CASE(lost_take_handed_back, 30, .standalone_only = "pauses the server"),
    TH_CASE(batch_and_max_in_flight, 30),
    TH_CASE(binary_payload, 30),
    TH_CASE(cancel, 30),
    TH_CASE(dedup, 30),
    TH_CASE(largest_batch, 60),
    TH_CASE(late_ack_reported, 30),
    TH_CASE(retry_dead_letter_requeue, 30),
    TH_CASE(expired_dead_letter, 30),
    TH_CASE(bad_input, 30),
    TH_CASE(free_inside_callbacks, 30),
    TH_CASE(close_cancels_pending, 30),
    TH_CASE(free_cancels_pending, 30),
    TH_CASE(keys_expire, 30),
    TH_CASE(early_push_wakes_consumer, 30),
    TH_CASE(stream_end_wakes_consumer, 60),
    TH_CASE(idle_cost, 30),
    TH_CASE(inspect_counts, 30),
    TH_CASE(old_layout_drains, 30),
    TH_CASE(memory_per_message, 60),
    TH_CASE(pending_pushes_capped, 30),
    TH_CASE(record_counts_requests, 30),
    TH_CASE(scripts_refuse_oversize, 30,
            .standalone_only = "raw EVALs on one connection to the first master"),
};
TH_MAIN(cases)
