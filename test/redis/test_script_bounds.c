/* Every embedded script, run the way the library runs it with the largest
 * arguments it accepts (batches of the largest size, the largest limits,
 * costs, payloads, ids and pages), against a Redis that logs the duration
 * of every call: each call ends within SCRIPT_US_MAX, a PING on a second
 * connection answers within PING_MS_MAX meanwhile, and Redis's memory
 * grows by no more than the data a step stored. The work of a script may
 * grow with the size of the call (its requests, messages, ids), never with
 * a number in it. */
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <event2/event.h>
#include <sluice/sluice.h>

#include "core/engine.h"
#include "harness.h"
#include "lua_scripts.h"
#include "rl_util.h"
#include "sem_util.h"

/* The slowest call allowed (Redis's own measure) and the slowest PING
 * while a step's calls run. Here they take 0.05-3 ms (the test prints
 * them); the bound leaves room for a loaded machine, where Redis waits for
 * a CPU now and then, and still catches a script whose work grows with a
 * number in its arguments (the 2,000,000-unit sliding log blocked Redis
 * for 4.6 s). Steps that the library's own maxima make longer get a budget
 * per item of the call. */
#define SCRIPT_US_MAX 25000
#define PING_MS_MAX 25.0
/* A PING that waited for a script near SCRIPT_US_MAX also waits for the
 * pinger to be scheduled: the 2 cores are shared with the test and, in CI,
 * other lanes (a 23 ms script gave a 26.4 ms PING on Valkey there). */
#define PING_SLACK_MS 5.0

static struct event_base *base;
static sluice_client *client;

/* ---- a second connection that keeps asking PING ------------------------- */

/* The pinger is this binary again (exec'd, so it runs natively even when
 * the test runs under valgrind): it PINGs every half millisecond; a byte
 * 'S' on fd ask starts a window (while the step's calls run: a long wait
 * elsewhere is the machine, not Redis), '?' writes the worst round trip of
 * the window so far (ms, a double) to fd answer. */
static int pinger_main(const char *sock, int ask, int answer) {
  redisContext *rc = redisConnectUnix(sock);
  if (!rc || rc->err) return 1;
  fcntl(ask, F_SETFL, O_NONBLOCK);
  double worst = 0;
  for (;;) {
    struct timespec a, b;
    clock_gettime(CLOCK_MONOTONIC, &a);
    redisReply *r = redisCommand(rc, "PING");
    if (!r) return 1;
    freeReplyObject(r);
    clock_gettime(CLOCK_MONOTONIC, &b);
    double ms = (double)(b.tv_sec - a.tv_sec) * 1e3 + (double)(b.tv_nsec - a.tv_nsec) / 1e6;
    if (ms > worst) worst = ms;
    char c;
    ssize_t n = read(ask, &c, 1);
    if (n == 0) return 0; /* the test is gone */
    if (n == 1 && c == 'S') worst = 0;
    if (n == 1 && c == '?' && write(answer, &worst, sizeof worst) != (ssize_t)sizeof worst)
      return 1;
    usleep(500);
  }
}

static struct {
  pid_t pid;
  int ask, answer;
} pinger;

static void pinger_start(void) {
  int to[2], from[2];
  char self[4096];
  ssize_t len = readlink("/proc/self/exe", self, sizeof self - 1); /* valgrind: the test's */
  TH_ASSERT(len > 0);
  self[len] = '\0';
  TH_ASSERT(pipe(to) == 0 && pipe(from) == 0);
  pinger.pid = fork();
  TH_ASSERT(pinger.pid >= 0);
  if (pinger.pid == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    char a[16], w[16];
    snprintf(a, sizeof a, "%d", to[0]);
    snprintf(w, sizeof w, "%d", from[1]);
    execl(self, "pinger", "--pinger", th_server.sock, a, w, (char *)NULL);
    _exit(127);
  }
  close(to[0]);
  close(from[1]);
  pinger.ask = to[1];
  pinger.answer = from[0];
}

