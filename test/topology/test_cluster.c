/* Redis Cluster (redis+cluster:// URLs): every primitive on a local
 * cluster with its keys spread over the masters, blocking waits on several
 * slots at once, the hand-off's computed wake-list key under the cluster's
 * script rules, a scan over every master, and the bad inputs. Suite
 * "cluster": each case starts its own cluster (a few seconds). */
#include <signal.h>
#include <stdarg.h>
#include <string.h>
#include <unistd.h>

#include "dq_util.h"
#include "rl_util.h"
#include "sem_util.h"
#include "topology.h"

static th_cluster topo;
static char url[TH_CLUSTER_MAX * 24 + 32];

static void start(int replicas) {
  TH_ASSERT_EQ(th_cluster_start(&topo, 3, replicas), 0);
  snprintf(url, sizeof url, "redis+cluster://%s", topo.seeds);
}

/* The end of a case: its client closed (the loop drained), the loop freed,
 * the topology stopped. */
static void finish(struct event_base *base, sluice_client *c) {
  th_free_client_and_loop(base, c, 5000);
  th_cluster_stop(&topo);
}

/* A name whose semaphore keys live on master m (by index among masters),
 * other than `not`. */
static void name_on(const th_node *m, const char *kind, char *out, size_t size) {
  for (int i = 0; i < 10000; i++) {
    char key[96];
    snprintf(out, size, "%s%d", kind, i);
    snprintf(key, sizeof key, "sluice:%s:{%s}", kind, out);
    if (th_cluster_master_for_key(&topo, key) == m) return;
  }
  th_fail(__FILE__, __LINE__, "no name found for %s", m->addr);
}

static long long node_int(const th_node *n, const char *fmt, const char *arg) {
  redisContext *x = th_node_connect(n);
  TH_ASSERT(x != NULL);
  redisReply *r = redisCommand(x, fmt, arg);
  TH_ASSERT(r && r->type == REDIS_REPLY_INTEGER);
  long long v = r->integer;
  freeReplyObject(r);
  redisFree(x);
  return v;
}

static void on_check(sluice_limiter *lim, int status, const sluice_rl_result *res, void *ud) {
  int *n = ud;
  if (status == SLUICE_OK && res->allowed) (*n)++;
  else *n = -1000;
}

typedef struct scan_acc {
  int done, status, found;
  uint64_t next;
} scan_acc;

static void on_scan(sluice_client *c, int status, uint64_t next, const sluice_scan_entry *e,
                    size_t n, void *ud) {
  scan_acc *a = ud;
  a->status = status;
  a->found += (int)n;
  a->next = next;
  a->done = 1;
}

/* Semaphores on each master, each with a holder and a waiter on another
 * handle (the release hands the permit over through the waiter's computed
 * wake-list key, which the cluster's script rules must accept); limiter
 * checks over keys in many slots; a queue; a scan that finds every
 * semaphore on every master. */
static void test_primitives(void) {
  start(0);
  struct event_base *base = event_base_new();
  sluice_client *c = sem_test_client_at(base, url, 2000);
  sluice_sem *s[3], *t[3];
  acq_result held[3], waited[3];
  char names[3][32];
  for (int i = 0; i < 3; i++) {
    th_node *m = NULL;
    for (int k = 0, seen = 0; k < topo.n; k++)
      if (topo.node[k].is_master && seen++ == i) m = &topo.node[k];
    TH_ASSERT(m != NULL);
    name_on(m, "sem", names[i], sizeof names[i]);
    s[i] = sem_test_new(c, names[i], 1, 5000, i == 1);
    t[i] = sem_test_new(c, names[i], 1, 5000, i == 1);
    held[i] = sem_try(base, s[i]); /* the first ones wait for the map */
    TH_ASSERT_EQ(held[i].status, SLUICE_OK);
    memset(&waited[i], 0, sizeof waited[i]);
    TH_ASSERT_EQ(sluice_sem_acquire(t[i], 8000, acq_cb, &waited[i], NULL), SLUICE_OK);
    char key[96];
    snprintf(key, sizeof key, "sluice:sem:{%s}:holders", names[i]);
    TH_ASSERT_EQ(node_int(m, "ZCARD %s", key), 1); /* on the master the map names */
  }
  th_loop_for(base, 200);
  for (int i = 0; i < 3; i++) TH_ASSERT_EQ(waited[i].done, 0);
  for (int i = 0; i < 3; i++) sluice_permit_release(held[i].permit, NULL, NULL);
  for (int i = 0; i < 3; i++) {
    TH_ASSERT(th_loop_until(base, &waited[i].done, 5000));
    TH_ASSERT_EQ(waited[i].status, SLUICE_OK);
  }
  sluice_client_health h;
  sluice_client_get_health(c, &h);
  TH_ASSERT_EQ(h.command_up, 1);
  TH_ASSERT_EQ(h.blocking_up, 1);

  /* A scan visits every master. */
  scan_acc a = {0};
  int found = 0, pages = 0;
  uint64_t cursor = 0;
  do {
    memset(&a, 0, sizeof a);
    TH_ASSERT_EQ(sluice_client_scan(c, "sem", NULL, cursor, on_scan, &a), SLUICE_OK);
    TH_ASSERT(th_loop_until(base, &a.done, 3000));
    TH_ASSERT_EQ(a.status, SLUICE_OK);
    found += a.found;
    cursor = a.next;
  } while (cursor && ++pages < 100);
  TH_ASSERT_EQ(found, 3);
  for (int i = 0; i < 3; i++) {
    sluice_permit_release(waited[i].permit, NULL, NULL);
    sluice_sem_free(s[i]);
    sluice_sem_free(t[i]);
  }

  /* Limiter checks for keys in many slots: each batch goes to its slot's
   * master, never a CROSSSLOT error. */
  sluice_limiter *lim = rl_test_new(c, "l", SLUICE_RL_FIXED, 5, 10000);
  int ok = 0;
  char keys[64][8];
  for (int i = 0; i < 64; i++) {
    snprintf(keys[i], sizeof keys[i], "k%d", i);
    TH_ASSERT_EQ(sluice_limiter_check(lim, keys[i], 1, on_check, &ok), SLUICE_OK);
  }
  uint64_t until = th_now_ms() + 5000;
  while (ok >= 0 && ok < 64 && th_now_ms() < until) th_loop_for(base, 10);
  TH_ASSERT_EQ(ok, 64);
  sluice_limiter_free(lim);

  /* A queue, with its consumer blocked on its slot. */
  sluice_dq *dq = dqt_queue(c, "q");
  int delivered = 0;
  sluice_dq_consumer *con = NULL;
  TH_ASSERT_EQ(sluice_dq_consumer_new(c, "q", NULL, dqt_ack_counted, &delivered, &con), SLUICE_OK);
  th_loop_for(base, 100);
  dqt_push p;
  TH_ASSERT_EQ(dqt_push_wait(base, dq, "m", "m", 0, &p), SLUICE_OK);
  TH_ASSERT(th_loop_until(base, &delivered, 3000));
  sluice_dq_consumer_free(con);
  sluice_dq_free(dq);

  /* The same through the options, for programs without URLs. */
  sluice_client_options o;
  th_client_options(&o, NULL);
  o.cluster_seeds = topo.seeds;
  sluice_client *c2 = th_client_with(base, &o);
  sluice_sem *s2 = sem_test_new(c2, names[2], 1, 5000, 0);
  acq_result b = sem_hold(base, s2);
  sluice_permit_release(b.permit, NULL, NULL);
  sluice_sem_free(s2);
  sluice_client_free(c2);

  sluice_client_stats st;
  sluice_client_get_stats(c, &st);
  th_note("ops %llu, timed out %llu\n", (unsigned long long)st.ops_started,
          (unsigned long long)st.ops_timed_out);
  TH_ASSERT_EQ(st.ops_timed_out, 0);
  finish(base, c);
}

