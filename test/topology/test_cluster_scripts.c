/* Scripts on a migrating slot's source node. While a slot migrates, its
 * source runs a script only when all the script's declared keys exist
 * there, and then refuses any later access to a key the script itself
 * emptied ("non local key"), keeping the writes made before. Here each
 * primitive's slot is put into that state and kept there (IMPORTING on
 * another master, MIGRATING on its own, no key moved) with every key
 * present, and each step that empties a key is driven through the public
 * API: no step may fail with a Redis error, nothing may be lost or
 * over-issued. Suite "cluster". */
#include <string.h>

#include "dq_util.h"
#include "lua_scripts.h"
#include "sem_util.h"
#include "topology.h"

static th_cluster topo;
static char url[TH_CLUSTER_MAX * 24 + 32];
static th_node *src, *dst;
static unsigned cur_slot;

/* A node's reply, which must come. */
static redisReply *replied(redisReply *r) {
  TH_ASSERT(r != NULL);
  return r;
}
#define node_cmd(n, ...) replied(th_node_command(n, __VA_ARGS__))

/* A command n must run without an error. */
static void ok_from(const th_node *n, redisReply *r) {
  if (!r || r->type == REDIS_REPLY_ERROR)
    th_fail(__FILE__, __LINE__, "%s: %s", n->addr, r ? r->str : "no reply");
  freeReplyObject(r);
}
#define node_ok(n, ...) ok_from(n, th_node_command(n, __VA_ARGS__))

static long long node_int(const th_node *n, const char *fmt, const char *arg) {
  redisReply *r = node_cmd(n, fmt, arg);
  TH_ASSERT_EQ(r->type, REDIS_REPLY_INTEGER);
  long long v = r->integer;
  freeReplyObject(r);
  return v;
}

/* A key's size on the source by cmd (ZCARD, LLEN), 0 when it is gone (ASK). */
static long long src_size(const char *cmd, const char *key) {
  redisReply *r = node_cmd(src, "%s %s", cmd, key);
  long long v = r->type == REDIS_REPLY_INTEGER ? r->integer : 0;
  if (r->type == REDIS_REPLY_ERROR && strncmp(r->str, "ASK ", 4) != 0)
    th_fail(__FILE__, __LINE__, "%s %s: %s", cmd, key, r->str);
  freeReplyObject(r);
  return v;
}

static long long src_zcard(const char *key) { return src_size("ZCARD", key); }

/* Every key exists on the source: the script will run there. */
static void assert_on_source(const char *const *keys) {
  for (int i = 0; keys[i]; i++)
    if (node_int(src, "EXISTS %s", keys[i]) != 1)
      th_fail(__FILE__, __LINE__, "%s missing on %s", keys[i], src->addr);
}

/* The hash tag's slot starts migrating from its master to another one;
 * every one of keys (NULL-terminated; NULL: none) is still on the source,
 * so the step's script runs there. */
static void migrating(const char *tag, const char *const *keys) {
  cur_slot = th_keyslot(tag, strlen(tag));
  src = th_cluster_master_for_slot(&topo, cur_slot);
  dst = NULL;
  for (int i = 0; i < topo.n && !dst; i++)
    if (topo.node[i].is_master && &topo.node[i] != src) dst = &topo.node[i];
  TH_ASSERT(src && dst);
  node_ok(dst, "CLUSTER SETSLOT %u IMPORTING %s", cur_slot, src->id);
  node_ok(src, "CLUSTER SETSLOT %u MIGRATING %s", cur_slot, dst->id);
  if (keys) assert_on_source(keys);
}

static void stable(void) {
  node_ok(dst, "CLUSTER SETSLOT %u STABLE", cur_slot);
  node_ok(src, "CLUSTER SETSLOT %u STABLE", cur_slot);
}

/* The case's cluster (three masters, no replicas) and a client of it. */
static sluice_client *start(struct event_base *base) {
  TH_ASSERT_EQ(th_cluster_start(&topo, 3, 0), 0);
  snprintf(url, sizeof url, "redis+cluster://%s", topo.seeds);
  return sem_test_client_at(base, url, 2000);
}

