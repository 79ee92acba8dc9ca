/* A Sentinel-managed master (redis+sentinel:// URLs): every primitive
 * through the sentinels, a failover during activity (a blocked waiter and a
 * consumer resume against the new master without any action), the
 * sentinels the client learns (SENTINEL sentinels) carrying it through a
 * failover when the one it was given is gone, the replies and reconnects
 * that make it ask the sentinels again, a switch ending the reconnect
 * backoff built up on a killed master, an old master not taken while a
 * sentinel fails it over or from a sentinel behind the last switch, and the bad inputs: an unknown
 * master name, no sentinel reachable, malformed URLs.
 * Suite "sentinel": the topology takes a second or two to start. */
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/client.h" /* the client's sentinel link, to look at its list */
#include "dq_util.h"
#include "rl_util.h"
#include "sem_util.h"
#include "topology.h"
#include "net/sentinel.h"

/* The client's link to the sentinels (its topology's). */
static sluice__sentinel *sentinel_link(sluice_client *c) {
  return sluice__topo_sentinel_link(c->topo);
}

static th_sentinel topo;
static char url[256];

static void start(void) {
  TH_ASSERT_EQ(th_sentinel_start(&topo, "mymaster"), 0);
  snprintf(url, sizeof url, "redis+sentinel://%s/mymaster", topo.sentinels);
}

/* start, and a new loop (into *base) with a client of the sentinels' url
 * (operations bounded by 1 s). */
static sluice_client *start_client(struct event_base **base) {
  start();
  *base = event_base_new();
  return sem_test_client_at(*base, url, 1000);
}

/* start, and a new loop; o is set for a client of the sentinels' url (the
 * case changes what it needs before th_client_with). */
static struct event_base *start_options(sluice_client_options *o) {
  start();
  th_client_options(o, url);
  return event_base_new();
}

/* start_client, with a permit of the one-permit semaphore `name` (lease
 * ttl_ms) held (*h) and a waiter of the same handle blocked behind it (*w,
 * for wait_ms). */
static sluice_sem *start_held(struct event_base **base, sluice_client **c, const char *name,
                              unsigned ttl_ms, unsigned wait_ms, acq_result *h, acq_result *w) {
  *c = start_client(base);
  sluice_sem *s = sem_test_new(*c, name, 1, ttl_ms, 0);
  *h = sem_hold_with_waiter(*base, s, s, wait_ms, w);
  return s;
}

/* The end of a case: its client closed (the loop drained), the loop freed,
 * the topology stopped. */
static void finish(struct event_base *base, sluice_client *c) {
  th_free_client_and_loop(base, c, 5000);
  th_sentinel_stop(&topo);
}

/* finish for a case that ends holding permit p of s: released, s freed. */
static void finish_sem(struct event_base *base, sluice_client *c, sluice_sem *s, sluice_permit *p) {
  sluice_permit_release(p, NULL, NULL);
  sluice_sem_free(s);
  finish(base, c);
}

/* Queue `name` on c, and its consumer *con, which acks what it gets and
 * counts it into *delivered. */
static sluice_dq *counted_queue(sluice_client *c, const char *name, int *delivered,
                                sluice_dq_consumer **con) {
  sluice_dq *dq = dqt_queue(c, name);
  *con = NULL;
  TH_ASSERT_EQ(sluice_dq_consumer_new(c, name, NULL, dqt_ack_counted, delivered, con), SLUICE_OK);
  return dq;
}

static void on_check(sluice_limiter *lim, int status, const sluice_rl_result *res, void *ud) {
  *(int *)ud = status == SLUICE_OK && res->allowed ? 1 : -1;
}

/* Every primitive through the sentinels; operations started before the
 * master's address is known wait for it. */
static void test_primitives(void) {
  struct event_base *base;
  sluice_client *c = start_client(&base);
  sluice_sem *s = sem_test_new(c, "s", 1, 5000, 0);
  acq_result a = sem_try(base, s); /* sent before the sentinels answered */
  TH_ASSERT_EQ(a.status, SLUICE_OK);
  acq_result w = {0};
  TH_ASSERT_EQ(sluice_sem_acquire(s, 5000, acq_cb, &w, NULL), SLUICE_OK);
  th_loop_for(base, 100);
  sluice_permit_release(a.permit, NULL, NULL);
  TH_ASSERT(th_loop_until(base, &w.done, 3000));
  TH_ASSERT_EQ(w.status, SLUICE_OK);
  sluice_permit_release(w.permit, NULL, NULL);

  sluice_limiter *lim = rl_test_new(c, "l", SLUICE_RL_FIXED, 5, 1000);
  int ok = 0;
  TH_ASSERT_EQ(sluice_limiter_check(lim, "k", 1, on_check, &ok), SLUICE_OK);
  TH_ASSERT(th_loop_until(base, &ok, 3000));
  TH_ASSERT_EQ(ok, 1);

  int delivered = 0;
  sluice_dq_consumer *con;
  sluice_dq *dq = counted_queue(c, "q", &delivered, &con);
  dqt_push p;
  TH_ASSERT_EQ(dqt_push_wait(base, dq, "m", "m", 50, &p), SLUICE_OK);
  TH_ASSERT(th_loop_until(base, &delivered, 3000));
  /* The data went to the master the sentinels named. */
  redisContext *m = th_node_connect(th_sentinel_master(&topo));
  redisReply *r = m ? redisCommand(m, "EXISTS sluice:dq:{q}:h") : NULL;
  TH_ASSERT(r && r->type == REDIS_REPLY_INTEGER);
  freeReplyObject(r);
  redisFree(m);

  /* The same through the options, for programs without URLs. */
  sluice_client_options o;
  th_client_options(&o, NULL);
  o.master_name = "mymaster";
  o.sentinels = topo.sentinels;
  sluice_client *c2 = th_client_with(base, &o);
  sluice_sem *s2 = sem_test_new(c2, "s", 1, 5000, 0);
  acq_result b = sem_hold(base, s2);
  sluice_permit_release(b.permit, NULL, NULL);
  sluice_sem_free(s2);
  sluice_client_free(c2);

  sluice_dq_consumer_free(con);
  sluice_dq_free(dq);
  sluice_limiter_free(lim);
  sluice_sem_free(s);
  finish(base, c);
}

/* SENTINEL FAILOVER while a waiter is blocked and a consumer idles: both
 * go on against the new master, which the client finds by itself. */