/* Bad input: a plain Redis behind a cluster URL and unreachable seeds give a
 * clear error and nothing hangs; malformed URLs are refused at once. */
static void test_bad_input(void) {
  struct event_base *base = event_base_new();
  char plain[128];
  th_redis r;
  int port = 0, rc = -1;
  for (int attempt = 0; attempt < 20 && rc != 0; attempt++) {
    port = 20000 + rand() % 30000;
    rc = th_redis_start(&r, port, NULL);
  }
  TH_ASSERT_EQ(rc, 0);
  snprintf(plain, sizeof plain, "redis+cluster://127.0.0.1:%d", port);
  {
    sluice_client *c = sem_test_client_at(base, plain, 2000);
    sluice_sem *s = sem_test_new(c, "b", 1, 1000, 0);
    acq_result a = {0};
    TH_ASSERT_EQ(sluice_sem_try_acquire(s, acq_cb, &a), SLUICE_OK);
    TH_ASSERT(th_loop_until(base, &a.done, 5000));
    TH_ASSERT_EQ(a.status, SLUICE_ECONNECTION);
    const char *err = sluice_client_last_error(c);
    if (!strstr(err, "cluster support disabled"))
      th_fail(__FILE__, __LINE__, "unclear error: \"%s\"", err);
    sluice_sem_free(s);
    client_close_drain(base, c);
    th_redis_stop(&r);
  }
  sluice_client *c = sem_test_client_at(base, "redis+cluster://127.0.0.1:1,127.0.0.1:2", 2000);
  sluice_sem *s = sem_test_new(c, "b", 1, 1000, 0);
  acq_result a = {0};
  TH_ASSERT_EQ(sluice_sem_try_acquire(s, acq_cb, &a), SLUICE_OK);
  TH_ASSERT(th_loop_until(base, &a.done, 5000));
  TH_ASSERT_EQ(a.status, SLUICE_ECONNECTION);
  if (!strstr(sluice_client_last_error(c), "127.0.0.1:") ||
      !strstr(sluice_client_last_error(c), "connect"))
    th_fail(__FILE__, __LINE__, "unclear error: \"%s\"", sluice_client_last_error(c));
  sluice_sem_free(s);
  client_close_drain(base, c);

  static const char *const malformed[] = {"redis+cluster://",
                                          "redis+cluster://h",
                                          "redis+cluster://h:0",
                                          "redis+cluster://h:1,",
                                          "redis+cluster://:1",
                                          "redis+cluster://h:1/2",
                                          "redis+cluster://h:1?verify=0",
                                          "redis+cluster://h:1,h:x",
                                          NULL};
  th_assert_urls_refused(base, malformed);
  sluice_client_options o;
  th_client_options(&o, NULL);
  o.cluster_seeds = "127.0.0.1:7000";
  o.master_name = "m";
  o.sentinels = "127.0.0.1:26379";
  sluice_client *x = NULL;
  TH_ASSERT_EQ(sluice_client_new(base, &o, &x), SLUICE_EINVAL);
  event_base_free(base);
}

/* ---- resharding under load ---------------------------------------------- */

static int node_ok(const th_node *n, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  redisReply *r = th_node_vcommand(n, fmt, ap);
  va_end(ap);
  int ok = r && r->type == REDIS_REPLY_STATUS;
  if (!ok)
    fprintf(stderr, "# %s: %s\n", n->addr, r && r->type == REDIS_REPLY_ERROR ? r->str : "failed");
  if (r) freeReplyObject(r);
  return ok;
}

/* Moves slot from one master to another the slow way, one key at a time
 * with a pause between, so that clients meet ASK and TRYAGAIN for a while:
 * run in a child process while the test's loop keeps working. */
