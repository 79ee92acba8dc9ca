/* The record of unreplicated writes (core/record.h) across real failovers
 * and restarts, with the client's default options.
 *
 * A write the master acknowledged and never replicated is made on purpose:
 * the replica is held (SIGSTOP) while the client writes, then the master is
 * killed, the replica resumed and promoted (topology.h's *_hold_* and
 * *_kill_held). The case's loop does not run during that wait, so the new
 * master is in place, without the writes, before the client hears of it.
 * Each reconciliation step is checked on a Sentinel set and on a cluster:
 * a release sent again, a permit restored, a permit lost at once (taken on
 * the new master first), pushes sent again without a duplicate, the
 * record's bounds. And on a single Redis killed -9 and restarted, with
 * appendfsync everysec and without persistence. Replays and re-assertions
 * that fail while the connection stays up (a node refusing writes for now,
 * a cluster step bounced until it gives up) go again; one refused for good
 * is counted.
 * Suite "replay": each case starts its own topology (a few seconds). */
#include <signal.h>
#include <stdlib.h>
#include <string.h>

#include "core/client.h" /* the client's map: which node a slot goes to */
#include "core/record.h" /* SLUICE_REPLAY_WINDOW_MS */
#include "dq_util.h"
#include "sem/sem.h" /* a permit's re-assertion in flight */
#include "sem_util.h"
#include "topology.h"

/* ---- the rig: a Sentinel set or a cluster, and the master of {t} ---------- */

typedef struct rig {
  int cluster;
  th_cluster cl;
  th_sentinel sn;
  th_redis redis; /* a restart case's single Redis instead (one_start) */
  char url[512];
  th_node *master;         /* serves every key of the cases (hash tag {t}) */
  struct event_base *base; /* the case's loop */
  sluice_client *c;        /* the queue and restart cases' client */
  sluice_dq *dq;           /* the queue cases' queue "t" on c */
} rig;

static rig R;

static void rig_start(int cluster) {
  memset(&R, 0, sizeof R);
  R.cluster = cluster;
  if (cluster) {
    TH_ASSERT_EQ(th_cluster_start(&R.cl, 3, 1), 0);
    snprintf(R.url, sizeof R.url, "redis+cluster://%s", R.cl.seeds);
    R.master = th_cluster_master_for_key(&R.cl, "{t}");
  } else {
    TH_ASSERT_EQ(th_sentinel_start(&R.sn, "mymaster"), 0);
    snprintf(R.url, sizeof R.url, "redis+sentinel://%s/mymaster", R.sn.sentinels);
    R.master = th_sentinel_master(&R.sn);
  }
  TH_ASSERT(R.master != NULL);
  R.base = event_base_new();
}

static void rig_stop(void) {
  if (R.cluster) th_cluster_stop(&R.cl);
  else th_sentinel_stop(&R.sn);
}

/* From now on the master's writes reach no replica. */
static void rig_hold(void) {
  TH_ASSERT_EQ(
      R.cluster ? th_cluster_hold_replicas(&R.cl, R.master) : th_sentinel_hold_replica(&R.sn), 0);
}

/* Kill the master; its held replica takes over without those writes. */
static void rig_fail_over(void) {
  R.master = R.cluster ? th_cluster_kill_held(&R.cl, R.master) : th_sentinel_kill_held(&R.sn);
  TH_ASSERT(R.master != NULL);
}

/* The replica of {t}'s master now (for checks of what it has). */
static th_node *rig_replica(void) {
  return R.cluster ? th_cluster_replica_of(&R.cl, R.master) : th_sentinel_replica(&R.sn);
}

/* cmd's integer answer, a string's number, or an array's first (TIME);
 * with replica set, read from a cluster replica (READONLY first). */
static long long node_read(const th_node *n, const char *cmd, int replica) {
  redisContext *ctx = th_node_connect(n);
  TH_ASSERT(ctx != NULL);
  if (replica && R.cluster) freeReplyObject(redisCommand(ctx, "READONLY"));
  redisReply *r = redisCommand(ctx, cmd);
  TH_ASSERT(r != NULL && r->type != REDIS_REPLY_ERROR);
  const redisReply *e = r->type == REDIS_REPLY_ARRAY && r->elements ? r->element[0] : r;
  long long v = e->type == REDIS_REPLY_INTEGER  ? e->integer
                : e->type == REDIS_REPLY_STRING ? strtoll(e->str, NULL, 10)
                                                : -1;
  freeReplyObject(r);
  redisFree(ctx);
  return v;
}

static long long master_int(const char *cmd) { return node_read(R.master, cmd, 0); }

/* Wait (outside the loop: the client must not see it) until the replica
 * has what cmd counts. */
static void replica_has(const char *cmd, long long want) {
  th_node *r = rig_replica();
  TH_ASSERT(r != NULL);
  uint64_t end = th_now_ms() + 5000;
  while (node_read(r, cmd, 1) != want && th_now_ms() < end) {}
  TH_ASSERT_EQ(node_read(r, cmd, 1), want);
}

static sluice_client_metrics metrics(const sluice_client *c) {
  sluice_client_metrics m;
  sluice_client_get_metrics(c, &m);
  return m;
}

/* Steps of one kind answered (completed with SLUICE_OK). */
static uint64_t answered(const sluice_client *c, const char *kind) {
  sluice_client_metrics m = metrics(c);
  for (size_t k = 0; k < m.nkinds; k++)
    if (strcmp(m.kinds[k].name, kind) == 0) return m.kinds[k].ops - m.kinds[k].errors;
  return 0;
}

/* Steps of one kind that failed (a timeout among them). */
static uint64_t failed(const sluice_client *c, const char *kind) {
  sluice_client_metrics m = metrics(c);
  for (size_t k = 0; k < m.nkinds; k++)
    if (strcmp(m.kinds[k].name, kind) == 0) return m.kinds[k].errors;
  return 0;
}

/* A client of the rig on its loop, connected. */
static sluice_client *client(void) {
  sluice_client *c = th_client(R.base, R.url, 3000);
  TH_LOOP_UNTIL(R.base, sluice_client_is_connected(c), 10000);
  TH_ASSERT(sluice_client_is_connected(c));
  return c;
}

/* A rig case's end: its last client closed (the loop drained), the loop
 * freed, the topology stopped. */
static void finish(sluice_client *c) {
  th_free_client_and_loop(R.base, c, 5000);
  rig_stop();
}

/* A semaphore case's end: its permit p released, s freed, then finish(c). */
static void sem_finish(sluice_client *c, sluice_sem *s, sluice_permit *p) {
  sluice_permit_release(p, NULL, NULL);
  sluice_sem_free(s);
  finish(c);
}

/* A queue case's start: the rig, its loop, a client R.c and the queue
 * R.dq ("t"). */
static void queue_start(int cluster) {
  rig_start(cluster);
  R.c = client();
  R.dq = dqt_queue(R.c, "t");
}

/* A queue case's end. */
static void queue_finish(void) {
  sluice_dq_free(R.dq);
  finish(R.c);
}

static void on_released(sluice_sem *s, int status, void *ud) { *(int *)ud = status ? -1 : 1; }

/* s's permit taken at once (it must be free), its loss reported in *l. */
static acq_result take_watched(struct event_base *base, sluice_sem *s, lost_result *l) {
  acq_result a = sem_try(base, s);
  TH_ASSERT_EQ(a.status, SLUICE_OK);
  sluice_permit_set_lost_cb(a.permit, lost_cb, l);
  return a;
}

/* ---- the cases ------------------------------------------------------------- */

/* A release the old master answered is missing on the new one: sent
 * again, it frees the permit there at once (not at the end of its lease). */
