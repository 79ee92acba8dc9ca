/* Delay queue: priorities (order among due messages, kept by retries and
 * dead-letter requeues, an urgent message through a backlog) and pushes
 * that replace or postpone a queued message (debounce). */
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <event2/event.h>
#include <sluice/sluice.h>

#include "dq_util.h"
#include "harness.h"
#include "lua_scripts.h"

static uint64_t mono_us(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000 + (uint64_t)ts.tv_nsec / 1000;
}

enum { GOT_MAX = 64 };

/* What a consumer got, in order; acks at once unless hold is set, when
 * it keeps the handles for the case to settle. */
typedef struct got {
  int n, hold;
  char ids[GOT_MAX][SLUICE_DQ_ID_MAX + 1];
  char payloads[GOT_MAX][16];
  unsigned attempts[GOT_MAX], priorities[GOT_MAX];
  uint64_t at_us[GOT_MAX];
  sluice_dq_msg *held[GOT_MAX];
} got;

static void on_msg(sluice_dq_consumer *con, sluice_dq_msg *m, void *ud) {
  got *g = ud;
  size_t len;
  const char *p = sluice_dq_msg_payload(m, &len);
  TH_ASSERT(g->n < GOT_MAX);
  int i = g->n++;
  snprintf(g->ids[i], sizeof g->ids[i], "%s", sluice_dq_msg_id(m));
  snprintf(g->payloads[i], sizeof g->payloads[i], "%.*s", (int)len, p);
  g->attempts[i] = sluice_dq_msg_attempt(m);
  g->priorities[i] = sluice_dq_msg_priority(m);
  g->at_us[i] = mono_us();
  if (g->hold) g->held[i] = m;
  else TH_ASSERT_EQ(sluice_dq_ack(m, NULL, NULL), SLUICE_OK);
}

static sluice_dq_consumer *start(sluice_client *c, const char *q, unsigned batch,
                                 unsigned max_in_flight, unsigned max_attempts, got *g) {
  sluice_dq_consumer_options o = dqt_options(batch, max_in_flight, 30000, max_attempts);
  sluice_dq_consumer *con = NULL;
  TH_ASSERT_EQ(sluice_dq_consumer_new(c, q, &o, on_msg, g, &con), SLUICE_OK);
  return con;
}

/* start on fx's client, then the loop run until g has n messages (5 s at
 * most; the case checks what came). */
static sluice_dq_consumer *start_until(dq_fx *fx, const char *q, unsigned batch,
                                       unsigned max_in_flight, unsigned max_attempts, got *g,
                                       int n) {
  sluice_dq_consumer *con = start(fx->c, q, batch, max_in_flight, max_attempts, g);
  TH_LOOP_UNTIL(fx->base, g->n >= n, 5000);
  return con;
}

/* sluice_dq_push_ex, run until answered; the status, due time into p. */
static int push_ex(struct event_base *base, sluice_dq *dq, const char *id, const char *payload,
                   int64_t delay, int64_t at, unsigned pri, int if_exists, dqt_push *p) {
  sluice_dq_item it = {payload, strlen(payload), delay, at, id};
  memset(p, 0, sizeof *p);
  TH_ASSERT_EQ(sluice_dq_push_ex(dq, &it, pri, if_exists, dqt_on_push, p), SLUICE_OK);
  TH_ASSERT(th_loop_until(base, &p->done, 5000));
  return p->status;
}

/* A case of pushes to one queue: its fixture, the queue and the last
 * push's answer. */
typedef struct push_case {
  dq_fx fx;
  sluice_dq *dq;
  dqt_push p;
} push_case;

static push_case push_case_open(const char *q) {
  push_case k = {dq_fx_open(), NULL, {0}};
  k.dq = dqt_queue(k.fx.c, q);
  return k;
}

/* push_ex to k's queue, the answer into k->p. */
static int push(push_case *k, const char *id, const char *payload, int64_t delay, int64_t at,
                unsigned pri, int if_exists) {
  return push_ex(k->fx.base, k->dq, id, payload, delay, at, pri, if_exists, &k->p);
}

/* A case's loop on libevent's precise clock (EVENT_BASE_FLAG_PRECISE_TIMER)
 * and its client: for cases that measure milliseconds. */