static int migrate_slowly(th_node *from, th_node *to, unsigned slot, unsigned pause_ms) {
  if (!node_ok(to, "CLUSTER SETSLOT %u IMPORTING %s", slot, from->id) ||
      !node_ok(from, "CLUSTER SETSLOT %u MIGRATING %s", slot, to->id))
    return -1;
  for (int round = 0; round < 100000; round++) {
    redisReply *keys = th_node_command(from, "CLUSTER GETKEYSINSLOT %u 1", slot);
    if (!keys || keys->type != REDIS_REPLY_ARRAY) return -1;
    if (keys->elements == 0) {
      freeReplyObject(keys);
      break;
    }
    redisReply *r = th_node_command(from, "MIGRATE 127.0.0.1 %d %b 0 5000 REPLACE", to->port,
                                    keys->element[0]->str, keys->element[0]->len);
    int ok = r && r->type == REDIS_REPLY_STATUS;
    if (!ok)
      fprintf(stderr, "# MIGRATE: %s\n", r && r->type == REDIS_REPLY_ERROR ? r->str : "failed");
    if (r) freeReplyObject(r);
    freeReplyObject(keys);
    if (!ok) return -1;
    usleep(pause_ms * 1000);
  }
  for (int i = 0; i < topo.n; i++) {
    th_node *m = &topo.node[i];
    if (m != to && m != from && m->is_master &&
        !node_ok(m, "CLUSTER SETSLOT %u NODE %s", slot, to->id))
      return -1;
  }
  return node_ok(to, "CLUSTER SETSLOT %u NODE %s", slot, to->id) &&
                 node_ok(from, "CLUSTER SETSLOT %u NODE %s", slot, to->id)
             ? 0
             : -1;
}

/* A slot's slow move, as a child's work (th_child_start). */
typedef struct slot_move {
  th_node *from, *to;
  unsigned slot, pause_ms;
} slot_move;

static int move_slot(void *arg) {
  const slot_move *m = arg;
  return migrate_slowly(m->from, m->to, m->slot, m->pause_ms);
}

#define WORKERS 6
#define PERMITS 2

typedef struct load {
  struct event_base *base;
  sluice_sem *sem[WORKERS];
  sluice_dq *dq;
  int stop;
  int holders, max_holders; /* this process holds all of them */
  long grants, refusals, acquires, acquire_cbs, late, twice;
  long pushes, pushed_ok, push_cbs;
  char seen[4096];   /* message i delivered */
  char pushed[4096]; /* message i accepted by Redis */
  long delivered, dup;
} load;

typedef struct worker {
  load *L;
  int i;
  int busy; /* an acquire is outstanding */
  uint64_t started_ms;
  long cbs; /* callbacks of the acquire in flight */
  sluice_permit *permit;
  struct event *hold;
} worker;

static worker workers[WORKERS];

static void start_acquire(worker *w);

static void hold_done(evutil_socket_t fd, short what, void *arg) {
  worker *w = arg;
  w->L->holders--;
  sluice_permit_release(w->permit, NULL, NULL);
  w->permit = NULL;
  start_acquire(w);
}

static void worker_cb(sluice_sem *sem, int status, sluice_permit *permit, void *ud) {
  worker *w = ud;
  load *L = w->L;
  L->acquire_cbs++;
  if (++w->cbs > 1) L->twice++;
  w->busy = 0;
  if (th_now_ms() - w->started_ms > 3000 + 500) L->late++; /* its timeout, and some slack */
  if (status == SLUICE_OK) {
    L->grants++;
    if (++L->holders > L->max_holders) L->max_holders = L->holders;
    w->permit = permit;
    struct timeval two = {0, 2000};
    evtimer_add(w->hold, &two);
  } else {
    L->refusals++;
    start_acquire(w);
  }
}

static void start_acquire(worker *w) {
  if (w->L->stop) return;
  w->busy = 1;
  w->cbs = 0;
  w->started_ms = th_now_ms();
  w->L->acquires++;
  TH_ASSERT_EQ(sluice_sem_acquire(w->L->sem[w->i], 3000, worker_cb, w, NULL), SLUICE_OK);
}

static void on_pushed(sluice_dq *dq, int status, const char *id, int64_t due, void *ud) {
  load *L = ud;
  L->push_cbs++;
  if (status == SLUICE_OK) {
    L->pushed_ok++;
    L->pushed[atoi(id + 1)] = 1;
  }
}

static void on_load_msg(sluice_dq_consumer *con, sluice_dq_msg *m, void *ud) {
  load *L = ud;
  const char *id = sluice_dq_msg_id(m);
  int i = atoi(id + 1);
  if (i >= 0 && i < (int)sizeof L->seen) {
    if (L->seen[i]) L->dup++;
    else L->delivered++;
    L->seen[i] = 1;
  }
  sluice_dq_ack(m, NULL, NULL);
}

static void push_tick(evutil_socket_t fd, short what, void *arg) {
  load *L = arg;
  if (L->stop || L->pushes >= (long)sizeof L->pushed) return;
  char id[32];
  snprintf(id, sizeof id, "m%ld", L->pushes++);
  sluice_dq_item it = {id, 1, 0, 0, id};
  TH_ASSERT_EQ(sluice_dq_push(L->dq, &it, on_pushed, L), SLUICE_OK);
}

/* Runs the loop while a child process moves slot to `to`. */
static void migrate_under_load(struct event_base *base, unsigned slot, th_node *to) {
  th_node *from = th_cluster_master_for_slot(&topo, slot);
  TH_ASSERT(from && from != to);
  slot_move mv = {from, to, slot, 30};
  th_loop_until_child(base, th_child_start(move_slot, &mv), 60000);
  TH_ASSERT_EQ(th_cluster_wait_ok(&topo, 30000), 0);
  TH_ASSERT(th_cluster_master_for_slot(&topo, slot) == to);
  th_note("slot %u moved from %s to %s\n", slot, from->addr, to->addr);
}

static th_node *other_master(const th_node * not ) {
  for (int i = 0; i < topo.n; i++)
    if (topo.node[i].is_master && &topo.node[i] != not ) return &topo.node[i];
  return NULL;
}

