/* A limiter's checks of one loop turn on a cluster go in one script call
 * per master whatever their slots (src/lua/_spread.lua), decided as calls
 * slot by slot would decide them. A node declines such a call before it
 * writes anything when a key is not served there now -- its slot moved
 * behind the client's map, or migrates with the key gone -- and the checks
 * go again slot by slot (MOVED, ASK): none may be counted twice. A node
 * whose ACL refuses the call's read gets calls slot by slot from then on.
 * A node with a partial call in flight gets no other until it answers
 * (full calls go at once), and that wait counts against a check's op
 * timeout.
 * Suite "cluster": each case starts its own cluster. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rl_util.h"
#include "topology.h"

static th_cluster topo;
static char url[TH_CLUSTER_MAX * 24 + 64];

#define NAME "sp"
#define LIMIT 3
#define USER "sp"
#define PASS "sp-pw"

/* A cluster of 3 masters and a client of it (as USER, whose ACL refuses
 * EXISTS on every master, when refusing is set). */
static sluice_client *client; /* the case's, start() to finish() */

static sluice_client *start(struct event_base *base, int refusing) {
  TH_ASSERT_EQ(th_cluster_start(&topo, 3, 0), 0);
  for (int i = 0; refusing && i < topo.masters; i++)
    th_node_acl_user(&topo.node[i], USER, PASS, "~* &* +@all -exists", NULL);
  snprintf(url, sizeof url, "redis+cluster://%s%s", refusing ? USER ":" PASS "@" : "", topo.seeds);
  client = th_client(base, url, 5000);
  TH_LOOP_UNTIL(base, sluice_client_is_connected(client), 5000);
  TH_ASSERT(sluice_client_is_connected(client));
  return client;
}

static void finish(struct event_base *base, sluice_limiter *lim) {
  sluice_limiter_free(lim);
  th_free_client_and_loop(base, client, 5000);
  th_cluster_stop(&topo);
}

/* The fixed window's Redis key of key. */
static void rkey(char *out, size_t size, const char *key) {
  snprintf(out, size, "sluice:rl:{%zu:" NAME ":%s}:fw", strlen(NAME), key);
}

static unsigned slot_of(const char *key) {
  char k[96];
  rkey(k, sizeof k, key);
  return th_keyslot(k, strlen(k));
}

/* A key "<kind><i>" whose slot is on master m and is none of the n taken. */
static void key_on(const th_node *m, const char *kind, const unsigned *taken, size_t n, char *out,
                   size_t size) {
  for (int i = 0; i < 100000; i++) {
    snprintf(out, size, "%s%d", kind, i);
    unsigned slot = slot_of(out);
    int used = 0;
    for (size_t j = 0; j < n; j++) used |= taken[j] == slot;
    if (!used && th_cluster_master_for_slot(&topo, slot) == m) return;
  }
  th_fail(__FILE__, __LINE__, "no key found on %s", m->addr);
}

/* Units counted on key, read on node n (after ASKING when asking). */
static long long counted(const th_node *n, const char *key, int asking) {
  char k[96];
  rkey(k, sizeof k, key);
  redisContext *x = th_node_connect(n);
  TH_ASSERT(x != NULL);
  if (asking) freeReplyObject(redisCommand(x, "ASKING"));
  redisReply *r = redisCommand(x, "HGET %s n", k);
  if (!r || r->type == REDIS_REPLY_ERROR)
    th_fail(__FILE__, __LINE__, "HGET %s on %s: %s", k, n->addr, r ? r->str : "no reply");
  long long v = r->type == REDIS_REPLY_STRING ? atoll(r->str) : 0;
  freeReplyObject(r);
  redisFree(x);
  return v;
}

/* A number in node n's INFO commandstats: field (e.g. "rejected_calls=")
 * of cmd's line, 0 if the command never ran. */
static long long cmd_stat(const th_node *n, const char *cmd, const char *field) {
  redisReply *r = th_node_command(n, "INFO commandstats");
  TH_ASSERT(r && r->type != REDIS_REPLY_ERROR);
  char line[64];
  snprintf(line, sizeof line, "cmdstat_%s:", cmd);
  const char *p = strstr(r->str, line), *end = p ? strchr(p, '\n') : NULL;
  const char *f = p ? strstr(p, field) : NULL;
  long long v = f && (!end || f < end) ? atoll(f + strlen(field)) : 0;
  freeReplyObject(r);
  return v;
}