static dq_fx precise_fx(void) {
  dq_fx fx = {th_precise_base(), NULL};
  TH_ASSERT(fx.base != NULL);
  fx.c = th_client(fx.base, th_server.url, 5000);
  return fx;
}

/* ---- priorities --------------------------------------------------------------- */

static void on_info_ex(sluice_dq *dq, int status, const sluice_dq_info *info, unsigned pri,
                       void *ud) {
  TH_ASSERT_EQ(status, SLUICE_OK);
  *(unsigned *)ud = pri;
}

/* Due messages go by priority, then due time, then push order; inspect's
 * next message is the earliest due whatever its priority. */
static void test_priority_order(void) {
  dq_fx fx = dq_fx_open();
  sluice_dq *dq = dqt_queue(fx.c, "po");
  dqt_info in;
  int64_t base = dqt_inspect(fx.base, dq, &in).now_ms - 5000; /* all due already */
  static const struct {
    const char *id;
    int64_t at;
    unsigned pri;
  } push[] = {{"z1", 0, 0}, {"z0", -100, 0}, {"f1", 0, 5},
              {"f2", 0, 5}, {"f0", -200, 5}, {"n", 500, 9}};
  dqt_push p;
  for (size_t i = 0; i < sizeof push / sizeof *push; i++)
    TH_ASSERT_EQ(push_ex(fx.base, dq, push[i].id, push[i].id, 0, base + push[i].at, push[i].pri,
                         SLUICE_DQ_REFUSE, &p),
                 SLUICE_OK);
  TH_ASSERT_EQ(dqt_inspect(fx.base, dq, &in).ready, 6);
  TH_ASSERT_STR_EQ(in.info.next_id, "f0");
  TH_ASSERT_EQ(in.info.next_due_ms, base - 200);
  unsigned next_priority = 99;
  TH_ASSERT_EQ(sluice_dq_inspect_ex(dq, on_info_ex, &next_priority), SLUICE_OK);
  TH_LOOP_UNTIL(fx.base, next_priority != 99, 5000);
  TH_ASSERT_EQ(next_priority, 5);
  got g = {0};
  sluice_dq_consumer *con = start_until(&fx, "po", 16, 256, 5, &g, 6);
  static const char *const want[] = {"n", "f0", "f1", "f2", "z0", "z1"};
  static const unsigned want_pri[] = {9, 5, 5, 5, 0, 0};
  for (int i = 0; i < 6; i++) {
    TH_ASSERT_STR_EQ(g.ids[i], want[i]);
    TH_ASSERT_EQ(g.priorities[i], want_pri[i]);
  }
  TH_ASSERT_EQ(sluice_dq_msg_priority(NULL), 0);
  dq_case_close(&fx, con, dq);
}

static void on_settled(sluice_dq_consumer *con, int status, const char *id, void *ud) {
  th_status_set(ud, status);
}

/* Settle m by a retry with no delay (the last attempt: a dead letter),
 * after freeing its consumer, so that none takes anything else before the
 * retry is due (a retry is due from Redis's next whole ms). */
static void retry_alone(struct event_base *base, sluice_dq_consumer *con, sluice_dq_msg *m) {
  sluice_dq_consumer_free(con);
  th_status st = {0};
  TH_ASSERT_EQ(sluice_dq_retry(m, 0, on_settled, &st), SLUICE_OK);
  TH_ASSERT(th_loop_until(base, &st.done, 5000));
  TH_ASSERT_EQ(st.status, SLUICE_OK);
  th_loop_for(base, 5);
}

/* A retried message keeps its priority, and so does a dead letter put back:
 * each comes back ahead of the older messages of priority 0. */