static void test_failover(void) {
  struct event_base *base;
  sluice_client *c;
  acq_result h, w;
  sluice_sem *s = start_held(&base, &c, "f", 2000, 20000, &h, &w);
  int delivered = 0;
  sluice_dq_consumer *con;
  sluice_dq *dq = counted_queue(c, "fq", &delivered, &con);
  th_loop_for(base, 200);
  th_node *old = th_sentinel_master(&topo);
  int old_port = old->port;
  uint64_t t0 = th_now_ms();
  th_node *nm = th_sentinel_failover(&topo);
  TH_ASSERT(nm != NULL);
  TH_ASSERT(nm->port != old_port);
  /* The holder's renewals and the waiter's heartbeats go on against the
   * new master; the holder's release there hands the waiter the permit (or
   * the holder's short lease ran out during the switch, and the waiter got
   * it then). Either way the waiter gets it, without any action. */
  th_loop_for(base, 300);
  th_note("waiter after the switch: done %d, status %s; holder lost: %d\n", w.done,
          sluice_err_name(w.status), sluice_permit_lost(h.permit));
  /* A waiter served before the release: the new master did not have the
   * holder's last renewal (replication is asynchronous) and its lease had
   * ended there. The holder hears it at its next renewal, a third of a lease
   * later at most (docs/failures.md: the failover window). */
  if (w.done) {
    uint64_t until = th_now_ms() + 2500;
    while (!sluice_permit_lost(h.permit) && th_now_ms() < until) th_loop_for(base, 20);
    TH_ASSERT(sluice_permit_lost(h.permit) != 0);
  }
  sluice_permit_release(h.permit, NULL, NULL);
  TH_ASSERT(th_loop_until(base, &w.done, 10000));
  TH_ASSERT_EQ(w.status, SLUICE_OK);
  /* A push after the failover reaches the consumer. */
  dqt_push_until_delivered(base, dq, &delivered, 10000, 5000);
  th_note("failover to delivery: %llu ms\n", (unsigned long long)(th_now_ms() - t0));
  /* The client talks to the new master now. */
  redisContext *m = th_node_connect(nm);
  redisReply *r = m ? redisCommand(m, "ZCARD sluice:sem:{f}:holders") : NULL;
  TH_ASSERT(r && r->type == REDIS_REPLY_INTEGER && r->integer >= 1);
  freeReplyObject(r);
  redisFree(m);
  sluice_dq_consumer_free(con);
  sluice_dq_free(dq);
  finish_sem(base, c, s, w.permit);
}

typedef struct changes {
  int changes, ups, change_at_up;
} changes;

static void count_changes(sluice_client *c, int level, const char *msg, void *ud) {
  changes *b = ud;
  if (strstr(msg, "a different Redis node serves every key"))
    b->changes++, b->change_at_up = b->ups;
  if (strncmp(msg, "connected to ", 13) == 0) b->ups++;
  if (getenv("DBG")) fprintf(stderr, "LOG %s\n", msg);
}

/* start_client (*base, *c) logging into *b, and semaphore `name` of
 * `permits`, one of them granted (so confirmed) and released. */
static sluice_sem *start_counted(struct event_base **base, sluice_client **c, changes *b,
                                 const char *name, unsigned permits) {
  *c = start_client(base);
  sluice_client_set_log_cb(*c, count_changes, b);
  sluice_sem *s = sem_test_new(*c, name, permits, 5000, 0);
  acq_result a = sem_hold(*base, s);
  sluice_permit_release(a.permit, NULL, NULL);
  return s;
}

/* SENTINEL FAILOVER: the client reports once that another node serves
 * every key, before it is connected to the new master. */
static void test_node_change(void) {
  struct event_base *base;
  sluice_client *c;
  changes b = {0};
  sluice_sem *s = start_counted(&base, &c, &b, "n", 1);
  acq_result a;
  th_loop_for(base, 50);
  TH_ASSERT_EQ(b.changes, 0);
  TH_ASSERT(th_sentinel_failover(&topo) != NULL);
  uint64_t end = th_now_ms() + 15000;
  do a = sem_try(base, s);
  while (a.status != SLUICE_OK && th_now_ms() < end);
  TH_ASSERT_EQ(a.status, SLUICE_OK);
  sluice_permit_release(a.permit, NULL, NULL);
  th_loop_for(base, 200);
  TH_ASSERT_EQ(b.changes, 1);
  TH_ASSERT_CMP(b.change_at_up, <, b.ups); /* "connected to" the new master came after */
  sluice_sem_free(s);
  finish(base, c);
}

/* Bad input: an unknown master name and no sentinel reachable give a clear
 * error and nothing hangs; malformed URLs are refused at once. */
static void test_bad_input(void) {
  start();
  struct event_base *base = event_base_new();
  char bad[256];
  snprintf(bad, sizeof bad, "redis+sentinel://%s/nosuchmaster", topo.sentinels);
  sluice_client *c = sem_test_client_at(base, bad, 1000);
  sluice_sem *s = sem_test_new(c, "b", 1, 1000, 0);
  acq_result a = {0};
  TH_ASSERT_EQ(sluice_sem_try_acquire(s, acq_cb, &a), SLUICE_OK);
  TH_ASSERT(th_loop_until(base, &a.done, 5000));
  TH_ASSERT(a.status == SLUICE_ETIMEDOUT || a.status == SLUICE_ECONNECTION);
  th_loop_for(base, 300);
  const char *err = sluice_client_last_error(c);
  if (!strstr(err, "nosuchmaster") && !strstr(err, "sentinel"))
    th_fail(__FILE__, __LINE__, "unclear error: \"%s\"", err);
  sluice_sem_free(s);
  client_close_drain(base, c);

  c = sem_test_client_at(base, "redis+sentinel://127.0.0.1:1,127.0.0.1:2/mymaster", 1000);
  s = sem_test_new(c, "b", 1, 1000, 0);
  memset(&a, 0, sizeof a);
  TH_ASSERT_EQ(sluice_sem_try_acquire(s, acq_cb, &a), SLUICE_OK);
  TH_ASSERT(th_loop_until(base, &a.done, 5000));
  TH_ASSERT(a.status == SLUICE_ETIMEDOUT || a.status == SLUICE_ECONNECTION);
  sluice_sem_free(s);
  client_close_drain(base, c);

  /* Closed while the sentinels are still being asked, with an object alive:
   * the answer that comes later must not start a connection. */
  c = sem_test_client_at(base, url, 1000);
  s = sem_test_new(c, "b", 1, 1000, 0);
  sluice_client_close(c, NULL, NULL);
  th_loop_for(base, 500);
  sluice_sem_free(s);
  TH_ASSERT(th_loop_drain(base, 5000));

  static const char *const malformed[] = {"redis+sentinel://",
                                          "redis+sentinel://h:1",
                                          "redis+sentinel://h:1/",
                                          "redis+sentinel://h/m",
                                          "redis+sentinel://h:0/m",
                                          "redis+sentinel://:1/m",
                                          "redis+sentinel://h:1,/m",
                                          "redis+sentinel://h:1/m?verify=0",
                                          NULL};
  th_assert_urls_refused(base, malformed);
  event_base_free(base);
  th_sentinel_stop(&topo);
}