static void release_replayed(int cluster) {
  rig_start(cluster);
  sluice_client *c = client();
  sluice_sem *s = sem_test_new(c, "t", 1, 30000, 0);
  acq_result a = sem_try(R.base, s);
  TH_ASSERT_EQ(a.status, SLUICE_OK);
  replica_has("ZCARD sluice:sem:{t}:holders", 1);
  rig_hold();
  int released = 0;
  TH_ASSERT_EQ(sluice_permit_release(a.permit, on_released, &released), SLUICE_OK);
  TH_ASSERT(th_loop_until(R.base, &released, 3000));
  TH_ASSERT_EQ(released, 1);
  TH_ASSERT_CMP(metrics(c).record_entries, >=, 1);
  rig_fail_over();
  TH_ASSERT_EQ(master_int("ZCARD sluice:sem:{t}:holders"), 1); /* the release is gone */
  TH_LOOP_UNTIL(R.base, metrics(c).replay_releases >= 1, 15000);
  sluice_client_metrics m = metrics(c);
  TH_ASSERT_EQ(m.replay_releases, 1);
  TH_ASSERT_EQ(m.replay_restored, 1);
  TH_ASSERT_EQ(master_int("ZCARD sluice:sem:{t}:holders"), 0);
  acq_result b = sem_try(R.base, s);
  TH_ASSERT_EQ(b.status, SLUICE_OK);
  sem_finish(c, s, b.permit);
}

/* A client whose grants are answered without a replica: with the replica
 * ack on (the default) the held replica would make them fail, and the
 * re-assertion is what stands behind grants answered that way. */
static sluice_client *client_ack_off(void) {
  sluice_client *c = client();
  TH_ASSERT_EQ(sluice_client_set_replica_ack(c, 0), SLUICE_OK);
  return c;
}

/* A grant the old master answered is missing on the new one: the permit
 * is put back with its id and token, the fence raised to the token, so the
 * semaphore stays full and the next grant's token is higher. */
static void permit_restored(int cluster) {
  rig_start(cluster);
  sluice_client *c = client_ack_off();
  sluice_client *other = client();
  sluice_sem *s = sem_test_new(c, "t", 1, 30000, 0);
  sluice_sem *o = sem_test_new(other, "t", 1, 30000, 0);
  rig_hold();
  acq_result a = sem_try(R.base, s);
  TH_ASSERT_EQ(a.status, SLUICE_OK);
  rig_fail_over();
  TH_ASSERT_EQ(master_int("ZCARD sluice:sem:{t}:holders"), 0);
  TH_LOOP_UNTIL(R.base, metrics(c).permits_restored >= 1, 15000);
  TH_ASSERT_EQ(metrics(c).permits_restored, 1);
  TH_ASSERT_EQ(master_int("ZCARD sluice:sem:{t}:holders"), 1);
  TH_ASSERT_CMP(master_int("HGET sluice:sem:{t}:meta fence"), >=, sluice_permit_fence(a.permit));
  TH_ASSERT_EQ(sluice_permit_lost(a.permit), 0);
  /* The other client may still be finding the new master. */
  TH_LOOP_UNTIL(R.base, sluice_client_is_connected(other), 10000);
  TH_ASSERT_EQ(sem_try(R.base, o).status, SLUICE_EBUSY);
  uint64_t fence = sluice_permit_fence(a.permit); /* the release frees the permit */
  sluice_permit_release(a.permit, NULL, NULL);
  acq_result b = {0};
  TH_ASSERT_EQ(sluice_sem_acquire(o, 5000, acq_cb, &b, NULL), SLUICE_OK);
  TH_ASSERT(th_loop_until(R.base, &b.done, 5000));
  TH_ASSERT_EQ(b.status, SLUICE_OK);
  TH_ASSERT_CMP(sluice_permit_fence(b.permit), >, fence);
  sluice_permit_release(b.permit, NULL, NULL);
  sluice_sem_free(o);
  sluice_sem_free(s);
  sluice_client_free(other);
  finish(c);
}

/* The new master granted the permit to someone else before this client
 * heard of the failover: the holder is told at once, DEFINITE, not at its
 * next renewal (a third of the 30 s lease away). */
static void permit_lost(int cluster) {
  rig_start(cluster);
  sluice_client *c = client_ack_off();
  sluice_sem *s = sem_test_new(c, "t", 1, 30000, 0);
  rig_hold();
  lost_result l = {0};
  acq_result a = take_watched(R.base, s, &l);
  rig_fail_over();
  char cmd[160];
  long long now_s = master_int("TIME");
  snprintf(cmd, sizeof cmd, "ZADD sluice:sem:{t}:holders %lld 0123456789abcdef0123456789abcdef",
           (now_s + 60) * 1000);
  TH_ASSERT_EQ(master_int(cmd), 1);
  uint64_t from = th_now_ms();
  TH_ASSERT(th_loop_until(R.base, &l.done, 8000));
  TH_ASSERT_EQ(l.reason, SLUICE_LOST_DEFINITE);
  th_note("lost %llu ms after the loop ran again\n", (unsigned long long)(l.at_ms - from));
  TH_ASSERT_EQ(metrics(c).permits_lost, 1);
  TH_ASSERT_EQ(master_int("ZCARD sluice:sem:{t}:holders"), 1); /* the other's only */
  sem_finish(c, s, a.permit);
}

/* Pushes sent again under their ids: m2, which the new master never saw,
 * is queued again; m1, which it has, is refused as a duplicate; each is
 * delivered once. m1 is in the record too: it reached the replica, but no
 * WAIT has run since (the loop ran only for the few ms of the pushes). */
static void push_replayed(int cluster) {
  queue_start(cluster);
  dqt_push p;
  TH_ASSERT_EQ(dqt_push_wait(R.base, R.dq, "m1", "one", 0, &p), SLUICE_OK);
  replica_has("HEXISTS sluice:dq:{t}:h pm1", 1);
  rig_hold();
  TH_ASSERT_EQ(dqt_push_wait(R.base, R.dq, "m2", "two", 0, &p), SLUICE_OK);
  size_t kept = metrics(R.c).record_entries;
  TH_ASSERT_CMP(kept, >=, 1);
  rig_fail_over();
  TH_ASSERT_EQ(master_int("HEXISTS sluice:dq:{t}:h pm2"), 0);
  TH_LOOP_UNTIL(R.base, metrics(R.c).replay_pushes >= kept, 15000);
  sluice_client_metrics m = metrics(R.c);
  TH_ASSERT_EQ(m.replay_pushes, kept);
  TH_ASSERT_EQ(m.replay_restored, 1); /* m2 only */
  TH_ASSERT_EQ(master_int("ZCARD sluice:dq:{t}:z"), 2);
  TH_ASSERT_EQ(master_int("HEXISTS sluice:dq:{t}:h pm2"), 1);
  dqt_info in;
  TH_ASSERT_EQ(dqt_inspect(R.base, R.dq, &in).ready, 2);
  queue_finish();
}

/* A string command's answer from node n (NULL: an error). */
static char *node_string(const th_node *n, const char *cmd) {
  redisContext *ctx = th_node_connect(n);
  TH_ASSERT(ctx != NULL);
  redisReply *r = redisCommand(ctx, cmd);
  char *out = r && (r->type == REDIS_REPLY_STRING || r->type == REDIS_REPLY_STATUS) ? strdup(r->str)
                                                                                    : NULL;
  if (r) freeReplyObject(r);
  redisFree(ctx);
  return out;
}

/* The new master cannot run a replayed push for a while: its slot is
 * marked migrating to another master that does not import it, so every
 * try bounces between them (ASK, then MOVED back) until the step gives up
 * with SLUICE_ECONNECTION while every connection stays up. The replay goes
 * again after a backoff, not at a reconnect that never comes, and lands
 * once the slot is stable. */