static long long evalsha_calls(void) {
  long long sum = 0;
  for (int i = 0; i < topo.masters; i++) sum += cmd_stat(&topo.node[i], "evalsha", "calls=");
  return sum;
}

/* Every check of keys[0..n) `rounds` times over, all issued in one loop
 * turn (round by round), run to their answers: a[r * n + i]. */
static void check_all(struct event_base *base, sluice_limiter *lim, char (*keys)[16], size_t n,
                      int rounds, rl_answer *a) {
  memset(a, 0, (size_t)rounds * n * sizeof *a);
  for (int r = 0; r < rounds; r++)
    for (size_t i = 0; i < n; i++)
      TH_ASSERT_EQ(sluice_limiter_check(lim, keys[i], 1, rl_answer_cb, &a[r * n + i]), SLUICE_OK);
  size_t total = (size_t)rounds * n, done = 0;
  uint64_t end = th_now_ms() + 10000;
  while (done < total && th_now_ms() < end) {
    event_base_loop(base, EVLOOP_ONCE);
    while (done < total && a[done].done) done++;
  }
  TH_ASSERT_EQ(done, total);
}

/* Round r (0-based) of a key with `before` units already taken. */
static void assert_round(const rl_answer *a, int r, int before) {
  TH_ASSERT_EQ(a->done, 1);
  TH_ASSERT_EQ(a->status, SLUICE_OK);
  TH_ASSERT_EQ(a->res.allowed, before + r < LIMIT);
  if (before + r < LIMIT) TH_ASSERT_EQ(a->res.remaining, LIMIT - 1 - before - r);
}

/* ---- one call per master ---------------------------------------------- */

enum { NKEYS = 60, ROUNDS = LIMIT + 1 };

/* Each algorithm: 60 keys over every master, each checked LIMIT + 1 times
 * in one turn: three calls in all, exactly the first LIMIT of each key
 * admitted, in order. */
static void test_one_call_per_master(void) {
  struct event_base *base = th_precise_base();
  sluice_client *c = start(base, 0);
  static const sluice_rl_algo algos[] = {SLUICE_RL_FIXED, SLUICE_RL_SLIDING_LOG,
                                         SLUICE_RL_SLIDING_COUNTER, SLUICE_RL_GCRA};
  static char keys[NKEYS][16];
  static rl_answer a[NKEYS * ROUNDS];
  for (int i = 0; i < NKEYS; i++) snprintf(keys[i], sizeof keys[i], "k%d", i);
  for (size_t g = 0; g < sizeof algos / sizeof algos[0]; g++) {
    char name[16];
    snprintf(name, sizeof name, "all%zu", g);
    sluice_limiter *lim = rl_test_new(c, name, algos[g], LIMIT, 60000);
    rl_test_check(base, lim, "warm", 1); /* the clock probe, then the map in use */
    long long calls0 = evalsha_calls(), exists0 = 0;
    for (int i = 0; i < topo.masters; i++) exists0 += cmd_stat(&topo.node[i], "exists", "calls=");
    check_all(base, lim, keys, NKEYS, ROUNDS, a);
    long long calls = evalsha_calls() - calls0, exists = -exists0;
    for (int i = 0; i < topo.masters; i++) exists += cmd_stat(&topo.node[i], "exists", "calls=");
    th_note("%s: %d checks on %d keys took %lld calls, %lld reads first\n",
            sluice_rl_algo_name(algos[g]), NKEYS * ROUNDS, NKEYS, calls, exists);
    /* 60 keys' slots leave no master without any (odds 3 x (2/3)^60). */
    TH_ASSERT_EQ(calls, topo.masters);
    TH_ASSERT_EQ(exists, NKEYS * ROUNDS);
    for (int r = 0; r < ROUNDS; r++)
      for (int i = 0; i < NKEYS; i++) assert_round(&a[r * NKEYS + i], r, 0);
    sluice_limiter_free(lim);
  }
  finish(base, NULL);
}

/* ---- declined calls --------------------------------------------------- */