/* wait_replicas with the replica ack turned off: with the replica there
 * every grant reports replicated; with it stopped, grants still happen and
 * report not replicated within wait_timeout_ms. (With the ack on, the
 * default, such a grant is given back: test_sem_replicas.) */
static void test_wait_replicas(void) {
  sluice_client_options o;
  struct event_base *base = start_options(&o);
  o.op_timeout_ms = 4000;
  o.wait_replicas = 1;
  o.wait_timeout_ms = 1000; /* generous: the replica may lag on a loaded machine */
  sluice_client *c = th_client_with(base, &o);
  TH_ASSERT_EQ(sluice_client_set_replica_ack(c, 0), SLUICE_OK);
  sluice_sem *s = sem_test_new(c, "w", 2, 5000, 0);
  acq_result a = sem_hold(base, s);
  TH_ASSERT_EQ(sluice_permit_replicated(a.permit), 1);
  TH_ASSERT_EQ(th_sentinel_replica_stop(&topo), 0);
  uint64_t t0 = th_now_ms();
  acq_result b = sem_try(base, s);
  TH_ASSERT_EQ(b.status, SLUICE_OK); /* still a grant */
  TH_ASSERT_EQ(sluice_permit_replicated(b.permit), 0);
  TH_ASSERT_CMP(th_now_ms() - t0, <, 2500); /* the WAIT's 1 s, not the 4 s deadline */
  sluice_client_stats st;
  sluice_client_get_stats(c, &st);
  TH_ASSERT_CMP(st.writes_not_replicated, >=, 1);
  sluice_permit_release(a.permit, NULL, NULL);
  finish_sem(base, c, s, b.permit);
}

static void on_release(sluice_sem *sem, int status, void *ud) { *(int *)ud = 1; }

/* Runs the loop until the link knows n sentinels; 1, or 0 after ms. */
static int until_known(struct event_base *base, sluice_client *c, int n, unsigned ms) {
  uint64_t end = th_now_ms() + ms;
  while (sluice__sentinel_count(sentinel_link(c)) != n && th_now_ms() < end) th_loop_for(base, 20);
  return sluice__sentinel_count(sentinel_link(c)) == n;
}

/* Runs the loop until a sentinel has named the master more than `than`
 * times; 1, or 0 after ms. */
static int until_asked(struct event_base *base, sluice_client *c, unsigned long than, unsigned ms) {
  uint64_t end = th_now_ms() + ms;
  while (sluice__sentinel_answers(sentinel_link(c)) <= than && th_now_ms() < end)
    th_loop_for(base, 20);
  return sluice__sentinel_answers(sentinel_link(c)) > than;
}

/* Runs the loop until the client's command connection is up; 1, or 0
 * after ms. */
static int until_connected(struct event_base *base, sluice_client *c, unsigned ms) {
  uint64_t end = th_now_ms() + ms;
  while (!sluice_client_is_connected(c) && th_now_ms() < end) th_loop_for(base, 20);
  return sluice_client_is_connected(c);
}

/* No two entries of the link's list name the same address. */
static void assert_no_duplicates(const sluice__sentinel *sl) {
  for (int i = 0; i < sluice__sentinel_count(sl); i++)
    for (int j = i + 1; j < sluice__sentinel_count(sl); j++) {
      int pi, pj;
      const char *hi = sluice__sentinel_at(sl, i, &pi), *hj = sluice__sentinel_at(sl, j, &pj);
      if (pi == pj && strcmp(hi, hj) == 0) th_fail(__FILE__, __LINE__, "%s:%d twice", hi, pi);
    }
}

/* Given one sentinel, the client learns the other two; with that one
 * killed and a failover forced through another, it still follows the
 * master: only a sentinel it learned can have named the new one. */
static void test_discovery(void) {
  start();
  struct event_base *base = event_base_new();
  char one[128];
  snprintf(one, sizeof one, "redis+sentinel://%s/mymaster", topo.sent[0].addr);
  sluice_client *c = sem_test_client_at(base, one, 1000);
  sluice_sem *s = sem_test_new(c, "d", 1, 5000, 0);
  acq_result a = sem_hold(base, s);
  int released = 0;
  TH_ASSERT_EQ(sluice_permit_release(a.permit, on_release, &released), SLUICE_OK);
  TH_ASSERT(th_loop_until(base, &released, 5000));
  TH_ASSERT(until_known(base, c, 3, 5000));
  assert_no_duplicates(sentinel_link(c));
  for (int i = 0; i < 3; i++) {
    int port = 0, found = 0;
    for (int j = 0; j < 3; j++)
      if (sluice__sentinel_at(sentinel_link(c), j, &port) && port == topo.sent[i].port) found = 1;
    TH_ASSERT(found);
  }

  unsigned long asked = sluice__sentinel_answers(sentinel_link(c));
  TH_ASSERT_EQ(th_sentinel_stop_one(&topo, 0), 0);
  th_node *nm = th_sentinel_failover(&topo); /* asks the first live one: s1 */
  TH_ASSERT(nm != NULL);
  /* Acquire until the grant is on the new master: one that reached the
   * old master before it was demoted is lost with its data, and tried
   * again. */
  redisContext *m = th_node_connect(nm);
  TH_ASSERT(m != NULL);
  int there = 0;
  uint64_t end = th_now_ms() + 20000;
  while (!there && th_now_ms() < end) {
    acq_result b = {0};
    TH_ASSERT_EQ(sluice_sem_try_acquire(s, acq_cb, &b), SLUICE_OK);
    TH_ASSERT(th_loop_until(base, &b.done, 5000));
    if (b.status != SLUICE_OK) {
      th_loop_for(base, 100);
      continue;
    }
    redisReply *r = redisCommand(m, "ZSCORE sluice:sem:{d}:holders %s", sluice_permit_id(b.permit));
    TH_ASSERT(r != NULL);
    there = r->type == REDIS_REPLY_STRING;
    freeReplyObject(r);
    sluice_permit_release(b.permit, NULL, NULL);
    if (!there) th_loop_for(base, 100);
  }
  redisFree(m);
  TH_ASSERT(there);
  TH_ASSERT_EQ(c->endpoint.port, nm->port);
  /* The switch was announced by a learned sentinel (the client watches
   * them too); asked now, a learned one answers, and goes to the front. */
  sluice__sentinel_stale(sentinel_link(c));
  sluice__sentinel_address(sentinel_link(c));
  end = th_now_ms() + 5000;
  while (sluice__sentinel_answers(sentinel_link(c)) <= asked && th_now_ms() < end)
    th_loop_for(base, 10);
  TH_ASSERT_CMP(sluice__sentinel_answers(sentinel_link(c)), >, asked);
  int first = 0;
  TH_ASSERT(sluice__sentinel_at(sentinel_link(c), 0, &first) != NULL);
  TH_ASSERT(first == topo.sent[1].port || first == topo.sent[2].port);
  TH_ASSERT_EQ(sluice__sentinel_count(sentinel_link(c)), 3);
  assert_no_duplicates(sentinel_link(c));

  sluice_sem_free(s);
  finish(base, c);
}

