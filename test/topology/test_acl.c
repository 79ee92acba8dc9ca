/*
 * Least privilege: every primitive and the tool run as a Redis user with
 * exactly the rule `sluice acl` prints, on a single Redis, a Sentinel set
 * and a cluster; and with any one command taken out of that rule a step
 * fails, saying which command and which sluice step (a refused BRPOP shows
 * on the health API and the log hook). A tenant confined to its prefix
 * without SCAN sees nothing of another's, and `sluice top` still works for
 * it when given names.
 *
 * Suite "acl": the cases start their own topologies, one after another.
 */
#include <string.h>
#include <strings.h>

#include "dq_util.h"
#include "rl_util.h"
#include "sem_util.h"
#include "topology.h"

#define USER "sl"
#define PASS "sl-pw"

/* ---- the rule ---------------------------------------------------------- */

typedef struct rule {
  char text[2][2048]; /* [0] data nodes, [1] sentinels ("" elsewhere) */
} rule;

/* `sluice acl ARGS...`: its rule lines. */
static rule acl_rule(const char *const *args) {
  const char *argv[16] = {"acl"};
  int n = 1;
  for (; *args && n < 15; args++) argv[n++] = *args;
  argv[n] = NULL;
  th_run r = th_tool_capture(argv, NULL, 0);
  TH_ASSERT_EQ(r.status, 0);
  rule out;
  memset(&out, 0, sizeof out);
  int k = 0;
  for (char *line = strtok(r.out, "\n"); line && k < 2; line = strtok(NULL, "\n"))
    if (line[0] != '#') snprintf(out.text[k++], sizeof out.text[0], "%s", line);
  th_run_free(&r);
  TH_ASSERT(out.text[0][0] != '\0');
  return out;
}

/* The user sl with the rule's words on node n, without "+without". */
static void set_user(const th_node *n, const char *text, const char *without) {
  th_node_acl_user(n, USER, PASS, text, without);
}

/* The commands of a rule line ("+x" words), into cmds; how many. */
static int rule_commands(const char *text, char cmds[][48], int max) {
  char copy[2048];
  int n = 0;
  snprintf(copy, sizeof copy, "%s", text);
  for (char *w = strtok(copy, " "); w && n < max; w = strtok(NULL, " "))
    if (w[0] == '+') snprintf(cmds[n++], 48, "%s", w + 1);
  return n;
}

/* ---- what runs under the rule -------------------------------------------- */

typedef struct consumed {
  int n, settled, status, took_error;
} consumed;

typedef struct run {
  struct event_base *base;
  sluice_client *c;
  void (*admin)(const char *cmd); /* a command on the data nodes, as admin */
  const char *step;               /* the first that failed, or NULL */
  char why[1024];                 /* its status and sluice_client_last_error */
  char log[32 * 1024];            /* every line of the log hook */
  size_t loglen;
  consumed dq; /* the dq consumer's; a settlement may answer at close */
  /* The failed step lost a permit's lease with no refusal to show for it:
   * the loop stalled past the lease (ASan lanes under CI load), which says
   * nothing about the rule; run_settled runs it again. */
  int stalled;
} run;

/* Each line: its level's number, a space, the message. */
static void on_log(sluice_client *c, int level, const char *msg, void *ud) {
  run *r = ud;
  int n = snprintf(r->log + r->loglen, sizeof r->log - r->loglen, "%d %s\n", level, msg);
  if (n > 0 && r->loglen + (size_t)n < sizeof r->log) r->loglen += (size_t)n;
}

/* Record the first failure: 0 when status is not what the step wanted. */
static int ok(run *r, const char *step, int status, int want) {
  if (status == want) return 1;
  if (!r->step) {
    r->step = step;
    snprintf(r->why, sizeof r->why, "%s: %s", sluice_err_name(status),
             sluice_client_last_error(r->c));
  }
  return 0;
}

/* An operation's answer. It lives in its step's frame: a step that ends
 * early frees its handle and waits for what is still pending (settle). */
typedef struct done {
  int sent; /* started: its callback will run */
  int n, status;
  sluice_permit *permit;
  int allowed;
} done;

/* The body of every callback below: d (ud) answered with status. */
static done *answered(void *ud, int status) {
  done *d = ud;
  d->n++, d->status = status;
  return d;
}