/* A step's calls start now. */
static void window_begin(void) { TH_ASSERT(write(pinger.ask, "S", 1) == 1); }

/* The worst PING (ms) since window_begin. */
static double pinger_worst(void) {
  double worst = -1;
  TH_ASSERT(write(pinger.ask, "?", 1) == 1);
  TH_ASSERT(read(pinger.answer, &worst, sizeof worst) == (ssize_t)sizeof worst);
  return worst;
}

static void pinger_stop(void) {
  close(pinger.ask);
  close(pinger.answer);
  kill(pinger.pid, SIGKILL);
  waitpid(pinger.pid, NULL, 0);
}

/* ---- what Redis logged ----------------------------------------------------- */

static long long seen_calls[SLUICE__LUA_COUNT];

static const sluice__script *script_of(const char *sha) {
  for (unsigned i = 0; i < SLUICE__LUA_COUNT; i++)
    if (strcmp(sluice__lua_all[i]->sha, sha) == 0) return sluice__lua_all[i];
  return NULL;
}

static long long info_memory(const char *field) {
  redisReply *r = th_redis_command(&th_server, "INFO memory");
  char name[64];
  snprintf(name, sizeof name, "\n%s:", field);
  const char *p = strstr(r->str, name);
  long long v = p ? atoll(p + strlen(name)) : 0;
  freeReplyObject(r);
  return v;
}

/* The Lua heap the last used_memory() found garbage (bytes). */
static long long lua_garbage;

/* Redis's used_memory once the scripts' Lua heap holds only what is live.
 * Redis 8 allocates that heap from its own allocator and counts it
 * (used_memory_vm_eval), so a step's garbage, collected only now and then,
 * would pass for data it stored; 7.0 and Valkey 8 do not count it. A full
 * collection first makes the measure the same on all of them. */
static long long used_memory(void) {
  long long heap = info_memory("used_memory_vm_eval");
  freeReplyObject(th_redis_command(&th_server, "EVAL %s 0", "collectgarbage('collect')"));
  lua_garbage = heap - info_memory("used_memory_vm_eval");
  return info_memory("used_memory");
}

/* The end of a step: its slowest script call (Redis's measure) within
 * SCRIPT_US_MAX, its worst PING within PING_MS_MAX, plus us_per_item for
 * each of the items a step's call carries (where the library's own maxima
 * allow large calls: work in proportion to the call, never to a number in
 * it), and Redis's memory growth since `before` within stored bytes plus a
 * megabyte. */
static void step_check(const char *what, long long before, long long stored, long items,
                       double us_per_item) {
  redisReply *r = th_redis_command(&th_server, "SLOWLOG GET -1");
  long long worst_us = 0;
  const sluice__script *worst = NULL;
  for (size_t i = 0; i < r->elements; i++) {
    const redisReply *e = r->element[i], *args = e->element[3];
    const sluice__script *s = args->elements > 1 ? script_of(args->element[1]->str) : NULL;
    if (!s) continue;
    seen_calls[s->index]++;
    if (e->element[2]->integer > worst_us) worst_us = e->element[2]->integer, worst = s;
  }
  freeReplyObject(r);
  freeReplyObject(th_redis_command(&th_server, "SLOWLOG RESET"));
  double ping_ms = pinger_worst();
  long long grew = used_memory() - before;
  th_note("%-44s slowest %-18s %6lld us; PING %6.2f ms; memory %+lld KB; Lua garbage %lld KB\n",
          what, worst ? worst->name : "-", worst_us, ping_ms, grew / 1024, lua_garbage / 1024);
  TH_ASSERT_CMP(worst_us, <=, SCRIPT_US_MAX + items * us_per_item);
  TH_ASSERT_CMP(ping_ms, <=, PING_MS_MAX + PING_SLACK_MS + items * us_per_item / 1000);
  TH_ASSERT_CMP(grew, <=, stored + (1 << 20));
}