/* The list is the configured sentinels plus learned ones, without
 * duplicates and at most 16; a longer configured list is kept whole. No
 * sentinel needs to answer for this. */
static void test_list_bounds(void) {
  struct event_base *base = event_base_new();
  sluice_client *c = sem_test_client_at(
      base, "redis+sentinel://127.0.0.1:1,127.0.0.1:1,127.0.0.1:2/m", 1000);
  sluice__sentinel *sl = sentinel_link(c);
  TH_ASSERT_EQ(sluice__sentinel_count(sl), 2); /* the configured duplicate once */
  TH_ASSERT_EQ(sluice__sentinel_learn(sl, "127.0.0.1", 9, 2), 0);
  TH_ASSERT_EQ(sluice__sentinel_learn(sl, "127.0.0.1", 9, 0), 0);
  TH_ASSERT_EQ(sluice__sentinel_learn(sl, "127.0.0.1", 9, 65536), 0);
  TH_ASSERT_EQ(sluice__sentinel_learn(sl, "", 0, 3), 0);
  int added = 0;
  for (int round = 0; round < 2; round++) /* the second round: all known or no room */
    for (int port = 100; port < 130; port++)
      added += sluice__sentinel_learn(sl, "127.0.0.2", 9, port);
  TH_ASSERT_EQ(added, 14);
  TH_ASSERT_EQ(sluice__sentinel_count(sl), 16);
  int port = 0;
  TH_ASSERT(strcmp(sluice__sentinel_at(sl, 0, &port), "127.0.0.1") == 0 && port == 1);
  TH_ASSERT(strcmp(sluice__sentinel_at(sl, 1, &port), "127.0.0.1") == 0 && port == 2);
  TH_ASSERT(sluice__sentinel_at(sl, 16, NULL) == NULL);
  assert_no_duplicates(sl);
  client_close_drain(base, c);

  char many[512] = "redis+sentinel://";
  for (int i = 0; i < 18; i++)
    snprintf(many + strlen(many), sizeof many - strlen(many), "%s127.0.0.1:%d", i ? "," : "",
             10 + i);
  strcat(many, "/m");
  c = sem_test_client_at(base, many, 1000);
  TH_ASSERT_EQ(sluice__sentinel_count(sentinel_link(c)), 18);
  TH_ASSERT_EQ(sluice__sentinel_learn(sentinel_link(c), "127.0.0.3", 9, 1), 0);
  th_free_client_and_loop(base, c, 5000);
}

typedef struct cmd_result {
  int done, status;
} cmd_result;

static void on_cmd(void *ud, int status, const redisReply *reply) {
  cmd_result *r = ud;
  r->status = status;
  r->done = 1;
}

/* The client id of the master's connection now running `cmd`, or -1. */
static long long client_running(redisContext *m, const char *cmd) {
  redisReply *r = redisCommand(m, "CLIENT LIST");
  long long id = -1;
  char want[64];
  snprintf(want, sizeof want, " cmd=%s ", cmd);
  for (char *line = r && r->type == REDIS_REPLY_STRING ? r->str : NULL; line && id < 0;) {
    char *nl = strchr(line, '\n');
    if (nl) *nl = '\0';
    if (strstr(line, want) && strncmp(line, "id=", 3) == 0) id = atoll(line + 3);
    line = nl ? nl + 1 : NULL;
  }
  if (r) freeReplyObject(r);
  return id;
}

/* A connection to master m once the client's blocked waiter runs BRPOP
 * there (within 5 s). */
static redisContext *connect_blocked(struct event_base *base, const th_node *m) {
  redisContext *mc = th_node_connect(m);
  TH_ASSERT(mc != NULL);
  uint64_t end = th_now_ms() + 5000;
  while (client_running(mc, "brpop") < 0 && th_now_ms() < end) th_loop_for(base, 20);
  TH_ASSERT(client_running(mc, "brpop") >= 0);
  return mc;
}

/* Drops the master's connections to the client under test: all but the
 * sentinels' (named "sentinel-..."), the replica's and m's own. How many
 * went. */
static int kill_client_connections(redisContext *m) {
  redisReply *me = redisCommand(m, "CLIENT ID"), *r = redisCommand(m, "CLIENT LIST");
  TH_ASSERT(me && me->type == REDIS_REPLY_INTEGER && r && r->type == REDIS_REPLY_STRING);
  int killed = 0;
  for (char *line = r->str; line && *line;) {
    char *nl = strchr(line, '\n');
    if (nl) *nl = '\0';
    long long id = strncmp(line, "id=", 3) == 0 ? atoll(line + 3) : -1;
    if (id >= 0 && id != me->integer && !strstr(line, " name=sentinel-") &&
        !strstr(line, " flags=S ")) { /* nor the replica's link */
      redisReply *k = redisCommand(m, "CLIENT KILL ID %lld", id);
      killed += k && k->type == REDIS_REPLY_INTEGER ? (int)k->integer : 0;
      if (k) freeReplyObject(k);
    }
    line = nl ? nl + 1 : NULL;
  }
  freeReplyObject(me);
  freeReplyObject(r);
  return killed;
}

/* Replies that say "not the master here" (READONLY, LOADING, MASTERDOWN on
 * the command connection, -UNBLOCKED on the blocking one) and a plain
 * reconnect each make the client ask the sentinels again; a blocked waiter
 * gets its permit at the end all the same. */