static void on_acq(sluice_sem *s, int status, sluice_permit *p, void *ud) {
  answered(ud, status)->permit = p;
}
static void on_sem_status(sluice_sem *s, int status, void *ud) { answered(ud, status); }
static void on_sem_info(sluice_sem *s, int status, const sluice_sem_info *i, void *ud) {
  answered(ud, status);
}
static void on_rl(sluice_limiter *l, int status, const sluice_rl_result *res, void *ud) {
  answered(ud, status)->allowed = res && res->allowed;
}
static void on_dq_status(sluice_dq *dq, int status, void *ud) { answered(ud, status); }
static void on_dq_info(sluice_dq *dq, int status, const sluice_dq_info *i, void *ud) {
  answered(ud, status);
}
static void on_dead(sluice_dq *dq, int status, size_t total, const sluice_dq_dead_entry *e,
                    size_t n, void *ud) {
  answered(ud, status)->allowed = (int)total;
}
static void on_count(sluice_dq *dq, int status, uint64_t count, void *ud) {
  answered(ud, status)->allowed = (int)count;
}

/* Wait for d (started with rc); the status, or rc when it did not start. */
static int wait_done(run *r, int rc, done *d, unsigned ms) {
  if (rc != SLUICE_OK) return rc;
  d->sent = 1;
  return th_loop_until(r->base, &d->n, ms) ? d->status : SLUICE_ETIMEDOUT;
}

/* After their handle was freed, until every operation started into ds has
 * answered (SLUICE_ECANCELED, from the loop): their dones are about to go
 * out of scope. */
static void settle(run *r, done *const *ds, size_t n) {
  uint64_t end = th_now_ms() + 5000;
  for (size_t i = 0; i < n; i++)
    while (ds[i]->sent && !ds[i]->n && th_now_ms() < end) th_loop_for(r->base, 5);
}

static int blocking_up(const run *r) {
  sluice_client_health h;
  sluice_client_get_health(r->c, &h);
  return h.blocking_up == 1;
}

/* Semaphore: grant, a waiter woken through BRPOP, renewals, status, a
 * timed-out waiter leaving, release by handle and by id. */
static void sem_steps(run *r) {
  sluice_sem_options o;
  sluice_sem_options_init(&o);
  o.ttl_ms = 600;
  o.renew_ms = 100; /* renewed several times within the lease, even on a busy machine */
  sluice_sem *s = NULL;
  TH_ASSERT_EQ(sluice_sem_new(r->c, "s", &o, &s), SLUICE_OK);
  done a = {0}, w = {0}, late = {0}, info = {0}, rel = {0}, relid = {0};
  if (!ok(r, "sem_acquire", wait_done(r, sluice_sem_try_acquire(s, on_acq, &a), &a, 3000),
          SLUICE_OK))
    goto out;
  int rc = sluice_sem_acquire(s, 5000, on_acq, &w, NULL);
  w.sent = rc == SLUICE_OK;
  uint64_t end = th_now_ms() + 2000;
  while (rc == SLUICE_OK && !w.n && !blocking_up(r) && th_now_ms() < end) th_loop_for(r->base, 10);
  th_loop_for(r->base, 100); /* a refused BRPOP is answered at once */
  /* A refused queueing step may answer before the blocking connection is
   * up (a loaded machine): its error names what it lacked. */
  if (w.n && !ok(r, "sem_acquire (queued)", w.status, SLUICE_OK)) goto out;
  if (!ok(r, "waiting (BRPOP)", rc == SLUICE_OK && blocking_up(r) ? SLUICE_OK : SLUICE_EREDIS,
          SLUICE_OK))
    goto out;
  if (!ok(r, "sem_status", wait_done(r, sluice_sem_inspect(s, on_sem_info, &info), &info, 3000),
          SLUICE_OK))
    goto out;
  th_loop_for(r->base, 700); /* past the lease: it must have been renewed */
  /* Lost: by a refused renewal, whose answer may come after a loop stalled
   * past the lease (seen under CI load); its error says why. */
  for (uint64_t until = th_now_ms() + 2000;
       sluice_permit_lost(a.permit) && !sluice_client_last_error(r->c)[0] && th_now_ms() < until;)
    th_loop_for(r->base, 10);
  r->stalled = sluice_permit_lost(a.permit) && !sluice_client_last_error(r->c)[0];
  if (!ok(r, "sem_renew", sluice_permit_lost(a.permit) ? SLUICE_EREDIS : SLUICE_OK, SLUICE_OK))
    goto out;
  rc = wait_done(r, sluice_permit_release(a.permit, on_sem_status, &rel), &rel, 3000);
  r->stalled = rc == SLUICE_ENOTFOUND && !sluice_client_last_error(r->c)[0];
  if (!ok(r, "sem_release", rc, SLUICE_OK)) goto out;
  a.permit = NULL;
  if (!ok(r, "woken", wait_done(r, SLUICE_OK, &w, 3000), SLUICE_OK)) goto out;
  if (!ok(r, "sem_leave",
          wait_done(r, sluice_sem_acquire(s, 100, on_acq, &late, NULL), &late, 3000),
          SLUICE_ETIMEDOUT))
    goto out;
  char id[64];
  snprintf(id, sizeof id, "%s", sluice_permit_id(w.permit));
  rc = wait_done(r, sluice_sem_release_id(s, id, on_sem_status, &relid), &relid, 3000);
  r->stalled = rc == SLUICE_ENOTFOUND && !sluice_client_last_error(r->c)[0];
  ok(r, "sem_release (by id)", rc, SLUICE_OK);
out:
  sluice_sem_free(s); /* what it still holds is released or expires */
  settle(r, (done *const[]){&a, &w, &late, &info, &rel, &relid}, 6);
}