static void step_done(const char *what, long long before, long long stored) {
  step_check(what, before, stored, 0, 0);
}

/* ---- steps ----------------------------------------------------------------- */

static int done_count;

static void on_rl(sluice_limiter *lim, int status, const sluice_rl_result *res, void *ud) {
  TH_ASSERT_EQ(status, SLUICE_OK);
  done_count++;
}

static void run_until(int n) {
  TH_LOOP_UNTIL(base, done_count >= n, 30000);
  TH_ASSERT_EQ(done_count, n);
  done_count = 0;
}

/* n checks of cost on keys "k0".."k<keys - 1>", all in one loop turn (one
 * script call per 255). */
static void checks(sluice_limiter *lim, int n, int keys, unsigned cost) {
  for (int i = 0; i < n; i++) {
    char key[16];
    snprintf(key, sizeof key, "k%d", i % keys);
    TH_ASSERT_EQ(sluice_limiter_check(lim, key, cost, on_rl, NULL), SLUICE_OK);
  }
  run_until(n);
}

/* Each algorithm at the largest limit, period and cost: a full batch
 * admitted, then one denied (the denial's searches). */
static void step_limiters(void) {
  for (int a = SLUICE_RL_FIXED; a <= SLUICE_RL_GCRA; a++) {
    long long m = used_memory();
    sluice_limiter *lim = rl_test_new(client, "max", (sluice_rl_algo)a, SLUICE_RL_LIMIT_MAX,
                                      SLUICE_RL_PERIOD_MAX);
    window_begin();
    checks(lim, 255, 255, SLUICE_RL_LIMIT_MAX);
    checks(lim, 255, 255, SLUICE_RL_LIMIT_MAX);
    char what[64];
    snprintf(what, sizeof what, "%s, 2 x 255 checks of cost 1e9", sluice_rl_algo_name(a));
    step_done(what, m, 255 * 400);
    sluice_limiter_free(lim);
  }
  /* The call that once wrote 2,000,000 entries. */
  long long m = used_memory();
  sluice_limiter *lim = rl_test_new(client, "big", SLUICE_RL_SLIDING_LOG, 2000000, 60000);
  window_begin();
  checks(lim, 1, 1, 2000000);
  step_done("sliding-log 2e6 per 60 s, cost 2e6", m, 400);
  TH_ASSERT_CMP(th_redis_int(&th_server, "LLEN sluice:rl:{3:big:k0}:log"), ==, 3);
  sluice_limiter_free(lim);
}

/* Write key as a sliding log of n entries (one unit each) whose times
 * span [now - 1.5 period, now - 0.5 period]: half of them expired. */
static const char fill_log[] =
    "local key, n, p = KEYS[1], tonumber(ARGV[1]), tonumber(ARGV[2]) * 1000\n"
    "local t = redis.call('TIME')\n"
    "local now = tonumber(t[1]) * 1000000 + tonumber(t[2])\n"
    "redis.call('DEL', key)\n"
    "redis.call('RPUSH', key, 0)\n"
    "local args = {}\n"
    "for i = 1, n do\n"
    "  args[#args + 1] = string.format('%d', now - 1.5 * p + i * p / n)\n"
    "  args[#args + 1] = i\n"
    "  if #args == 1000 or i == n then redis.call('RPUSH', key, unpack(args)) args = {} end\n"
    "end\n"
    "redis.call('PEXPIRE', key, p / 1000)\n";

/* A sliding log of the most entries a key may hold, half of them expired:
 * a check trims and searches a few entries, never the log. */