static void test_priority_kept(void) {
  dq_fx fx = dq_fx_open();
  sluice_dq *dq = dqt_queue(fx.c, "pk");
  dqt_push p;
  TH_ASSERT_EQ(push_ex(fx.base, dq, "lo1", "lo1", 0, 1, 0, SLUICE_DQ_REFUSE, &p), SLUICE_OK);
  TH_ASSERT_EQ(push_ex(fx.base, dq, "lo2", "lo2", 0, 1, 0, SLUICE_DQ_REFUSE, &p), SLUICE_OK);
  TH_ASSERT_EQ(push_ex(fx.base, dq, "hi", "hi", 0, 1, 7, SLUICE_DQ_REFUSE, &p), SLUICE_OK);
  got g = {.hold = 1};
  sluice_dq_consumer *con = start_until(&fx, "pk", 1, 1, 2, &g, 1);
  TH_ASSERT_STR_EQ(g.ids[0], "hi");
  retry_alone(fx.base, con, g.held[0]);
  con = start(fx.c, "pk", 1, 1, 2, &g);
  TH_LOOP_UNTIL(fx.base, g.n >= 2, 5000);
  TH_ASSERT_STR_EQ(g.ids[1], "hi"); /* retried: before lo1, due since long */
  TH_ASSERT_EQ(g.attempts[1], 2);
  retry_alone(fx.base, con, g.held[1]); /* the last attempt: dead */
  con = start(fx.c, "pk", 1, 1, 2, &g);
  TH_LOOP_UNTIL(fx.base, g.n >= 3, 5000);
  TH_ASSERT_STR_EQ(g.ids[2], "lo1");
  dqt_dead d = {0};
  TH_ASSERT_EQ(sluice_dq_dead_requeue(dq, "hi", dqt_on_dead_count, &d), SLUICE_OK);
  TH_ASSERT(th_loop_until(fx.base, &d.done, 5000));
  TH_ASSERT_EQ(d.count, 1);
  TH_ASSERT_EQ(sluice_dq_ack(g.held[2], NULL, NULL), SLUICE_OK);
  TH_LOOP_UNTIL(fx.base, g.n >= 4, 5000);
  TH_ASSERT_STR_EQ(g.ids[3], "hi"); /* requeued now, still before lo2 */
  TH_ASSERT_EQ(g.attempts[3], 1);
  TH_ASSERT_EQ(sluice_dq_ack(g.held[3], NULL, NULL), SLUICE_OK);
  TH_LOOP_UNTIL(fx.base, g.n >= 5, 5000);
  TH_ASSERT_STR_EQ(g.ids[4], "lo2");
  TH_ASSERT_EQ(sluice_dq_ack(g.held[4], NULL, NULL), SLUICE_OK);
  dq_case_close(&fx, con, dq);
}

enum { BACKLOG = 100000, BACKLOG_BATCH = 10000 };

typedef struct urgent {
  int delivered, pushed, urgent_seen, batches;
  uint64_t answered_us, seen_us;
  int backlog_left; /* backlog messages not yet delivered when the urgent one came */
} urgent;

static void on_backlog_batch(sluice_dq *dq, int status, const sluice_dq_push_result *res, size_t n,
                             void *ud) {
  TH_ASSERT_EQ(status, SLUICE_OK);
  ((urgent *)ud)->batches++;
}

static void on_urgent_pushed(sluice_dq *dq, int status, const char *id, int64_t due, void *ud) {
  urgent *u = ud;
  TH_ASSERT_EQ(status, SLUICE_OK);
  u->answered_us = mono_us();
  u->pushed = 1;
}

static void on_backlog_msg(sluice_dq_consumer *con, sluice_dq_msg *m, void *ud) {
  urgent *u = ud;
  if (strcmp(sluice_dq_msg_id(m), "urgent") == 0) {
    u->seen_us = mono_us();
    u->urgent_seen = 1;
    u->backlog_left = BACKLOG - u->delivered;
  } else {
    u->delivered++;
  }
  TH_ASSERT_EQ(sluice_dq_ack(m, NULL, NULL), SLUICE_OK);
}

/* The test: behind 100,000 due messages of priority 0, a message of
 * priority 9 pushed after them reaches the handler within 10 ms of its push
 * being answered, while the consumer works through the backlog. */