/* The sliding log's other paths: a log with an expired entry before a
 * live one (trimmed; a denial searches it), and a key in the layout of
 * older versions (a sorted set, converted). Times in microseconds: 1 is
 * long expired, 4102444800000000 (the year 2100) still to come. */
static void rl_log_paths(run *r, sluice_limiter *l) {
  r->admin("RPUSH sluice:rl:{11:sliding-log:trim}:log 0 1 1 4102444800000000 2");
  r->admin("ZADD sluice:rl:{11:sliding-log:old}:log 4102444800000000 4102444800000000");
  done t = {0}, d = {0}, o = {0};
  if (ok(r, "sliding-log (trim)",
         wait_done(r, sluice_limiter_check(l, "trim", 1, on_rl, &t), &t, 3000), SLUICE_OK))
    ok(r, "sliding-log (deny)",
       wait_done(r, sluice_limiter_check(l, "trim", 5, on_rl, &d), &d, 3000), SLUICE_OK);
  if (!r->step)
    ok(r, "sliding-log (convert)",
       wait_done(r, sluice_limiter_check(l, "old", 1, on_rl, &o), &o, 3000), SLUICE_OK);
  settle(r, (done *const[]){&t, &d, &o}, 3); /* within the op timeout */
}

/* Every limiter algorithm: a check and a peek. */
static void rl_steps(run *r) {
  static const sluice_rl_algo algos[] = {SLUICE_RL_FIXED, SLUICE_RL_SLIDING_LOG,
                                         SLUICE_RL_SLIDING_COUNTER, SLUICE_RL_GCRA};
  for (size_t i = 0; i < 4 && !r->step; i++) {
    sluice_limiter *l = rl_test_new(r->c, sluice_rl_algo_name(algos[i]), algos[i], 5, 1000);
    done d = {0}, p = {0};
    if (ok(r, sluice_rl_algo_name(algos[i]),
           wait_done(r, sluice_limiter_check(l, "k", 1, on_rl, &d), &d, 3000), SLUICE_OK))
      ok(r, sluice_rl_algo_name(algos[i]),
         wait_done(r, sluice_limiter_peek(l, "k", 1, on_rl, &p), &p, 3000), SLUICE_OK);
    if (!r->step && algos[i] == SLUICE_RL_SLIDING_LOG) rl_log_paths(r, l);
    sluice_limiter_free(l);
    settle(r, (done *const[]){&d, &p}, 2);
  }
}

static void on_settled(sluice_dq_consumer *con, int status, const char *id, void *ud) {
  consumed *k = ud;
  k->settled++;
  if (status != SLUICE_OK) k->status = status;
}

/* "dead" goes to the dead letters (one attempt allowed), the others are
 * acknowledged. */
static void on_msg(sluice_dq_consumer *con, sluice_dq_msg *m, void *ud) {
  consumed *k = ud;
  k->n++;
  if (strcmp(sluice_dq_msg_id(m), "dead") == 0) sluice_dq_retry(m, 0, on_settled, k);
  else sluice_dq_ack(m, on_settled, k);
}

static void on_take_error(sluice_dq_consumer *con, int status, void *ud) {
  consumed *k = ud;
  if (!k->took_error) k->took_error = status;
}

/* Delay queue: push, cancel, status, a consumer woken by a push (BRPOP)
 * that acknowledges one message and dead-letters another, the dead letters
 * listed and requeued. */