static void step_long_log(void) {
  enum { PERIOD_MS = 60000 };
  sluice_limiter *lim = rl_test_new(client, "long", SLUICE_RL_SLIDING_LOG,
                                    SLUICE_RL_LOG_ENTRIES_MAX, PERIOD_MS);
  freeReplyObject(th_redis_command(&th_server, "EVAL %s 1 sluice:rl:{4:long:k0}:log %u %u",
                                   fill_log, SLUICE_RL_LOG_ENTRIES_MAX, PERIOD_MS));
  freeReplyObject(th_redis_command(&th_server, "SLOWLOG RESET"));
  long long m = used_memory();
  window_begin();
  checks(lim, 1, 1, 1);
  checks(lim, 1, 1, SLUICE_RL_LOG_ENTRIES_MAX); /* denied: the search for its time */
  step_done("sliding-log of 100,000 entries, half expired", m, 0);
  long long left = (th_redis_int(&th_server, "LLEN sluice:rl:{4:long:k0}:log") - 1) / 2;
  th_note("%lld entries left of %u\n", left, SLUICE_RL_LOG_ENTRIES_MAX + 1);
  TH_ASSERT(left > SLUICE_RL_LOG_ENTRIES_MAX * 2 / 5 && left <= SLUICE_RL_LOG_ENTRIES_MAX / 2 + 1);
  sluice_limiter_free(lim);
}

/* ---- semaphores ---- */

#define SEM_BATCH 256 /* SEM_BATCH_MAX: requests of one script call */

static sluice_permit *permits[SEM_BATCH + 1];
static sluice_acquire *acquires[SEM_BATCH];
static int npermits;

static void on_acquired(sluice_sem *sem, int status, sluice_permit *p, void *ud) {
  if (status == SLUICE_OK) permits[npermits++] = p;
  else TH_ASSERT(status == SLUICE_ECANCELED);
  done_count++;
}

static void on_released(sluice_sem *sem, int status, void *ud) {
  TH_ASSERT_EQ(status, SLUICE_OK);
  done_count++;
}

static void on_info(sluice_sem *sem, int status, const sluice_sem_info *info, void *ud) {
  TH_ASSERT_EQ(status, SLUICE_OK);
  done_count++;
}

static sluice_sem *semaphore(const char *name, unsigned permits_n, unsigned ttl_ms,
                             unsigned renew_ms) {
  sluice_sem_options o = sem_test_options(permits_n, ttl_ms);
  o.renew_ms = renew_ms;
  return sem_test_new_opts(client, name, &o);
}

static void acquire_all(sluice_sem *sem, int n) {
  for (int i = 0; i < n; i++) TH_ASSERT_EQ(sluice_sem_try_acquire(sem, on_acquired, NULL), 0);
  run_until(n);
}

static void release_all(void) {
  int n = npermits;
  for (int i = 0; i < n; i++) TH_ASSERT_EQ(sluice_permit_release(permits[i], on_released, NULL), 0);
  npermits = 0;
  run_until(n);
}

/* The most permits and the longest lease, a full batch of each step. */
static void step_sem_batches(void) {
  sluice_sem *sem = semaphore("max", 1000000, 86400000, 0); /* sem.c's maxima */
  long long m = used_memory();
  window_begin();
  acquire_all(sem, SEM_BATCH);
  step_done("sem: 256 try-acquires (1e6 permits, 1 day)", m, SEM_BATCH * 300);
  m = used_memory();
  window_begin();
  release_all();
  step_done("sem: 256 releases", m, 0);
  sluice_sem_free(sem);
  /* Renewals every 100 ms (of a lease long enough for valgrind's pace). */
  sem = semaphore("renew", SEM_BATCH, 5000, 100);
  acquire_all(sem, SEM_BATCH);
  m = used_memory();
  window_begin();
  th_loop_for(base, 150);
  step_done("sem: 256 renewals", m, 0);
  release_all();
  sluice_sem_free(sem);
}