/* Keys on master a: two of the checks' own (k1, k2) and one whose slot the
 * case moves (m); slots all different. */
typedef struct trio {
  char k[3][16];
  unsigned slot[3];
} trio;

static void trio_on(const th_node *a, const char *kind, trio *t) {
  for (size_t i = 0; i < 3; i++) {
    key_on(a, kind, t->slot, i, t->k[i], sizeof t->k[i]);
    t->slot[i] = slot_of(t->k[i]);
  }
}

/* A slot moved (with its key) to another master after the client's map
 * was read: the call to the old master is declined at its read of that
 * key, and all three checks go again slot by slot (that key's after a
 * MOVED): each counted once. */
static void test_slot_moved(void) {
  struct event_base *base = th_precise_base();
  sluice_limiter *lim = rl_test_new(start(base, 0), NAME, SLUICE_RL_FIXED, LIMIT, 60000);
  th_node *a = &topo.node[0], *b = &topo.node[1];
  trio t;
  trio_on(a, "mv", &t);
  rl_answer r[3];
  check_all(base, lim, t.k, 3, 1, r);
  for (int i = 0; i < 3; i++) assert_round(&r[i], 0, 0);
  TH_ASSERT_EQ(th_cluster_migrate_slot(&topo, t.slot[2], b), 1);
  long long refused0 = cmd_stat(a, "exists", "rejected_calls=");
  check_all(base, lim, t.k, 3, 1, r);
  for (int i = 0; i < 3; i++) assert_round(&r[i], 0, 1);
  TH_ASSERT_CMP(cmd_stat(a, "exists", "rejected_calls="), >, refused0); /* declined */
  TH_ASSERT_EQ(counted(a, t.k[0], 0), 2);
  TH_ASSERT_EQ(counted(a, t.k[1], 0), 2);
  TH_ASSERT_EQ(counted(b, t.k[2], 0), 2);
  /* The map knows the move now: one call to each node, each counted once. */
  check_all(base, lim, t.k, 3, 1, r);
  for (int i = 0; i < 3; i++) assert_round(&r[i], 0, 2);
  TH_ASSERT_EQ(counted(b, t.k[2], 0), 3);
  finish(base, lim);
}

static void node_ok(const th_node *n, const char *fmt, unsigned slot, const char *id) {
  redisReply *r = th_node_command(n, fmt, slot, id);
  if (!r || r->type == REDIS_REPLY_ERROR)
    th_fail(__FILE__, __LINE__, "%s: %s", n->addr, r ? r->str : "no reply");
  freeReplyObject(r);
}

/* Two slots of a call's node migrating to another master: one key there
 * already (served where it is), one not yet written (ASK). The call is
 * declined at the missing key's read; again slot by slot, the missing
 * key's check goes to the importing node after ASKING: each counted once,
 * where it lives. */
static void test_migrating(void) {
  struct event_base *base = th_precise_base();
  sluice_limiter *lim = rl_test_new(start(base, 0), NAME, SLUICE_RL_FIXED, LIMIT, 60000);
  th_node *a = &topo.node[0], *b = &topo.node[2];
  trio t; /* k[2]: present on a, its slot migrating */
  trio_on(a, "mg", &t);
  char gone[16]; /* its slot migrating, the key not on a: ASK */
  key_on(a, "gone", t.slot, 3, gone, sizeof gone);
  rl_answer r[4];
  check_all(base, lim, t.k, 3, 1, r);
  unsigned slots[2] = {t.slot[2], slot_of(gone)};
  for (int i = 0; i < 2; i++) {
    node_ok(b, "CLUSTER SETSLOT %u IMPORTING %s", slots[i], a->id);
    node_ok(a, "CLUSTER SETSLOT %u MIGRATING %s", slots[i], b->id);
  }
  char keys[4][16];
  memcpy(keys, t.k, sizeof t.k);
  memcpy(keys[3], gone, sizeof gone);
  long long refused0 = cmd_stat(a, "exists", "rejected_calls=");
  check_all(base, lim, keys, 4, 1, r);
  for (int i = 0; i < 3; i++) assert_round(&r[i], 0, 1);
  assert_round(&r[3], 0, 0);
  TH_ASSERT_CMP(cmd_stat(a, "exists", "rejected_calls="), >, refused0); /* declined */
  for (int i = 0; i < 3; i++) TH_ASSERT_EQ(counted(a, t.k[i], 0), 2);
  TH_ASSERT_EQ(counted(b, gone, 1), 1);
  for (int i = 0; i < 2; i++) {
    node_ok(a, "CLUSTER SETSLOT %u STABLE%s", slots[i], "");
    node_ok(b, "CLUSTER SETSLOT %u STABLE%s", slots[i], "");
  }
  finish(base, lim);
}