static void dq_steps(run *r) {
  sluice_dq *dq = dqt_queue(r->c, "q");
  sluice_dq_consumer_options co;
  sluice_dq_consumer_options_init(&co);
  co.max_attempts = 1;
  consumed *k = &r->dq;
  sluice_dq_consumer *con = NULL;
  TH_ASSERT_EQ(sluice_dq_consumer_new(r->c, "q", &co, on_msg, k, &con), SLUICE_OK);
  sluice_dq_consumer_set_error_cb(con, on_take_error, k);
  dqt_push p;
  done cancel = {0}, info = {0}, dead = {0}, requeue = {0};
  if (!ok(r, "dq_push", dqt_push_wait(r->base, dq, "later", "x", 60000, &p), SLUICE_OK) ||
      !ok(r, "dq_cancel",
          wait_done(r, sluice_dq_cancel(dq, "later", on_dq_status, &cancel), &cancel, 3000),
          SLUICE_OK) ||
      !ok(r, "dq_status", wait_done(r, sluice_dq_inspect(dq, on_dq_info, &info), &info, 3000),
          SLUICE_OK) ||
      !ok(r, "dq_push", dqt_push_wait(r->base, dq, "dead", "x", 0, &p), SLUICE_OK) ||
      !ok(r, "dq_push", dqt_push_wait(r->base, dq, "done", "x", 0, &p), SLUICE_OK))
    goto out;
  uint64_t end = th_now_ms() + 3000;
  while (k->settled < 2 && !k->took_error && th_now_ms() < end) th_loop_for(r->base, 5);
  if (!ok(r, "dq_take",
          k->took_error    ? k->took_error
          : k->settled < 2 ? SLUICE_ETIMEDOUT
                           : SLUICE_OK,
          SLUICE_OK) ||
      !ok(r, "dq_ack, dq_requeue", k->status, SLUICE_OK) ||
      !ok(r, "dq_dead", wait_done(r, sluice_dq_dead_list(dq, 0, 10, on_dead, &dead), &dead, 3000),
          SLUICE_OK) ||
      !ok(r, "dq_dead (listed)", dead.allowed == 1 ? SLUICE_OK : SLUICE_EPROTOCOL, SLUICE_OK))
    goto out;
  ok(r, "dq_requeue",
     wait_done(r, sluice_dq_dead_requeue(dq, "dead", on_count, &requeue), &requeue, 3000),
     SLUICE_OK);
out:
  sluice_dq_consumer_free(con);
  sluice_dq_free(dq);
  settle(r, (done *const[]){&cancel, &info, &dead, &requeue}, 4);
}

/* A client of url; wait_replicas as given. Scripts are flushed once it is
 * up, so that its first step needs EVAL. */
static void run_open(run *r, const char *url, unsigned wait_replicas,
                     void (*admin)(const char *cmd)) {
  memset(r, 0, sizeof *r);
  r->admin = admin;
  r->base = event_base_new();
  sluice_client_options o;
  sluice_client_options_init(&o);
  o.url = url;
  o.op_timeout_ms = 2000;
  o.connect_timeout_ms = 1000;
  o.reconnect_min_ms = 20;
  o.reconnect_max_ms = 500;
  o.wait_replicas = wait_replicas;
  o.wait_timeout_ms = 500;
  TH_ASSERT_EQ(sluice_client_new(r->base, &o, &r->c), SLUICE_OK);
  sluice_client_set_log_cb(r->c, on_log, r);
  uint64_t end = th_now_ms() + 3000;
  while (!sluice_client_is_connected(r->c) && th_now_ms() < end) th_loop_for(r->base, 10);
  if (!ok(r, "connect", sluice_client_is_connected(r->c) ? SLUICE_OK : SLUICE_ECONNECTION,
          SLUICE_OK))
    return;
  admin("SCRIPT FLUSH");
}

static void run_close(run *r) { th_free_client_and_loop(r->base, r->c, 5000); }

/* One primitive's steps on url under the current rule. */
static void run_one(run *r, const char *url, void (*steps)(run *), void (*admin)(const char *)) {
  admin("FLUSHALL");
  run_open(r, url, 0, admin);
  if (!r->step) steps(r);
  run_close(r);
}

/* Every primitive on url under the current rule; the first failure is
 * left in r. */
static void run_all(run *r, const char *url, unsigned wait_replicas,
                    void (*admin)(const char *cmd)) {
  admin("FLUSHALL"); /* what an earlier run left (held permits...) */
  run_open(r, url, wait_replicas, admin);
  if (!r->step) sem_steps(r);
  if (!r->step) rl_steps(r);
  if (!r->step) dq_steps(r);
  run_close(r);
}

/* run_all, again while a stalled loop made its outcome say nothing of the
 * rule (at most three runs). */
static void run_settled(run *r, const char *url, unsigned wait_replicas,
                        void (*admin)(const char *cmd)) {
  for (int i = 0; i < 3; i++) {
    run_all(r, url, wait_replicas, admin);
    if (!r->stalled) return;
    th_note("%s lost a lease to a stalled loop (no refusal): run again\n", r->step);
  }
}

/* The tool's commands on url under the current rule (top with names:
 * no SCAN). 0, or the failing command's output in why. */