static void finish(struct event_base *base, sluice_client *c) {
  th_free_client_and_loop(base, c, 5000);
  th_cluster_stop(&topo);
}

static unsigned long long redis_errors(const sluice_client *c) {
  sluice_client_metrics m;
  sluice_client_get_metrics(c, &m);
  return (unsigned long long)m.by_status[-SLUICE_EREDIS];
}

static void no_redis_errors(const sluice_client *c, const char *step) {
  unsigned long long n = redis_errors(c);
  th_note("%s: Redis errors %llu%s%s\n", step, n, n ? "; last: " : "",
          n ? sluice_client_last_error(c) : "");
  if (n) th_fail(__FILE__, __LINE__, "%s: %llu Redis errors", step, n);
}

/* ---- semaphores ------------------------------------------------------------ */

static void sem_keys(const char *name, char keys[4][96], const char *ptrs[5]) {
  static const char *const parts[4] = {"holders", "queue", "beats", "meta"};
  for (int i = 0; i < 4; i++) {
    snprintf(keys[i], sizeof keys[i], "sluice:sem:{%s}:%s", name, parts[i]);
    ptrs[i] = keys[i];
  }
  ptrs[4] = NULL;
}

static sluice_sem *sem_with(sluice_client *c, const char *name, unsigned ttl, int fair, int renew) {
  sluice_sem_options o = sem_test_options(1, ttl);
  o.fair = fair;
  o.auto_renew = renew;
  return sem_test_new_opts(c, name, &o);
}

/* Release and wait for the answer (freeing the handle first is not what
 * this test is about). */
static void release_wait(struct event_base *base, sluice_permit *p, int want) {
  th_status d = {0};
  TH_ASSERT_EQ(sluice_permit_release(p, rel_cb, &d), SLUICE_OK);
  TH_ASSERT(th_loop_until(base, &d.done, 8000));
  TH_ASSERT_EQ(d.status, want);
}

/* An acquire on s (timeout_ms) into *r that queues: not answered
 * settle_ms later. */
static void acquire_queued(struct event_base *base, sluice_sem *s, unsigned timeout_ms,
                           unsigned settle_ms, acq_result *r) {
  memset(r, 0, sizeof *r);
  TH_ASSERT_EQ(sluice_sem_acquire(s, timeout_ms, acq_cb, r, NULL), SLUICE_OK);
  th_loop_for(base, settle_ms);
  TH_ASSERT_EQ(r->done, 0);
}

/* The last holder releases while a waiter queues (fair and non-fair): the
 * release empties the holders, the hand-off still runs. */
static void release_last(struct event_base *base, sluice_client *c, int fair) {
  const char *name = fair ? "relf" : "reln";
  char keys[4][96];
  const char *ptrs[5];
  sem_keys(name, keys, ptrs);
  sluice_sem *a = sem_test_new(c, name, 1, 5000, fair);
  sluice_sem *w = sem_test_new(c, name, 1, 5000, fair);
  acq_result held = sem_hold(base, a);
  acq_result waited;
  acquire_queued(base, w, 15000, 300, &waited);
  char tag[16];
  snprintf(tag, sizeof tag, "{%s}", name);
  migrating(tag, ptrs);

  th_status rel = {0};
  TH_ASSERT_EQ(sluice_permit_release(held.permit, rel_cb, &rel), SLUICE_OK);
  TH_ASSERT(th_loop_until(base, &rel.done, 5000));
  th_note("%s release of the last holder: %s\n", fair ? "fair" : "non-fair",
          sluice_err_name(rel.status));
  TH_ASSERT_EQ(rel.status, SLUICE_OK);
  th_loop_for(base, 500);
  TH_ASSERT_CMP(src_zcard(keys[0]), <=, 1);
  th_note("waiter %s while migrating (its next attempt needs the emptied holders key)\n",
          waited.done ? "granted" : "still waiting");
  no_redis_errors(c, fair ? "fair release" : "non-fair release");
  stable();
  TH_ASSERT(th_loop_until(base, &waited.done, 10000));
  TH_ASSERT_EQ(waited.status, SLUICE_OK);
  TH_ASSERT_EQ(src_zcard(keys[0]), 1);
  release_wait(base, waited.permit, SLUICE_OK);
  sluice_sem_free(a);
  sluice_sem_free(w);
}