static void test_cluster_replay_bounced(void) {
  queue_start(1);
  rig_hold();
  dqt_push p;
  TH_ASSERT_EQ(dqt_push_wait(R.base, R.dq, "m2", "two", 0, &p), SLUICE_OK);
  size_t kept = metrics(R.c).record_entries;
  TH_ASSERT_CMP(kept, >=, 1);
  rig_fail_over();
  long long slot = master_int("CLUSTER KEYSLOT {t}");
  th_node *other = th_cluster_master_for_key(&R.cl, "{a}");
  if (other == R.master) other = th_cluster_master_for_key(&R.cl, "{b}");
  TH_ASSERT(other != NULL && other != R.master);
  char *other_id = node_string(other, "CLUSTER MYID"), cmd[160];
  TH_ASSERT(other_id != NULL);
  snprintf(cmd, sizeof cmd, "CLUSTER SETSLOT %lld MIGRATING %s", slot, other_id);
  free(other_id);
  char *ok = node_string(R.master, cmd);
  TH_ASSERT(ok != NULL);
  free(ok);
  TH_LOOP_UNTIL(R.base, failed(R.c, "dq_push") >= 2, 15000); /* bounced, then again */
  TH_ASSERT_CMP(failed(R.c, "dq_push"), >=, 2);
  TH_ASSERT_EQ(metrics(R.c).replay_pushes, 0);
  snprintf(cmd, sizeof cmd, "CLUSTER SETSLOT %lld STABLE", slot);
  ok = node_string(R.master, cmd);
  TH_ASSERT(ok != NULL);
  free(ok);
  TH_LOOP_UNTIL(R.base, metrics(R.c).replay_pushes >= kept, 10000);
  TH_ASSERT_EQ(metrics(R.c).replay_pushes, kept);
  TH_ASSERT_EQ(master_int("HEXISTS sluice:dq:{t}:h pm2"), 1);
  queue_finish();
}

/* A consumer registered (in the queue's set c) only on the old master: the
 * new master never saw its entry, so it must register again after the
 * switch, or a push there wakes nobody and its message waits for the
 * consumer's 60 s poll. Pushes from another client, one at a time, each
 * delivered within a second. */
typedef struct taker {
  const char *want;
  int got;
} taker;

static void take_one(sluice_dq_consumer *con, sluice_dq_msg *m, void *ud) {
  taker *t = ud;
  if (t->want && strcmp(sluice_dq_msg_id(m), t->want) == 0) t->got = 1;
  TH_ASSERT_EQ(sluice_dq_ack(m, NULL, NULL), SLUICE_OK);
}

/* Push id and wait for its delivery. A push that may fail while the
 * client finds its node is tried again every 50 ms for retry_ms (0: its
 * first answer must be OK). Others may come first: a push the failover
 * lost is sent again (at least once), its ack perhaps before it. */
static void push_delivered(sluice_dq *dq, const char *id, unsigned retry_ms, taker *t) {
  dqt_push p;
  uint64_t end = th_now_ms() + retry_ms;
  t->want = id;
  t->got = 0;
  while (dqt_push_wait(R.base, dq, id, "x", 0, &p) != SLUICE_OK && th_now_ms() < end)
    th_loop_for(R.base, 50);
  TH_ASSERT_EQ(p.status, SLUICE_OK);
  if (!th_loop_until(R.base, &t->got, 1000))
    th_fail(__FILE__, __LINE__, "%s not delivered within 1 s of its push's answer", id);
}

/* push_delivered of <prefix>0 .. <prefix><n - 1>, one after the other. */
static void pushes_delivered(sluice_dq *dq, const char *prefix, int n, unsigned retry_ms,
                             taker *t) {
  char id[16];
  for (int i = 0; i < n; i++) {
    snprintf(id, sizeof id, "%s%d", prefix, i);
    push_delivered(dq, id, retry_ms, t);
  }
}

/* A consumer case's end: con, the queue dq, the producer pc, then the
 * consumer's client cc with the rest (finish). */
static void consumer_finish(sluice_dq_consumer *con, sluice_dq *dq, sluice_client *pc,
                            sluice_client *cc) {
  sluice_dq_consumer_free(con);
  sluice_dq_free(dq);
  sluice_client_free(pc);
  finish(cc);
}

static void consumer_registered_again(int cluster) {
  rig_start(cluster);
  sluice_client *pc = client(), *cc = client();
  sluice_dq *dq = dqt_queue(pc, "t");
  rig_hold();
  taker t = {NULL, 0};
  sluice_dq_consumer *con = NULL;
  TH_ASSERT_EQ(sluice_dq_consumer_new(cc, "t", NULL, take_one, &t, &con), SLUICE_OK);
  push_delivered(dq, "before", 0, &t);
  rig_fail_over();
  TH_ASSERT_EQ(master_int("EXISTS sluice:dq:{t}:c"), 0);
  TH_LOOP_UNTIL(R.base,
                sluice_client_is_connected(pc) && sluice_client_is_connected(cc) &&
                    master_int("EXISTS sluice:dq:{t}:c") == 1,
                15000);
  TH_ASSERT_EQ(master_int("EXISTS sluice:dq:{t}:c"), 1);
  pushes_delivered(dq, "after", 20, 0, &t);
  consumer_finish(con, dq, pc, cc);
}

/* Every other node of the cluster stopped (sig SIGSTOP) or resumed. */
static void others_signal(const th_node *keep, int sig) {
  for (int i = 0; i < R.cl.n; i++)
    if (&R.cl.node[i] != keep && R.cl.node[i].pid > 0) kill(-R.cl.node[i].pid, sig);
}

/* The killed master started again, empty, with its nodes.conf: it claims
 * its old slots until the others tell it otherwise, and clients that have
 * not heard of the failover yet reach it first (held so here: the others
 * are stopped while it restarts and the clients try it). It refuses their
 * steps (CLUSTERDOWN: it has not heard from the cluster), so nothing is
 * written there; once the others resume and it is demoted, every push is
 * delivered within a second of its answer: no wake-up was lost to it. */
static void test_cluster_restarted_empty_master(void) {
  rig_start(1);
  sluice_client *pc = client(), *cc = client();
  sluice_dq *dq = dqt_queue(pc, "t");
  taker t = {NULL, 0};
  sluice_dq_consumer *con = NULL;
  TH_ASSERT_EQ(sluice_dq_consumer_new(cc, "t", NULL, take_one, &t, &con), SLUICE_OK);
  push_delivered(dq, "before", 0, &t);
  th_node *old = R.master;
  R.master = th_cluster_kill_master(&R.cl, old);
  TH_ASSERT(R.master != NULL);
  others_signal(old, SIGSTOP);
  TH_ASSERT_EQ(th_cluster_restart_node(&R.cl, old), 0);
  dqt_push p;
  TH_ASSERT_CMP(dqt_push_wait(R.base, dq, "on_old", "x", 0, &p), !=, SLUICE_OK);
  th_loop_for(R.base, 1000); /* the consumer's and the producer's retries go there too */
  TH_ASSERT_EQ(node_read(old, "DBSIZE", 0), 0);
  others_signal(old, SIGCONT);
  pushes_delivered(dq, "after", 40, 10000, &t);
  TH_ASSERT_EQ(th_cluster_wait_ok(&R.cl, 60000), 0);
  pushes_delivered(dq, "agreed", 20, 0, &t);
  consumer_finish(con, dq, pc, cc);
}

static void test_sentinel_consumer_registered_again(void) { consumer_registered_again(0); }
static void test_cluster_consumer_registered_again(void) { consumer_registered_again(1); }

/* The client's map sends slot to node n. */
static int routes_to(sluice_client *c, int slot, const th_node *n) {
  const sluice__conn *conn = sluice__topo_conn(c->topo, slot);
  return conn && conn->cfg.net.endpoint->port == n->port;
}