static int tool_all(const char *url, char *why, size_t size) {
  static const char *const cmds[][12] = {
      {"sem", "run", "job", "-n", "1", "--ttl", "5000", "--", "true", NULL},
      {"sem", "status", "job", NULL},
      {"rl", "check", "api", "k", "--algo", "gcra", "--limit", "5", "--period", "1000", NULL},
      {"dq", "push", "jobs", "--id", "j1", "hello", NULL},
      {"dq", "consume", "jobs", "--count", "1", "--", "cat", NULL},
      {"dq", "status", "jobs", NULL},
      {"top", "--once", "job", "jobs", NULL},
  };
  char env[600];
  snprintf(env, sizeof env, "SLUICE_REDIS=%s", url);
  const char *const envs[] = {env, NULL};
  for (size_t i = 0; i < sizeof cmds / sizeof cmds[0]; i++) {
    th_run t = th_tool_capture(cmds[i], envs, 1);
    int failed = t.status != 0;
    if (failed) snprintf(why, size, "%s %s: exit %d: %s", cmds[i][0], cmds[i][1], t.status, t.out);
    th_run_free(&t);
    if (failed) return -1;
  }
  return 0;
}

/* ---- the checks ------------------------------------------------------------ */

typedef struct target {
  th_node *data; /* the nodes the data rule goes to */
  int ndata;
  th_node *sentinels; /* and the sentinel rule */
  int nsentinels;
  const char *url;
  unsigned wait_replicas;
  void (*admin)(const char *cmd); /* a command on every data node, as admin */
} target;

static void apply(const target *t, const rule *ru, int which, const char *without) {
  for (int i = 0; i < t->ndata; i++)
    set_user(&t->data[i], ru->text[0], which == 0 ? without : NULL);
  for (int i = 0; i < t->nsentinels; i++)
    set_user(&t->sentinels[i], ru->text[1], which == 1 ? without : NULL);
}

/* Under exactly the rule, everything works. */
static void exact_rule_works(const target *t, const rule *ru, int tool_too) {
  run *r = malloc(sizeof *r);
  char why[4096];
  apply(t, ru, 0, NULL);
  run_settled(r, t->url, t->wait_replicas, t->admin);
  if (r->step) th_fail(__FILE__, __LINE__, "under the exact rule, %s failed: %s", r->step, r->why);
  if (tool_too && tool_all(t->url, why, sizeof why) != 0)
    th_fail(__FILE__, __LINE__, "under the exact rule, the tool failed: %s", why);
  free(r);
}

/* Without cmd (in rule line which), a step fails and says cmd: in its
 * error, or for BRPOP in the log hook (and the health API, which the
 * semaphore steps check). */
static void without_fails_clearly(const target *t, const rule *ru, int which, const char *cmd) {
  run *r = malloc(sizeof *r);
  apply(t, ru, which, cmd);
  run_settled(r, t->url, t->wait_replicas, t->admin);
  char quoted[64];
  snprintf(quoted, sizeof quoted, "'%.48s'", cmd);
  const char *logged = strcasestr(r->log, quoted);
  if (!r->step && !logged)
    th_fail(__FILE__, __LINE__, "without +%s everything still worked; log:\n%s", cmd, r->log);
  if (!strcasestr(r->why, cmd) && !logged)
    th_fail(__FILE__, __LINE__, "without +%s, %s failed without naming it: %s\nlog:\n%s", cmd,
            r->step, r->why, r->log);
  if (r->step && strcasestr(r->why, cmd))
    th_note("without +%s: %s: %.200s\n", cmd, r->step, r->why);
  else th_note("without +%s: logged: %.200s\n", cmd, logged);
  free(r);
}

/* ---- single Redis ------------------------------------------------------------ */

static th_node single;

/* The database the cases' URL names (the data of a command on a key). */
static int admin_db;

/* cmd on each node, as the default user, in admin_db (a command on a key
 * runs where the key is: the other masters of a cluster answer MOVED). */
static void on_nodes(th_node *nodes, int n, const char *cmd) {
  for (int i = 0; i < n; i++) {
    redisContext *ctx = th_node_connect(&nodes[i]);
    TH_ASSERT(ctx != NULL);
    if (admin_db) freeReplyObject(redisCommand(ctx, "SELECT %d", admin_db));
    redisReply *rep = redisCommand(ctx, cmd);
    TH_ASSERT(rep && (rep->type != REDIS_REPLY_ERROR || strncmp(rep->str, "MOVED ", 6) == 0));
    freeReplyObject(rep);
    redisFree(ctx);
  }
}

static void admin_single(const char *cmd) { on_nodes(&single, 1, cmd); }