/* The slots of a busy semaphore (holders, blocked waiters on six handles,
 * hand-offs through computed wake-list keys) and of a busy queue (a
 * producer every 5 ms, a blocked consumer) migrate while they work: no
 * over-issue, no lost message, no waiter past its timeout, every callback
 * exactly once. */
static void test_resharding(void) {
  start(0);
  static load L;
  memset(&L, 0, sizeof L);
  struct event_base *base = L.base = event_base_new();
  sluice_client *c = sem_test_client_at(base, url, 2000);
  for (int i = 0; i < WORKERS; i++) {
    L.sem[i] = sem_test_new(c, "busy", PERMITS, 3000, i % 2);
    workers[i] = (worker){.L = &L, .i = i};
    workers[i].hold = evtimer_new(base, hold_done, &workers[i]);
  }
  L.dq = dqt_queue(c, "busyq");
  sluice_dq_consumer *con = NULL;
  TH_ASSERT_EQ(sluice_dq_consumer_new(c, "busyq", NULL, on_load_msg, &L, &con), SLUICE_OK);
  struct event *pusher = event_new(base, -1, EV_PERSIST, push_tick, &L);
  struct timeval five = {0, 5000};
  event_add(pusher, &five);
  for (int i = 0; i < WORKERS; i++) start_acquire(&workers[i]);
  th_loop_for(base, 500);
  long before = L.grants;
  TH_ASSERT_CMP(before, >, 10);

  unsigned sem_slot = th_keyslot("{busy}", 6), q_slot = th_keyslot("{busyq}", 7);
  th_node *sem_home = th_cluster_master_for_slot(&topo, sem_slot);
  migrate_under_load(base, sem_slot, other_master(sem_home));
  migrate_under_load(base, q_slot, other_master(th_cluster_master_for_slot(&topo, q_slot)));
  migrate_under_load(base, sem_slot, sem_home); /* and back */
  long during = L.grants - before;
  th_loop_for(base, 500);
  long after = L.grants - before - during;

  L.stop = 1;
  event_del(pusher);
  uint64_t until = th_now_ms() + 8000;
  for (;;) {
    int busy = 0;
    for (int i = 0; i < WORKERS; i++) busy += workers[i].busy || workers[i].permit;
    if ((!busy && L.push_cbs == L.pushes && L.delivered == L.pushed_ok) || th_now_ms() > until)
      break;
    th_loop_for(base, 20);
  }
  th_note(
      "grants %ld (during the moves %ld, after %ld), refusals %ld, max holders %d, "
      "pushes %ld ok %ld delivered %ld dup %ld\n",
      L.grants, during, after, L.refusals, L.max_holders, L.pushes, L.pushed_ok, L.delivered,
      L.dup);
  sluice_client_metrics m;
  sluice_client_get_metrics(c, &m);
  for (unsigned k = 0; k < m.nkinds; k++)
    th_note("%s: %llu ops, %llu errors\n", m.kinds[k].name, (unsigned long long)m.kinds[k].ops,
            (unsigned long long)m.kinds[k].errors);
  th_note("Redis errors: %llu; last error: %s\n", (unsigned long long)m.by_status[-SLUICE_EREDIS],
          sluice_client_last_error(c));
  TH_ASSERT_EQ(m.by_status[-SLUICE_EREDIS], 0); /* no script broke a cluster rule */
  TH_ASSERT_CMP(L.max_holders, <=, PERMITS);    /* no over-issue */
  TH_ASSERT_EQ(L.twice, 0);                     /* every callback once */
  TH_ASSERT_EQ(L.acquire_cbs, L.acquires);
  TH_ASSERT_EQ(L.late, 0); /* nobody past its timeout */
  TH_ASSERT_EQ(L.push_cbs, L.pushes);
  for (int i = 0; i < L.pushes; i++) /* no accepted message lost */
    if (L.pushed[i] && !L.seen[i]) th_fail(__FILE__, __LINE__, "message m%d lost", i);
  TH_ASSERT_CMP(after, >, 10); /* and it all still works */

  event_free(pusher);
  sluice_dq_consumer_free(con);
  sluice_dq_free(L.dq);
  for (int i = 0; i < WORKERS; i++) {
    event_free(workers[i].hold);
    sluice_sem_free(L.sem[i]);
  }
  finish(base, c);
}

/* ---- failover ------------------------------------------------------------ */

/* SIGSTOP m and wait until a replica took over (m stays stopped). */
static int pause_master(void *m) { return th_cluster_pause_master(&topo, m) ? 0 : -1; }

/* Runs the loop while a child process does `what` to the cluster (the
 * topology helpers block), then brings this process's view up to date. */
static void in_child_under_loop(struct event_base *base, int (*what)(void *), th_node *m) {
  th_loop_until_child(base, th_child_start(what, m), 90000);
  if (what == pause_master) m->paused = 1; /* stopped by the child: skipped by the waits */
  TH_ASSERT_EQ(th_cluster_wait_ok(&topo, 30000), 0);
}

static int manual_failover(void *m) { return th_cluster_failover(&topo, m) ? 0 : -1; }
static int await_failover(void *m) { return th_cluster_wait_ok(&topo, 60000); }

typedef struct fo_load {
  sluice_sem *holder_sem, *waiter_sem;
  sluice_dq *dq;
  sluice_dq_consumer *con;
  acq_result held, waited;
  int delivered;
} fo_load;

/* A push accepted and delivered (20 s to be accepted, 10 s more to
 * arrive); returns ms from `since`. */
static uint64_t push_until_delivered(struct event_base *base, fo_load *f, uint64_t since) {
  dqt_push_until_delivered(base, f->dq, &f->delivered, 20000, 10000);
  return th_now_ms() - since;
}

/* The load's semaphore `name` (1 permit, ttl_ms): the holder's grant, and
 * a second handle for the waiter. */