static void test_re_resolve(void) {
  struct event_base *base;
  sluice_client *c;
  acq_result h, w;
  sluice_sem *s = start_held(&base, &c, "u", 10000, 30000, &h, &w);
  redisContext *m = connect_blocked(base, th_sentinel_master(&topo));

  static const char *const refusals[] = {"READONLY You cannot write against a read only replica.",
                                         "LOADING Redis is loading the dataset in memory",
                                         "MASTERDOWN Link with MASTER is down", NULL};
  for (int i = 0; refusals[i]; i++) {
    /* Connected again first: an op meets a lost connection with a fast
     * SLUICE_ECONNECTION, without reaching Redis. */
    TH_ASSERT(until_connected(base, c, 5000));
    unsigned long asked = sluice__sentinel_answers(sentinel_link(c));
    char script[160];
    snprintf(script, sizeof script, "return redis.error_reply('%s')", refusals[i]);
    const char *argv[3] = {"EVAL", script, "0"};
    cmd_result r = {0};
    TH_ASSERT_EQ(sluice__command(c, 3, argv, NULL, 0, on_cmd, &r, NULL), SLUICE_OK);
    TH_ASSERT(th_loop_until(base, &r.done, 5000));
    char word[16];
    snprintf(word, sizeof word, "%.*s", (int)strcspn(refusals[i], " "), refusals[i]);
    if (r.status != SLUICE_ECONNECTION || !strstr(sluice_client_last_error(c), word))
      th_fail(__FILE__, __LINE__, "%s: %s", sluice_err_name(r.status), sluice_client_last_error(c));
    if (!until_asked(base, c, asked, 5000))
      th_fail(__FILE__, __LINE__, "the sentinels were not asked again after %.10s", refusals[i]);
  }

  /* -UNBLOCKED: a failover unblocks the blocked clients with it. */
  unsigned long asked = sluice__sentinel_answers(sentinel_link(c));
  int unblocked = 0; /* 0 when caught between two BRPOPs: again */
  uint64_t end = th_now_ms() + 5000;
  while (!unblocked && th_now_ms() < end) {
    long long blk = client_running(m, "brpop");
    redisReply *r = blk >= 0 ? redisCommand(m, "CLIENT UNBLOCK %lld ERROR", blk) : NULL;
    unblocked = r && r->type == REDIS_REPLY_INTEGER && r->integer == 1;
    if (r) freeReplyObject(r);
    if (!unblocked) th_loop_for(base, 20);
  }
  TH_ASSERT(unblocked);
  TH_ASSERT(until_asked(base, c, asked, 5000));

  /* A reconnect: the client's connections dropped by the master. */
  asked = sluice__sentinel_answers(sentinel_link(c));
  TH_ASSERT_CMP(kill_client_connections(m), >=, 1);
  TH_ASSERT(until_asked(base, c, asked, 5000));
  redisFree(m);

  TH_ASSERT_EQ(w.done, 0);
  sluice_permit_release(h.permit, NULL, NULL);
  TH_ASSERT(th_loop_until(base, &w.done, 10000));
  TH_ASSERT_EQ(w.status, SLUICE_OK);
  TH_ASSERT_EQ(sluice__sentinel_count(sentinel_link(c)), 3);
  assert_no_duplicates(sentinel_link(c));
  finish_sem(base, c, s, w.permit);
}

static void on_lost_count(sluice_permit *p, int reason, void *ud) { ++*(int *)ud; }

/* The sentinels' failovers and rejoins, as a child's work (th_child_start):
 * they wait, while the case's loop must keep running. */
static int kill_master(void *unused) { return th_sentinel_kill_master(&topo) ? 0 : -1; }
static int pause_master(void *unused) { return th_sentinel_pause_master(&topo) ? 0 : -1; }
static int rejoin(void *node) { return th_sentinel_resume_node(&topo, node); }

/* SIGKILL of the master while a holder renews, a waiter is blocked and a
 * consumer idles, the loop running all along (the sentinels' wait runs in
 * a child): the sentinels promote the replica by themselves; the holder
 * keeps its permit there or hears it lost, the waiter and the consumer go
 * on, and the recovery time is printed. */
static void test_kill_master(void) {
  struct event_base *base;
  sluice_client *c = start_client(&base);
  sluice_sem *hs = sem_test_new(c, "k", 1, 3000, 0), *ws = sem_test_new(c, "k", 1, 3000, 0);
  acq_result h = sem_hold(base, hs);
  int lost = 0;
  sluice_permit_set_lost_cb(h.permit, on_lost_count, &lost);
  acq_result w = {0};
  TH_ASSERT_EQ(sluice_sem_acquire(ws, 30000, acq_cb, &w, NULL), SLUICE_OK);
  int delivered = 0;
  sluice_dq_consumer *con;
  sluice_dq *dq = counted_queue(c, "kq", &delivered, &con);
  th_loop_for(base, 200);
  th_node *old = th_sentinel_master(&topo);
  TH_ASSERT(old != NULL);
  uint64_t t0 = th_now_ms();
  th_loop_until_child(base, th_child_start(kill_master, NULL), 60000);
  old->pid = 0; /* killed by the child */
  th_note("sentinels promoted the replica after %llu ms; holder lost %d, waiter done %d\n",
          (unsigned long long)(th_now_ms() - t0), lost, w.done);
  if (!w.done) {
    /* The holder kept its permit on the new master (its lease outlived the
     * switch) and its release hands it over; or its lease ran out there
     * and the waiter gets it without it. */
    if (!lost) {
      sluice_permit_release(h.permit, NULL, NULL);
      h.permit = NULL;
    }
    TH_ASSERT(th_loop_until(base, &w.done, 10000));
  }
  TH_ASSERT_EQ(w.status, SLUICE_OK);
  TH_ASSERT_CMP(lost, <=, 1);
  dqt_push_until_delivered(base, dq, &delivered, 10000, 5000);
  th_note("kill to delivery: %llu ms\n", (unsigned long long)(th_now_ms() - t0));
  if (h.permit) sluice_permit_release(h.permit, NULL, NULL); /* harmless when lost */
  sluice_permit_release(w.permit, NULL, NULL);
  sluice_dq_consumer_free(con);
  sluice_dq_free(dq);
  sluice_sem_free(hs);
  sluice_sem_free(ws);
  finish(base, c);
}