static void test_single(void) {
  th_redis r;
  th_redis_start_tcp(&r, NULL);
  memset(&single, 0, sizeof single);
  single.port = r.port;
  snprintf(single.addr, sizeof single.addr, "127.0.0.1:%d", r.port);
  char url[128];
  snprintf(url, sizeof url, "redis://" USER ":" PASS "@127.0.0.1:%d/3", r.port);
  admin_db = 3;
  static const char *const args[] = {"--db", NULL};
  rule ru = acl_rule(args);
  target t = {&single, 1, NULL, 0, url, 0, admin_single};
  exact_rule_works(&t, &ru, 1);
  char cmds[64][48];
  int n = rule_commands(ru.text[0], cmds, 64);
  for (int i = 0; i < n; i++) without_fails_clearly(&t, &ru, 0, cmds[i]);
  /* One primitive's rule is enough for it. */
  static const struct {
    const char *name;
    void (*steps)(run *);
  } each[] = {{"sem", sem_steps}, {"rl", rl_steps}, {"dq", dq_steps}};
  for (int i = 0; i < 3; i++) {
    const char *const one[] = {"--db", each[i].name, NULL};
    rule only = acl_rule(one);
    run *w = malloc(sizeof *w);
    apply(&t, &only, 0, NULL);
    run_one(w, url, each[i].steps, admin_single);
    if (w->step)
      th_fail(__FILE__, __LINE__, "under `sluice acl %s`: %s: %s", each[i].name, w->step, w->why);
    free(w);
  }
  admin_db = 0;
  th_redis_stop(&r);
}

/* ---- tenants -------------------------------------------------------------------- */

/* `sluice ARGS...` with --redis URL before a "--", stdout and stderr
 * joined. */
static th_run tool_on(const char *url, const char *const *args) {
  const char *argv[20];
  int n = 0;
  for (; *args && strcmp(*args, "--") != 0 && n < 16; args++) argv[n++] = *args;
  argv[n++] = "--redis", argv[n++] = url;
  for (; *args && n < 19; args++) argv[n++] = *args;
  argv[n] = NULL;
  return th_tool_capture(argv, NULL, 1);
}

/* Two tenants of one Redis, each a user with `sluice acl --prefix` of its
 * own: A sees nothing of B's (not even names, without SCAN), and `sluice
 * top` with names works for it. With SCAN allowed, A could list B's
 * names: what the docs warn of. */
static void test_tenants(void) {
  th_redis r;
  th_redis_start_tcp(&r, NULL);
  th_node node = {0};
  node.port = r.port;
  snprintf(node.addr, sizeof node.addr, "127.0.0.1:%d", r.port);
  static const char *const args_a[] = {"--prefix", "tA:", NULL};
  static const char *const args_b[] = {"--prefix", "tB:", NULL};
  rule ra = acl_rule(args_a), rb = acl_rule(args_b);
  set_user(&node, ra.text[0], NULL); /* user sl: tenant A */
  char url_a[128], url_b[128];
  snprintf(url_a, sizeof url_a, "redis://" USER ":" PASS "@127.0.0.1:%d", r.port);
  snprintf(url_b, sizeof url_b, "redis://127.0.0.1:%d", r.port); /* B: the default user */
  TH_ASSERT(strstr(rb.text[0], "~tB:*") != NULL);

  static const char *const b_holds[] = {"sem",   "run",      "secret-b", "-n", "1",    "--ttl",
                                        "60000", "--prefix", "tB:",      "--", "true", NULL};
  th_run t = tool_on(url_b, b_holds);
  if (t.status != 0) th_fail(__FILE__, __LINE__, "B's sem run: %d: %s", t.status, t.out);
  th_run_free(&t);
  static const char *const b_queue[] = {"dq", "push", "secret-q", "--prefix", "tB:", "x", NULL};
  t = tool_on(url_b, b_queue);
  TH_ASSERT_EQ(t.status, 0);
  th_run_free(&t);

  static const char *const a_lists_b[] = {"top", "--once", "--prefix", "tB:", NULL};
  t = tool_on(url_a, a_lists_b);
  TH_ASSERT_EQ(t.status, 69);
  TH_ASSERT(strstr(t.out, "'scan'") != NULL);
  TH_ASSERT(strstr(t.out, "secret") == NULL);
  th_run_free(&t);
  static const char *const a_reads_b[] = {"sem", "status", "secret-b", "--prefix", "tB:", NULL};
  t = tool_on(url_a, a_reads_b);
  TH_ASSERT_EQ(t.status, 69);
  TH_ASSERT(strstr(t.out, "key patterns") != NULL);
  TH_ASSERT(strstr(t.out, "holder") == NULL);
  th_run_free(&t);
  static const char *const a_own[] = {"top", "--once", "--prefix", "tA:", "mine", "queue", NULL};
  t = tool_on(url_a, a_own);
  if (t.status != 0) th_fail(__FILE__, __LINE__, "top with names: %d: %s", t.status, t.out);
  TH_ASSERT(strstr(t.out, "which this Redis user may not run") != NULL);
  th_run_free(&t);

  /* SCAN is not confined by key patterns: allowed it, A lists B's names. */
  static const char *const args_scan[] = {"--prefix", "tA:", "--scan", NULL};
  rule rs = acl_rule(args_scan);
  set_user(&node, rs.text[0], NULL);
  t = tool_on(url_a, a_lists_b);
  TH_ASSERT(strstr(t.out, "secret-b") != NULL || strstr(t.out, "secret-q") != NULL);
  th_run_free(&t);
  th_redis_stop(&r);
}