static void test_urgent_through_backlog(void) {
  dq_fx fx = precise_fx();
  struct event_base *base = fx.base;
  sluice_client *c = fx.c;
  sluice_dq *dq = dqt_queue(c, "bl");
  static sluice_dq_item items[BACKLOG_BATCH];
  for (int i = 0; i < BACKLOG_BATCH; i++) items[i] = (sluice_dq_item){"b", 1, 0, 1, NULL};
  urgent u = {0};
  for (int b = 0; b < BACKLOG / BACKLOG_BATCH; b++)
    TH_ASSERT_EQ(sluice_dq_push_batch(dq, items, BACKLOG_BATCH, on_backlog_batch, &u), SLUICE_OK);
  TH_LOOP_UNTIL(base, u.batches == BACKLOG / BACKLOG_BATCH, 60000);
  dqt_info in;
  TH_ASSERT_EQ(dqt_inspect(base, dq, &in).ready, BACKLOG);
  sluice_dq_consumer_options o = dqt_options(16, 256, 30000, 5);
  sluice_dq_consumer *con = NULL;
  TH_ASSERT_EQ(sluice_dq_consumer_new(c, "bl", &o, on_backlog_msg, &u, &con), SLUICE_OK);
  TH_LOOP_UNTIL(base, u.delivered >= 2000, 30000); /* the consumer is under way */
  sluice_dq_item it = {"now", 3, 0, 0, "urgent"};
  TH_ASSERT_EQ(sluice_dq_push_ex(dq, &it, 9, SLUICE_DQ_REFUSE, on_urgent_pushed, &u), SLUICE_OK);
  TH_LOOP_UNTIL(base, u.urgent_seen, 10000);
  TH_ASSERT(u.pushed);
  int64_t waited = (int64_t)u.seen_us - (int64_t)u.answered_us;
  th_note("urgent message handled %.2f ms after its push was answered, %d of the backlog left\n",
          (double)waited / 1000, u.backlog_left);
  TH_ASSERT_CMP(waited, <=, 10000);
  TH_ASSERT_CMP(u.backlog_left, >, BACKLOG / 2);
  dq_case_close(&fx, con, dq);
}

/* ---- replacing and postponing ------------------------------------------------- */

/* Replace and postpone act only on a message waiting in the queue: one in
 * flight or dead answers SLUICE_EBUSY and stays as it was; a missing one
 * is pushed; without either option a push of an existing id is refused. */
static void test_replace_only_while_waiting(void) {
  push_case k = push_case_open("rw");
  TH_ASSERT_EQ(push(&k, "t", "one", 0, 0, 0, SLUICE_DQ_REPLACE), SLUICE_OK);
  TH_ASSERT_EQ(push(&k, "t", "two", 0, 0, 0, SLUICE_DQ_REFUSE), SLUICE_EEXIST);
  got g = {.hold = 1};
  sluice_dq_consumer *con = start_until(&k.fx, "rw", 1, 1, 1, &g, 1);
  TH_ASSERT_STR_EQ(g.payloads[0], "one");
  TH_ASSERT_EQ(push(&k, "t", "two", 0, 0, 0, SLUICE_DQ_REPLACE), SLUICE_EBUSY);
  TH_ASSERT_EQ(k.p.due, -1);
  TH_ASSERT_EQ(push(&k, "t", "two", 5000, 0, 0, SLUICE_DQ_POSTPONE), SLUICE_EBUSY);
  TH_ASSERT_EQ(sluice_dq_retry(g.held[0], 0, NULL, NULL), SLUICE_OK); /* max 1: dead */
  dqt_info in;
  TH_LOOP_UNTIL(k.fx.base, dqt_inspect(k.fx.base, k.dq, &in).dead == 1, 5000);
  TH_ASSERT_EQ(push(&k, "t", "two", 0, 0, 0, SLUICE_DQ_REPLACE), SLUICE_EBUSY);
  dqt_dead d = {0};
  TH_ASSERT_EQ(sluice_dq_dead_list(k.dq, 0, 10, dqt_on_dead, &d), SLUICE_OK);
  TH_ASSERT(th_loop_until(k.fx.base, &d.done, 5000));
  TH_ASSERT_STR_EQ(d.payload, "one");
  sluice_dq_metrics m;
  sluice_dq_get_metrics(k.dq, &m);
  TH_ASSERT_EQ(m.duplicates, 1);
  TH_ASSERT_EQ(m.errors, 3);
  TH_ASSERT_EQ(sluice_dq_push_ex(k.dq, &(sluice_dq_item){"x", 1, 0, 0, "u"}, 10, 0, NULL, NULL),
               SLUICE_EINVAL);
  TH_ASSERT_EQ(sluice_dq_push_ex(k.dq, &(sluice_dq_item){"x", 1, 0, 0, "u"}, 0, 3, NULL, NULL),
               SLUICE_EINVAL);
  dq_case_close(&k.fx, con, k.dq);
}