static void fo_hold(struct event_base *base, sluice_client *c, fo_load *f, const char *name,
                    unsigned ttl_ms) {
  f->holder_sem = sem_test_new(c, name, 1, ttl_ms, 0);
  f->waiter_sem = sem_test_new(c, name, 1, ttl_ms, 0);
  f->held = sem_try(base, f->holder_sem);
  TH_ASSERT_EQ(f->held.status, SLUICE_OK);
}

/* The load's queue and its consumer, a first message through them. */
static void fo_queue(struct event_base *base, sluice_client *c, fo_load *f, const char *qname) {
  f->dq = dqt_queue(c, qname);
  TH_ASSERT_EQ(sluice_dq_consumer_new(c, qname, NULL, dqt_ack_counted, &f->delivered, &f->con),
               SLUICE_OK);
  push_until_delivered(base, f, th_now_ms());
}

/* Frees the load, the client and the loop; stops the cluster. */
static void fo_finish(struct event_base *base, sluice_client *c, fo_load *f) {
  sluice_dq_consumer_free(f->con);
  sluice_dq_free(f->dq);
  sluice_sem_free(f->holder_sem);
  sluice_sem_free(f->waiter_sem);
  finish(base, c);
}

/* A manual failover (CLUSTER FAILOVER) of the semaphore's master while a
 * waiter is blocked on it, then SIGKILL of the queue's master (the cluster
 * fails over by itself after its node timeout) while a consumer idles:
 * both go on against the new masters without any action, and the time to
 * recover is printed. */
static void test_failover(void) {
  start(1);
  struct event_base *base = event_base_new();
  sluice_client *c = sem_test_client_at(base, url, 2000);
  fo_load f;
  memset(&f, 0, sizeof f);
  fo_hold(base, c, &f, "f", 3000);
  TH_ASSERT_EQ(sluice_sem_acquire(f.waiter_sem, 30000, acq_cb, &f.waited, NULL), SLUICE_OK);
  fo_queue(base, c, &f, "fq");
  th_loop_for(base, 200);
  TH_ASSERT_EQ(f.waited.done, 0);

  th_node *sem_master = th_cluster_master_for_key(&topo, "{f}");
  uint64_t t0 = th_now_ms();
  in_child_under_loop(base, manual_failover, sem_master);
  TH_ASSERT(th_cluster_master_for_key(&topo, "{f}") != sem_master);
  th_note("manual failover of %s done after %llu ms\n", sem_master->addr,
          (unsigned long long)(th_now_ms() - t0));
  /* The holder's renewals went on; its release on the new master hands the
   * waiter the permit through the re-armed blocking connection. */
  th_loop_for(base, 200);
  TH_ASSERT_EQ(sluice_permit_lost(f.held.permit), 0);
  TH_ASSERT_EQ(f.waited.done, 0);
  t0 = th_now_ms();
  sluice_permit_release(f.held.permit, NULL, NULL);
  TH_ASSERT(th_loop_until(base, &f.waited.done, 5000));
  TH_ASSERT_EQ(f.waited.status, SLUICE_OK);
  th_note("release to hand-off on the new master: %llu ms\n",
          (unsigned long long)(th_now_ms() - t0));

  th_node *q_master = th_cluster_master_for_key(&topo, "{fq}");
  t0 = th_now_ms();
  kill(q_master->pid, SIGKILL);
  q_master->pid = 0;
  in_child_under_loop(base, await_failover, q_master);
  TH_ASSERT(th_cluster_master_for_key(&topo, "{fq}") != q_master);
  uint64_t agreed = th_now_ms() - t0;
  uint64_t recovered = push_until_delivered(base, &f, t0);
  th_note(
      "SIGKILL of %s: cluster agreed after %llu ms, a push delivered %llu ms after the "
      "kill\n",
      q_master->addr, (unsigned long long)agreed, (unsigned long long)recovered);
  TH_ASSERT_CMP(recovered, <, agreed + 5000);

  sluice_client_health h;
  sluice_client_get_health(c, &h);
  TH_ASSERT_EQ(h.command_up, 1);
  sluice_permit_release(f.waited.permit, NULL, NULL);
  fo_finish(base, c, &f);
}

/* The slots the client said another node serves now (its log), each
 * counted. */
static unsigned char slot_changes[16384];

static void count_slot_changes(sluice_client *c, int level, const char *msg, void *ud) {
  int lo, hi;
  if (sscanf(msg, "a different Redis node serves slots %d-%d now", &lo, &hi) == 2)
    for (int s = lo; s <= hi && s < 16384; s++) slot_changes[s]++;
}

/* How many of the slots in `mine` were reported (once or more). */
static int count_reported(const unsigned char *mine) {
  int n = 0;
  for (int sl = 0; sl < 16384; sl++) n += mine[sl] && slot_changes[sl];
  return n;
}

/* The slots master m serves, by CLUSTER SLOTS asked of m. */
static int slots_of(const th_node *m, unsigned char *mine) {
  redisContext *x = th_node_connect(m);
  TH_ASSERT(x != NULL);
  redisReply *r = redisCommand(x, "CLUSTER SLOTS");
  TH_ASSERT(r && r->type == REDIS_REPLY_ARRAY);
  int n = 0;
  for (size_t i = 0; i < r->elements; i++) {
    const redisReply *e = r->element[i], *master = e->element[2];
    if (master->element[1]->integer != m->port) continue;
    for (long long sl = e->element[0]->integer; sl <= e->element[1]->integer; sl++, n++)
      mine[sl] = 1;
  }
  freeReplyObject(r);
  redisFree(x);
  return n;
}

/* A manual failover: every slot of the old master is reported once as
 * served by another node (the MOVED that meets the first step, then the
 * new map, split the range between them), no other slot is. */