/* ---- Sentinel --------------------------------------------------------------- */

static th_sentinel sent;

static void admin_sentinel(const char *cmd) {
  th_node *m = th_sentinel_master(&sent);
  TH_ASSERT(m != NULL);
  on_nodes(m, 1, cmd);
}

/* How many times sentinel n refused user sl the +switch-master
 * subscription (the command or the channel), by its ACL LOG. */
static long long subscribe_refusals(const th_node *n) {
  redisReply *r = th_node_command(n, "ACL LOG");
  long long total = 0;
  for (size_t i = 0; r && r->type == REDIS_REPLY_ARRAY && i < r->elements; i++) {
    const redisReply *e = r->element[i];
    long long count = 0;
    int ours = 0, subscribe = 0;
    for (size_t j = 0; e->type == REDIS_REPLY_ARRAY && j + 1 < e->elements; j += 2) {
      const char *k = e->element[j]->str;
      const redisReply *v = e->element[j + 1];
      if (strcmp(k, "count") == 0 && v->type == REDIS_REPLY_INTEGER) count = v->integer;
      else if (strcmp(k, "username") == 0) ours = strcmp(v->str, USER) == 0;
      else if (strcmp(k, "object") == 0)
        subscribe = strcmp(v->str, "subscribe") == 0 || strcmp(v->str, "+switch-master") == 0;
    }
    if (ours && subscribe) total += count;
  }
  freeReplyObject(r);
  return total;
}

static int each_refused_thrice(const target *t) {
  for (int i = 0; i < t->nsentinels; i++)
    if (subscribe_refusals(&t->sentinels[i]) < 3) return 0;
  return 1;
}

/* Lines of log (on_log's) naming sentinel addr's refused subscription;
 * those at WARN with the rule's words that fix it into *clear. */
static int refusal_lines(const char *log, const char *addr, int *clear) {
  char said[96];
  snprintf(said, sizeof said, "sentinel %s refused SUBSCRIBE +switch-master", addr);
  int n = 0;
  *clear = 0;
  for (const char *p = strstr(log, said); p; p = strstr(p + 1, said)) {
    const char *eol = strchr(p, '\n'), *fix = strstr(p, "+subscribe &+switch-master");
    n++;
    *clear += p - log >= 2 && p[-2] == '0' + SLUICE_LOG_WARN && (p - log == 2 || p[-3] == '\n') &&
              fix && (!eol || fix < eol);
  }
  return n;
}

/* Sentinels whose rule lacks `without` refuse the +switch-master
 * subscription, again at each of the watch's reconnects: the client says
 * so once per sentinel, at WARN, with the words of the rule that fix it,
 * and reconnects at the backoff's cap (500 ms here, jittered: 4 in a
 * second at most, and one under way), not at once. */
static void refused_subscribe_said(const target *t, const rule *ru, const char *without) {
  apply(t, ru, 1, without);
  for (int i = 0; i < t->nsentinels; i++)
    freeReplyObject(th_node_command(&t->sentinels[i], "ACL LOG RESET"));
  run *r = malloc(sizeof *r);
  run_open(r, t->url, 0, t->admin);
  TH_LOOP_UNTIL(r->base, each_refused_thrice(t), 10000);
  TH_ASSERT(each_refused_thrice(t));
  long long before = subscribe_refusals(&t->sentinels[0]);
  th_loop_for(r->base, 1000);
  long long in_a_second = subscribe_refusals(&t->sentinels[0]) - before;
  th_note("without %s: refusals by one sentinel in 1 s: %lld\n", without, in_a_second);
  TH_ASSERT_CMP(in_a_second, <=, 5);
  run_close(r);
  for (int i = 0; i < t->nsentinels; i++) {
    int clear, n = refusal_lines(r->log, t->sentinels[i].addr, &clear);
    if (n != 1 || clear != 1)
      th_fail(__FILE__, __LINE__,
              "without %s, %s refused %lld times, said %d times (%d clear); log:\n%s", without,
              t->sentinels[i].addr, subscribe_refusals(&t->sentinels[i]), n, clear, r->log);
  }
  th_note("without %s: %.230s\n", without, strstr(r->log, "sentinel "));
  free(r);
}

/* The master and its replica under the data rule (with ROLE, and WAIT for
 * wait_replicas 1), the sentinels under theirs; each command needed taken
 * away fails clearly. */