/* An acquire queued on s, its slot {exp} made migrating meanwhile: its
 * answer within 5 s, noted as what. */
static acq_result queued_over_migration(struct event_base *base, sluice_sem *s, unsigned timeout_ms,
                                        unsigned settle_ms, const char *const *keys,
                                        const char *what) {
  acq_result r;
  acquire_queued(base, s, timeout_ms, settle_ms, &r);
  migrating("{exp}", keys);
  TH_ASSERT(th_loop_until(base, &r.done, 5000));
  th_note("%s: %s\n", what, sluice_err_name(r.status));
  return r;
}

/* Acquire when every lease has expired (the sweep empties the holders),
 * renewals, and a waiter giving up as the only one queued (its leave
 * empties the queue and the beats). */
static void expired_renew_leave(struct event_base *base, sluice_client *c) {
  const char *name = "exp";
  char keys[4][96];
  const char *ptrs[5];
  sem_keys(name, keys, ptrs);
  sluice_sem *a = sem_with(c, name, 400, 0, 0); /* its lease just expires */
  sluice_sem *w = sem_with(c, name, 900, 0, 1); /* renewed every 300 ms */
  sluice_sem *l = sem_with(c, name, 900, 0, 1);
  acq_result held = sem_hold(base, a);
  /* The waiter's next attempt comes when the lease ends; all keys are there. */
  acq_result waited = queued_over_migration(base, w, 15000, 100, ptrs,
                                            "acquire after every lease expired");
  TH_ASSERT_EQ(waited.status, SLUICE_OK);
  TH_ASSERT_EQ(src_zcard(keys[0]), 1);
  no_redis_errors(c, "acquire after expiry");
  stable();

  acq_result left = queued_over_migration(base, l, 1500, 300, ptrs, "waiter giving up");
  TH_ASSERT_EQ(left.status, SLUICE_ETIMEDOUT);
  th_loop_for(base, 1000); /* renewals of the holder meanwhile */
  TH_ASSERT_EQ(sluice_permit_lost(waited.permit), 0);
  TH_ASSERT_EQ(src_zcard(keys[0]), 1);
  TH_ASSERT_EQ(src_zcard(keys[1]), 0);
  no_redis_errors(c, "leave and renewals");
  stable();
  release_wait(base, waited.permit, SLUICE_OK);
  release_wait(base, held.permit, SLUICE_ENOTFOUND); /* it lapsed */
  sluice_sem_free(a);
  sluice_sem_free(w);
  sluice_sem_free(l);
}

/* sem_renew.lua with an expired lease (the only holder) before another id:
 * no public call makes that batch on cue, so it is sent as the library
 * would. */
static void renew_expired_direct(void) {
  const char *h = "sluice:sem:{ren}:holders";
  node_ok(th_cluster_master_for_key(&topo, h), "ZADD %s 1 gone", h);
  migrating("{ren}", NULL);
  redisReply *r = node_cmd(src, "EVAL %s 1 %s 1000 60000 gone other", sluice__lua_sem_renew.body,
                           h);
  th_note("sem_renew, expired only holder then another id: %s\n",
          r->type == REDIS_REPLY_ERROR ? r->str : "ok");
  TH_ASSERT_EQ(r->type, REDIS_REPLY_ARRAY);
  TH_ASSERT_EQ(r->elements, 2);
  freeReplyObject(r);
  TH_ASSERT_EQ(src_zcard(h), 0);
  stable();
}

static void test_semaphores(void) {
  struct event_base *base = event_base_new();
  sluice_client *c = start(base);
  release_last(base, c, 0);
  release_last(base, c, 1);
  expired_renew_leave(base, c);
  renew_expired_direct();
  no_redis_errors(c, "semaphores");
  finish(base, c);
}