static void test_node_change(void) {
  start(1);
  struct event_base *base = event_base_new();
  sluice_client *c = sem_test_client_at(base, url, 2000);
  memset(slot_changes, 0, sizeof slot_changes);
  sluice_client_set_log_cb(c, count_slot_changes, NULL);
  sluice_sem *s = sem_test_new(c, "f", 1, 5000, 0);
  acq_result a = sem_hold(base, s);
  sluice_permit_release(a.permit, NULL, NULL);
  th_node *m = th_cluster_master_for_key(&topo, "{f}");
  static unsigned char mine[16384];
  memset(mine, 0, sizeof mine);
  int owned = slots_of(m, mine);
  TH_ASSERT_CMP(owned, >, 0);
  in_child_under_loop(base, manual_failover, m);
  uint64_t end = th_now_ms() + 10000;
  do a = sem_try(base, s);
  while (a.status != SLUICE_OK && th_now_ms() < end);
  TH_ASSERT_EQ(a.status, SLUICE_OK);
  sluice_permit_release(a.permit, NULL, NULL);
  int reported = 0;
  TH_LOOP_UNTIL(base, (reported = count_reported(mine)) == owned, 5000);
  for (int sl = 0; sl < 16384; sl++) {
    if (slot_changes[sl] != mine[sl])
      th_fail(__FILE__, __LINE__, "slot %d reported %d times, want %d", sl, slot_changes[sl],
              mine[sl]);
  }
  TH_ASSERT_EQ(reported, owned);
  sluice_sem_free(s);
  finish(base, c);
}

static int rejoin(void *m) { return th_cluster_resume_node(&topo, m); }

static void on_lost(sluice_permit *p, int reason, void *ud) { ++*(int *)ud; }

static void print_log(sluice_client *c, int level, const char *msg, void *ud) {
  th_note("%llu %s %s\n", (unsigned long long)(th_now_ms() % 100000), sluice_log_level_name(level),
          msg);
}

/* The holder's id in the holders set of the master now serving "{p}". */
static int holds_there(const char *id) {
  redisContext *x = th_node_connect(th_cluster_master_for_key(&topo, "{p}"));
  TH_ASSERT(x != NULL);
  redisReply *t = redisCommand(x, "TIME");
  TH_ASSERT(t && t->type == REDIS_REPLY_ARRAY && t->elements == 2);
  long long now = atoll(t->element[0]->str) * 1000 + atoll(t->element[1]->str) / 1000;
  freeReplyObject(t);
  redisReply *r = redisCommand(x, "ZSCORE sluice:sem:{p}:holders %s", id);
  int held = r && r->type == REDIS_REPLY_STRING && atoll(r->str) > now; /* a live lease */
  if (r) freeReplyObject(r);
  redisFree(x);
  return held;
}

/* SIGSTOP of the master of a semaphore (held, with a waiter) and of a
 * queue, until the cluster fails it over: every operation ends within its
 * deadline; the holder either keeps its permit on the new master or hears
 * it lost; the waiter and the consumer go on; then the old master comes
 * back as a replica and nothing changes. wait_replicas reports replicated
 * grants before, and after the new master has its replica back. */
static void test_pause_master(void) {
  start(1);
  struct event_base *base = event_base_new();
  sluice_client_options o;
  th_client_quick_options(&o, url, 1000);
  o.wait_replicas = 1;
  o.wait_timeout_ms = 200;
  sluice_client *c = th_client_with(base, &o);
  if (getenv("TEST_LOG")) sluice_client_set_log_cb(c, print_log, NULL);
  fo_load f;
  memset(&f, 0, sizeof f);
  th_node *m = th_cluster_master_for_key(&topo, "{p}");
  char qname[32];
  name_on(m, "dq", qname, sizeof qname); /* the queue on the same master */
  fo_hold(base, c, &f, "p", 2000);
  TH_ASSERT_EQ(sluice_permit_replicated(f.held.permit), 1);
  int lost = 0;
  sluice_permit_set_lost_cb(f.held.permit, on_lost, &lost);
  char holder_id[64];
  snprintf(holder_id, sizeof holder_id, "%s", sluice_permit_id(f.held.permit));
  uint64_t asked = th_now_ms();
  TH_ASSERT_EQ(sluice_sem_acquire(f.waiter_sem, 20000, acq_cb, &f.waited, NULL), SLUICE_OK);
  fo_queue(base, c, &f, qname);

  uint64_t t0 = th_now_ms();
  in_child_under_loop(base, pause_master, m);
  TH_ASSERT(th_cluster_master_for_key(&topo, "{p}") != m);
  th_note("SIGSTOP of %s: taken over after %llu ms; holder lost: %d\n", m->addr,
          (unsigned long long)(th_now_ms() - t0), lost);
  /* Within one lease the holder knows where it stands: held on the new
   * master, or told it is lost. */
  th_loop_for(base, 2000);
  int held = holds_there(holder_id);
  th_note("after a lease: holder held there %d, lost callbacks %d, waiter done %d\n", held, lost,
          f.waited.done);
  TH_ASSERT(held || lost == 1);
  TH_ASSERT_CMP(lost, <=, 1);
  if (!held) { /* its lease ended during the switch: the waiter has it */
    if (!th_loop_until(base, &f.waited.done, 5000)) {
      sluice_client_health hh;
      sluice_client_get_health(c, &hh);
      th_note("waiter not served: health %d/%d, last error %s\n", hh.command_up, hh.blocking_up,
              sluice_client_last_error(c));
      th_fail(__FILE__, __LINE__, "waiter not served");
    }
  } else {
    sluice_permit_release(f.held.permit, NULL, NULL);
    f.held.permit = NULL;
    TH_ASSERT(th_loop_until(base, &f.waited.done, 5000));
  }
  TH_ASSERT_EQ(f.waited.status, SLUICE_OK);
  TH_ASSERT_CMP(th_now_ms() - asked, <, 20000 + 500);
  uint64_t recovered = push_until_delivered(base, &f, t0);
  th_note("a push delivered %llu ms after the SIGSTOP\n", (unsigned long long)recovered);

  /* The old master returns as the new one's replica. */
  in_child_under_loop(base, rejoin, m);
  m->paused = 0;
  push_until_delivered(base, &f, th_now_ms());
  if (f.held.permit) sluice_permit_release(f.held.permit, NULL, NULL);
  sluice_permit_release(f.waited.permit, NULL, NULL);
  /* Grants report replicated again once the replica is back (a lost permit
   * is not released by its holder: its lease has to run out first). */
  acq_result again = {0};
  uint64_t until = th_now_ms() + 8000;
  for (;;) {
    again = sem_try(base, f.holder_sem);
    if (again.status == SLUICE_OK && sluice_permit_replicated(again.permit) == 1) break;
    if (again.status == SLUICE_OK) sluice_permit_release(again.permit, NULL, NULL);
    TH_ASSERT(th_now_ms() < until);
    th_loop_for(base, 100);
  }
  sluice_permit_release(again.permit, NULL, NULL);
  fo_finish(base, c, &f);
}