/* A push the old master answers after the client already routes its slot
 * to the new one: the old master is stopped with the push in its socket,
 * its replica promoted, the client's map refreshed; resumed, the old
 * master runs the push before it learns it was replaced, then drops it as
 * a replica. Sent again at once, the push must reach the slot's new master
 * (a resumed master that learns first answers MOVED instead: the push then
 * goes there directly, and the case checks the same). */
static void test_cluster_late_answer(void) {
  rig_start(1);
  R.c = th_client(R.base, R.url, 60000); /* the stopped master is not given up */
  TH_LOOP_UNTIL(R.base, sluice_client_is_connected(R.c), 10000);
  R.dq = dqt_queue(R.c, "t");
  dqt_push p;
  TH_ASSERT_EQ(dqt_push_wait(R.base, R.dq, "m1", "one", 0, &p), SLUICE_OK);
  th_node *old = R.master;
  TH_ASSERT_EQ(kill(old->pid, SIGSTOP), 0);
  sluice_dq_item it = {"two", 3, 0, 0, "m2"};
  memset(&p, 0, sizeof p);
  TH_ASSERT_EQ(sluice_dq_push(R.dq, &it, dqt_on_push, &p), SLUICE_OK);
  th_loop_for(R.base, 100); /* written into the stopped master's socket */
  R.master = th_cluster_pause_master(&R.cl, old);
  TH_ASSERT(R.master != NULL);
  int slot = sluice__topo_route_of(R.c->topo, "{t}", 3);
  sluice__topo_stale(R.c->topo);
  TH_LOOP_UNTIL(R.base, routes_to(R.c, slot, R.master), 15000);
  TH_ASSERT_EQ(p.done, 0);
  TH_ASSERT_EQ(th_cluster_resume_node(&R.cl, old), 0);
  TH_LOOP_UNTIL(R.base, p.done, 15000);
  TH_ASSERT_EQ(p.status, SLUICE_OK);
  TH_LOOP_UNTIL(R.base, master_int("HEXISTS sluice:dq:{t}:h pm2") == 1, 10000);
  TH_ASSERT_EQ(master_int("HEXISTS sluice:dq:{t}:h pm2"), 1);
  TH_ASSERT_EQ(master_int("ZCARD sluice:dq:{t}:z"), 2);
  queue_finish();
}

/* The record keeps at most replay_max_entries steps (and bytes), counting
 * the push requests in flight: past a bound new pushes fail at once with
 * SLUICE_EFULL, nothing it kept falls out, and all of it is sent again. */
static int push_or_full(struct event_base *base, sluice_dq *dq, const char *id,
                        const char *payload) {
  sluice_dq_item it = {payload, strlen(payload), 0, 0, id};
  dqt_push p = {0};
  int rc = sluice_dq_push(dq, &it, dqt_on_push, &p);
  if (rc == SLUICE_EFULL) return 1;
  TH_ASSERT_EQ(rc, SLUICE_OK);
  TH_ASSERT(th_loop_until(base, &p.done, 5000));
  TH_ASSERT_EQ(p.status, SLUICE_OK);
  return 0;
}

static void record_bounded(int cluster) {
  rig_start(cluster);
  sluice_client_options o;
  th_client_options(&o, R.url);
  o.replay_max_entries = 4;
  sluice_client *c = th_client_with(R.base, &o);
  o.replay_max_entries = 0;
  o.replay_max_bytes = 3000;
  sluice_client *small = th_client_with(R.base, &o);
  sluice_dq *dq = dqt_queue(c, "t"), *dq2 = dqt_queue(small, "t");
  rig_hold();
  char id[16], big[1000];
  memset(big, 'b', sizeof big - 1);
  big[sizeof big - 1] = '\0';
  int refused = 0, refused_small = 0;
  for (int i = 0; i < 10; i++) {
    snprintf(id, sizeof id, "a%d", i);
    refused += push_or_full(R.base, dq, id, "x");
    snprintf(id, sizeof id, "b%d", i);
    refused_small += push_or_full(R.base, dq2, id, big);
  }
  sluice_client_metrics m = metrics(c), ms = metrics(small);
  TH_ASSERT_EQ(m.record_entries, 4);
  TH_ASSERT_EQ(refused, 6);
  TH_ASSERT_EQ(m.record_dropped, 0);
  TH_ASSERT_CMP(ms.record_bytes, <, 3000 + 1500); /* the last one admitted under the bound */
  TH_ASSERT_CMP(ms.record_entries, >=, 3);
  TH_ASSERT_EQ(ms.record_entries + (size_t)refused_small, 10);
  TH_ASSERT_EQ(ms.record_dropped, 0);
  rig_fail_over();
  TH_LOOP_UNTIL(R.base,
                metrics(c).replay_pushes >= 4 && metrics(small).replay_pushes >= ms.record_entries,
                15000);
  TH_ASSERT_EQ(metrics(c).replay_pushes, 4);
  TH_ASSERT_EQ(metrics(small).replay_pushes, ms.record_entries);
  TH_ASSERT_EQ(master_int("ZCARD sluice:dq:{t}:z"), 4 + (long long)ms.record_entries);
  sluice_dq_free(dq);
  sluice_dq_free(dq2);
  sluice_client_free(small);
  finish(c);
}

/* Push "x" as m<first> .. m<first + n - 1>, each due after delay_ms,
 * one at a time (each answered OK before the next). */
static void push_ids(struct event_base *base, sluice_dq *dq, int first, int n, int64_t delay_ms) {
  dqt_push p;
  for (int i = first; i < first + n; i++) {
    char id[16];
    snprintf(id, sizeof id, "m%d", i);
    TH_ASSERT_EQ(dqt_push_wait(base, dq, id, "x", delay_ms, &p), SLUICE_OK);
  }
}

/* A master whose replicas are gone (cut off, as a partition does) keeps
 * every write it acknowledged since, past the time window a master that
 * never had replicas is given, until the node that replaced it has them. */
static void replicas_gone_kept(int cluster) {
  queue_start(cluster);
  dqt_push p;
  TH_ASSERT_EQ(dqt_push_wait(R.base, R.dq, "m0", "zero", 0, &p), SLUICE_OK);
  TH_LOOP_UNTIL(R.base, metrics(R.c).record_entries == 0, 5000);
  rig_hold();
  push_ids(R.base, R.dq, 1, 20, 0);
  th_loop_for(R.base, SLUICE_REPLAY_WINDOW_MS + 2000); /* INFO says: no replica online */
  sluice_client_metrics m = metrics(R.c);
  TH_ASSERT_EQ(m.record_entries, 20);
  TH_ASSERT_EQ(m.record_dropped, 0);
  rig_fail_over();
  TH_LOOP_UNTIL(R.base, metrics(R.c).replay_pushes >= 20, 15000);
  TH_ASSERT_EQ(metrics(R.c).replay_pushes, 20);
  TH_ASSERT_EQ(master_int("ZCARD sluice:dq:{t}:z"), 21);
  queue_finish();
}

/* Once a replica has the writes (INFO replication says so), the record is empty
 * again, and a failover then sends nothing. */
static void replicated_not_replayed(int cluster) {
  queue_start(cluster);
  dqt_push p;
  TH_ASSERT_EQ(dqt_push_wait(R.base, R.dq, "m1", "one", 0, &p), SLUICE_OK);
  TH_ASSERT_EQ(metrics(R.c).record_entries, 1);
  TH_LOOP_UNTIL(R.base, metrics(R.c).record_entries == 0, 5000);
  TH_ASSERT_EQ(metrics(R.c).record_entries, 0);
  rig_hold();
  rig_fail_over();
  uint64_t end = th_now_ms() + 15000; /* a push fails fast until the new master is found */
  while (dqt_push_wait(R.base, R.dq, "m2", "two", 0, &p) != SLUICE_OK && th_now_ms() < end)
    th_loop_for(R.base, 50);
  TH_ASSERT_EQ(p.status, SLUICE_OK);
  TH_ASSERT_EQ(metrics(R.c).replay_pushes, 0);
  TH_ASSERT_EQ(master_int("ZCARD sluice:dq:{t}:z"), 2);
  queue_finish();
}