/* ---- limiters -------------------------------------------------------------- */

typedef struct rl_res {
  int done, status, allowed;
} rl_res;

static void on_rl(sluice_limiter *lim, int status, const sluice_rl_result *res, void *ud) {
  rl_res *r = ud;
  r->done++;
  r->status = status;
  r->allowed += status == SLUICE_OK && res->allowed;
}

/* Every algorithm on a migrating slot, two checks of one key in one call; the
 * sliding log once all its entries expired (its key kept alive meanwhile). */
static void test_limiters(void) {
  struct event_base *base = event_base_new();
  sluice_client *c = start(base);
  static const struct {
    sluice_rl_algo algo;
    const char *name, *suffix;
  } algos[] = {{SLUICE_RL_FIXED, "rfw", "fw"},
               {SLUICE_RL_SLIDING_LOG, "rlog", "log"},
               {SLUICE_RL_SLIDING_COUNTER, "rswc", "swc"},
               {SLUICE_RL_GCRA, "rgcra", "gcra"}};
  for (size_t i = 0; i < sizeof algos / sizeof algos[0]; i++) {
    sluice_limiter_options lo;
    sluice_limiter_options_init(&lo);
    lo.algo = algos[i].algo;
    lo.limit = 4;
    lo.period_ms = 1000;
    sluice_limiter *lim;
    TH_ASSERT_EQ(sluice_limiter_new(c, algos[i].name, &lo, &lim), SLUICE_OK);
    char tag[64], key[96];
    snprintf(tag, sizeof tag, "{%zu:%s:k}", strlen(algos[i].name), algos[i].name);
    snprintf(key, sizeof key, "sluice:rl:%s:%s", tag, algos[i].suffix);
    rl_res r = {0};
    TH_ASSERT_EQ(sluice_limiter_check(lim, "k", 1, on_rl, &r), SLUICE_OK);
    TH_ASSERT(th_loop_until(base, &r.done, 5000));
    TH_ASSERT_EQ(r.allowed, 1);
    th_node *home = th_cluster_master_for_key(&topo, key);
    node_ok(home, "PEXPIRE %s 60000", key);
    if (algos[i].algo == SLUICE_RL_SLIDING_LOG) th_loop_for(base, 1100); /* all expired */
    const char *ptrs[] = {key, NULL};
    migrating(tag, ptrs);
    memset(&r, 0, sizeof r);
    TH_ASSERT_EQ(sluice_limiter_check(lim, "k", 1, on_rl, &r), SLUICE_OK);
    TH_ASSERT_EQ(sluice_limiter_check(lim, "k", 2, on_rl, &r), SLUICE_OK);
    uint64_t until = th_now_ms() + 5000;
    while (r.done < 2 && th_now_ms() < until) th_loop_for(base, 5);
    th_note("%s on the migrating slot: %s, allowed %d of 2\n", algos[i].suffix,
            sluice_err_name(r.status), r.allowed);
    TH_ASSERT_EQ(r.done, 2);
    TH_ASSERT_EQ(r.status, SLUICE_OK);
    if (algos[i].algo == SLUICE_RL_SLIDING_LOG) {
      TH_ASSERT_EQ(r.allowed, 2);
      TH_ASSERT_EQ(src_size("LLEN", key), 5); /* base, then two requests */
    }
    no_redis_errors(c, algos[i].suffix);
    stable();
    sluice_limiter_free(lim);
  }
  finish(base, c);
}

/* ---- delay queue ----------------------------------------------------------- */

#define HELD_MAX 8

typedef struct qstate {
  sluice_dq_msg *held[HELD_MAX];
  int nheld;
  int m1_deliveries, x_deliveries, m2_deliveries, got;
  int settled, settle_status;
} qstate;