/* A release sent while the master is stopped (it cannot be answered there)
 * reaches the new master after the failover, and the blocked waiter gets
 * the permit then, not when the holder's 30 s lease ends. */
static void test_release_during_pause(void) {
  start(1);
  struct event_base *base = event_base_new();
  sluice_client *c = sem_test_client_at(base, url, 2000);
  if (getenv("TEST_LOG")) sluice_client_set_log_cb(c, print_log, NULL);
  sluice_sem *hs = sem_test_new(c, "r", 1, 30000, 0), *ws = sem_test_new(c, "r", 1, 30000, 0);
  acq_result w;
  acq_result h = sem_hold_with_waiter(base, hs, ws, 60000, &w);
  th_loop_for(base, 300); /* queued, its replica in sync */
  th_node *m = th_cluster_master_for_key(&topo, "{r}");
  pid_t pausing = th_child_start(pause_master, m);
  th_loop_for(base, 300); /* stopped by now */
  uint64_t t0 = th_now_ms();
  sluice_permit_release(h.permit, NULL, NULL);
  th_loop_until_child(base, pausing, 60000);
  m->paused = 1;
  TH_ASSERT_EQ(th_cluster_wait_ok(&topo, 30000), 0);
  uint64_t took = th_now_ms() - t0;
  TH_ASSERT(th_loop_until(base, &w.done, 10000));
  TH_ASSERT_EQ(w.status, SLUICE_OK);
  th_note("released during the pause; taken over after %llu ms, waiter granted after %llu ms\n",
          (unsigned long long)took, (unsigned long long)(th_now_ms() - t0));
  sluice_permit_release(w.permit, NULL, NULL);
  sluice_sem_free(hs);
  sluice_sem_free(ws);
  finish(base, c);
}

/* ---- a node joins, a node leaves ----------------------------------------- */

/* Every live master of the topology, and `extra` if given, maps slot to
 * port (CLUSTER SLOTS). */
static int slot_at_port_everywhere(unsigned slot, int port, const th_node *extra) {
  for (int i = 0; i <= topo.n; i++) {
    const th_node *n = i < topo.n ? &topo.node[i] : extra;
    if (!n || (i < topo.n && (!n->is_master || n->pid <= 0))) continue;
    redisReply *r = th_node_command(n, "CLUSTER SLOTS");
    int ok = 0;
    for (size_t k = 0; r && r->type == REDIS_REPLY_ARRAY && k < r->elements && !ok; k++) {
      redisReply *e = r->element[k];
      if (e->elements >= 3 && (unsigned)e->element[0]->integer <= slot &&
          slot <= (unsigned)e->element[1]->integer)
        ok = e->element[2]->element[1]->integer == port;
    }
    if (r) freeReplyObject(r);
    if (!ok) return 0;
  }
  return 1;
}

static th_node joiner;
static unsigned join_slot;

typedef struct churn {
  sluice_sem *sem;
  int ok, failed, inflight;
  struct event *tick;
} churn;

static void churn_cb(sluice_sem *sem, int status, sluice_permit *p, void *ud) {
  churn *ch = ud;
  ch->inflight = 0;
  if (status == SLUICE_OK) {
    ch->ok++;
    sluice_permit_release(p, NULL, NULL);
  } else {
    ch->failed++;
  }
}

static void churn_tick(evutil_socket_t fd, short what, void *arg) {
  churn *ch = arg;
  if (ch->inflight) return;
  ch->inflight = 1;
  TH_ASSERT_EQ(sluice_sem_acquire(ch->sem, 2000, churn_cb, ch, NULL), SLUICE_OK);
}

/* Runs the loop while a child moves join_slot between from and to; then
 * until the whole cluster maps it to `to`. */
static void under_churn(struct event_base *base, th_node *from, th_node *to) {
  uint64_t until = th_now_ms() + 60000;
  slot_move mv = {from, to, join_slot, 20};
  th_loop_until_child(base, th_child_start(move_slot, &mv), 60000);
  while (!slot_at_port_everywhere(join_slot, to->port, &joiner) && th_now_ms() < until)
    th_loop_for(base, 20);
  TH_ASSERT(slot_at_port_everywhere(join_slot, to->port, &joiner));
}

/* A master that joins the cluster after the client started (never a seed,
 * never in its first map) takes a busy semaphore's slot: the client follows
 * MOVED to it. Then the slot goes back, the node is forgotten and killed:
 * the client drops it and goes on. */