/* A producer that never pauses still has its writes confirmed: replicas
 * acknowledge about once a second, and each answer confirms what was
 * written before an earlier mark, so the record holds a second or two of
 * writes, not all of them since the last pause. */
static void steady_writes_confirmed(int cluster) {
  queue_start(cluster);
  uint64_t end = th_now_ms() + 5000;
  int pushed = 0;
  dqt_push p;
  while (th_now_ms() < end) {
    TH_ASSERT_EQ(dqt_push_wait(R.base, R.dq, NULL, "x", 60000, &p), SLUICE_OK);
    pushed++;
    th_loop_for(R.base, 20);
  }
  sluice_client_metrics m = metrics(R.c);
  th_note("%d pushes over 5 s: %zu kept, the oldest %llu ms old", pushed, m.record_entries,
          (unsigned long long)m.record_oldest_ms);
  TH_ASSERT_CMP(m.record_oldest_ms, <, 3500);
  TH_ASSERT_CMP(m.record_entries, <, (size_t)pushed * 7 / 10);
  queue_finish();
}

/* Each delivery's occurrence; phase 1: after the failover. */
static void on_tick(sluice_dq_consumer *con, sluice_dq_msg *m, void *ud) {
  dqt_tick(ud, m);
  sluice_dq_ack(m, NULL, NULL);
}

/* A failover that loses a schedule's fires (and the deliveries and acks
 * of what they queued): the new master has the schedule as it was, and
 * its fires queue the lost occurrences again under the same ids. Whatever
 * the old master delivered before the hold is delivered once; an
 * occurrence delivered again is one from the lost window; on the new
 * master each is delivered once, and the schedule goes on (the
 * occurrences of the failover itself are missed, but for one catch-up:
 * nothing could fire them). */
static void schedule_lost_fires(int cluster) {
  queue_start(cluster);
  static dqt_ticks t;
  memset(&t, 0, sizeof t);
  sluice_dq_consumer_options o = dqt_options(16, 256, 30000, 0);
  sluice_dq_consumer *con = NULL;
  TH_ASSERT_EQ(sluice_dq_consumer_new(R.c, "t", &o, on_tick, &t, &con), SLUICE_OK);
  TH_ASSERT_EQ(sluice_dq_schedule_set(R.dq, "tick", "every 200ms", "x", 1, NULL, NULL), SLUICE_OK);
  th_loop_for(R.base, 1500);
  int before_hold = t.n;
  TH_ASSERT_CMP(before_hold, >=, 5);
  rig_hold();
  th_loop_for(R.base, 600);
  int held = t.n - before_hold;
  rig_fail_over();
  t.phase = 1;
  int at_failover = t.n;
  TH_LOOP_UNTIL(R.base, t.n >= at_failover + 20, 20000);
  /* What the replica may lack starts a moment before the hold (replication
   * runs behind): from the last but one delivery before it. */
  int64_t lost_from = t.at[before_hold - 2];
  int dups = 0;
  for (int i = 0; i < t.n; i++)
    for (int j = i + 1; j < t.n; j++)
      if (t.at[i] == t.at[j]) {
        dups++;
        TH_ASSERT(!t.in_phase[i] && t.in_phase[j]); /* once on each master at most */
        TH_ASSERT_CMP(t.at[i], >=, lost_from);
      }
  /* Before the hold and after the failover's catch-up: consecutive. */
  for (int i = 1; i < before_hold; i++) TH_ASSERT_EQ(t.at[i], t.at[i - 1] + 200);
  for (int i = t.n - 8; i < t.n; i++) TH_ASSERT_EQ(t.at[i], t.at[i - 1] + 200);
  th_note("%d occurrences before the hold, %d while held (lost), %d after; %d delivered twice",
          before_hold, held, t.n - at_failover, dups);
  TH_ASSERT_CMP(dups, <=, held + 1);
  sluice_dq_consumer_free(con);
  queue_finish();
}

#define ON_BOTH(name)                                 \
  static void test_sentinel_##name(void) { name(0); } \
  static void test_cluster_##name(void) { name(1); }

ON_BOTH(release_replayed)
ON_BOTH(permit_restored)
ON_BOTH(permit_lost)
ON_BOTH(push_replayed)
ON_BOTH(record_bounded)
ON_BOTH(replicas_gone_kept)
ON_BOTH(replicated_not_replayed)
ON_BOTH(steady_writes_confirmed)
ON_BOTH(schedule_lost_fires)

/* ---- a single Redis killed -9 and restarted ------------------------------- */

/* A standalone case's private Redis R.redis (started with extra, as
 * th_redis_start), its loop R.base and its client R.c (op timeout 3 s). */
static void one_start(const char *const *extra) {
  memset(&R, 0, sizeof R);
  TH_ASSERT_EQ(th_redis_start(&R.redis, 0, extra), 0);
  R.base = event_base_new();
  R.c = th_client(R.base, R.redis.url, 3000);
}

static void one_finish(void) {
  th_free_client_and_loop(R.base, R.c, 5000);
  th_redis_stop(&R.redis);
}

/* A semaphore case's end: its permit p released, s freed, then the rest. */
static void one_sem_finish(sluice_sem *s, sluice_permit *p) {
  sluice_permit_release(p, NULL, NULL);
  sluice_sem_free(s);
  one_finish();
}

/* Held permits and acknowledged pushes survive a kill -9: with appendfsync
 * everysec from the file (what the record sends again is refused as
 * duplicates), without persistence from the record (what it holds: the
 * writes of the last replay_window_ms). */
static void restart(const char *const *extra, int persistent) {
  one_start(extra);
  sluice_sem *s = sem_test_new(R.c, "t", 1, 30000, 0);
  sluice_dq *dq = dqt_queue(R.c, "t");
  lost_result l = {0};
  acq_result a = take_watched(R.base, s, &l);
  enum { N = 50 };
  push_ids(R.base, dq, 0, N, 60000);
  th_redis_respawn(&R.redis, extra);
  TH_LOOP_UNTIL(R.base, metrics(R.c).replay_pushes >= N, 10000);
  sluice_client_metrics m = metrics(R.c);
  TH_ASSERT_EQ(m.replay_pushes, N);
  TH_ASSERT_EQ(m.replay_restored, persistent ? 0 : N);
  TH_ASSERT_EQ(th_redis_int(&R.redis, "ZCARD sluice:dq:{t}:z"), N);
  /* The permit is back under its id, counted once the re-assertion's
   * answer came: from the file, still held (renewed); without it, restored. */
  TH_LOOP_UNTIL(R.base, answered(R.c, "sem_reassert") >= 1, 10000);
  char held[160];
  snprintf(held, sizeof held, "ZSCORE sluice:sem:{t}:holders %s", sluice_permit_id(a.permit));
  TH_ASSERT_EQ(th_redis_int(&R.redis, "ZCARD sluice:sem:{t}:holders"), 1);
  redisReply *score = th_redis_command(&R.redis, held);
  TH_ASSERT(score && score->type == REDIS_REPLY_STRING);
  freeReplyObject(score);
  TH_ASSERT_EQ(answered(R.c, "sem_reassert"), 1);
  TH_ASSERT_EQ(metrics(R.c).permits_restored, persistent ? 0 : 1);
  TH_ASSERT_EQ(metrics(R.c).permits_lost, 0);
  TH_ASSERT_EQ(l.done, 0);
  sluice_permit_release(a.permit, NULL, NULL);
  sluice_dq_free(dq);
  sluice_sem_free(s);
  one_finish();
}