/* A full batch of blocked acquirers: they queue, are inspected, leave. */
static void step_sem_waiters(void) {
  sluice_sem *sem = semaphore("block", 1, 60000, 0);
  acquire_all(sem, 1);
  long long m = used_memory();
  window_begin();
  for (int i = 0; i < SEM_BATCH; i++)
    TH_ASSERT_EQ(sluice_sem_acquire(sem, 0, on_acquired, NULL, &acquires[i]), SLUICE_OK);
  th_loop_for(base, 100);
  TH_ASSERT_EQ(sluice_sem_inspect(sem, on_info, NULL), SLUICE_OK);
  run_until(1);
  for (int i = 0; i < SEM_BATCH; i++) TH_ASSERT_EQ(sluice_acquire_cancel(acquires[i]), SLUICE_OK);
  run_until(SEM_BATCH);
  th_loop_for(base, 100); /* their leaving steps */
  /* Not one call: 256 leave calls, pipelined in one turn, which Redis runs
   * back to back (about 30 us each), so the PING waits for all of them. */
  step_check("sem: 256 blocked, inspected, cancelled", m, SEM_BATCH * 300, SEM_BATCH, 50);
  release_all();
  sluice_sem_free(sem);
}

/* A full batch of re-assertions at the maxima (the client sends them after
 * a failover or a restart, which this Redis does not have): the permits are
 * missing, so each is restored and the fence raised. */
static void on_reply(void *ud, int status, const redisReply *r);

static void step_sem_reassert(void) {
  static char ids[SEM_BATCH][24];
  const char *argv[6 + 5 * SEM_BATCH] = {"sluice:sem:{ra}:holders",
                                         "sluice:sem:{ra}:meta",
                                         "sluice:sem:{ra}:restored",
                                         "1000000",
                                         "86400000",
                                         "86400000"};
  int argc = 6;
  for (int i = 0; i < SEM_BATCH; i++) {
    snprintf(ids[i], sizeof ids[i], "reassert-%d", i);
    argv[argc++] = ids[i];
    argv[argc++] = "9007199254740991";
    argv[argc++] = "86400000";
    argv[argc++] = "9007199254740991";
    argv[argc++] = "1";
  }
  long long m = used_memory();
  window_begin();
  TH_ASSERT_EQ(
      sluice__eval(client, &sluice__lua_sem_reassert, 3, argc, argv, NULL, 0, on_reply, NULL, NULL),
      0);
  run_until(1);
  step_done("sem: 256 re-assertions (1e6 permits, 1 day)", m, SEM_BATCH * 300);
}

/* ---- the delay queue ---- */

static void on_batch(sluice_dq *dq, int status, const sluice_dq_push_result *r, size_t n,
                     void *ud) {
  TH_ASSERT_EQ(status, SLUICE_OK);
  done_count++;
}

static void on_dq_status(sluice_dq *dq, int status, void *ud) { done_count++; }

static void on_count(sluice_dq *dq, int status, uint64_t count, void *ud) {
  TH_ASSERT_EQ(status, SLUICE_OK);
  done_count++;
}

static void on_dead(sluice_dq *dq, int status, size_t total, const sluice_dq_dead_entry *e,
                    size_t n, void *ud) {
  TH_ASSERT_EQ(status, SLUICE_OK);
  done_count++;
}

static void on_dq_info(sluice_dq *dq, int status, const sluice_dq_info *info, void *ud) {
  TH_ASSERT_EQ(status, SLUICE_OK);
  done_count++;
}

