/* Redis Cluster (redis+cluster:// URLs): every primitive on a local
 * cluster with its keys spread over the masters, blocking waits on several
 * slots at once, the hand-off's computed wake-list key under the cluster's
 * script rules, a scan over every master, and the bad inputs. Suite
 * "cluster": each case starts its own cluster (a few seconds). */
#include <string.h>

#include "dq_util.h"
#include "sem_util.h"
#include "topology.h"

static th_cluster topo;
static char url[TH_CLUSTER_MAX * 24 + 32];

static void start(int replicas) {
  TH_ASSERT_EQ(th_cluster_start(&topo, 3, replicas), 0);
  snprintf(url, sizeof url, "redis+cluster://%s", topo.seeds);
}

static sluice_client *client_at(struct event_base *base, const char *u) {
  sluice_client_options o;
  sluice_client_options_init(&o);
  o.url = u;
  o.reconnect_min_ms = 20;
  o.reconnect_max_ms = 200;
  o.op_timeout_ms = 2000;
  sluice_client *c = NULL;
  TH_ASSERT_EQ(sluice_client_new(base, &o, &c), SLUICE_OK);
  return c;
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

typedef struct got {
  int n;
} got;

static void on_msg(sluice_dq_consumer *con, sluice_dq_msg *m, void *ud) {
  ((got *)ud)->n++;
  sluice_dq_ack(m, NULL, NULL);
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
  sluice_client *c = client_at(base, url);
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
  sluice_limiter_options lo;
  sluice_limiter_options_init(&lo);
  lo.limit = 5, lo.period_ms = 10000;
  sluice_limiter *lim;
  TH_ASSERT_EQ(sluice_limiter_new(c, "l", &lo, &lim), SLUICE_OK);
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
  got g = {0};
  sluice_dq_consumer *con = NULL;
  TH_ASSERT_EQ(sluice_dq_consumer_new(c, "q", NULL, on_msg, &g, &con), SLUICE_OK);
  th_loop_for(base, 100);
  dqt_push p;
  TH_ASSERT_EQ(dqt_push_wait(base, dq, "m", "m", 0, &p), SLUICE_OK);
  TH_ASSERT(th_loop_until(base, &g.n, 3000));
  sluice_dq_consumer_free(con);
  sluice_dq_free(dq);

  /* The same through the options, for programs without URLs. */
  sluice_client_options o;
  sluice_client_options_init(&o);
  o.cluster_seeds = topo.seeds;
  sluice_client *c2 = NULL;
  TH_ASSERT_EQ(sluice_client_new(base, &o, &c2), SLUICE_OK);
  sluice_sem *s2 = sem_test_new(c2, names[2], 1, 5000, 0);
  acq_result b = sem_try(base, s2);
  TH_ASSERT_EQ(b.status, SLUICE_OK);
  sluice_permit_release(b.permit, NULL, NULL);
  sluice_sem_free(s2);
  sluice_client_free(c2);

  sluice_client_stats st;
  sluice_client_get_stats(c, &st);
  printf("# ops %llu, timed out %llu\n", (unsigned long long)st.ops_started,
         (unsigned long long)st.ops_timed_out);
  TH_ASSERT_EQ(st.ops_timed_out, 0);
  sluice_client_free(c);
  TH_ASSERT(th_loop_drain(base, 5000));
  event_base_free(base);
  th_cluster_stop(&topo);
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
    sluice_client *c = client_at(base, plain);
    sluice_sem *s = sem_test_new(c, "b", 1, 1000, 0);
    acq_result a = {0};
    TH_ASSERT_EQ(sluice_sem_try_acquire(s, acq_cb, &a), SLUICE_OK);
    TH_ASSERT(th_loop_until(base, &a.done, 5000));
    TH_ASSERT_EQ(a.status, SLUICE_ECONNECTION);
    const char *err = sluice_client_last_error(c);
    if (!strstr(err, "cluster support disabled"))
      th_fail(__FILE__, __LINE__, "unclear error: \"%s\"", err);
    sluice_sem_free(s);
    sluice_client_free(c);
    TH_ASSERT(th_loop_drain(base, 5000));
    th_redis_stop(&r);
  }
  sluice_client *c = client_at(base, "redis+cluster://127.0.0.1:1,127.0.0.1:2");
  sluice_sem *s = sem_test_new(c, "b", 1, 1000, 0);
  acq_result a = {0};
  TH_ASSERT_EQ(sluice_sem_try_acquire(s, acq_cb, &a), SLUICE_OK);
  TH_ASSERT(th_loop_until(base, &a.done, 5000));
  TH_ASSERT_EQ(a.status, SLUICE_ECONNECTION);
  if (!strstr(sluice_client_last_error(c), "connect"))
    th_fail(__FILE__, __LINE__, "unclear error: \"%s\"", sluice_client_last_error(c));
  sluice_sem_free(s);
  sluice_client_free(c);
  TH_ASSERT(th_loop_drain(base, 5000));

  static const char *const malformed[] = {
      "redis+cluster://", "redis+cluster://h", "redis+cluster://h:0",
      "redis+cluster://h:1,", "redis+cluster://:1", "redis+cluster://h:1/2",
      "redis+cluster://h:1?verify=0", "redis+cluster://h:1,h:x", NULL};
  for (int i = 0; malformed[i]; i++) {
    sluice_client_options o;
    sluice_client_options_init(&o);
    o.url = malformed[i];
    sluice_client *x = NULL;
    if (sluice_client_new(base, &o, &x) != SLUICE_EINVAL)
      th_fail(__FILE__, __LINE__, "accepted \"%s\"", malformed[i]);
    TH_ASSERT(x == NULL);
    TH_ASSERT(strlen(sluice_client_last_error(NULL)) > 0);
  }
  sluice_client_options o;
  sluice_client_options_init(&o);
  o.cluster_seeds = "127.0.0.1:7000";
  o.master_name = "m";
  o.sentinels = "127.0.0.1:26379";
  sluice_client *x = NULL;
  TH_ASSERT_EQ(sluice_client_new(base, &o, &x), SLUICE_EINVAL);
  event_base_free(base);
}

int main(int argc, char **argv) {
  static const th_case cases[] = {
      {"primitives", test_primitives, 120},
      {"bad_input", test_bad_input, 60},
      {NULL, NULL, 0},
  };
  return th_topology_main(argc, argv, cases);
}