/* SIGKILL of the master while the client reconnects with a long backoff
 * (reconnect_min_ms 60 s: a failed attempt waits at least 30 s before the
 * next): the sentinels' switch ends that wait, the failures were the dead
 * node's. An acquire started once the replica is promoted, with a timeout
 * that ends before the backoff would, gets the permit. */
static void test_switch_ends_backoff(void) {
  sluice_client_options o;
  struct event_base *base = start_options(&o);
  o.reconnect_min_ms = 60000;
  o.reconnect_max_ms = 60000;
  sluice_client *c = th_client_with(base, &o);
  sluice_sem *s = sem_test_new(c, "bk", 1, 30000, 0);
  acq_result a = sem_try(base, s);
  TH_ASSERT_EQ(a.status, SLUICE_OK);
  sluice_permit_release(a.permit, NULL, NULL);
  th_node *old = th_sentinel_master(&topo);
  TH_ASSERT(old != NULL);
  uint64_t t0 = th_now_ms();
  th_loop_until_child(base, th_child_start(kill_master, NULL), 60000);
  old->pid = 0; /* killed by the child */
  uint64_t spent = th_now_ms() - t0;
  th_note("sentinels promoted the replica after %llu ms\n", (unsigned long long)spent);
  TH_ASSERT_CMP(spent, <, 20000); /* else the backoff's end is too near to tell */
  unsigned timeout = (unsigned)(28000 - spent);
  acq_result w = {0};
  TH_ASSERT_EQ(sluice_sem_acquire(s, timeout, acq_cb, &w, NULL), SLUICE_OK);
  TH_ASSERT(th_loop_until(base, &w.done, timeout + 2000));
  TH_ASSERT_EQ(w.status, SLUICE_OK);
  th_note("kill to grant: %llu ms\n", (unsigned long long)(th_now_ms() - t0));
  finish_sem(base, c, s, w.permit);
}

/* The client hears a switch from whichever sentinel announces it: with the
 * first sentinel of its list paused (it would announce nothing, and a
 * question to it waits out the connect timeout), the others' +switch-master
 * moves the client at once, with no traffic of its own. */
static void test_switch_heard_from_any(void) {
  start();
  struct event_base *base = event_base_new();
  sluice_client_options o;
  th_client_quick_options(&o, url, 0);
  o.connect_timeout_ms = 15000;
  sluice_client *c = th_client_with(base, &o);
  changes b = {0};
  sluice_client_set_log_cb(c, count_changes, &b);
  sluice_sem *s = sem_test_new(c, "any", 1, 5000, 0);
  acq_result a = sem_hold(base, s);
  sluice_permit_release(a.permit, NULL, NULL);
  th_node *first = &topo.sent[0];
  kill(first->pid, SIGSTOP);
  first->paused = 1;
  th_loop_for(base, 100);
  TH_ASSERT(th_sentinel_failover(&topo) != NULL);
  uint64_t t0 = th_now_ms();
  uint64_t end = t0 + 5000;
  while (!b.changes && th_now_ms() < end) th_loop_for(base, 10);
  th_note("switch heard %llu ms after the failover ended\n",
          (unsigned long long)(th_now_ms() - t0));
  TH_ASSERT_EQ(b.changes, 1);
  kill(first->pid, SIGCONT);
  first->paused = 0;
  a = sem_try(base, s);
  TH_ASSERT_EQ(a.status, SLUICE_OK);
  finish_sem(base, c, s, a.permit);
}

/* A sentinel failing the master over that still names it (the promotion
 * not seen yet) is waited for, not taken: with the replica paused, a
 * SENTINEL FAILOVER stays in progress and the old master still answers
 * ROLE master, yet a new client's acquire does not run there; once the
 * replica is back and promoted, it runs on the new master. */
static void test_failover_under_way_waits(void) {
  start();
  th_node *old = th_sentinel_master(&topo), *rep = th_sentinel_replica(&topo);
  TH_ASSERT(old != NULL && rep != NULL);
  kill(rep->pid, SIGSTOP);
  rep->paused = 1;
  redisReply *r = th_node_command(&topo.sent[0], "SENTINEL FAILOVER mymaster");
  TH_ASSERT(r != NULL);
  if (r->type != REDIS_REPLY_STATUS) th_fail(__FILE__, __LINE__, "SENTINEL FAILOVER: %s", r->str);
  freeReplyObject(r);
  struct event_base *base = event_base_new();
  char one[128];
  snprintf(one, sizeof one, "redis+sentinel://%s/mymaster", topo.sent[0].addr);
  sluice_client *c = sem_test_client_at(base, one, 1000);
  sluice_sem *s = sem_test_new(c, "fo", 1, 5000, 0);
  acq_result a = {0};
  TH_ASSERT_EQ(sluice_sem_acquire(s, 10000, acq_cb, &a, NULL), SLUICE_OK);
  th_loop_for(base, 600);
  TH_ASSERT_EQ(a.done, 0);
  const char *why = sluice__sentinel_error(sentinel_link(c));
  if (!strstr(why, "being failed over")) th_fail(__FILE__, __LINE__, "the link says: %s", why);
  kill(rep->pid, SIGCONT);
  rep->paused = 0;
  TH_ASSERT(th_loop_until(base, &a.done, 9000));
  TH_ASSERT_EQ(a.status, SLUICE_OK);
  TH_ASSERT(th_sentinel_master(&topo) == rep);
  finish_sem(base, c, s, a.permit);
}

/* A sentinel behind the last switch it announced is not taken: the
 * client heard a failover of its set, then, with that set's first
 * sentinel gone and its connections dropped, asks the next in its list, a
 * sentinel of another set that names its own master under the same name
 * (an old configuration: epoch 0). The client goes on to one of its set's
 * sentinels, and the other set's master never sees a key. */