static void test_sentinel(void) {
  TH_ASSERT_EQ(th_sentinel_start(&sent, "mk"), 0);
  char url[512];
  snprintf(url, sizeof url,
           "redis+sentinel://" USER ":" PASS "@%s/mk?sentinel_username=" USER
           "&sentinel_password=" PASS,
           sent.sentinels);
  static const char *const args[] = {"--sentinel", "--wait", NULL};
  rule ru = acl_rule(args);
  target t = {sent.data, 2, sent.sent, 3, url, 1, admin_sentinel};
  exact_rule_works(&t, &ru, 1);
  without_fails_clearly(&t, &ru, 0, "role");
  without_fails_clearly(&t, &ru, 0, "wait");
  without_fails_clearly(&t, &ru, 1, "ping");
  without_fails_clearly(&t, &ru, 1, "sentinel|get-master-addr-by-name");
  /* Learning the other sentinels and hearing of failovers at once are
   * for failovers (the rule's comment says so): steps work without. */
  static const char *const for_failovers[] = {"sentinel|master", "sentinel|sentinels", "subscribe"};
  for (int i = 0; i < 3; i++) {
    run *r = malloc(sizeof *r);
    apply(&t, &ru, 1, for_failovers[i]);
    run_settled(r, t.url, t.wait_replicas, t.admin);
    if (r->step)
      th_fail(__FILE__, __LINE__, "without +%s: %s: %s", for_failovers[i], r->step, r->why);
    free(r);
  }
  refused_subscribe_said(&t, &ru, "subscribe");
  refused_subscribe_said(&t, &ru, "&+switch-master");
  th_sentinel_stop(&sent);
}

/* ---- cluster ------------------------------------------------------------------ */

static th_cluster cl;

static void admin_cluster(const char *cmd) { on_nodes(cl.node, cl.masters, cmd); }

/* A step on a slot being migrated: sent to the importing node after
 * ASKING. A one-key step (a GCRA limiter's): with several keys, some not
 * moved yet, the importing node answers TRYAGAIN until the move is done. */
static void asking_step(run *r, const char *url) {
  const char *key = "sluice:rl:{3:ask:k}:gcra";
  th_node *from = th_cluster_master_for_key(&cl, key);
  th_node *to = from == &cl.node[0] ? &cl.node[1] : &cl.node[0];
  unsigned slot = th_keyslot(key, strlen(key));
  char cmd[128];
  snprintf(cmd, sizeof cmd, "CLUSTER SETSLOT %u IMPORTING %s", slot, from->id);
  on_nodes(to, 1, cmd);
  snprintf(cmd, sizeof cmd, "CLUSTER SETSLOT %u MIGRATING %s", slot, to->id);
  on_nodes(from, 1, cmd);
  run_open(r, url, 0, admin_cluster);
  if (!r->step) {
    sluice_limiter *l = rl_test_new(r->c, "ask", SLUICE_RL_GCRA, 5, 1000);
    done d = {0};
    ok(r, "rl_gcra (asked)", wait_done(r, sluice_limiter_check(l, "k", 1, on_rl, &d), &d, 5000),
       SLUICE_OK);
    sluice_limiter_free(l);
  }
  run_close(r);
  snprintf(cmd, sizeof cmd, "CLUSTER SETSLOT %u STABLE", slot);
  on_nodes(from, 1, cmd);
  on_nodes(to, 1, cmd);
}

static void test_cluster(void) {
  TH_ASSERT_EQ(th_cluster_start(&cl, 3, 0), 0);
  char url[512];
  snprintf(url, sizeof url, "redis+cluster://" USER ":" PASS "@%s", cl.seeds);
  static const char *const args[] = {"--cluster", NULL};
  rule ru = acl_rule(args);
  target t = {cl.node, cl.n, NULL, 0, url, 0, admin_cluster};
  exact_rule_works(&t, &ru, 1);
  without_fails_clearly(&t, &ru, 0, "cluster|slots");
  run *r = malloc(sizeof *r);
  apply(&t, &ru, 0, NULL);
  admin_cluster("FLUSHALL");
  asking_step(r, url);
  if (r->step)
    th_fail(__FILE__, __LINE__, "asked, under the exact rule: %s: %s\nlog:\n%s", r->step, r->why,
            r->log);
  apply(&t, &ru, 0, "asking");
  asking_step(r, url);
  if (!r->step || !strcasestr(r->log, "'asking'"))
    th_fail(__FILE__, __LINE__, "asked, without +asking: %s: %s\nlog:\n%s", r->step, r->why,
            r->log);
  th_note("without +asking: %s: %.200s\n", r->step, r->why);
  free(r);
  th_cluster_stop(&cl);
}

static const th_case cases[] = {
    TH_CASE(single, 300),
    TH_CASE(tenants, 60),
    TH_CASE(sentinel, 300),
    TH_CASE(cluster, 300),
};
TH_TOPOLOGY_MAIN(cases)