/* Holds messages named m*; acknowledges the others. */
static void on_hold(sluice_dq_consumer *con, sluice_dq_msg *m, void *ud) {
  qstate *q = ud;
  const char *id = sluice_dq_msg_id(m);
  q->got++;
  if (strcmp(id, "m1") == 0) q->m1_deliveries++;
  if (strcmp(id, "m2") == 0) q->m2_deliveries++;
  if (strcmp(id, "x") == 0) q->x_deliveries++;
  if (id[0] == 'm' && q->nheld < HELD_MAX) q->held[q->nheld++] = m;
  else sluice_dq_ack(m, NULL, NULL);
}

static void on_dead(sluice_dq_consumer *con, sluice_dq_msg *m, void *ud) {
  sluice_dq_retry(m, 0, NULL, NULL); /* max_attempts 1: a dead letter */
  (*(int *)ud)++;
}

static void on_settle(sluice_dq_consumer *con, int status, const char *id, void *ud) {
  qstate *q = ud;
  q->settled++;
  q->settle_status = status;
}

static sluice_dq_msg *take_held(qstate *q) {
  TH_ASSERT(q->nheld > 0);
  sluice_dq_msg *m = q->held[0];
  memmove(q->held, q->held + 1, (size_t)--q->nheld * sizeof q->held[0]);
  return m;
}

/* A count as the status when the call succeeded (ud: a th_status). */
static void count_cb(sluice_dq *dq, int status, uint64_t count, void *ud) {
  th_status_set(ud, status == SLUICE_OK ? (int)count : status);
}