/* ---- a node that refuses ---------------------------------------------- */

static int warned;

static void on_log(sluice_client *c, int level, const char *msg, void *ud) {
  if (level == SLUICE_LOG_WARN && strstr(msg, "refused a call across slots")) warned++;
}

/* How often node n's ACL refused EXISTS to the user (ACL LOG). */
static long long exists_refusals(const th_node *n) {
  redisReply *r = th_node_command(n, "ACL LOG");
  TH_ASSERT(r && r->type == REDIS_REPLY_ARRAY);
  long long count = 0;
  for (size_t i = 0; i < r->elements; i++) {
    const redisReply *e = r->element[i];
    long long c = 0;
    int exists = 0;
    for (size_t j = 0; j + 1 < e->elements; j += 2) {
      const char *f = e->element[j]->str, *v = e->element[j + 1]->str;
      if (strcmp(f, "object") == 0) exists = v && strcmp(v, "exists") == 0;
      if (strcmp(f, "count") == 0) c = e->element[j + 1]->integer;
    }
    if (exists) count += c;
  }
  freeReplyObject(r);
  return count;
}

/* A user whose ACL refuses EXISTS: the first call across slots to each
 * node is declined, the checks go again slot by slot, and that node gets
 * calls slot by slot from then on (one refusal in its ACL LOG, one WARN);
 * every check decided right. */
static void test_refused_by_acl(void) {
  struct event_base *base = th_precise_base();
  sluice_client *c = start(base, 1);
  sluice_client_set_log_cb(c, on_log, NULL);
  sluice_limiter *lim = rl_test_new(c, NAME, SLUICE_RL_FIXED, LIMIT, 60000);
  static char keys[NKEYS][16];
  static rl_answer a[NKEYS * ROUNDS];
  for (int i = 0; i < NKEYS; i++) snprintf(keys[i], sizeof keys[i], "k%d", i);
  for (int turn = 0; turn < ROUNDS; turn++) {
    check_all(base, lim, keys, NKEYS, 1, a);
    for (int i = 0; i < NKEYS; i++) assert_round(&a[i], 0, turn);
  }
  th_loop_for(base, 50); /* the log hook's messages come from the loop */
  long long refusals = 0;
  for (int i = 0; i < topo.masters; i++) {
    long long n = exists_refusals(&topo.node[i]);
    TH_ASSERT_CMP(n, <=, 1);
    refusals += n;
  }
  th_note("%lld refusals, %d warnings over %d turns\n", refusals, warned, ROUNDS);
  TH_ASSERT_EQ(refusals, topo.masters);
  TH_ASSERT_EQ(warned, topo.masters);
  finish(base, lim);
}

/* ---- a node's next call waits for its call in flight ------------------- */

/* CLIENT PAUSE WRITE on n: the scripts sent to it wait, the case's own
 * commands do not (ms is a bound; the case ends the pause itself with
 * CLIENT UNPAUSE, ms 0). */
static void pause_node(const th_node *n, unsigned ms) {
  redisReply *r = ms ? th_node_command(n, "CLIENT PAUSE %u WRITE", ms)
                     : th_node_command(n, "CLIENT UNPAUSE");
  TH_ASSERT(r && r->type == REDIS_REPLY_STATUS);
  freeReplyObject(r);
}

/* Run the loop a few times without waiting: what this turn queued leaves
 * (or waits for its node) before the case makes more. */
static void end_turn(struct event_base *base) {
  for (int i = 0; i < 3; i++) event_base_loop(base, EVLOOP_NONBLOCK);
}

/* One check of key in a loop turn of its own. */
static void check_alone(struct event_base *base, sluice_limiter *lim, const char *key,
                        rl_answer *a) {
  memset(a, 0, sizeof *a);
  TH_ASSERT_EQ(sluice_limiter_check(lim, key, 1, rl_answer_cb, a), SLUICE_OK);
  end_turn(base);
}