/* Postpone moves only later and keeps the payload; replace sets payload,
 * due time and priority, earlier too. */
static void test_postpone_and_replace(void) {
  push_case k = push_case_open("pr");
  TH_ASSERT_EQ(push(&k, "m", "one", 60000, 0, 0, SLUICE_DQ_POSTPONE), SLUICE_OK);
  int64_t due = k.p.due;
  TH_ASSERT_EQ(push(&k, "m", "two", 120000, 0, 0, SLUICE_DQ_POSTPONE), SLUICE_OK);
  TH_ASSERT_CMP(k.p.due, >=, due + 60000);
  due = k.p.due;
  TH_ASSERT_EQ(push(&k, "m", "three", 1000, 0, 0, SLUICE_DQ_POSTPONE), SLUICE_OK);
  TH_ASSERT_EQ(k.p.due, due); /* not earlier */
  dqt_info in;
  TH_ASSERT_EQ(dqt_inspect(k.fx.base, k.dq, &in).next_due_ms, due);
  TH_ASSERT_EQ(in.info.delayed, 1);
  TH_ASSERT_EQ(push(&k, "other", "o", 0, 1, 0, SLUICE_DQ_REFUSE), SLUICE_OK);
  TH_ASSERT_EQ(push(&k, "m", "four", 0, 1, 9, SLUICE_DQ_REPLACE), SLUICE_OK);
  TH_ASSERT_EQ(k.p.due, 1);
  TH_ASSERT_EQ(dqt_inspect(k.fx.base, k.dq, &in).delayed, 2);
  got g = {0};
  sluice_dq_consumer *con = start_until(&k.fx, "pr", 16, 256, 5, &g, 2);
  TH_ASSERT_STR_EQ(g.ids[0], "m"); /* priority 9 now, pushed after "other" */
  TH_ASSERT_STR_EQ(g.payloads[0], "four");
  TH_ASSERT_STR_EQ(g.ids[1], "other");
  th_loop_for(k.fx.base, 100);
  TH_ASSERT_EQ(g.n, 2);
  dq_case_close(&k.fx, con, k.dq);
}

enum { DEBOUNCE_N = 1000, DEBOUNCE_MS = 2000 };

typedef struct debounce {
  int answered, ok;
  uint64_t last_sent_us, last_answered_us;
} debounce;

static void on_debounced(sluice_dq *dq, int status, const char *id, int64_t due, void *ud) {
  debounce *d = ud;
  if (status == SLUICE_OK) d->ok++;
  if (++d->answered == DEBOUNCE_N) d->last_answered_us = mono_us();
}

/* The test: 1,000 pushes of one id within a second, each replacing
 * the last and due 2 s later, give one delivery with the last payload,
 * 2 s after the last push (not before; after, within what a loaded
 * machine or valgrind adds), and nothing more. */
static void test_debounce(void) {
  dq_fx fx = precise_fx();
  struct event_base *base = fx.base;
  sluice_client *c = fx.c;
  sluice_dq *dq = dqt_queue(c, "db");
  got g = {0};
  sluice_dq_consumer *con = start(c, "db", 16, 256, 5, &g);
  debounce d = {0};
  char payload[16];
  uint64_t first = mono_us();
  for (int i = 0; i < DEBOUNCE_N; i++) {
    snprintf(payload, sizeof payload, "v%d", i);
    sluice_dq_item it = {payload, strlen(payload), DEBOUNCE_MS, 0, "deb"};
    if (i == DEBOUNCE_N - 1) d.last_sent_us = mono_us();
    TH_ASSERT_EQ(sluice_dq_push_ex(dq, &it, 0, SLUICE_DQ_REPLACE, on_debounced, &d), SLUICE_OK);
    if (i % 10 == 9) th_loop_for(base, 8); /* 1,000 over about a second */
  }
  TH_LOOP_UNTIL(base, d.answered == DEBOUNCE_N, 10000);
  th_note("%d pushes over %.0f ms\n", DEBOUNCE_N, (double)(d.last_sent_us - first) / 1000);
  TH_ASSERT_EQ(d.ok, DEBOUNCE_N);
  TH_LOOP_UNTIL(base, g.n >= 1, 10000);
  int64_t after = (int64_t)g.at_us[0] - (int64_t)d.last_sent_us;
  th_note("delivered %.1f ms after the last push was sent\n", (double)after / 1000);
  TH_ASSERT_STR_EQ(g.payloads[0], "v999");
  TH_ASSERT_CMP(after, >=, (DEBOUNCE_MS - 1) * 1000);
  TH_ASSERT_CMP(after, <=, (DEBOUNCE_MS + 750) * 1000);
  th_loop_for(base, 1000);
  TH_ASSERT_EQ(g.n, 1);
  dq_case_close(&fx, con, dq);
}

