/* The topology harness itself (test/support/topology.h): a 3+3 Redis Cluster with
 * slots, a slot migration and failovers, and a Sentinel-managed master with
 * forced and automatic failovers, and no process left behind. Suite
 * "topology", not "redis": it takes a minute or more. Each case prints how
 * long its steps took. */
#include <signal.h>
#include <stdarg.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "harness.h"
#include "topology.h"

static uint64_t step_t0;

static void step(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* "# <what>: <ms since the previous step>" */
static void step(const char *fmt, ...) {
  uint64_t now = th_now_ms();
  va_list ap;
  printf("# ");
  va_start(ap, fmt);
  vprintf(fmt, ap);
  va_end(ap);
  printf(": %llu ms\n", (unsigned long long)(now - step_t0));
  fflush(stdout);
  step_t0 = now;
}

static redisReply *cmd(const th_node *n, const char *fmt, ...) {
  redisContext *c = th_node_connect(n);
  if (!c) th_fail(__FILE__, __LINE__, "cannot connect to %s", n->addr);
  va_list ap;
  va_start(ap, fmt);
  redisReply *r = redisvCommand(c, fmt, ap);
  va_end(ap);
  if (!r) th_fail(__FILE__, __LINE__, "%s: %s", n->addr, c->errstr);
  redisFree(c);
  return r;
}

static long long cmd_int(const th_node *n, const char *fmt, const char *arg) {
  redisReply *r = cmd(n, fmt, arg);
  if (r->type != REDIS_REPLY_INTEGER)
    th_fail(__FILE__, __LINE__, "%s: %s", n->addr,
            r->type == REDIS_REPLY_ERROR ? r->str : "not an integer");
  long long v = r->integer;
  freeReplyObject(r);
  return v;
}

/* "master" or "slave" (ROLE's first element), into buf. */
static const char *role(const th_node *n, char *buf, size_t len) {
  redisReply *r = cmd(n, "ROLE");
  snprintf(
      buf, len, "%s",
      r->type == REDIS_REPLY_ARRAY && r->elements > 0 && r->element[0]->type == REDIS_REPLY_STRING
          ? r->element[0]->str
          : "?");
  freeReplyObject(r);
  return buf;
}

/* The spec's vectors and hash-tag rules, without a server. */
static void test_crc16(void) {
  TH_ASSERT_EQ(th_crc16("123456789", 9), 0x31C3);
  TH_ASSERT_EQ(th_keyslot("", 0), 0);
  TH_ASSERT_EQ(th_keyslot("foo", 3), 12182);
  TH_ASSERT_EQ(th_keyslot("{user1000}.following", 20), th_keyslot("{user1000}.followers", 20));
  TH_ASSERT_EQ(th_keyslot("{user1000}.following", 20), th_keyslot("user1000", 8));
  TH_ASSERT_EQ(th_keyslot("foo{}{bar}", 10), th_crc16("foo{}{bar}", 10) & 16383);
  TH_ASSERT_EQ(th_keyslot("foo{{bar}}zap", 13), th_keyslot("{bar", 4));
  TH_ASSERT_EQ(th_keyslot("foo{bar}{zap}", 13), th_keyslot("bar", 3));
}

static void expect_moved(const th_node *wrong, const char *key, const th_node *owner) {
  redisReply *r = cmd(wrong, "GET %s", key);
  char want[64];
  snprintf(want, sizeof want, " %s", owner->addr);
  if (r->type != REDIS_REPLY_ERROR || strncmp(r->str, "MOVED ", 6) != 0 || !strstr(r->str, want))
    th_fail(__FILE__, __LINE__, "GET %s on %s: want MOVED to %s, got %s", key, wrong->addr,
            owner->addr, r->type == REDIS_REPLY_ERROR ? r->str : "a value");
  freeReplyObject(r);
}

static void expect_value(const th_node *n, const char *key, const char *value) {
  redisReply *r = cmd(n, "GET %s", key);
  if (r->type != REDIS_REPLY_STRING || strcmp(r->str, value) != 0)
    th_fail(__FILE__, __LINE__, "GET %s on %s: want \"%s\", got %s", key, n->addr, value,
            r->type == REDIS_REPLY_ERROR    ? r->str
            : r->type == REDIS_REPLY_STRING ? r->str
                                            : "nil");
  freeReplyObject(r);
}

static th_cluster cl; /* 32 KB of slot map: not on the case's stack */

/* Stop the cluster, timed; no process of it may be left. */
static void cluster_stopped(void) {
  th_cluster_stop(&cl);
  step("cluster stop");
  TH_ASSERT_EQ(th_topology_live_processes(), 0);
}

/* Our CRC16 against CLUSTER KEYSLOT for plain, tagged, odd-brace and
 * binary keys (pipelined on one connection). */
static void check_keyslots(const th_node *n) {
  enum { N = 4000 };
  static char keys[N][48];
  static size_t lens[N];
  const char *forms[] = {"key:%d",     "{user%d}.following",
                         "foo{%d}bar", "{}%d",
                         "x{}{%d}",    "a{{b%d}}c",
                         "{%d",        "%d}",
                         "{%d}{x}",    "%d{y}"};
  for (int i = 0; i < N; i++) {
    if (i % 11 == 10) { /* binary: NUL and high bytes, braces around them */
      int l = 0;
      keys[i][l++] = '{';
      keys[i][l++] = 0;
      keys[i][l++] = (char)(0x80 + i % 100);
      keys[i][l++] = (char)(i & 0xff);
      keys[i][l++] = i % 2 ? '}' : 'z';
      keys[i][l++] = (char)0xff;
      lens[i] = (size_t)l;
    } else {
      lens[i] = (size_t)snprintf(keys[i], sizeof keys[i], forms[i % 10], i);
    }
  }
  redisContext *c = th_node_connect(n);
  TH_ASSERT(c != NULL);
  for (int i = 0; i < N; i++) redisAppendCommand(c, "CLUSTER KEYSLOT %b", keys[i], lens[i]);
  for (int i = 0; i < N; i++) {
    void *p = NULL;
    TH_ASSERT_EQ(redisGetReply(c, &p), REDIS_OK);
    redisReply *r = p;
    TH_ASSERT_EQ(r->type, REDIS_REPLY_INTEGER);
    if ((unsigned)r->integer != th_keyslot(keys[i], lens[i]))
      th_fail(__FILE__, __LINE__, "key #%d (%zu bytes): CLUSTER KEYSLOT %lld, ours %u", i, lens[i],
              r->integer, th_keyslot(keys[i], lens[i]));
    freeReplyObject(r);
  }
  redisFree(c);
}

static void test_cluster(void) {
  char buf[16];
  step_t0 = th_now_ms();
  TH_ASSERT_EQ(th_cluster_start(&cl, 3, 1), 0);
  step("cluster start (3 masters + 3 replicas, all agreeing)");
  th_note("seeds %s\n", cl.seeds);
  TH_ASSERT_EQ(cl.n, 6);

  check_keyslots(&cl.node[0]);
  step("4000 keys: th_keyslot == CLUSTER KEYSLOT");

  /* Writes through plain sync connections to the masters our map names:
   * a wrong one would answer MOVED instead of OK. */
  enum { W = 1000 };
  redisContext *conn[TH_CLUSTER_MAX] = {0};
  long long sent[TH_CLUSTER_MAX] = {0};
  for (int i = 0; i < W; i++) {
    char key[32], val[32];
    snprintf(key, sizeof key, "w:%d", i);
    snprintf(val, sizeof val, "v%d", i);
    th_node *m = th_cluster_master_for_key(&cl, key);
    TH_ASSERT(m != NULL && m->is_master);
    int mi = (int)(m - cl.node);
    if (!conn[mi]) conn[mi] = th_node_connect(m);
    TH_ASSERT(conn[mi] != NULL);
    redisReply *r = redisCommand(conn[mi], "SET %s %s", key, val);
    TH_ASSERT(r != NULL);
    if (r->type != REDIS_REPLY_STATUS)
      th_fail(__FILE__, __LINE__, "SET %s on %s: %s", key, m->addr,
              r->type == REDIS_REPLY_ERROR ? r->str : "?");
    freeReplyObject(r);
    sent[mi]++;
  }
  int masters = 0;
  for (int i = 0; i < cl.n; i++) {
    if (conn[i]) redisFree(conn[i]);
    if (!cl.node[i].is_master) continue;
    masters++;
    TH_ASSERT_CMP(sent[i], >, 0);
    TH_ASSERT_EQ(cmd_int(&cl.node[i], "DBSIZE", NULL), sent[i]);
  }
  TH_ASSERT_EQ(masters, 3);
  step("%d SETs, each on the master owning its slot", W);

  /* Slot migration with keys in it. */
  const char *tag = "{mig}";
  unsigned slot = th_keyslot(tag, strlen(tag));
  th_node *from = th_cluster_master_for_slot(&cl, slot), *to = NULL;
  for (int i = 0; i < cl.n && !to; i++)
    if (cl.node[i].is_master && &cl.node[i] != from) to = &cl.node[i];
  TH_ASSERT(from && to);
  for (int i = 0; i < 25; i++) {
    redisReply *r = cmd(from, "SET {mig}:%d m%d", i, i);
    TH_ASSERT_EQ(r->type, REDIS_REPLY_STATUS);
    freeReplyObject(r);
  }
  char slotstr[16];
  snprintf(slotstr, sizeof slotstr, "%u", slot);
  TH_ASSERT_EQ(cmd_int(from, "CLUSTER COUNTKEYSINSLOT %s", slotstr), 25);
  TH_ASSERT_EQ(cmd_int(to, "CLUSTER COUNTKEYSINSLOT %s", slotstr), 0);
  step_t0 = th_now_ms();
  TH_ASSERT_EQ(th_cluster_migrate_slot(&cl, slot, to), 25);
  step("slot %u (25 keys) migrated %s -> %s, all nodes agreeing", slot, from->addr, to->addr);
  TH_ASSERT_EQ(cmd_int(from, "CLUSTER COUNTKEYSINSLOT %s", slotstr), 0);
  TH_ASSERT_EQ(cmd_int(to, "CLUSTER COUNTKEYSINSLOT %s", slotstr), 25);
  TH_ASSERT(th_cluster_master_for_slot(&cl, slot) == to);
  expect_value(to, "{mig}:7", "m7");
  for (int i = 0; i < cl.n; i++) /* every node's own map, replicas too */
    if (&cl.node[i] != to) expect_moved(&cl.node[i], "{mig}:7", to);

  /* Manual failover of the slot's new master. */
  th_node *old = to, *rep = th_cluster_replica_of(&cl, to);
  TH_ASSERT(rep != NULL);
  th_node *nm = th_cluster_failover(&cl, old);
  TH_ASSERT(nm == rep);
  step("CLUSTER FAILOVER %s -> %s, cluster ok", old->addr, nm->addr);
  TH_ASSERT_STR_EQ(role(nm, buf, sizeof buf), "master");
  TH_ASSERT_STR_EQ(role(old, buf, sizeof buf), "slave");
  TH_ASSERT(th_cluster_master_for_slot(&cl, slot) == nm);
  expect_value(nm, "{mig}:24", "m24"); /* a manual failover loses nothing */
  for (int i = 0; i < cl.n; i++)
    if (&cl.node[i] != nm) expect_moved(&cl.node[i], "{mig}:24", nm);

  cluster_stopped();
}

/* Automatic failovers: a paused master (rejoining as a replica when
 * resumed), then a killed one. */
static void test_cluster_auto_failover(void) {
  char buf[16];
  step_t0 = th_now_ms();
  TH_ASSERT_EQ(th_cluster_start(&cl, 3, 1), 0);
  step("cluster start");
  th_node *m = th_cluster_master_for_key(&cl, "paused");
  th_node *rep = th_cluster_replica_of(&cl, m);
  TH_ASSERT(rep != NULL);
  th_node *nm = th_cluster_pause_master(&cl, m);
  TH_ASSERT(nm == rep);
  step("SIGSTOP master %s: %s promoted, cluster ok", m->addr, nm->addr);
  TH_ASSERT_STR_EQ(role(nm, buf, sizeof buf), "master");
  TH_ASSERT_EQ(th_cluster_resume_node(&cl, m), 0);
  step("SIGCONT %s: rejoined as a replica", m->addr);
  TH_ASSERT(!m->is_master && th_cluster_replica_of(&cl, nm) == m);
  TH_ASSERT_STR_EQ(role(m, buf, sizeof buf), "slave");

  th_node *k = th_cluster_master_for_key(&cl, "killed");
  rep = th_cluster_replica_of(&cl, k);
  TH_ASSERT(rep != NULL);
  nm = th_cluster_kill_master(&cl, k);
  TH_ASSERT(nm == rep);
  TH_ASSERT_EQ(k->pid, 0);
  step("SIGKILL master %s: %s promoted, cluster ok", k->addr, nm->addr);
  TH_ASSERT(th_cluster_master_for_key(&cl, "killed") == nm);
  cluster_stopped();
}

/* Two replicas per master: after a manual failover the other replica
 * follows the new master (the waits must see that too). */
static void test_cluster_two_replicas(void) {
  step_t0 = th_now_ms();
  TH_ASSERT_EQ(th_cluster_start(&cl, 3, 2), 0);
  step("cluster start (3 masters + 6 replicas)");
  th_node *m = th_cluster_master_for_key(&cl, "x");
  int mi = (int)(m - cl.node), reps = 0;
  for (int i = 0; i < cl.n; i++) reps += cl.node[i].master == mi;
  TH_ASSERT_EQ(reps, 2);
  th_node *nm = th_cluster_failover(&cl, m);
  TH_ASSERT(nm != NULL);
  step("CLUSTER FAILOVER %s -> %s, both other nodes its replicas", m->addr, nm->addr);
  int ni = (int)(nm - cl.node);
  reps = 0;
  for (int i = 0; i < cl.n; i++) reps += cl.node[i].master == ni;
  TH_ASSERT_EQ(reps, 2);
  TH_ASSERT_EQ(m->master, ni);
  cluster_stopped();
}

static th_sentinel sn;

/* Stop the Sentinel set, timed; no process of it may be left. */
static void sentinel_stopped(void) {
  th_sentinel_stop(&sn);
  step("sentinel stop");
  TH_ASSERT_EQ(th_topology_live_processes(), 0);
}

/* SET then WAIT 1 on the same connection (WAIT counts the replicas that
 * acknowledged this connection's writes): the replicas that have it. */
static long long set_wait(const th_node *m, const char *key, const char *val, int wait_ms) {
  redisContext *c = th_node_connect(m);
  TH_ASSERT(c != NULL);
  redisReply *r = redisCommand(c, "SET %s %s", key, val);
  TH_ASSERT(r != NULL && r->type == REDIS_REPLY_STATUS);
  freeReplyObject(r);
  r = redisCommand(c, "WAIT 1 %d", wait_ms);
  TH_ASSERT(r != NULL && r->type == REDIS_REPLY_INTEGER);
  long long n = r->integer;
  freeReplyObject(r);
  redisFree(c);
  return n;
}

static void test_sentinel(void) {
  char buf[16];
  step_t0 = th_now_ms();
  TH_ASSERT_EQ(th_sentinel_start(&sn, "mymaster"), 0);
  step("sentinel start (master, replica, 3 sentinels knowing each other)");
  th_note("sentinels %s\n", sn.sentinels);
  th_node *m = th_sentinel_master(&sn);
  TH_ASSERT(m == &sn.data[0]);
  TH_ASSERT_EQ(set_wait(m, "before", "failover", 5000), 1); /* the replica has it */

  th_node *nm = th_sentinel_failover(&sn);
  TH_ASSERT(nm == &sn.data[1]);
  step("SENTINEL FAILOVER -> %s (every sentinel reports it, ROLE master)", nm->addr);
  TH_ASSERT(th_sentinel_master(&sn) == nm);
  TH_ASSERT_STR_EQ(role(nm, buf, sizeof buf), "master");
  expect_value(nm, "before", "failover");
  TH_ASSERT_EQ(th_sentinel_wait_replica(&sn, 60000), 0);
  step("old master %s made a linked replica, known to every sentinel", m->addr);
  TH_ASSERT_STR_EQ(role(m, buf, sizeof buf), "slave");
  /* And back: the topology is ready for another failover. */
  TH_ASSERT(th_sentinel_failover(&sn) == m);
  step("SENTINEL FAILOVER back -> %s", m->addr);
  sentinel_stopped();
}

static void test_sentinel_auto_failover(void) {
  char buf[16];
  step_t0 = th_now_ms();
  TH_ASSERT_EQ(th_sentinel_start(&sn, "auto"), 0);
  step("sentinel start");
  th_node *m = th_sentinel_master(&sn);
  TH_ASSERT(m != NULL);

  /* Replica stop/restart, as the WAIT tests will do. */
  TH_ASSERT_EQ(th_sentinel_replica_stop(&sn), 0);
  TH_ASSERT_EQ(set_wait(m, "k", "1", 200), 0);
  step_t0 = th_now_ms();
  TH_ASSERT_EQ(th_sentinel_replica_restart(&sn), 0);
  step("replica restarted and linked");
  TH_ASSERT_EQ(set_wait(m, "k", "2", 5000), 1);

  th_node *nm = th_sentinel_pause_master(&sn);
  TH_ASSERT(nm != NULL && nm != m);
  step("SIGSTOP master %s: sentinels promoted %s", m->addr, nm->addr);
  TH_ASSERT_STR_EQ(role(nm, buf, sizeof buf), "master");
  TH_ASSERT_EQ(th_sentinel_resume_node(&sn, m), 0);
  step("SIGCONT %s: made a replica by the sentinels", m->addr);
  TH_ASSERT_STR_EQ(role(m, buf, sizeof buf), "slave");

  th_node *k = th_sentinel_kill_master(&sn);
  TH_ASSERT(k == m);
  TH_ASSERT_EQ(nm->pid, 0);
  step("SIGKILL master %s: sentinels promoted %s", nm->addr, k->addr);
  TH_ASSERT_STR_EQ(role(k, buf, sizeof buf), "master");
  sentinel_stopped();
}

/* A case that dies without stopping its topology leaves no server: they
 * die with the process that started them. */
static void test_dying_case(void) {
  pid_t pid = fork();
  TH_ASSERT(pid >= 0);
  if (pid == 0) {
    alarm(60);
    if (th_sentinel_start(&sn, "orphan") != 0) _exit(2);
    _exit(th_topology_live_processes() == 5 ? 0 : 3); /* no stop */
  }
  int st;
  TH_ASSERT_EQ(waitpid(pid, &st, 0), pid);
  TH_ASSERT(WIFEXITED(st));
  TH_ASSERT_EQ(WEXITSTATUS(st), 0);
  uint64_t end = th_now_ms() + 5000;
  while (th_topology_live_processes() != 0 && th_now_ms() < end) {
    struct timespec ts = {0, 20 * 1000 * 1000};
    nanosleep(&ts, NULL);
  }
  TH_ASSERT_EQ(th_topology_live_processes(), 0);
}

/* Last: no server of ours runs, and the sweep (also run at exit) removes
 * what a dead case left. */
static void test_no_leaks(void) {
  TH_ASSERT_EQ(th_topology_live_processes(), 0);
  th_topology_sweep();
  TH_ASSERT_EQ(th_topology_dirs(), 0);
  /* Informational: other test binaries may run servers meanwhile. */
  FILE *p = popen("pgrep -c -f redis-server", "r");
  int all = -1;
  if (p) {
    if (fscanf(p, "%d", &all) != 1) all = -1;
    pclose(p);
  }
  th_note("redis-server processes on the machine now (any owner): %d\n", all);
}

static const th_case cases[] = {
    TH_CASE(crc16, 10),
    TH_CASE(cluster, 180),
    TH_CASE(cluster_auto_failover, 240),
    TH_CASE(cluster_two_replicas, 180),
    TH_CASE(sentinel, 180),
    TH_CASE(sentinel_auto_failover, 240),
    TH_CASE(dying_case, 90),
    TH_CASE(no_leaks, 30),
};
TH_TOPOLOGY_MAIN(cases)