enum { NWAIT = 10 };

/* n different keys on master m: "<kind><j>-<i>". */
static void keys_on(const th_node *m, const char *kind, int n, char (*out)[16]) {
  for (int j = 0; j < n; j++) {
    char k[8];
    snprintf(k, sizeof k, "%s%d-", kind, j);
    key_on(m, k, NULL, 0, out[j], sizeof out[j]);
  }
}

static int all_done(const rl_answer *a, int n) {
  for (int i = 0; i < n; i++)
    if (!a[i].done) return 0;
  return 1;
}

/* A check to a node whose call is in flight waits for that call's answer
 * and then goes with every other that came in meanwhile: master a, paused,
 * holds one call while ten checks arrive in ten loop turns, and runs two
 * calls in all, not eleven. Another master's checks, made in the same
 * turns, are answered meanwhile: nodes never wait for each other. */
static void test_node_call_waits(void) {
  struct event_base *base = th_precise_base();
  sluice_limiter *lim = rl_test_new(start(base, 0), NAME, SLUICE_RL_FIXED, LIMIT, 60000);
  th_node *a = &topo.node[0], *b = &topo.node[1];
  rl_test_check(base, lim, "warm", 1);
  char ka[NWAIT + 1][16], kb[NWAIT][16];
  keys_on(a, "wa", NWAIT + 1, ka);
  keys_on(b, "wb", NWAIT, kb);
  long long calls_a = cmd_stat(a, "evalsha", "calls=");
  rl_answer ra[NWAIT + 1], rb[NWAIT];
  pause_node(a, 30000);
  check_alone(base, lim, ka[0], &ra[0]);
  for (int i = 0; i < NWAIT; i++) {
    check_alone(base, lim, ka[i + 1], &ra[i + 1]);
    check_alone(base, lim, kb[i], &rb[i]);
  }
  TH_LOOP_UNTIL(base, all_done(rb, NWAIT), 5000);
  TH_ASSERT(all_done(rb, NWAIT));
  for (int i = 0; i <= NWAIT; i++) TH_ASSERT(!ra[i].done); /* master a is still paused */
  for (int i = 0; i < NWAIT; i++) assert_round(&rb[i], 0, 0);
  pause_node(a, 0);
  TH_LOOP_UNTIL(base, all_done(ra, NWAIT + 1), 5000);
  for (int i = 0; i <= NWAIT; i++) assert_round(&ra[i], 0, 0);
  TH_ASSERT_EQ(cmd_stat(a, "evalsha", "calls=") - calls_a, 2);
  finish(base, lim);
}

/* Bytes waiting in the query buffers of node n's clients (CLIENT LIST). */
static long long queued_bytes(const th_node *n) {
  redisReply *r = th_node_command(n, "CLIENT LIST");
  TH_ASSERT(r && r->type != REDIS_REPLY_ERROR);
  long long sum = 0;
  for (const char *p = r->str; (p = strstr(p, " qbuf=")) != NULL; p++) sum += atoll(p + 6);
  freeReplyObject(r);
  return sum;
}

enum { CALL_MAX = 255 }; /* a limiter call's most requests (limiter.c) */

/* Full calls never wait, nor does what comes behind a full call: a node
 * given more than a call's worth per round trip keeps its pipe full. With
 * master a paused: CALL_MAX checks go as one call; 5 made the next turn
 * go at once behind it (they reach a's query buffer); 3 more made the turn
 * after wait behind that partial call, and CALL_MAX more made with them go
 * at once as a full call. Four calls in all, every check answered. */