static void test_restart_aof_everysec(void) {
  static const char *const aof[] = {"--appendonly", "yes", "--appendfsync", "everysec", NULL};
  restart(aof, 1);
}

static void test_restart_empty(void) { restart(NULL, 0); }

/* A Redis that kept everything (appendfsync always) is restarted after the
 * pushed messages were delivered and acknowledged: the record sends the
 * pushes again, and the tombstones their acks left keep every one from
 * being queued a second time (no duplicate delivery). */
static void test_restart_aof_acked_not_again(void) {
  static const char *const aof[] = {"--appendonly", "yes", "--appendfsync", "always", NULL};
  one_start(aof);
  sluice_dq *dq = dqt_queue(R.c, "t");
  int delivered = 0;
  sluice_dq_consumer *con = NULL;
  TH_ASSERT_EQ(sluice_dq_consumer_new(R.c, "t", NULL, dqt_ack_counted, &delivered, &con),
               SLUICE_OK);
  enum { N = 50 };
  push_ids(R.base, dq, 0, N, 0);
  sluice_dq_consumer_metrics cm = {0};
  for (uint64_t end = th_now_ms() + 10000; cm.acked < N && th_now_ms() < end;) {
    th_loop_for(R.base, 5);
    sluice_dq_consumer_get_metrics(con, &cm);
  }
  TH_ASSERT_EQ(cm.acked, N);
  TH_ASSERT_EQ(metrics(R.c).replay_pushes, 0); /* all still in the record */
  th_redis_respawn(&R.redis, aof);
  TH_LOOP_UNTIL(R.base, metrics(R.c).replay_pushes >= N, 10000);
  TH_ASSERT_EQ(metrics(R.c).replay_restored, 0);
  TH_ASSERT_EQ(th_redis_int(&R.redis, "ZCARD sluice:dq:{t}:z"), 0);
  TH_ASSERT_EQ(th_redis_int(&R.redis, "ZCARD sluice:dq:{t}:f"), 0);
  TH_ASSERT_EQ(delivered, N);
  sluice_dq_consumer_free(con);
  sluice_dq_free(dq);
  one_finish();
}

/* Replacing pushes of one message, with a priority, survive a restart
 * without persistence: the record sends them again in order, each with the
 * version Redis gave it, so the message ends as the last one left it. */
static void test_restart_replace_replayed(void) {
  one_start(NULL);
  sluice_dq *dq = dqt_queue(R.c, "t");
  static const char *const payloads[] = {"one", "two", "three"};
  for (int i = 0; i < 3; i++) {
    dqt_push p = {0};
    sluice_dq_item it = {payloads[i], strlen(payloads[i]), 60000, 0, "m"};
    TH_ASSERT_EQ(sluice_dq_push_ex(dq, &it, 4, SLUICE_DQ_REPLACE, dqt_on_push, &p), SLUICE_OK);
    TH_ASSERT(th_loop_until(R.base, &p.done, 5000));
    TH_ASSERT_EQ(p.status, SLUICE_OK);
  }
  redisReply *before = th_redis_command(&R.redis, "HGET sluice:dq:{t}:h pm");
  th_redis_respawn(&R.redis, NULL);
  TH_LOOP_UNTIL(R.base, metrics(R.c).replay_pushes >= 3, 10000);
  TH_ASSERT_EQ(metrics(R.c).replay_pushes, 3);
  TH_ASSERT_EQ(th_redis_int(&R.redis, "HGET sluice:dq:{t}:h #pmax"), 4);
  TH_ASSERT_EQ(th_redis_int(&R.redis, "ZCARD sluice:dq:{t}:z"), 1);
  /* The same value: version (byte 255 and 16 digits), sequence, payload. */
  redisReply *after = th_redis_command(&R.redis, "HGET sluice:dq:{t}:h pm");
  TH_ASSERT(before && before->type == REDIS_REPLY_STRING && before->len > 22);
  TH_ASSERT(after && after->type == REDIS_REPLY_STRING && after->len == before->len);
  TH_ASSERT_EQ((unsigned char)after->str[0], 255);
  TH_ASSERT(memcmp(after->str, before->str, 17) == 0); /* the version */
  TH_ASSERT(memcmp(after->str + after->len - 5, "three", 5) == 0);
  freeReplyObject(before);
  freeReplyObject(after);
  sluice_dq_free(dq);
  one_finish();
}

static void redis_ok(const th_redis *r, const char *command) {
  redisReply *reply = th_redis_command(r, command);
  TH_ASSERT(reply && reply->type == REDIS_REPLY_STATUS);
  freeReplyObject(reply);
}

/* Semaphore "t" of one permit (op_timeout_ms 0: the client's). */
static sluice_sem *one_permit(sluice_client *c, unsigned ttl_ms, int auto_renew,
                              unsigned op_timeout_ms) {
  sluice_sem_options o;
  sluice_sem_options_init(&o);
  o.permits = 1;
  o.ttl_ms = ttl_ms;
  o.auto_renew = auto_renew;
  o.op_timeout_ms = op_timeout_ms;
  return sem_test_new_opts(c, "t", &o);
}

/* one_start, then a permit of one_permit(ttl_ms, auto_renew,
 * op_timeout_ms) taken (*a), the Redis restarted and its writes paused for
 * pause_ms before the client's loop runs again. The script is loaded first
 * (a grant of "w", freed), so a short op_timeout_ms is plenty for it. */
static sluice_sem *one_held_paused(unsigned ttl_ms, int auto_renew, unsigned op_timeout_ms,
                                   int pause_ms, acq_result *a) {
  one_start(NULL);
  sluice_sem *w = sem_test_new(R.c, "w", 1, 30000, 0);
  TH_ASSERT_EQ(sem_try(R.base, w).status, SLUICE_OK);
  sluice_sem_free(w);
  sluice_sem *s = one_permit(R.c, ttl_ms, auto_renew, op_timeout_ms);
  *a = sem_try(R.base, s);
  TH_ASSERT_EQ(a->status, SLUICE_OK);
  th_redis_respawn(&R.redis, NULL);
  redisReply *pause = th_redis_command(&R.redis, "CLIENT PAUSE %d WRITE", pause_ms);
  TH_ASSERT(pause && pause->type == REDIS_REPLY_STATUS);
  freeReplyObject(pause);
  return s;
}

/* A re-assertion that restored the permit but whose answer came after its
 * deadline: the next one, after the connection is back, finds the permit
 * held and still reports the restore, counted once. Writes are paused on
 * the restarted Redis before the client's loop runs again, and resumed
 * once the first re-assertion timed out (its 1 s, shorter than the
 * client's 3 s after which a silent connection is replaced). */
static void test_restart_late_answer(void) {
  acq_result a;
  sluice_sem *s = one_held_paused(30000, 1, 1000, 60000, &a);
  TH_LOOP_UNTIL(R.base, failed(R.c, "sem_reassert") >= 1, 10000);
  TH_ASSERT_EQ(answered(R.c, "sem_reassert"), 0);
  redis_ok(&R.redis, "CLIENT UNPAUSE");
  /* The late step runs now: the permit is back, unknown to the client. */
  TH_LOOP_UNTIL(R.base, th_redis_int(&R.redis, "ZCARD sluice:sem:{t}:holders") == 1, 5000);
  TH_ASSERT_EQ(metrics(R.c).permits_restored, 0);
  uint64_t reconnects = metrics(R.c).reconnects;
  TH_ASSERT_CMP(th_redis_int(&R.redis, "CLIENT KILL TYPE normal SKIPME yes"), >=, 1);
  TH_LOOP_UNTIL(R.base, metrics(R.c).reconnects > reconnects && answered(R.c, "sem_reassert") >= 1,
                10000);
  TH_ASSERT_EQ(answered(R.c, "sem_reassert"), 1);
  TH_ASSERT_EQ(metrics(R.c).permits_restored, 1);
  TH_ASSERT_EQ(metrics(R.c).permits_lost, 0);
  TH_ASSERT_EQ(sluice_permit_lost(a.permit), 0);
  one_sem_finish(s, a.permit);
}