static void test_queue(void) {
  struct event_base *base = event_base_new();
  sluice_client *c = start(base);
  const char *keys[] = {"sluice:dq:{q}:z", "sluice:dq:{q}:f", "sluice:dq:{q}:d",
                        "sluice:dq:{q}:h", "sluice:dq:{q}:c", NULL};
  th_node *home = th_cluster_master_for_key(&topo, keys[0]);
  sluice_dq *dq = dqt_queue(c, "q");
  dqt_push p;

  /* A dead letter x. */
  sluice_dq_consumer_options co;
  sluice_dq_consumer_options_init(&co);
  co.max_attempts = 1;
  int died = 0;
  sluice_dq_consumer *k = NULL;
  TH_ASSERT_EQ(sluice_dq_consumer_new(c, "q", &co, on_dead, &died, &k), SLUICE_OK);
  TH_ASSERT_EQ(dqt_push_wait(base, dq, "x", "x", 0, &p), SLUICE_OK);
  TH_ASSERT(th_loop_until(base, &died, 5000));
  th_loop_for(base, 200);
  sluice_dq_consumer_free(k);
  th_loop_for(base, 200);

  /* A far message, and m1 in flight with a short deadline; the consumer
   * holds one message at most, so holding m1 it leaves the consumer set c
   * (c is then kept present with the entry of a consumer long gone). */
  TH_ASSERT_EQ(dqt_push_wait(base, dq, "later", "later", 300000, &p), SLUICE_OK);
  static qstate q;
  memset(&q, 0, sizeof q);
  sluice_dq_consumer_options_init(&co);
  co.max_in_flight = 1;
  co.visibility_ms = 400;
  co.max_attempts = 0;
  co.max_poll_ms = 100;
  sluice_dq_consumer *con = NULL;
  TH_ASSERT_EQ(sluice_dq_consumer_new(c, "q", &co, on_hold, &q, &con), SLUICE_OK);
  TH_ASSERT_EQ(dqt_push_wait(base, dq, "m1", "m1", 0, &p), SLUICE_OK);
  TH_ASSERT(th_loop_until(base, &q.m1_deliveries, 5000));
  th_loop_for(base, 200);
  node_ok(home, "ZADD %s 1 gone", keys[4]); /* c exists */
  migrating("{q}", keys);

  /* m1's deadline passes; its late ack changes nothing; the next take
   * requeues it (the last in flight) and takes it again. */
  th_loop_for(base, 600);
  TH_ASSERT_EQ(sluice_dq_ack(take_held(&q), on_settle, &q), SLUICE_OK);
  TH_ASSERT(th_loop_until(base, &q.settled, 5000));
  th_note("late ack: %s\n", sluice_err_name(q.settle_status));
  TH_ASSERT_EQ(q.settle_status, SLUICE_ELATE);
  uint64_t until = th_now_ms() + 5000;
  while (q.m1_deliveries < 2 && th_now_ms() < until) th_loop_for(base, 10);
  th_note("m1 delivered %d times while migrating\n", q.m1_deliveries);
  no_redis_errors(c, "take requeueing the last late message");
  TH_ASSERT_EQ(q.m1_deliveries, 2);

  /* Retry it (the last in flight) past the keys' horizon: every key's
   * expiry moves, after f was emptied. */
  q.settled = 0;
  TH_ASSERT_EQ(sluice_dq_retry(take_held(&q), 600000, on_settle, &q), SLUICE_OK);
  TH_ASSERT(th_loop_until(base, &q.settled, 5000));
  th_note("retry of the last in flight: %s\n", sluice_err_name(q.settle_status));
  TH_ASSERT_EQ(q.settle_status, SLUICE_OK);
  no_redis_errors(c, "retry");
  stable();
  dqt_info in;
  sluice_dq_info info = dqt_inspect(base, dq, &in);
  th_note("delayed %llu, in flight %llu, dead %llu\n", (unsigned long long)info.delayed,
          (unsigned long long)info.in_flight, (unsigned long long)info.dead);
  TH_ASSERT_EQ(info.delayed, 2); /* later, m1 */
  TH_ASSERT_EQ(info.in_flight, 0);
  TH_ASSERT_EQ(info.dead, 1); /* x */

  /* m2 in flight again (so f exists), then: cancel the far message, requeue
   * the only dead letter (empties d: every later step would go to the other
   * node and meet TRYAGAIN, so it comes last). */
  TH_ASSERT_EQ(dqt_push_wait(base, dq, "m2", "m2", 0, &p), SLUICE_OK);
  TH_ASSERT(th_loop_until(base, &q.m2_deliveries, 5000));
  th_loop_for(base, 200);
  node_ok(home, "ZADD %s 1 gone", keys[4]);
  migrating("{q}", keys);
  th_status rq = {0}, cx = {0};
  TH_ASSERT_EQ(sluice_dq_cancel(dq, "later", dqt_status_cb, &cx), SLUICE_OK);
  TH_ASSERT(th_loop_until(base, &cx.done, 5000));
  TH_ASSERT_EQ(cx.status, SLUICE_OK);
  TH_ASSERT_EQ(sluice_dq_dead_requeue(dq, NULL, count_cb, &rq), SLUICE_OK);
  TH_ASSERT(th_loop_until(base, &rq.done, 5000));
  th_note("dead letters requeued: %d\n", rq.status);
  TH_ASSERT_EQ(rq.status, 1);
  no_redis_errors(c, "cancel, dead requeue");
  stable();
  q.settled = 0;
  TH_ASSERT_EQ(sluice_dq_ack(take_held(&q), on_settle, &q), SLUICE_OK);
  TH_ASSERT(th_loop_until(base, &q.settled, 5000));
  TH_ASSERT_EQ(q.settle_status, SLUICE_OK);
  /* x is delivered (and acknowledged) once the slot is stable again. */
  until = th_now_ms() + 5000;
  while (q.x_deliveries < 1 && th_now_ms() < until) th_loop_for(base, 10);
  TH_ASSERT_EQ(q.x_deliveries, 1); /* after its requeue */
  th_loop_for(base, 200);
  info = dqt_inspect(base, dq, &in);
  TH_ASSERT_EQ(info.delayed, 1); /* m1, due in ten minutes */
  TH_ASSERT_EQ(info.in_flight, 0);
  TH_ASSERT_EQ(info.dead, 0);
  no_redis_errors(c, "queue");

  sluice_dq_consumer_free(con);
  sluice_dq_free(dq);
  finish(base, c);
}

static const th_case cases[] = {
    TH_CASE(semaphores, 120),
    TH_CASE(limiters, 120),
    TH_CASE(queue, 120),
};
TH_TOPOLOGY_MAIN(cases)