static void test_behind_refused(void) {
  start();
  static th_sentinel other;
  TH_ASSERT_EQ(th_sentinel_start(&other, "mymaster"), 0);
  struct event_base *base = event_base_new();
  char two[160];
  snprintf(two, sizeof two, "redis+sentinel://%s,%s/mymaster", topo.sent[0].addr,
           other.sent[0].addr);
  sluice_client *c = sem_test_client_at(base, two, 1000);
  changes b = {0};
  sluice_client_set_log_cb(c, count_changes, &b);
  sluice_sem *s = sem_test_new(c, "bh", 1, 5000, 0);
  acq_result a = sem_hold(base, s);
  sluice_permit_release(a.permit, NULL, NULL);
  TH_ASSERT(until_known(base, c, 4, 5000));
  TH_ASSERT(th_sentinel_failover(&topo) != NULL);
  uint64_t end = th_now_ms() + 5000;
  while (!b.changes && th_now_ms() < end) th_loop_for(base, 10);
  TH_ASSERT_EQ(b.changes, 1);
  a = sem_try(base, s);
  TH_ASSERT_EQ(a.status, SLUICE_OK);
  sluice_permit_release(a.permit, NULL, NULL);

  TH_ASSERT_EQ(th_sentinel_stop_one(&topo, 0), 0);
  redisContext *m = th_node_connect(th_sentinel_master(&topo));
  TH_ASSERT(m != NULL);
  unsigned long asked = sluice__sentinel_answers(sentinel_link(c));
  TH_ASSERT_CMP(kill_client_connections(m), >=, 1);
  redisFree(m);
  TH_ASSERT(until_asked(base, c, asked, 10000));
  end = th_now_ms() + 10000;
  do a = sem_try(base, s);
  while (a.status != SLUICE_OK && th_now_ms() < end);
  TH_ASSERT_EQ(a.status, SLUICE_OK);
  sluice_permit_release(a.permit, NULL, NULL);
  th_loop_for(base, 100);
  redisReply *n = th_node_command(th_sentinel_master(&other), "DBSIZE");
  TH_ASSERT(n != NULL && n->type == REDIS_REPLY_INTEGER);
  TH_ASSERT_EQ(n->integer, 0);
  freeReplyObject(n);
  sluice_sem_free(s);
  finish(base, c);
  th_sentinel_stop(&other);
}

static void count_blocking_downs(sluice_client *c, int level, const char *msg, void *ud) {
  if (strncmp(msg, "blocking connection down", 24) == 0) ++*(int *)ud;
}

/* A master that is gone with no replica to promote: a blocked waiter's
 * connection backs off like any other (reconnect_min_ms 50 doubling to
 * 2 s), though every attempt of the command connection re-announces the
 * same address: a handful of attempts in 3 s, not one every 25-50 ms. */
static void test_dead_master_backoff(void) {
  sluice_client_options o;
  struct event_base *base = start_options(&o);
  TH_ASSERT_EQ(th_sentinel_replica_stop(&topo), 0);
  o.op_timeout_ms = 1000;
  sluice_client *c = th_client_with(base, &o);
  sluice_sem *s = sem_test_new(c, "dm", 1, 30000, 0);
  acq_result w;
  acq_result h = sem_hold_with_waiter(base, s, s, 60000, &w);
  th_node *m = th_sentinel_master(&topo);
  TH_ASSERT(m != NULL);
  redisContext *mc = connect_blocked(base, m);
  redisFree(mc);
  int downs = 0;
  sluice_client_set_log_cb(c, count_blocking_downs, &downs);
  kill(m->pid, SIGKILL);
  m->pid = 0;
  th_loop_for(base, 3000);
  th_note("blocking connection attempts failed in 3 s: %d\n", downs);
  TH_ASSERT_CMP(downs, >=, 1);
  TH_ASSERT_CMP(downs, <=, 12);
  finish_sem(base, c, s, h.permit);
}

/* A holder that takes the permit, holds it 50 ms, releases and asks again,
 * and a waiter that blocks for it, through a SIGSTOP of the master until
 * the sentinels promote the replica: the waiter is served again within a
 * few seconds of the switch, not after a lease. */
typedef struct churn2 {
  struct event_base *base;
  sluice_sem *hs, *ws;
  sluice_permit *held;
  struct event *hold_ev, *retry_ev;
  uint64_t last_grant, longest_gap;
  long grants, errs;
  int stop, hbusy, wbusy;
} churn2;

static void churn_hold(churn2 *k);
static void churn_wait(churn2 *k);

static void on_churn_hold(sluice_sem *s, int status, sluice_permit *p, void *ud) {
  churn2 *k = ud;
  k->hbusy = 0;
  struct timeval tv = {0, 50000};
  if (status == SLUICE_OK) {
    k->held = p;
    evtimer_add(k->hold_ev, &tv);
  } else {
    k->errs++;
    if (!k->stop) evtimer_add(k->retry_ev, &tv);
  }
}

static void churn_release(evutil_socket_t fd, short what, void *arg) {
  churn2 *k = arg;
  if (k->held) sluice_permit_release(k->held, NULL, NULL);
  k->held = NULL;
  churn_hold(k);
}

static void churn_retry(evutil_socket_t fd, short what, void *arg) { churn_hold(arg); }

static void churn_hold(churn2 *k) {
  if (k->stop) return;
  k->hbusy = 1;
  TH_ASSERT_EQ(sluice_sem_acquire(k->hs, 10000, on_churn_hold, k, NULL), SLUICE_OK);
}

static void on_churn_wait(sluice_sem *s, int status, sluice_permit *p, void *ud) {
  churn2 *k = ud;
  k->wbusy = 0;
  if (status == SLUICE_OK) {
    uint64_t now = th_now_ms();
    if (k->last_grant && now - k->last_grant > k->longest_gap) k->longest_gap = now - k->last_grant;
    k->last_grant = now;
    k->grants++;
    sluice_permit_release(p, NULL, NULL);
  } else {
    k->errs++;
  }
  churn_wait(k);
}

static void churn_wait(churn2 *k) {
  if (k->stop) return;
  k->wbusy = 1;
  TH_ASSERT_EQ(sluice_sem_acquire(k->ws, 10000, on_churn_wait, k, NULL), SLUICE_OK);
}

static void print_log(sluice_client *c, int level, const char *msg, void *ud) {
  th_note("%llu %s %s\n", (unsigned long long)(th_now_ms() % 100000), (const char *)ud, msg);
}