static void test_full_calls_go(void) {
  struct event_base *base = th_precise_base();
  sluice_limiter *lim = rl_test_new(start(base, 0), NAME, SLUICE_RL_FIXED, LIMIT, 60000);
  th_node *a = &topo.node[0];
  rl_test_check(base, lim, "warm", 1);
  char k[1][16];
  keys_on(a, "fu", 1, k);
  long long calls_a = cmd_stat(a, "evalsha", "calls=");
  enum { N = 2 * CALL_MAX + 8 };
  static rl_answer r[N];
  memset(r, 0, sizeof r);
  static const int turns[] = {CALL_MAX, 5, 3 + CALL_MAX};
  pause_node(a, 30000);
  long long before = 0;
  for (int t = 0, i = 0; t < 3; t++) {
    for (int end = i + turns[t]; i < end; i++)
      TH_ASSERT_EQ(sluice_limiter_check(lim, k[0], 1, rl_answer_cb, &r[i]), SLUICE_OK);
    end_turn(base);
    long long more = t == 0 ? 0 : t == 1 ? 100 : CALL_MAX * 10;
    TH_LOOP_UNTIL(base, queued_bytes(a) > before + more, t ? 5000 : 200);
    long long now = queued_bytes(a);
    th_note("turn %d: %lld bytes queued\n", t, now);
    if (t) TH_ASSERT_CMP(now, >, before + more);
    before = now;
  }
  pause_node(a, 0);
  TH_LOOP_UNTIL(base, all_done(r, N), 5000);
  for (int i = 0; i < N; i++) {
    TH_ASSERT_EQ(r[i].status, SLUICE_OK);
    TH_ASSERT_EQ(r[i].res.allowed, i < LIMIT);
  }
  TH_ASSERT_EQ(cmd_stat(a, "evalsha", "calls=") - calls_a, 4);
  finish(base, lim);
}

/* Waiting for the node's call counts against a check's op timeout: with
 * master a paused, a check made while a's call is out ends with
 * SLUICE_ETIMEDOUT within its own op timeout (not after the call's and
 * then its own), and when a resumes, the scripts it runs late take no
 * units. Master b answers all along. */
static void test_wait_counts_against_timeout(void) {
  enum { OP_MS = 1000, LATER_MS = 500, SLACK_MS = 300 };
  struct event_base *base = th_precise_base();
  sluice_client *c = start(base, 0);
  sluice_limiter_options o = rl_test_options(SLUICE_RL_FIXED, LIMIT, 60000);
  o.op_timeout_ms = OP_MS;
  sluice_limiter *lim = rl_test_new_opts(c, NAME, &o);
  th_node *a = &topo.node[0], *b = &topo.node[1];
  rl_test_check(base, lim, "warm", 1);
  char ka[3][16], kb[16];
  keys_on(a, "ta", 3, ka);
  key_on(b, "tb", NULL, 0, kb, sizeof kb);
  rl_answer ra[2], rb;
  pause_node(a, 30000);
  check_alone(base, lim, ka[0], &ra[0]);
  th_loop_for(base, LATER_MS);
  uint64_t asked = th_now_ms();
  check_alone(base, lim, ka[1], &ra[1]);
  check_alone(base, lim, kb, &rb);
  TH_LOOP_UNTIL(base, rb.done, 2000);
  assert_round(&rb, 0, 0);
  TH_LOOP_UNTIL(base, ra[1].done, 3 * OP_MS);
  uint64_t took = th_now_ms() - asked;
  th_note("a check waiting for its node's call ended after %llu ms (op timeout %d)\n",
          (unsigned long long)took, OP_MS);
  TH_ASSERT_EQ(ra[0].done, 1);
  TH_ASSERT_EQ(ra[0].status, SLUICE_ETIMEDOUT);
  TH_ASSERT_EQ(ra[1].done, 1);
  TH_ASSERT_EQ(ra[1].status, SLUICE_ETIMEDOUT);
  TH_ASSERT_CMP(took, <, OP_MS + SLACK_MS);
  pause_node(a, 0);
  rl_test_check(base, lim, ka[2], 1); /* after whatever a ran late */
  TH_ASSERT_EQ(counted(a, ka[0], 0), 0);
  TH_ASSERT_EQ(counted(a, ka[1], 0), 0);
  finish(base, lim);
}

static const th_case cases[] = {
    TH_CASE(one_call_per_master, 120),
    TH_CASE(slot_moved, 120),
    TH_CASE(migrating, 120),
    TH_CASE(refused_by_acl, 120),
    TH_CASE(node_call_waits, 120),
    TH_CASE(full_calls_go, 120),
    TH_CASE(wait_counts_against_timeout, 120),
};
TH_TOPOLOGY_MAIN(cases)