/* The largest batch of the longest ids, then the largest payload. */
static void step_dq_push(sluice_dq *dq) {
  static sluice_dq_item items[SLUICE_DQ_BATCH_MAX];
  static char ids[SLUICE_DQ_BATCH_MAX][SLUICE_DQ_ID_MAX + 1];
  for (int i = 0; i < SLUICE_DQ_BATCH_MAX; i++) {
    memset(ids[i], 'i', SLUICE_DQ_ID_MAX);
    snprintf(ids[i], 16, "%06d", i);
    ids[i][6] = 'i';
    items[i] = (sluice_dq_item){"0123456789abcdef", 16, 0, 0, ids[i]};
  }
  long long m = used_memory();
  window_begin();
  TH_ASSERT_EQ(sluice_dq_push_batch(dq, items, SLUICE_DQ_BATCH_MAX, on_batch, NULL), SLUICE_OK);
  run_until(1);
  /* The dq API's largest push (SLUICE_DQ_BATCH_MAX, one atomic call): 7-14
   * us a message measured here, so 70-140 ms, far past "a few ms". */
  step_check("dq: push 10,000 messages, 128-byte ids", m, SLUICE_DQ_BATCH_MAX * 1024,
             SLUICE_DQ_BATCH_MAX, 50);
  static char payload[SLUICE_DQ_PAYLOAD_MAX];
  sluice_dq_item big = {payload, sizeof payload, SLUICE_DQ_TIME_MAX, 0, NULL};
  m = used_memory();
  window_begin();
  TH_ASSERT_EQ(sluice_dq_push_batch(dq, &big, 1, on_batch, NULL), SLUICE_OK);
  run_until(1);
  /* 3-6 ms for its MiB (copied into Lua, then into Redis). */
  step_check("dq: push a 1 MiB payload, longest delay", m, 3 * SLUICE_DQ_PAYLOAD_MAX,
             SLUICE_DQ_PAYLOAD_MAX / 1024, 10);
}

typedef struct dead_letters {
  int got;
  sluice_dq_consumer *con;
  sluice_dq_msg *held[1000];
} dead_letters;

/* Every message extended (1000 in one turn: the largest dq_extend call),
 * then retried past max_attempts 1: a dead letter. */
static void on_msg(sluice_dq_consumer *con, sluice_dq_msg *msg, void *ud) {
  dead_letters *d = ud;
  TH_ASSERT(d->got < 1000);
  TH_ASSERT_EQ(sluice_dq_msg_extend(msg, 60000, NULL, NULL), SLUICE_OK);
  d->held[d->got] = msg;
  if (++d->got == 1000) {
    sluice_dq_consumer_free(con);
    d->con = NULL;
  }
}

/* The largest take, settled in one turn: 1000 dead letters. */
static void step_dq_take(void) {
  sluice_dq_consumer_options o;
  sluice_dq_consumer_options_init(&o);
  o.batch = 1000;
  o.max_in_flight = 1000;
  o.max_attempts = 1;
  o.visibility_ms = UINT_MAX;
  static dead_letters d;
  d.got = 0;
  long long m = used_memory();
  window_begin();
  TH_ASSERT_EQ(sluice_dq_consumer_new(client, "max", &o, on_msg, &d, &d.con), SLUICE_OK);
  TH_LOOP_UNTIL(base, !d.con, 30000);
  TH_ASSERT(!d.con);
  th_loop_for(base, 200); /* the extensions */
  for (int i = 0; i < d.got; i++)
    TH_ASSERT_EQ(sluice_dq_retry(d.held[i], 0, NULL, NULL), SLUICE_OK);
  th_loop_for(base, 200); /* the settlements, the rest put back */
  /* The dq API's largest take (batch 1000): about 10 us a message. */
  step_check("dq: take 1000, extended, retried into dead letters", m, 1000 * 1024, 1000, 50);
}

static void step_dq_rest(sluice_dq *dq) {
  long long m = used_memory();
  window_begin();
  TH_ASSERT_EQ(sluice_dq_dead_list(dq, 0, 1000, on_dead, NULL), SLUICE_OK);
  TH_ASSERT_EQ(sluice_dq_dead_list(dq, (size_t)1 << 40, 1000, on_dead, NULL), SLUICE_OK);
  TH_ASSERT_EQ(sluice_dq_dead_requeue(dq, NULL, on_count, NULL), SLUICE_OK);
  TH_ASSERT_EQ(sluice_dq_cancel(dq, "000001iiii", on_dq_status, NULL), SLUICE_OK);
  TH_ASSERT_EQ(sluice_dq_inspect(dq, on_dq_info, NULL), SLUICE_OK);
  run_until(5);
  /* The dq API's largest requeue (1000 dead letters): 25-30 us each. */
  step_check("dq: dead pages, requeue, cancel, inspect", m, 1000 * 1024, 1000, 100);
}