static void test_pause_churn(void) {
  start();
  struct event_base *base = event_base_new();
  sluice_client *hc = sem_test_client_at(base, url, 1000);
  sluice_client *wc = sem_test_client_at(base, url, 1000);
  if (getenv("TEST_LOG")) {
    sluice_client_set_log_cb(hc, print_log, (void *)"holder");
    sluice_client_set_log_cb(wc, print_log, (void *)"waiter");
  }
  churn2 k = {0};
  k.base = base;
  k.hs = sem_test_new(hc, "fo", 1, 30000, 0);
  k.ws = sem_test_new(wc, "fo", 1, 30000, 0);
  k.hold_ev = evtimer_new(base, churn_release, &k);
  k.retry_ev = evtimer_new(base, churn_retry, &k);
  churn_hold(&k);
  churn_wait(&k);
  th_loop_for(base, 1000);
  TH_ASSERT_CMP(k.grants, >, 5);
  for (int round = 0; round < 2; round++) {
    th_node *old = th_sentinel_master(&topo);
    uint64_t t0 = th_now_ms();
    th_loop_until_child(base, th_child_start(pause_master, NULL), 60000);
    old->paused = 1;
    uint64_t switched = th_now_ms() - t0;
    long before = k.grants;
    uint64_t until = th_now_ms() + 10000;
    while (k.grants == before && th_now_ms() < until) th_loop_for(base, 20);
    th_note(
        "round %d: switched after %llu ms; waiter served again %llu ms after the stop; "
        "errors %ld\n",
        round, (unsigned long long)switched, (unsigned long long)(th_now_ms() - t0), k.errs);
    if (k.grants == before) {
      redisContext *m = th_node_connect(th_sentinel_master(&topo));
      redisReply *r = m ? redisCommand(m, "ZRANGE sluice:sem:{fo}:holders 0 -1 WITHSCORES") : NULL;
      for (size_t i = 0; r && i < r->elements; i++) th_note("  holders: %s\n", r->element[i]->str);
      if (r) freeReplyObject(r);
      if (m) redisFree(m);
    }
    TH_ASSERT_CMP(k.grants, >, before);
    /* The old master comes back as a replica, the loop running meanwhile. */
    th_loop_until_child(base, th_child_start(rejoin, old), 60000);
    old->paused = 0;
    th_loop_for(base, 500);
  }
  k.stop = 1;
  event_del(k.hold_ev);
  event_del(k.retry_ev);
  if (k.held) sluice_permit_release(k.held, NULL, NULL);
  k.held = NULL;
  uint64_t until = th_now_ms() + 15000;
  while ((k.hbusy || k.wbusy) && th_now_ms() < until) th_loop_for(base, 20);
  event_free(k.hold_ev);
  event_free(k.retry_ev);
  sluice_sem_free(k.hs);
  sluice_sem_free(k.ws);
  sluice_client_free(hc);
  finish(base, wc);
}

/* Runs the loop until the census has n connections; 1, or 0 after ms. */
static int until_census(struct event_base *base, sluice_client *c, int n, unsigned ms) {
  uint64_t end = th_now_ms() + ms;
  while (sluice__sentinel_census(sentinel_link(c), NULL) != n && th_now_ms() < end)
    th_loop_for(base, 20);
  return sluice__sentinel_census(sentinel_link(c), NULL) == n;
}

/* A master whose replica is gone confirms nothing: the client asks every
 * sentinel on connections of its own, switches nowhere (they all name the
 * same master), asks less and less often, and once a replica acknowledges
 * a grant again the census ends and its connections close. */
static void test_census_in_doubt(void) {
  struct event_base *base;
  sluice_client *c;
  changes b = {0};
  sluice_sem *s = start_counted(&base, &c, &b, "census", 2);
  acq_result a;
  TH_ASSERT_EQ(sluice__sentinel_census(sentinel_link(c), NULL), 0);
  TH_ASSERT_EQ(th_sentinel_replica_stop(&topo), 0);
  a = sem_try(base, s);
  TH_ASSERT_EQ(a.status, SLUICE_ENOREPLICA);
  TH_ASSERT(until_census(base, c, 3, 2000)); /* one per sentinel */
  unsigned long before, after;
  th_loop_for(base, 500); /* each asked once, at least */
  sluice__sentinel_census(sentinel_link(c), &before);
  TH_ASSERT_CMP(before, >=, 3);
  th_loop_for(base, 3000);
  sluice__sentinel_census(sentinel_link(c), &after);
  /* Every 250 ms for 3 s would be 36 questions; doubling waits, at most
   * about 4 each. */
  TH_ASSERT_CMP(after - before, <=, 15);
  TH_ASSERT_EQ(b.changes, 0);
  TH_ASSERT_EQ(th_sentinel_replica_restart(&topo), 0);
  uint64_t end = th_now_ms() + 10000;
  do a = sem_try(base, s);
  while (a.status != SLUICE_OK && th_now_ms() < end);
  TH_ASSERT_EQ(a.status, SLUICE_OK);
  TH_ASSERT(until_census(base, c, 0, 1000));
  TH_ASSERT_EQ(b.changes, 0);
  finish_sem(base, c, s, a.permit);
}

/* The tool on this topology's URL (th_tool). */
static int tool(char *out, size_t size, const char *args) { return th_tool(url, out, size, args); }

/* The tool, unchanged but for the URL. */
static void test_tool(void) {
  start();
  char out[1024];
  int rc = tool(out, sizeof out, "sem run job -n 1 --ttl 5000 -- echo ran");
  if (rc || !strstr(out, "ran")) th_fail(__FILE__, __LINE__, "sem run: %d: %s", rc, out);
  TH_ASSERT_EQ(tool(out, sizeof out, "sem status job"), 0);
  TH_ASSERT_EQ(tool(out, sizeof out, "rl check api u --algo fixed --limit 1 --period 60000"), 0);
  TH_ASSERT_EQ(tool(out, sizeof out, "rl check api u --algo fixed --limit 1 --period 60000"), 1);
  TH_ASSERT_EQ(tool(out, sizeof out, "dq push jobs --id j1 hello"), 0);
  TH_ASSERT_EQ(tool(out, sizeof out, "dq consume jobs --count 1 -- cat"), 0);
  TH_ASSERT(strstr(out, "hello") != NULL);
  TH_ASSERT_EQ(tool(out, sizeof out, "top --once"), 0);
  th_sentinel_stop(&topo);
}

static const th_case cases[] = {
    TH_CASE(primitives, 60),
    TH_CASE(failover, 90),
    TH_CASE(node_change, 90),
    TH_CASE(bad_input, 60),
    TH_CASE(wait_replicas, 60),
    TH_CASE(discovery, 90),
    TH_CASE(list_bounds, 30),
    TH_CASE(re_resolve, 60),
    TH_CASE(kill_master, 120),
    TH_CASE(tool, 60),
    TH_CASE(pause_churn, 180),
    TH_CASE(switch_ends_backoff, 120),
    TH_CASE(switch_heard_from_any, 120),
    TH_CASE(failover_under_way_waits, 90),
    TH_CASE(behind_refused, 120),
    TH_CASE(dead_master_backoff, 60),
    TH_CASE(census_in_doubt, 90),
};
TH_TOPOLOGY_MAIN(cases)