/* The version in front of a replaced message's p<id> (_dq_common.lua). */
static long long version_of(const th_redis *r, const char *hash, const char *id) {
  redisReply *v = th_redis_command(r, "HGET %s p%s", hash, id);
  TH_ASSERT(v && v->type == REDIS_REPLY_STRING && v->len > 17);
  TH_ASSERT_EQ((unsigned char)v->str[0], 255);
  char digits[17];
  memcpy(digits, v->str + 1, 16);
  digits[16] = '\0';
  freeReplyObject(v);
  return strtoll(digits, NULL, 10);
}

/* A replacing push the client's record sends again after a failover
 * carries the version Redis gave it: applied over an older version, never
 * over a newer one (raw calls, as the record sends them). */
static void test_replayed_replace_keeps_newer(void) {
  push_case k = push_case_open("rv");
  TH_ASSERT_EQ(push(&k, "m", "one", 60000, 0, 0, SLUICE_DQ_REPLACE), SLUICE_OK);
  long long v1 = version_of(&th_server, "sluice:dq:{rv}:h", "m");
  TH_ASSERT_EQ(push(&k, "m", "two", 60000, 0, 0, SLUICE_DQ_REPLACE), SLUICE_OK);
  long long v2 = version_of(&th_server, "sluice:dq:{rv}:h", "m");
  TH_ASSERT_CMP(v2, >, v1);
  static const char *const keys =
      "sluice:dq:{rv}:z sluice:dq:{rv}:f sluice:dq:{rv}:d "
      "sluice:dq:{rv}:h sluice:dq:{rv}:c";
  char cmd[512];
  snprintf(cmd, sizeof cmd, "EVALSHA %s 5 %s 1000 m ar@%lld 1 stale", sluice__lua_dq_push.sha, keys,
           v1);
  redisReply *r = th_redis_command(&th_server, cmd);
  TH_ASSERT(r && r->type == REDIS_REPLY_ARRAY && r->elements == 2); /* due, sequence */
  TH_ASSERT_EQ(r->element[0]->integer, k.p.due);                    /* the newer one's, untouched */
  freeReplyObject(r);
  snprintf(cmd, sizeof cmd, "EVALSHA %s 5 %s 1000 m ar@%lld 1 newer", sluice__lua_dq_push.sha, keys,
           v2 + 1);
  r = th_redis_command(&th_server, cmd);
  TH_ASSERT(r && r->type == REDIS_REPLY_ARRAY && r->elements == 2); /* due, sequence */
  TH_ASSERT_EQ(r->element[0]->integer, 1);
  freeReplyObject(r);
  TH_ASSERT_EQ(version_of(&th_server, "sluice:dq:{rv}:h", "m"), v2 + 1);
  got g = {0};
  sluice_dq_consumer *con = start_until(&k.fx, "rv", 16, 256, 5, &g, 1);
  TH_ASSERT_STR_EQ(g.payloads[0], "newer");
  dq_case_close(&k.fx, con, k.dq);
}

static const th_case cases[] = {
    TH_CASE(priority_order, 30),
    TH_CASE(priority_kept, 30),
    TH_CASE(urgent_through_backlog, 120),
    TH_CASE(replace_only_while_waiting, 30),
    TH_CASE(postpone_and_replace, 30),
    TH_CASE(debounce, 60),
    TH_CASE(replayed_replace_keeps_newer, 30),
};
TH_MAIN(cases)