static void on_sched(sluice_dq *dq, int status, const char *name, int64_t next, void *ud) {
  TH_ASSERT_EQ(status, SLUICE_OK);
  done_count++;
}

static void on_sched_list(sluice_dq *dq, int status, int64_t now, size_t total,
                          const sluice_dq_schedule_entry *e, size_t n, void *ud) {
  TH_ASSERT_EQ(status, SLUICE_OK);
  done_count++;
}

static void on_preview(sluice_dq *dq, int status, const int64_t *at, size_t n, void *ud) {
  TH_ASSERT_EQ(status, SLUICE_OK);
  done_count++;
}

/* Repeating schedules: a handle declaring the most (names of the longest,
 * the rarest cron expression, one payload of 1 MiB), 16 of them due every
 * 100 ms so its fire steps each queue 16; the longest preview (20
 * occurrences 28-40 years apart), the longest list, a removal. */
static void step_dq_schedules(sluice_dq *dq) {
  static char payload[SLUICE_DQ_PAYLOAD_MAX];
  static char names[SLUICE_DQ_SCHEDULE_MAX][SLUICE_DQ_SCHEDULE_NAME_MAX + 1];
  long long m = used_memory();
  window_begin();
  for (int i = 0; i < SLUICE_DQ_SCHEDULE_MAX; i++) {
    memset(names[i], 'n', SLUICE_DQ_SCHEDULE_NAME_MAX);
    snprintf(names[i], 8, "%06d", i);
    names[i][6] = 'n';
    const char *spec = i < 16 ? "every 100ms" : "0 0 29 2 */7";
    size_t len = i == SLUICE_DQ_SCHEDULE_MAX - 1 ? sizeof payload : 1024;
    TH_ASSERT_EQ(sluice_dq_schedule_set(dq, names[i], spec, payload, len, on_sched, NULL),
                 SLUICE_OK);
  }
  run_until(SLUICE_DQ_SCHEDULE_MAX);
  th_loop_for(base, 500); /* the fire steps */
  TH_ASSERT_EQ(sluice_dq_schedule_preview(dq, "0 0 29 2 */7", 3729196800000, 20, on_preview, NULL),
               SLUICE_OK);
  TH_ASSERT_EQ(sluice_dq_schedule_list(dq, 0, 100, on_sched_list, NULL), SLUICE_OK);
  TH_ASSERT_EQ(sluice_dq_schedule_remove(dq, names[SLUICE_DQ_SCHEDULE_MAX - 1], on_dq_status, NULL),
               SLUICE_OK);
  run_until(3);
  step_check("dq: 64 schedules, fires of 16, preview, list", m, 4 * SLUICE_DQ_PAYLOAD_MAX, 0, 0);
}

static void step_dq(void) {
  sluice_dq *dq = NULL;
  TH_ASSERT_EQ(sluice_dq_new(client, "max", NULL, &dq), SLUICE_OK);
  step_dq_push(dq);
  step_dq_take();
  step_dq_rest(dq);
  step_dq_schedules(dq);
  sluice_dq_free(dq);
}

/* ---- the rest ---- */

static void on_scan(sluice_client *c, int status, uint64_t next, const sluice_scan_entry *e,
                    size_t n, void *ud) {
  TH_ASSERT_EQ(status, SLUICE_OK);
  done_count++;
}

static void on_reply(void *ud, int status, const redisReply *r) {
  TH_ASSERT_EQ(status, SLUICE_OK);
  done_count++;
}

/* A page of each kind of discovery; the steps a library user cannot call
 * (ping) or may not cause here (the blocking connection's interrupt). */