/* A permit that is not renewed, restored on a restarted Redis, keeps the
 * lease its holder counts on: Redis's copy ends no later than the grant's
 * lease, and the lost callback comes when that lease ends. */
static void test_restart_unrenewed(void) {
  enum { TTL = 3000 };
  one_start(NULL);
  sluice_sem *s = one_permit(R.c, TTL, 0, 0);
  uint64_t asked = th_now_ms();
  lost_result l = {0};
  acq_result a = take_watched(R.base, s, &l);
  th_loop_for(R.base, 1000); /* a third of the lease gone */
  th_redis_respawn(&R.redis, NULL);
  TH_LOOP_UNTIL(R.base, metrics(R.c).permits_restored == 1, 5000);
  TH_ASSERT_EQ(metrics(R.c).permits_restored, 1);
  /* Redis's lease ends within the holder's (its clock is this machine's). */
  char cmd[160];
  snprintf(cmd, sizeof cmd, "ZSCORE sluice:sem:{t}:holders %s", sluice_permit_id(a.permit));
  redisReply *score = th_redis_command(&R.redis, cmd);
  TH_ASSERT(score && score->type == REDIS_REPLY_STRING);
  uint64_t ends = strtoull(score->str, NULL, 10);
  freeReplyObject(score);
  TH_ASSERT_CMP(ends, <=, (uint64_t)dqt_unix_ms() + TTL - 1000 + 100);
  TH_ASSERT(th_loop_until(R.base, &l.done, TTL + 1000));
  TH_ASSERT_CMP(l.at_ms - asked, <=, TTL + 200);
  sluice_sem_free(s);
  one_finish();
}

/* The restarted node is slow to answer writes (CLIENT PAUSE WRITE: a busy
 * master, a slow disk): the re-assertion waits for its answer as long as
 * any step may (the client's deadline, within the lease), and the permit is
 * restored; a re-assertion given up early would never be sent again while
 * the connection stays up, and a permit that is not renewed would then be
 * counted on for the rest of its lease while Redis lets another take it. */
static void test_restart_slow_node(void) {
  enum { TTL = 5000, PAUSE_MS = 300 };
  one_start(NULL);
  sluice_sem_options o;
  sluice_sem_options_init(&o);
  o.permits = 1;
  o.ttl_ms = TTL;
  o.auto_renew = 0;
  sluice_sem *s = sem_test_new_opts(R.c, "t", &o);
  lost_result l = {0};
  acq_result a = take_watched(R.base, s, &l);
  th_redis_respawn(&R.redis, NULL);
  /* Before this loop runs again: the client has not reconnected yet. */
  redisReply *pause = th_redis_command(&R.redis, "CLIENT PAUSE %d WRITE", PAUSE_MS);
  TH_ASSERT(pause && pause->type == REDIS_REPLY_STATUS);
  freeReplyObject(pause);
  TH_LOOP_UNTIL(R.base, metrics(R.c).permits_restored == 1, TTL / 2);
  TH_ASSERT_EQ(metrics(R.c).permits_restored, 1);
  TH_ASSERT_EQ(th_redis_int(&R.redis, "ZCARD sluice:sem:{t}:holders"), 1);
  TH_ASSERT_EQ(l.done, 0);
  one_sem_finish(s, a.permit);
}

/* ---- a node that refuses writes for now ----------------------------------- */

/* The restarted Redis refuses writes for now (min-replicas-to-write with
 * no replica: NOREPLICAS, as a node still getting ready answers LOADING or
 * BUSY) while its connection stays up. Set before the client's loop runs
 * again, so the first replays and re-assertions meet it. */
static void refuse_writes(const th_redis *r, int on) {
  redis_ok(r, on ? "CONFIG SET min-replicas-to-write 1" : "CONFIG SET min-replicas-to-write 0");
}

/* The Redis restarted refusing writes (refuse_writes), until the client's
 * steps of `kind` were refused, then sent again and refused again (within
 * wait_ms). Returns the client's reconnects before the restart. */
static uint64_t restart_refusing(const char *kind, unsigned wait_ms) {
  uint64_t reconnects = metrics(R.c).reconnects;
  th_redis_respawn(&R.redis, NULL);
  refuse_writes(&R.redis, 1);
  TH_LOOP_UNTIL(R.base, failed(R.c, kind) >= 2, wait_ms);
  TH_ASSERT_CMP(failed(R.c, kind), >=, 2);
  return reconnects;
}

/* Pushes whose replay the new node refused for now go again while the
 * connection stays up, and land once it takes writes; none is dropped. */
static void test_restart_replay_refused_for_now(void) {
  enum { N = 5 };
  one_start(NULL);
  sluice_dq *dq = dqt_queue(R.c, "t");
  push_ids(R.base, dq, 0, N, 60000);
  uint64_t reconnects = restart_refusing("dq_push", 10000);
  TH_ASSERT_EQ(metrics(R.c).replay_pushes, 0);
  refuse_writes(&R.redis, 0);
  TH_LOOP_UNTIL(R.base, metrics(R.c).replay_pushes >= N, 5000);
  sluice_client_metrics m = metrics(R.c);
  TH_ASSERT_EQ(m.replay_pushes, N);
  TH_ASSERT_EQ(m.replay_restored, N);
  TH_ASSERT_EQ(m.record_dropped, 0);
  TH_ASSERT_EQ(m.reconnects, reconnects + 1); /* the restart's: none since */
  TH_ASSERT_EQ(th_redis_int(&R.redis, "ZCARD sluice:dq:{t}:z"), N);
  sluice_dq_free(dq);
  one_finish();
}

/* A replay the new node refuses for good (here its ACL: no scripts) is
 * dropped at once and counted. */
static void test_restart_replay_refused_for_good(void) {
  enum { N = 3 };
  one_start(NULL);
  sluice_dq *dq = dqt_queue(R.c, "t");
  push_ids(R.base, dq, 0, N, 60000);
  th_redis_respawn(&R.redis, NULL);
  redis_ok(&R.redis, "ACL SETUSER default -evalsha -eval");
  TH_LOOP_UNTIL(R.base, metrics(R.c).record_dropped >= N, 10000);
  sluice_client_metrics m = metrics(R.c);
  TH_ASSERT_EQ(m.record_dropped, N);
  TH_ASSERT_EQ(m.replay_pushes, 0);
  TH_ASSERT_EQ(m.record_entries, 0);
  sluice_dq_free(dq);
  one_finish();
}

/* A re-assertion the new node refused for now goes again while the
 * connection stays up (not at a reconnect that never comes), and the
 * permit is restored once the node takes writes. */
static void test_restart_reassert_refused_for_now(void) {
  one_start(NULL);
  sluice_sem *s = one_permit(R.c, 10000, 0, 0);
  lost_result l = {0};
  acq_result a = take_watched(R.base, s, &l);
  uint64_t reconnects = restart_refusing("sem_reassert", 5000);
  TH_ASSERT_EQ(metrics(R.c).permits_restored, 0);
  refuse_writes(&R.redis, 0);
  TH_LOOP_UNTIL(R.base, metrics(R.c).permits_restored >= 1, 3000);
  TH_ASSERT_EQ(metrics(R.c).permits_restored, 1);
  TH_ASSERT_EQ(metrics(R.c).reconnects, reconnects + 1);
  TH_ASSERT_EQ(th_redis_int(&R.redis, "ZCARD sluice:sem:{t}:holders"), 1);
  TH_ASSERT_EQ(l.done, 0);
  one_sem_finish(s, a.permit);
}