static void test_join_leave(void) {
  start(0);
  th_redis r;
  int port = 0, rc = -1;
  /* It stays an empty master when its slot goes back (else Redis makes it
   * a replica of the slot's new owner), so that it can simply be forgotten. */
  const char *extra[] = {"--cluster-enabled",
                         "yes",
                         "--cluster-config-file",
                         "nodes.conf",
                         "--cluster-node-timeout",
                         "1000",
                         "--cluster-allow-replica-migration",
                         "no",
                         NULL};
  for (int attempt = 0; attempt < 20 && rc != 0; attempt++) {
    port = 20000 + rand() % 25000;
    rc = th_redis_start(&r, port, extra);
  }
  TH_ASSERT_EQ(rc, 0);
  memset(&joiner, 0, sizeof joiner);
  joiner.port = port;
  joiner.pid = r.pid;
  joiner.is_master = 1;
  snprintf(joiner.addr, sizeof joiner.addr, "127.0.0.1:%d", port);
  redisReply *id = th_node_command(&joiner, "CLUSTER MYID");
  TH_ASSERT(id && id->type == REDIS_REPLY_STRING);
  snprintf(joiner.id, sizeof joiner.id, "%s", id->str);
  freeReplyObject(id);
  TH_ASSERT(node_ok(&joiner, "CLUSTER MEET 127.0.0.1 %d", topo.node[0].port));
  uint64_t until = th_now_ms() + 20000;
  for (;;) { /* every master knows it, and it knows them */
    int known = 1;
    for (int i = 0; i < topo.n; i++) {
      redisReply *nodes = th_node_command(&topo.node[i], "CLUSTER NODES");
      known = known && nodes && nodes->type == REDIS_REPLY_STRING && strstr(nodes->str, joiner.id);
      if (nodes) freeReplyObject(nodes);
    }
    redisReply *info = th_node_command(&joiner, "CLUSTER INFO");
    known = known && info && strstr(info->str, "cluster_known_nodes:4") &&
            strstr(info->str, "cluster_state:ok"); /* it learned the slots too */
    if (info) freeReplyObject(info);
    if (known) break;
    TH_ASSERT(th_now_ms() < until);
    usleep(20000);
  }

  struct event_base *base = event_base_new();
  sluice_client *c = sem_test_client_at(base, url, 2000);
  churn ch = {0};
  ch.sem = sem_test_new(c, "j", 1, 3000, 0);
  ch.tick = event_new(base, -1, EV_PERSIST, churn_tick, &ch);
  struct timeval ten = {0, 10000};
  event_add(ch.tick, &ten);
  th_loop_for(base, 300);
  TH_ASSERT_CMP(ch.ok, >, 5);
  join_slot = th_keyslot("{j}", 3);
  th_node *home = th_cluster_master_for_slot(&topo, join_slot);

  under_churn(base, home, &joiner);
  int before = ch.ok;
  th_loop_for(base, 500);
  th_note("on the new node: %d grants in 0.5 s, %d failed so far\n", ch.ok - before, ch.failed);
  TH_ASSERT_CMP(ch.ok - before, >, 5);
  redisReply *meta = th_node_command(&joiner, "EXISTS sluice:sem:{j}:meta");
  TH_ASSERT(meta && meta->type == REDIS_REPLY_INTEGER && meta->integer == 1);
  freeReplyObject(meta);

  under_churn(base, &joiner, home);
  for (int i = 0; i < topo.n; i++)
    if (topo.node[i].is_master) node_ok(&topo.node[i], "CLUSTER FORGET %s", joiner.id);
  char conf[300];
  snprintf(conf, sizeof conf, "%s/nodes.conf", r.dir);
  th_redis_stop(&r);
  unlink(conf);
  rmdir(r.dir);
  before = ch.ok;
  th_loop_for(base, 500);
  th_note("after it left: %d grants in 0.5 s; %d failed in all\n", ch.ok - before, ch.failed);
  TH_ASSERT_CMP(ch.ok - before, >, 5);

  event_free(ch.tick);
  until = th_now_ms() + 5000;
  while (ch.inflight && th_now_ms() < until) th_loop_for(base, 10);
  sluice_sem_free(ch.sem);
  finish(base, c);
}

/* ---- the tool ------------------------------------------------------------ */

/* The tool on this topology's URL (th_tool). */
static int tool(char *out, size_t size, const char *args) { return th_tool(url, out, size, args); }

/* sem run / status / release, rl check, dq push / consume / status and top,
 * unchanged but for the URL. */
static void test_tool(void) {
  start(0);
  char out[1024];
  int rc = tool(out, sizeof out, "sem run job -n 1 --ttl 5000 -- echo ran");
  if (rc) th_fail(__FILE__, __LINE__, "sem run: %d: %s", rc, out);
  TH_ASSERT(strstr(out, "ran") != NULL);
  TH_ASSERT_EQ(tool(out, sizeof out, "sem status job"), 0);
  TH_ASSERT_EQ(tool(out, sizeof out, "sem release job 0123456789abcdef0123456789abcdef"), 1);
  for (int i = 0; i < 3; i++)
    TH_ASSERT_EQ(tool(out, sizeof out, "rl check api user1 --algo gcra --limit 3 --period 60000"),
                 0);
  TH_ASSERT_EQ(tool(out, sizeof out, "rl check api user1 --algo gcra --limit 3 --period 60000"), 1);
  TH_ASSERT_EQ(tool(out, sizeof out, "dq push jobs --id j1 hello"), 0);
  TH_ASSERT_EQ(tool(out, sizeof out, "dq push jobs --id j1 hello"), 1); /* duplicate id */
  TH_ASSERT_EQ(tool(out, sizeof out, "dq consume jobs --count 1 -- cat"), 0);
  TH_ASSERT(strstr(out, "hello") != NULL);
  TH_ASSERT_EQ(tool(out, sizeof out, "dq status jobs"), 0);
  /* top finds objects on every master. */
  TH_ASSERT_EQ(tool(out, sizeof out, "dq push other --id x y"), 0);
  TH_ASSERT_EQ(tool(out, sizeof out, "top --once"), 0);
  printf("%s", out[0] ? "# top:\n" : "");
  for (char *line = strtok(out, "\n"); line; line = strtok(NULL, "\n")) th_note("  %s\n", line);
  th_cluster_stop(&topo);
}

static const th_case cases[] = {
    TH_CASE(primitives, 120),           TH_CASE(bad_input, 60),
    TH_CASE(resharding, 240),           TH_CASE(failover, 300),
    TH_CASE(node_change, 180),          TH_CASE(pause_master, 300),
    TH_CASE(release_during_pause, 180), TH_CASE(tool, 120),
    TH_CASE(join_leave, 180),
};
TH_TOPOLOGY_MAIN(cases)