static void step_rest(void) {
  long long m = used_memory();
  window_begin();
  const char *kinds[] = {"rl", "sem", "dq"};
  for (int i = 0; i < 3; i++)
    TH_ASSERT_EQ(sluice_client_scan(client, kinds[i], NULL, 0, on_scan, NULL), SLUICE_OK);
  TH_ASSERT_EQ(sluice__eval(client, &sluice__lua_ping, 0, 0, NULL, NULL, 0, on_reply, NULL, NULL),
               0);
  const char *interrupt[] = {"sluice:blk:{x}:ctl", "60000"};
  TH_ASSERT_EQ(sluice__eval(client, &sluice__lua_blk_interrupt, 1, 2, interrupt, NULL, 0, on_reply,
                            NULL, NULL),
               0);
  run_until(5);
  step_done("scan pages, ping, interrupt", m, 0);
}

static void all_steps(void) {
  step_limiters();
  step_long_log();
  step_sem_batches();
  step_sem_waiters();
  step_sem_reassert();
  step_dq();
  step_rest();
}

static void test_every_script(void) {
  base = event_base_new();
  client = th_client(base, th_server.url, 30000);
  TH_LOOP_UNTIL(base, sluice_client_is_connected(client), 5000);
  pinger_start();
  freeReplyObject(th_redis_command(&th_server, "CONFIG SET slowlog-max-len 1000000"));
  freeReplyObject(th_redis_command(&th_server, "CONFIG SET slowlog-log-slower-than 0"));
  freeReplyObject(th_redis_command(&th_server, "SLOWLOG RESET"));
  pinger_worst();
  all_steps();
  for (unsigned i = 0; i < SLUICE__LUA_COUNT; i++) {
    th_note("%-20s %lld calls\n", sluice__lua_all[i]->name, seen_calls[i]);
    TH_ASSERT_CMP(seen_calls[i], >, 0); /* every script ran */
  }
  pinger_stop();
  th_free_client_and_loop(base, client, 5000);
}

static void on_info_copy(sluice_sem *sem, int status, const sluice_sem_info *info, void *ud) {
  TH_ASSERT_EQ(status, SLUICE_OK);
  *(sluice_sem_info *)ud = *info; /* the counts only: the lists are borrowed */
  done_count++;
}

/* Inspecting a semaphore lists at most SLUICE_SEM_INSPECT_MAX holders (and
 * queue entries) whatever its size, and counts them all. */
static void test_inspect_capped(void) {
  enum { HELD = SLUICE_SEM_INSPECT_MAX + 500 };
  base = event_base_new();
  client = th_client(base, th_server.url, 30000);
  sluice_sem *sem = semaphore("wide", HELD, 60000, 0);
  for (int n = 0; n < HELD; n += SEM_BATCH) {
    acquire_all(sem, HELD - n < SEM_BATCH ? HELD - n : SEM_BATCH);
    npermits = 0; /* held until the handle goes */
  }
  sluice_sem_info info;
  TH_ASSERT_EQ(sluice_sem_inspect(sem, on_info_copy, &info), SLUICE_OK);
  run_until(1);
  TH_ASSERT_EQ(info.nholders, SLUICE_SEM_INSPECT_MAX);
  TH_ASSERT_EQ(info.holders_total, HELD);
  TH_ASSERT_EQ(info.queued_total, 0);
  sluice_sem_free(sem);
  th_free_client_and_loop(base, client, 10000);
}

int main(int argc, char **argv) {
  if (argc == 5 && strcmp(argv[1], "--pinger") == 0)
    return pinger_main(argv[2], atoi(argv[3]), atoi(argv[4]));
  static const th_case cases[] = {
      TH_CASE(every_script, 300, .standalone_only = "reads one server's SLOWLOG"),
      TH_CASE(inspect_capped, 0),
      {NULL, NULL, 0}};
  return th_main(argc, argv, cases);
}