/* local_handoff: a permit whose re-assertion is still due (it failed: the
 * restarted Redis's ACL keeps the client off the key only re-assertions
 * write) handed to a waiter of its handle takes the re-assertion along; the
 * new holder's permit is restored once the ACL lets it, not lost at its
 * first renewal. Another holder, whose lease ends soon, keeps the waiter
 * queued on the restarted Redis until the hand-off. */
static void test_restart_handoff_carries_reassert(void) {
  enum { OTHER_MS = 1500 };
  one_start(NULL);
  sluice_sem_options o;
  sluice_sem_options_init(&o);
  o.permits = 1;
  o.ttl_ms = 6000;
  o.local_handoff = 1;
  sluice_sem *s = sem_test_new_opts(R.c, "t", &o);
  acq_result a = sem_try(R.base, s), w = {0};
  TH_ASSERT_EQ(a.status, SLUICE_OK);
  TH_ASSERT_EQ(sluice_sem_acquire(s, 30000, acq_cb, &w, NULL), SLUICE_OK);
  TH_LOOP_UNTIL(R.base, s->nwaiting == 1, 5000);
  TH_ASSERT_EQ(s->nwaiting, 1);
  th_redis_respawn(&R.redis, NULL);
  int64_t other_until = dqt_unix_ms() + OTHER_MS;
  char other[96];
  snprintf(other, sizeof other, "ZADD sluice:sem:{t}:holders %llu other",
           (unsigned long long)other_until);
  TH_ASSERT_EQ(th_redis_int(&R.redis, other), 1);
  redis_ok(&R.redis, "ACL SETUSER default resetkeys ~sluice:sem:{t}:[hqbmw]*");
  TH_LOOP_UNTIL(R.base, failed(R.c, "sem_reassert") >= 1 && s->nwaiting == 1, 5000);
  TH_ASSERT_EQ(s->nwaiting, 1);
  TH_ASSERT_EQ(sluice_permit_release(a.permit, NULL, NULL), SLUICE_OK);
  TH_ASSERT(th_loop_until(R.base, &w.done, 3000));
  TH_ASSERT_EQ(w.status, SLUICE_OK);
  sluice_sem_metrics sm;
  sluice_sem_get_metrics(s, &sm);
  TH_ASSERT_EQ(sm.local_handoffs, 1);
  lost_result l = {0};
  sluice_permit_set_lost_cb(w.permit, lost_cb, &l);
  /* The other lease ends: room for the restore. */
  TH_LOOP_UNTIL(R.base, l.done || dqt_unix_ms() > other_until + 50, OTHER_MS + 1000);
  redis_ok(&R.redis, "ACL SETUSER default allkeys");
  TH_LOOP_UNTIL(R.base, metrics(R.c).permits_restored >= 1 || l.done, 6000);
  TH_ASSERT_EQ(l.done, 0);
  TH_ASSERT_EQ(metrics(R.c).permits_restored, 1);
  char held[160];
  snprintf(held, sizeof held, "ZSCORE sluice:sem:{t}:holders %s", sluice_permit_id(w.permit));
  redisReply *score = th_redis_command(&R.redis, held);
  TH_ASSERT(score && score->type == REDIS_REPLY_STRING);
  freeReplyObject(score);
  sluice_permit_release(w.permit, NULL, NULL);
  sluice_sem_free(s);
  one_finish();
}

/* The node changes again while a re-assertion is in flight (a cluster's
 * slot moving twice; here the client is told of it by hand while writes
 * are paused on the restarted Redis): another re-assertion follows once
 * the first is answered, rather than being dropped. */
static void test_restart_reassert_while_in_flight(void) {
  acq_result a;
  sluice_sem *s = one_held_paused(10000, 0, 0, 1000, &a);
  TH_LOOP_UNTIL(R.base, a.permit->reassert.batch != NULL, 2000);
  TH_ASSERT(a.permit->reassert.batch != NULL);
  sluice__guard_home_node_changed(&R.c->home, -1, -1);
  TH_LOOP_UNTIL(R.base, answered(R.c, "sem_reassert") >= 2, 5000);
  TH_ASSERT_EQ(answered(R.c, "sem_reassert"), 2);
  TH_ASSERT_EQ(metrics(R.c).permits_restored, 1); /* the second finds it held */
  TH_ASSERT_EQ(sluice_permit_lost(a.permit), 0);
  one_sem_finish(s, a.permit);
}

int main(int argc, char **argv) {
  static const th_case cases[] = {
      {"sentinel_release_replayed", test_sentinel_release_replayed, 90},
      {"sentinel_permit_restored", test_sentinel_permit_restored, 90},
      {"sentinel_permit_lost", test_sentinel_permit_lost, 90},
      {"sentinel_push_replayed", test_sentinel_push_replayed, 90},
      {"sentinel_record_bounded", test_sentinel_record_bounded, 90},
      {"sentinel_replicas_gone_kept", test_sentinel_replicas_gone_kept, 90},
      {"sentinel_replicated_not_replayed", test_sentinel_replicated_not_replayed, 90},
      {"sentinel_steady_writes_confirmed", test_sentinel_steady_writes_confirmed, 90},
      {"sentinel_consumer_registered_again", test_sentinel_consumer_registered_again, 90},
      {"sentinel_schedule_lost_fires", test_sentinel_schedule_lost_fires, 90},
      {"cluster_release_replayed", test_cluster_release_replayed, 120},
      {"cluster_permit_restored", test_cluster_permit_restored, 120},
      {"cluster_permit_lost", test_cluster_permit_lost, 120},
      {"cluster_push_replayed", test_cluster_push_replayed, 120},
      {"cluster_record_bounded", test_cluster_record_bounded, 120},
      {"cluster_replicas_gone_kept", test_cluster_replicas_gone_kept, 120},
      {"cluster_replicated_not_replayed", test_cluster_replicated_not_replayed, 120},
      {"cluster_steady_writes_confirmed", test_cluster_steady_writes_confirmed, 120},
      {"cluster_late_answer", test_cluster_late_answer, 120},
      {"cluster_consumer_registered_again", test_cluster_consumer_registered_again, 120},
      {"cluster_schedule_lost_fires", test_cluster_schedule_lost_fires, 120},
      {"cluster_replay_bounced", test_cluster_replay_bounced, 120},
      {"cluster_restarted_empty_master", test_cluster_restarted_empty_master, 120},
      {"restart_aof_everysec", test_restart_aof_everysec, 60},
      {"restart_empty", test_restart_empty, 60},
      {"restart_aof_acked_not_again", test_restart_aof_acked_not_again, 60},
      {"restart_replace_replayed", test_restart_replace_replayed, 60},
      {"restart_late_answer", test_restart_late_answer, 60},
      {"restart_unrenewed", test_restart_unrenewed, 60},
      {"restart_slow_node", test_restart_slow_node, 60},
      {"restart_replay_refused_for_now", test_restart_replay_refused_for_now, 60},
      {"restart_replay_refused_for_good", test_restart_replay_refused_for_good, 60},
      {"restart_reassert_refused_for_now", test_restart_reassert_refused_for_now, 60},
      {"restart_handoff_carries_reassert", test_restart_handoff_carries_reassert, 60},
      {"restart_reassert_while_in_flight", test_restart_reassert_while_in_flight, 60},
      {NULL, NULL, 0},
  };
  return th_topology_main(argc, argv, cases);
}
