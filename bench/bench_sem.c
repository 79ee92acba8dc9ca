/*
 * Semaphore benchmark (not a pass/fail test). At 1, 50 and 500 operations in
 * flight on one sluice client (one pipelined connection):
 *  - try_acquire alone (acquires/s, latency), beside redis-benchmark running
 *    the same acquire script (EVALSHA of the embedded sem_acquire.lua with the
 *    KEYS/ARGV the library sends) in the same run, and the ratio;
 *  - release alone, beside redis-benchmark running the release script;
 *  - try_acquire -> release pairs per second and acquire latency, beside the
 *    two redis-benchmark runs combined (one acquire plus one release), and,
 *    when node is installed, beside redis-semaphore's Semaphore (ioredis)
 *    doing the same acquire -> release loop (bench/node/sem.js);
 *  - blocking wake-up latency: a waiter blocked in sluice_sem_acquire on its
 *    own client, woken by another client's release (release called -> waiter
 *    granted), beside redis-semaphore's acquire(), which polls every 10 ms;
 *  - contention: 32 blocking waiters cycling through a 1- and a 16-permit
 *    semaphore with holds of 1 ms: grants/s against the ideal, the idle gap
 *    from a release to the next grant, how long holds really lasted, the
 *    release's own round trip (called -> answered), and one Redis round trip
 *    (PING) taken at the same cadence as the yardstick.
 *    `bench_sem --contention` runs only this table.
 *
 * Fairness of the redis-benchmark reference (see bench/README.md):
 *  - The semaphore has PERMITS permits, so every acquire is a grant; the
 *    permit id argument is "00000000000000000000__rand_int__" with -r 10^8,
 *    32 characters like the library's ids, so each call grants a new id (a
 *    repeated id would take the idempotent "already mine" path). Both sides
 *    start from empty keys and end holding the same number of permits.
 *  - "N in flight" for redis-benchmark is -c 1 -P N (one connection, N
 *    pipelined: the closest to sluice's one connection) and, for 50 and 500,
 *    also -c N -P 1 (N connections, one each).
 *  - sluice sends every attempt (and every release) ready in one loop turn
 *    as one script call, a batch; redis-benchmark runs the one-request form
 *    of the same script. At 1 in flight both send one request per call; with
 *    more in flight the ratio shows what batching saves Redis per permit.
 *  - redis-benchmark's release names random ids, which are almost never held:
 *    the script then skips one ZREM, so the release and pair references are
 *    slightly optimistic, against sluice.
 *
 * Each sluice phase is followed at once by its redis-benchmark reference,
 * REPS times, keeping the best run of each (a neighbour's burst on a shared
 * 2-core machine can halve any single run).
 */
#include "bench.h"

#include <stdlib.h>
#include <string.h>

#include <event2/event.h>
#include <hiredis/adapters/libevent.h>
#include <hiredis/async.h>
#include <hiredis/hiredis.h>
#include <sluice/sluice.h>

#include "sem/sem.h"

#define PERMITS 1000000
#define REPS 2
#define RB_KEYSPACE 100000000
#define WAKE_ITERS 150
#define WAKE_WARMUP 5

typedef struct level {
  int in_flight, ops;
} level;

static const level levels[] = {{1, 3000}, {50, 20000}, {500, 20000}};
#define NLEVELS (sizeof levels / sizeof levels[0])

static bench_redis rs;
static struct event_base *base;

typedef struct result {
  double rps, p50_ms, p99_ms;
  double cpu_us; /* client CPU per operation (µs); 0 when not measured */
} result;

static void keep_best(result *best, const result *r) {
  if (r->rps > best->rps) *best = *r;
}

static uint32_t next_rand(uint32_t *s) { /* xorshift32 */
  *s ^= *s << 13;
  *s ^= *s >> 17;
  *s ^= *s << 5;
  return *s;
}

static int wait_connected(sluice_client *c) {
  uint64_t end = bench_now_us() + 3000000;
  while (!sluice_client_is_connected(c) && bench_now_us() < end) event_base_loop(base, EVLOOP_ONCE);
  return sluice_client_is_connected(c) ? 0 : -1;
}

static sluice_client *new_client(void) {
  sluice_client_options o;
  sluice_client *c = NULL;
  sluice_client_options_init(&o);
  o.replay_off = bench_replay_off();
  o.url = rs.url;
  if (sluice_client_new(base, &o, &c) != SLUICE_OK || wait_connected(c) != 0) {
    fprintf(stderr, "bench_sem: cannot connect to %s\n", rs.url);
    exit(1);
  }
  bench_replica_ack(c);
  return c;
}

static sluice_sem *new_sem_with(sluice_client *c, const char *name, unsigned permits,
                                int local_handoff) {
  sluice_sem_options o;
  sluice_sem *sem = NULL;
  sluice_sem_options_init(&o); /* defaults: ttl 30 s, auto-renew, not fair */
  o.permits = permits;
  o.local_handoff = local_handoff;
  if (sluice_sem_new(c, name, &o, &sem) != SLUICE_OK) {
    fprintf(stderr, "bench_sem: sluice_sem_new failed\n");
    exit(1);
  }
  return sem;
}

static sluice_sem *new_sem(sluice_client *c, const char *name, unsigned permits) {
  return new_sem_with(c, name, permits, 0);
}

/* ---- sluice: N loops on one client --------------------------------------- */

/* PAIR waits for each release's answer before the next acquire; PAIR_NOWAIT
 * releases without a callback and acquires again at once (the release still
 * runs first: same connection, and a flush sends releases before attempts). */
enum mode { ACQUIRE, RELEASE, PAIR, PAIR_NOWAIT };

typedef struct runner runner;
typedef struct slot {
  runner *r;
  uint64_t t0;
  sluice_sem *sem; /* this loop's semaphore; NULL: the runner's */
} slot;

struct runner {
  sluice_sem *sem;
  enum mode mode;
  int total, started, done, errors;
  sluice_permit **held; /* ACQUIRE fills it, RELEASE empties it */
  bench_lat *lat;       /* acquire latency (release latency in RELEASE) */
};

static void start_one(slot *s);

static void next_or_done(slot *s) {
  runner *r = s->r;
  r->done++;
  if (r->started < r->total) start_one(s);
}

static void on_release(sluice_sem *sem, int status, void *ud) {
  slot *s = ud;
  runner *r = s->r;
  if (status != SLUICE_OK) r->errors++;
  if (r->mode == RELEASE) bench_lat_add(r->lat, (double)(bench_now_us() - s->t0));
  next_or_done(s);
}

static void on_acquire(sluice_sem *sem, int status, sluice_permit *p, void *ud) {
  slot *s = ud;
  runner *r = s->r;
  bench_lat_add(r->lat, (double)(bench_now_us() - s->t0));
  if (status != SLUICE_OK) {
    r->errors++;
    next_or_done(s);
  } else if (r->mode == PAIR) {
    if (sluice_permit_release(p, on_release, s) != SLUICE_OK) {
      r->errors++;
      next_or_done(s);
    }
  } else if (r->mode == PAIR_NOWAIT) {
    if (sluice_permit_release(p, NULL, NULL) != SLUICE_OK) r->errors++;
    next_or_done(s);
  } else {
    r->held[r->done] = p;
    next_or_done(s);
  }
}

static void start_one(slot *s) {
  runner *r = s->r;
  int i = r->started++;
  s->t0 = bench_now_us();
  int rc = r->mode == RELEASE ? sluice_permit_release(r->held[i], on_release, s)
                              : sluice_sem_try_acquire(s->sem ? s->sem : r->sem, on_acquire, s);
  if (rc != SLUICE_OK) {
    r->errors++;
    r->done++;
  }
}

/* total operations (pairs in PAIR mode) with in_flight outstanding; loop i
 * uses sems[i % nsems] (nsems 0: sem). */
static int run_sluice_spread(sluice_sem *sem, sluice_sem **sems, int nsems, enum mode mode,
                             int in_flight, int total, sluice_permit **held, result *out) {
  runner r = {sem, mode, total, 0, 0, 0, held, bench_lat_new()};
  slot *slots = calloc((size_t)in_flight, sizeof *slots);
  if (!r.lat || !slots) exit(1);
  uint64_t t0 = bench_now_us();
  bench_cpu cpu = bench_cpu_start();
  for (int i = 0; i < in_flight && r.started < total; i++) {
    slots[i].r = &r;
    slots[i].sem = nsems > 0 ? sems[i % nsems] : NULL;
    start_one(&slots[i]);
  }
  while (r.done < total) event_base_loop(base, EVLOOP_ONCE);
  out->rps = total / ((double)(bench_now_us() - t0) / 1e6);
  out->cpu_us = bench_cpu_us_per_op(&cpu, total);
  out->p50_ms = bench_lat_pct(r.lat, 50) / 1000;
  out->p99_ms = bench_lat_pct(r.lat, 99) / 1000;
  bench_lat_free(r.lat);
  free(slots);
  if (r.errors) fprintf(stderr, "bench_sem: %d operations failed\n", r.errors);
  return r.errors ? -1 : 0;
}

static int run_sluice(sluice_sem *sem, enum mode mode, int in_flight, int total,
                      sluice_permit **held, result *out) {
  return run_sluice_spread(sem, NULL, 0, mode, in_flight, total, held, out);
}

/* ---- redis-benchmark: the same scripts, same KEYS/ARGV ------------------- */

typedef struct rb_args {
  char acq_sha[41], rel_sha[41];
  sluice__args acq, rel;
} rb_args;

/* The arguments the library sends for a call of one request on sem (whose
 * name has the length of the sluice side's), built by the same functions,
 * with a __rand_int__ permit id. */
static int rb_prepare(sluice_sem *sem, rb_args *a) {
  static const char id[] = "00000000000000000000__rand_int__";
  memset(a, 0, sizeof *a);
  if (bench_script_load(&rs, &sluice__lua_sem_acquire, a->acq_sha) != 0 ||
      bench_script_load(&rs, &sluice__lua_sem_release, a->rel_sha) != 0 ||
      sluice__args_init(&a->acq, SEM_ACQUIRE_ARGS_HEAD + SEM_ACQUIRE_ARGS_PER,
                        SEM_ACQUIRE_NUMS_HEAD + SEM_ACQUIRE_NUMS_PER) != 0 ||
      sluice__args_init(&a->rel, SEM_RELEASE_ARGS_HEAD + SEM_RELEASE_ARGS_PER,
                        SEM_RELEASE_NUMS_HEAD + SEM_RELEASE_NUMS_PER) != 0)
    return -1;
  sluice__sem_acquire_head(&a->acq, &sem->call, "", REDIS_FOREVER_MS);
  sluice__sem_acquire_item(&a->acq, id, "", 0, REDIS_FOREVER_MS, 0);
  sluice__sem_release_head(&a->rel, &sem->call);
  sluice__sem_release_item(&a->rel, id);
  return a->acq.failed || a->rel.failed ? -1 : 0;
}

static int run_rb(const rb_args *a, int release, int clients, int pipeline, int total,
                  result *out) {
  bench_rb_opts o = {clients, total, pipeline, RB_KEYSPACE, 0};
  bench_rb_result rb;
  const sluice__args *x = release ? &a->rel : &a->acq;
  bench_cpu cpu = bench_cpu_start();
  int rc = bench_evalsha(&rs, &o, release ? a->rel_sha : a->acq_sha, x->nkeys, x->argc, x->argv,
                         &rb);
  if (rc == 0)
    *out = (result){rb.rps, rb.p50_ms, rb.p99_ms, bench_cpu_children_us_per_op(&cpu, total)};
  return rc;
}

/* ---- throughput at one level ---------------------------------------------- */

typedef struct cell {
  result acq, rel, pair, pair_nowait;  /* sluice */
  result rb_acq, rb_acq_conns, rb_rel; /* redis-benchmark: -c 1 -P N; -c N -P 1; release */
  int have_rb;
} cell;

/* DEL the keys of sem (redis-benchmark's side) so its run starts empty. */
static void del_keys(const sluice_sem *sem) {
  struct timeval tv = {2, 0};
  redisContext *rc = redisConnectWithTimeout(rs.host, rs.port, tv);
  redisReply *rep = rc && !rc->err ? redisCommand(rc, "DEL %s %s %s %s", sem->keys[0], sem->keys[1],
                                                  sem->keys[2], sem->keys[3])
                                   : NULL;
  if (rep) freeReplyObject(rep);
  if (rc) redisFree(rc);
}

/* Each sluice phase is followed at once by its redis-benchmark reference, so
 * the two see the same neighbours. */
static int bench_level(sluice_client *c, const level *lv, cell *out) {
  char name[16];
  snprintf(name, sizeof name, "s%d", lv->in_flight);
  sluice_sem *sem = new_sem(c, name, PERMITS);
  snprintf(name, sizeof name, "r%d", lv->in_flight);
  sluice_sem *rbsem = new_sem(c, name, PERMITS);
  sluice_permit **held = calloc((size_t)lv->ops, sizeof *held);
  rb_args a;
  result one;
  memset(&a, 0, sizeof a);
  memset(out, 0, sizeof *out);
  int rb = bench_have_redis_benchmark() && rb_prepare(rbsem, &a) == 0;
  int rc = held ? 0 : -1;
  for (int rep = 0; rep < REPS && rc == 0; rep++) {
    rc = run_sluice(sem, ACQUIRE, lv->in_flight, lv->ops, held, &one);
    keep_best(&out->acq, &one);
    if (rb) del_keys(rbsem);
    if (rb && (rb = run_rb(&a, 0, 1, lv->in_flight, lv->ops, &one) == 0))
      keep_best(&out->rb_acq, &one);
    if (rc == 0) rc = run_sluice(sem, RELEASE, lv->in_flight, lv->ops, held, &one);
    keep_best(&out->rel, &one);
    if (rb && (rb = run_rb(&a, 1, 1, lv->in_flight, lv->ops, &one) == 0))
      keep_best(&out->rb_rel, &one);
    if (rc == 0) rc = run_sluice(sem, PAIR, lv->in_flight, lv->ops, NULL, &one);
    keep_best(&out->pair, &one);
    if (rc == 0) rc = run_sluice(sem, PAIR_NOWAIT, lv->in_flight, lv->ops, NULL, &one);
    keep_best(&out->pair_nowait, &one);
    if (rb && lv->in_flight > 1) {
      del_keys(rbsem);
      if ((rb = run_rb(&a, 0, lv->in_flight, 1, lv->ops, &one) == 0))
        keep_best(&out->rb_acq_conns, &one);
    }
  }
  out->have_rb = rb;
  if (lv->in_flight == 1) out->rb_acq_conns = out->rb_acq;
  sluice__args_clear(&a.acq);
  sluice__args_clear(&a.rel);
  free(held);
  sluice_sem_free(rbsem);
  sluice_sem_free(sem);
  bench_redis_flush(&rs);
  return rc;
}

/* ---- wake-up latency ------------------------------------------------------- */

typedef struct waker {
  sluice_permit *held, *granted;
  int status, acquired, released;
  uint64_t granted_us;
} waker;

static void on_holder(sluice_sem *sem, int status, sluice_permit *p, void *ud) {
  waker *w = ud;
  w->status = status;
  w->held = p;
  w->acquired = 1;
}

static void on_waiter(sluice_sem *sem, int status, sluice_permit *p, void *ud) {
  waker *w = ud;
  w->granted_us = bench_now_us();
  w->status = status;
  w->granted = p;
}

static void on_wake_release(sluice_sem *sem, int status, void *ud) { ((waker *)ud)->released = 1; }

static void run_for_ms(unsigned ms) {
  struct timeval tv = {ms / 1000, (long)(ms % 1000) * 1000};
  event_base_loopexit(base, &tv);
  event_base_dispatch(base);
}

/* A holder client and a waiter client on the 1-permit semaphore "wake". */
static int wake_run(bench_lat *lat) {
  sluice_client *hc = new_client(), *wc = new_client();
  sluice_sem *hs = new_sem(hc, "wake", 1), *ws = new_sem(wc, "wake", 1);
  uint32_t rng = 88172645u;
  int rc = 0;
  for (int i = 0; i < WAKE_ITERS + WAKE_WARMUP && rc == 0; i++) {
    waker w = {NULL, NULL, -1, 0, 0, 0};
    if (sluice_sem_try_acquire(hs, on_holder, &w) != SLUICE_OK) rc = -1;
    while (rc == 0 && !w.acquired) event_base_loop(base, EVLOOP_ONCE);
    if (rc != 0 || w.status != SLUICE_OK) {
      rc = -1;
      break;
    }
    w.status = -1;
    if (sluice_sem_acquire(ws, 5000, on_waiter, &w, NULL) != SLUICE_OK) rc = -1;
    /* Let its first attempt be refused and its BRPOP settle; a random delay
     * so a polling peer is caught at every phase of its poll. */
    run_for_ms(2 + next_rand(&rng) % 21);
    if (rc != 0 || w.status != -1) {
      rc = -1;
      break;
    }
    uint64_t t0 = bench_now_us();
    if (sluice_permit_release(w.held, NULL, NULL) != SLUICE_OK) rc = -1;
    while (rc == 0 && w.status == -1) event_base_loop(base, EVLOOP_ONCE);
    if (rc != 0 || w.status != SLUICE_OK) {
      rc = -1;
      break;
    }
    if (i >= WAKE_WARMUP) bench_lat_add(lat, (double)(w.granted_us - t0));
    sluice_permit_release(w.granted, on_wake_release, &w);
    while (!w.released) event_base_loop(base, EVLOOP_ONCE);
  }
  if (rc != 0) fprintf(stderr, "bench_sem: wake-up run failed\n");
  sluice_sem_free(hs);
  sluice_sem_free(ws);
  sluice_client_free(hc);
  sluice_client_free(wc);
  event_base_loop(base, EVLOOP_NONBLOCK);
  return rc;
}

/* ---- idle waiters ------------------------------------------------------- */

#define IDLE_WAITERS 100
#define IDLE_SECONDS 6

/* Script calls Redis ran (top-level EVALSHA/EVAL), from INFO commandstats. */
static long long script_calls(void) {
  struct timeval tv = {2, 0};
  redisContext *rc = redisConnectWithTimeout(rs.host, rs.port, tv);
  redisReply *rep = rc && !rc->err ? redisCommand(rc, "INFO commandstats") : NULL;
  long long n = -1;
  if (rep && rep->type == REDIS_REPLY_STRING) {
    n = 0;
    for (const char *k = "cmdstat_evalsha:calls=", *p = rep->str; (p = strstr(p, k)); p += 1)
      n += strtoll(p + strlen(k), NULL, 10);
    const char *e = strstr(rep->str, "cmdstat_eval:calls=");
    if (e) n += strtoll(e + 19, NULL, 10);
  }
  if (rep) freeReplyObject(rep);
  if (rc) redisFree(rc);
  return n;
}

/* What waiting costs Redis: IDLE_WAITERS blocking acquires of one handle on
 * a semaphore whose permit is held; their heartbeats share one call. */
static double idle_waiters_run(void) {
  sluice_client *c = new_client();
  sluice_sem *sem = new_sem(c, "idlew", 1);
  waker h = {NULL, NULL, -1, 0, 0, 0};
  waker w[IDLE_WAITERS];
  double per_s = -1;
  if (sluice_sem_try_acquire(sem, on_holder, &h) == SLUICE_OK)
    while (!h.acquired) event_base_loop(base, EVLOOP_ONCE);
  for (int i = 0; i < IDLE_WAITERS && h.status == SLUICE_OK; i++) {
    w[i] = (waker){NULL, NULL, -1, 0, 0, 0};
    sluice_sem_acquire(sem, 0, on_waiter, &w[i], NULL);
  }
  run_for_ms(1500); /* first attempts done, everyone blocked */
  long long c0 = script_calls();
  run_for_ms(IDLE_SECONDS * 1000);
  long long c1 = script_calls();
  if (h.status == SLUICE_OK && c0 >= 0 && c1 >= 0) per_s = (double)(c1 - c0) / IDLE_SECONDS;
  sluice_sem_free(sem); /* cancels the waiters, releases the holder's permit */
  sluice_client_free(c);
  event_base_loop(base, EVLOOP_NONBLOCK);
  run_for_ms(100);
  return per_s;
}

/* ---- contention ---------------------------------------------------------- */

/* WAITERS blocking acquirers in one process cycle through a semaphore of
 * `permits`, each holding its permit for HOLD_US: grants/s against the
 * ideal permits / hold, and the idle gap from a release to the next grant. */
#define CONT_WAITERS 32
#define CONT_HOLD_US 1000
#define CONT_SECONDS 4

typedef struct cont_run cont_run;
typedef struct cont_worker {
  cont_run *run;
  sluice_permit *p;
  struct event *hold;
  uint64_t granted_us, released_us;
} cont_worker;

struct cont_run {
  sluice_sem *sem;
  uint64_t end_us, grants, errors;
  uint64_t last_release_us; /* 0: a permit is free only when none is released */
  bench_lat *gap;
  bench_lat *held;        /* how long holds really last (the timer's lateness) */
  bench_lat *release_rtt; /* release called -> its answer */
  int running;
};

static void cont_acquire(cont_worker *w);

static void cont_released(sluice_sem *sem, int status, void *ud) {
  cont_worker *w = ud;
  if (status == SLUICE_OK)
    bench_lat_add(w->run->release_rtt, (double)(bench_now_us() - w->released_us));
}

static void cont_release(evutil_socket_t fd, short what, void *arg) {
  cont_worker *w = arg;
  w->run->last_release_us = w->released_us = bench_now_us();
  bench_lat_add(w->run->held, (double)(w->run->last_release_us - w->granted_us));
  sluice_permit_release(w->p, cont_released, w);
  w->p = NULL;
  cont_acquire(w);
}

static void cont_granted(sluice_sem *sem, int status, sluice_permit *p, void *ud) {
  cont_worker *w = ud;
  cont_run *r = w->run;
  r->running--;
  if (status != SLUICE_OK) {
    if (status != SLUICE_ECANCELED) r->errors++;
    return;
  }
  uint64_t now = bench_now_us();
  r->grants++;
  if (r->last_release_us) bench_lat_add(r->gap, (double)(now - r->last_release_us));
  r->last_release_us = 0;
  w->granted_us = now;
  w->p = p;
  struct timeval tv = {0, CONT_HOLD_US};
  evtimer_add(w->hold, &tv);
}

static void cont_acquire(cont_worker *w) {
  cont_run *r = w->run;
  if (bench_now_us() >= r->end_us) return;
  if (sluice_sem_acquire(r->sem, 5000, cont_granted, w, NULL) == SLUICE_OK) r->running++;
  else r->errors++;
}

/* The yardstick for the gap: one Redis round trip (PING on its own
 * connection, same loop) taken at the contention run's cadence, one every
 * hold, so both CPUs idle between requests as they do between grants. */
#define RTT_PINGS 1000

typedef struct rtt_run {
  redisAsyncContext *ac;
  struct event *tick;
  bench_lat *lat;
  uint64_t sent_us;
  int sent, answered, failed;
} rtt_run;

static void rtt_pong(redisAsyncContext *ac, void *reply, void *ud) {
  rtt_run *r = ud;
  if (!reply) r->failed = 1;
  else bench_lat_add(r->lat, (double)(bench_now_us() - r->sent_us));
  r->answered++;
}

static void rtt_tick(evutil_socket_t fd, short what, void *arg) {
  rtt_run *r = arg;
  if (r->failed || r->sent >= RTT_PINGS) return;
  r->sent_us = bench_now_us();
  if (redisAsyncCommand(r->ac, rtt_pong, r, "PING") != REDIS_OK) r->failed = 1;
  r->sent++;
  struct timeval tv = {0, CONT_HOLD_US};
  evtimer_add(r->tick, &tv);
}

/* p50 of the round trip in ms, or -1. */
static double rtt_p50_ms(void) {
  rtt_run r = {redisAsyncConnect(rs.host, rs.port), NULL, bench_lat_new(), 0, 0, 0, 0};
  double p50 = -1;
  if (r.ac && !r.ac->err && r.lat && redisLibeventAttach(r.ac, base) == REDIS_OK &&
      (r.tick = evtimer_new(base, rtt_tick, &r))) {
    rtt_tick(-1, 0, &r);
    while (!r.failed && r.answered < RTT_PINGS) event_base_loop(base, EVLOOP_ONCE);
    if (!r.failed) p50 = bench_lat_pct(r.lat, 50) / 1000;
  }
  if (r.tick) event_free(r.tick);
  if (r.ac) redisAsyncFree(r.ac);
  if (r.lat) bench_lat_free(r.lat);
  return p50;
}

typedef struct cont_result {
  double grants_per_s, ideal, gap_p50_ms, gap_p99_ms, rtt_ms, held_p50_ms, release_rtt_ms;
  double local_share; /* of the grants, handed on in-process (local_handoff) */
  long long calls;
} cont_result;

static int contention_run(unsigned permits, int local_handoff, cont_result *out) {
  char name[32];
  snprintf(name, sizeof name, "cont%u%s", permits, local_handoff ? "l" : "");
  out->rtt_ms = rtt_p50_ms();
  sluice_client *c = new_client();
  sluice_sem *sem = new_sem_with(c, name, permits, local_handoff);
  cont_run r = {sem, 0, 0, 0, 0, bench_lat_new(), bench_lat_new(), bench_lat_new(), 0};
  cont_worker w[CONT_WAITERS];
  for (int i = 0; i < CONT_WAITERS; i++) {
    w[i] = (cont_worker){&r, NULL, evtimer_new(base, cont_release, &w[i]), 0, 0};
  }
  uint64_t t0 = bench_now_us();
  long long c0 = script_calls();
  r.end_us = t0 + CONT_SECONDS * 1000000ull;
  for (int i = 0; i < CONT_WAITERS; i++) cont_acquire(&w[i]);
  while (bench_now_us() < r.end_us) event_base_loop(base, EVLOOP_ONCE);
  double secs = (double)(bench_now_us() - t0) / 1e6;
  long long c1 = script_calls();
  uint64_t grants = r.grants;
  sluice_sem_metrics m;
  sluice_sem_get_metrics(sem, &m);
  for (int i = 0; i < CONT_WAITERS; i++) {
    evtimer_del(w[i].hold);
    if (w[i].p) sluice_permit_release(w[i].p, NULL, NULL);
    w[i].p = NULL;
  }
  sluice_sem_free(sem); /* cancels the waiters still queued */
  while (r.running) event_base_loop(base, EVLOOP_ONCE);
  for (int i = 0; i < CONT_WAITERS; i++) event_free(w[i].hold);
  sluice_client_free(c);
  event_base_loop(base, EVLOOP_NONBLOCK);
  run_for_ms(100);
  out->grants_per_s = (double)grants / secs;
  out->ideal = permits * 1e6 / CONT_HOLD_US;
  out->gap_p50_ms = bench_lat_pct(r.gap, 50) / 1000;
  out->gap_p99_ms = bench_lat_pct(r.gap, 99) / 1000;
  out->held_p50_ms = bench_lat_pct(r.held, 50) / 1000;
  out->release_rtt_ms = bench_lat_pct(r.release_rtt, 50) / 1000;
  out->calls = c1 - c0;
  out->local_share = grants ? (double)m.local_handoffs / (double)grants : 0;
  bench_lat_free(r.gap);
  bench_lat_free(r.held);
  bench_lat_free(r.release_rtt);
  if (r.errors)
    fprintf(stderr, "bench_sem: contention: %llu errors\n", (unsigned long long)r.errors);
  return r.errors ? -1 : 0;
}

/* ---- redis-semaphore (bench/node/sem.js) ----------------------------------- */

static double json_num(const char *line, const char *key) {
  char k[64];
  snprintf(k, sizeof k, "\"%s\":", key);
  const char *at = strstr(line, k);
  return at ? strtod(at + strlen(k), NULL) : -1;
}

/* Runs node (inheriting our CPU pinning); reads up to n JSON lines. */
static int node_lines(const char *args, char lines[][512], int n) {
  char cmd[768];
  snprintf(cmd, sizeof cmd, "node '%s/sem.js' %s", bench_node_dir(), args);
  fflush(NULL);
  FILE *p = popen(cmd, "r");
  if (!p) return -1;
  int got = 0;
  while (got < n && fgets(lines[got], 512, p))
    if (lines[got][0] == '{') got++;
  int st = pclose(p);
  if (st != 0 || got != n) {
    fprintf(stderr, "bench_sem: node sem.js %s failed\n", args);
    return -1;
  }
  return 0;
}

/* ---- cluster ---------------------------------------------------------------- */

/* The acquire / release / pair workloads of bench_level on CL_NAMES
 * semaphores (their slots spread over the masters), on the private cluster
 * and, in the same run, on the standalone server; then redis-benchmark's
 * acquire script on both (--cluster: a "{tag}" semaphore name, replaced by
 * each connection with a tag of its own node's slots). Three servers share
 * one core here, so this shows the client's routing cost, not scaling. */
#define CL_NAMES 64

typedef struct cl_cell {
  result acq[2], rel[2], pair[2]; /* [0] standalone, [1] cluster */
  result rb[2];
} cl_cell;

static sluice_client *client_at(const char *url) {
  sluice_client_options o;
  sluice_client *c = NULL;
  sluice_client_options_init(&o);
  o.replay_off = bench_replay_off();
  o.url = url;
  if (sluice_client_new(base, &o, &c) != SLUICE_OK || wait_connected(c) != 0) {
    fprintf(stderr, "bench_sem: cannot connect to %s\n", url);
    exit(1);
  }
  bench_replica_ack(c);
  return c;
}

static int cl_rb(const rb_args *a, const bench_redis *at, int cluster, const level *lv,
                 result *out) {
  int clients = lv->in_flight < 3 ? lv->in_flight : 3; /* one connection per master */
  bench_rb_opts o = {clients, lv->ops, lv->in_flight / clients, RB_KEYSPACE, cluster};
  bench_rb_result rb;
  bench_cpu cpu = bench_cpu_start();
  if (bench_evalsha(at, &o, a->acq_sha, a->acq.nkeys, a->acq.argc, a->acq.argv, &rb) != 0)
    return -1;
  *out = (result){rb.rps, rb.p50_ms, rb.p99_ms, bench_cpu_children_us_per_op(&cpu, lv->ops)};
  return 0;
}

/* One level: standalone then cluster, REPS times, best of each. */
static int cl_level(sluice_client *cs[2], const bench_cluster *cl, const rb_args *a, int rb,
                    const level *lv, cl_cell *out) {
  sluice_sem *sems[2][CL_NAMES];
  sluice_permit **held = calloc((size_t)lv->ops, sizeof *held);
  result one;
  int rc = held ? 0 : -1;
  memset(out, 0, sizeof *out);
  for (int k = 0; k < 2; k++)
    for (int i = 0; i < CL_NAMES; i++) {
      char name[32];
      snprintf(name, sizeof name, "cl%d-%d", lv->in_flight, i);
      sems[k][i] = new_sem(cs[k], name, PERMITS);
    }
  for (int rep = 0; rep < REPS && rc == 0; rep++)
    for (int k = 0; k < 2 && rc == 0; k++) {
      rc = run_sluice_spread(NULL, sems[k], CL_NAMES, ACQUIRE, lv->in_flight, lv->ops, held, &one);
      keep_best(&out->acq[k], &one);
      if (rc == 0)
        rc = run_sluice_spread(NULL, sems[k], CL_NAMES, RELEASE, lv->in_flight, lv->ops, held,
                               &one);
      keep_best(&out->rel[k], &one);
      if (rc == 0)
        rc = run_sluice_spread(NULL, sems[k], CL_NAMES, PAIR, lv->in_flight, lv->ops, NULL, &one);
      keep_best(&out->pair[k], &one);
      if (rb && cl_rb(a, k ? &cl->node[0] : &rs, k, lv, &one) == 0) keep_best(&out->rb[k], &one);
    }
  for (int k = 0; k < 2; k++)
    for (int i = 0; i < CL_NAMES; i++) sluice_sem_free(sems[k][i]);
  free(held);
  bench_redis_flush(&rs);
  bench_cluster_flush(cl);
  return rc;
}

static void cl_row(bench_table *t, const char *op, int in_flight, const result r[2]) {
  bench_table_row(t, "%s|%d|%.0f|%.3f|%.3f|%.2f|%.0f|%.3f|%.3f|%.2f|%.2f", op, in_flight, r[0].rps,
                  r[0].p50_ms, r[0].p99_ms, r[0].cpu_us, r[1].rps, r[1].p50_ms, r[1].p99_ms,
                  r[1].cpu_us, r[1].rps / r[0].rps);
}

static int cluster_run(void) {
  bench_cluster cl;
  int at = bench_cluster_attach(&cl);
  if (at != 0) return at > 0 ? 0 : -1;
  sluice_client *cs[2] = {client_at(rs.url), client_at(cl.url)};
  /* "{tag}" in every key: redis-benchmark --cluster's placeholder. */
  sluice_sem *tag = new_sem(cs[0], "tag", PERMITS);
  rb_args a;
  int rb = bench_have_redis_benchmark() && rb_prepare(tag, &a) == 0 &&
           bench_cluster_script_load(&cl, &sluice__lua_sem_acquire, a.acq_sha) == 0;
  cl_cell cells[NLEVELS]; /* tag lives on: a's KEYS/ARGV point into it */
  int rc = 0;
  for (size_t i = 0; i < NLEVELS && rc == 0; i++)
    rc = cl_level(cs, &cl, &a, rb, &levels[i], &cells[i]);
  if (rb) {
    sluice__args_clear(&a.acq);
    sluice__args_clear(&a.rel);
  }
  sluice_sem_free(tag);
  for (int k = 0; k < 2; k++) sluice_client_free(cs[k]);
  event_base_loop(base, EVLOOP_NONBLOCK);
  if (rc != 0) {
    fprintf(stderr, "bench_sem: cluster run failed\n");
    return -1;
  }
  static const char *const cols[] = {"op",     "in flight", "standalone/s",       "p50 ms",
                                     "p99 ms", "CPU us",    "cluster/s",          "p50 ms",
                                     "p99 ms", "CPU us",    "cluster/standalone", NULL};
  char title[256];
  snprintf(title, sizeof title,
           "cluster (%d masters, one core between them) vs standalone, same run: %d semaphore "
           "names spread over the slots, one client",
           cl.n, CL_NAMES);
  bench_table *t = bench_table_new(title, cols);
  for (size_t i = 0; i < NLEVELS; i++) cl_row(t, "try_acquire", levels[i].in_flight, cells[i].acq);
  for (size_t i = 0; i < NLEVELS; i++) cl_row(t, "release", levels[i].in_flight, cells[i].rel);
  for (size_t i = 0; i < NLEVELS; i++)
    cl_row(t, "acquire->release pair", levels[i].in_flight, cells[i].pair);
  bench_table_print(t, stdout);
  bench_table_free(t);
  if (rb) {
    static const char *const rcols[] = {"in flight", "rb standalone/s", "rb --cluster/s", "ratio",
                                        NULL};
    t = bench_table_new(
        "redis-benchmark EVALSHA sem_acquire, -c min(N,3) -P N/c (--cluster: one "
        "connection per master, its own {tag} semaphore)",
        rcols);
    for (size_t i = 0; i < NLEVELS; i++)
      bench_table_row(t, "%d|%.0f|%.0f|%.2f", levels[i].in_flight, cells[i].rb[0].rps,
                      cells[i].rb[1].rps, cells[i].rb[1].rps / cells[i].rb[0].rps);
    bench_table_print(t, stdout);
    bench_table_free(t);
  }
  printf(
      "cluster: redis-semaphore not run on the cluster (its Semaphore takes one ioredis "
      "client; not measured here)\n");
  return 0;
}

/* ---- main ------------------------------------------------------------------- */

/* Both contention cells and their table; -1 when a run failed. */
static int contention_table(void) {
  enum { NCONT = 4 };
  static const unsigned cont_permits[NCONT] = {1, 16, 1, 16};
  static const int cont_local[NCONT] = {0, 0, 1, 1};
  cont_result cr[NCONT];
  int have_cont = 1;
  for (int i = 0; i < NCONT; i++)
    have_cont = have_cont && contention_run(cont_permits[i], cont_local[i], &cr[i]) == 0;
  if (have_cont) {
    static const char *const ccols[] = {
        "permits",        "local_handoff", "grants/s",   "ideal",          "of ideal",
        "gap p50 ms",     "gap p99 ms",    "RTT p50 ms", "release p50 ms", "hold p50 ms",
        "handed locally", "calls/grant",   NULL};
    bench_table *t = bench_table_new(
        "contention: 32 blocking waiters in one process, holds of 1 ms; gap = release called -> "
        "next grant; RTT = PING, one a ms; release = release called -> its answer",
        ccols);
    for (int i = 0; i < NCONT; i++)
      bench_table_row(t, "%u|%s|%.0f|%.0f|%.0f%%|%.3f|%.3f|%.3f|%.3f|%.3f|%.0f%%|%.2f",
                      cont_permits[i], cont_local[i] ? "on" : "off", cr[i].grants_per_s,
                      cr[i].ideal, 100 * cr[i].grants_per_s / cr[i].ideal, cr[i].gap_p50_ms,
                      cr[i].gap_p99_ms, cr[i].rtt_ms, cr[i].release_rtt_ms, cr[i].held_p50_ms,
                      100 * cr[i].local_share,
                      (double)cr[i].calls / (cr[i].grants_per_s * CONT_SECONDS));
    bench_table_print(t, stdout);
    bench_table_free(t);
  }
  return have_cont ? 0 : -1;
}

int main(int argc, char **argv) {
  int only_contention = argc > 1 && strcmp(argv[1], "--contention") == 0;
  if (argc > 1 && !only_contention) {
    fprintf(stderr, "usage: bench_sem [--contention]  (only the contention table)\n");
    return 2;
  }
  if (bench_redis_start(&rs) != 0) return 1;
  if (bench_can_pin()) bench_pin_self(BENCH_CPU_CLIENT);
  struct event_config *cfg = event_config_new();
  event_config_set_flag(cfg, EVENT_BASE_FLAG_PRECISE_TIMER);
  base = event_base_new_with_config(cfg);
  event_config_free(cfg);
  int node = bench_node_available();
  printf("semaphore: Redis at %s, %d CPUs, pinning %s; %d permits, ttl 30 s, auto-renew on\n",
         rs.url, bench_ncpus(), bench_can_pin() ? "on (server CPU 0, client CPU 1)" : "off",
         PERMITS);
  if (only_contention) {
    int crc = contention_table();
    event_base_free(base);
    bench_redis_stop(&rs);
    return crc == 0 ? 0 : 1;
  }

  sluice_client *c = new_client();
  { /* warm up: scripts cached, buffers grown */
    sluice_sem *w = new_sem(c, "warm", PERMITS);
    result one;
    run_sluice(w, PAIR, 50, 5000, NULL, &one);
    sluice_sem_free(w);
  }
  cell cells[NLEVELS];
  int rc = 0;
  for (size_t i = 0; i < NLEVELS && rc == 0; i++) rc = bench_level(c, &levels[i], &cells[i]);
  sluice_client_free(c);
  event_base_loop(base, EVLOOP_NONBLOCK);
  bench_redis_flush(&rs);
  if (rc != 0) {
    fprintf(stderr, "bench_sem: failed\n");
    bench_redis_stop(&rs);
    return 1;
  }

  char lines[NLEVELS][512], args[512];
  int n = snprintf(args, sizeof args, "pairs %s %d %d", rs.host, rs.port, PERMITS);
  for (size_t i = 0; i < NLEVELS; i++)
    n += snprintf(args + n, sizeof args - (size_t)n, " %d:%d", levels[i].in_flight, levels[i].ops);
  int have_node = node && node_lines(args, lines, NLEVELS) == 0;
  result nres[NLEVELS];
  for (size_t i = 0; have_node && i < NLEVELS; i++)
    nres[i] = (result){json_num(lines[i], "pairs_per_s"), json_num(lines[i], "p50_ms"),
                       json_num(lines[i], "p99_ms"), json_num(lines[i], "cpu_us_per_op")};
  bench_redis_flush(&rs);

  static const char *const acols[] = {"in flight",    "sluice/s", "p50 ms", "p99 ms", "CPU us",
                                      "rb -c1 -PN/s", "p50 ms",   "p99 ms", "CPU us", "ratio",
                                      "rb -cN/s",     "ratio",    NULL};
  bench_table *t = bench_table_new(
      "acquire (grant): sluice try_acquire vs redis-benchmark EVALSHA sem_acquire, same KEYS/ARGV",
      acols);
  for (size_t i = 0; i < NLEVELS; i++) {
    const cell *x = &cells[i];
    if (x->have_rb)
      bench_table_row(t, "%d|%.0f|%.3f|%.3f|%.2f|%.0f|%.3f|%.3f|%.2f|%.2f|%.0f|%.2f",
                      levels[i].in_flight, x->acq.rps, x->acq.p50_ms, x->acq.p99_ms, x->acq.cpu_us,
                      x->rb_acq.rps, x->rb_acq.p50_ms, x->rb_acq.p99_ms, x->rb_acq.cpu_us,
                      x->acq.rps / x->rb_acq.rps, x->rb_acq_conns.rps,
                      x->acq.rps / x->rb_acq_conns.rps);
    else
      bench_table_row(t, "%d|%.0f|%.3f|%.3f|%.2f|-|-|-|-|-|-|-", levels[i].in_flight, x->acq.rps,
                      x->acq.p50_ms, x->acq.p99_ms, x->acq.cpu_us);
  }
  bench_table_print(t, stdout);
  bench_table_free(t);

  static const char *const rcols[] = {"in flight",    "sluice/s", "p50 ms", "p99 ms", "CPU us",
                                      "rb -c1 -PN/s", "CPU us",   "ratio",  NULL};
  t = bench_table_new("release: sluice_permit_release vs redis-benchmark EVALSHA sem_release",
                      rcols);
  for (size_t i = 0; i < NLEVELS; i++) {
    const cell *x = &cells[i];
    if (x->have_rb)
      bench_table_row(t, "%d|%.0f|%.3f|%.3f|%.2f|%.0f|%.2f|%.2f", levels[i].in_flight, x->rel.rps,
                      x->rel.p50_ms, x->rel.p99_ms, x->rel.cpu_us, x->rb_rel.rps, x->rb_rel.cpu_us,
                      x->rel.rps / x->rb_rel.rps);
    else
      bench_table_row(t, "%d|%.0f|%.3f|%.3f|%.2f|-|-|-", levels[i].in_flight, x->rel.rps,
                      x->rel.p50_ms, x->rel.p99_ms, x->rel.cpu_us);
  }
  bench_table_print(t, stdout);
  bench_table_free(t);

  static const char *const pcols[] = {"in flight", "sluice pairs/s", "acq p50", "acq p99",
                                      "CPU us",    "rb pairs/s",     "ratio",   "redis-sem pairs/s",
                                      "acq p50",   "acq p99",        "CPU us",  "sluice/redis-sem",
                                      NULL};
  t = bench_table_new(
      "try_acquire -> release pairs (ms): sluice vs redis-benchmark (acquire + "
      "release) vs redis-semaphore",
      pcols);
  for (size_t i = 0; i < NLEVELS; i++) {
    const cell *x = &cells[i];
    char rb[64] = "-|-", nd[112] = "-|-|-|-|-";
    if (x->have_rb) {
      double pair = 1.0 / (1.0 / x->rb_acq.rps + 1.0 / x->rb_rel.rps);
      snprintf(rb, sizeof rb, "%.0f|%.2f", pair, x->pair.rps / pair);
    }
    if (have_node)
      snprintf(nd, sizeof nd, "%.0f|%.3f|%.3f|%.2f|%.2f", nres[i].rps, nres[i].p50_ms,
               nres[i].p99_ms, nres[i].cpu_us, x->pair.rps / nres[i].rps);
    bench_table_row(t, "%d|%.0f|%.3f|%.3f|%.2f|%s|%s", levels[i].in_flight, x->pair.rps,
                    x->pair.p50_ms, x->pair.p99_ms, x->pair.cpu_us, rb, nd);
  }
  bench_table_print(t, stdout);
  bench_table_free(t);

  static const char *const ncols[] = {"in flight", "sluice pairs/s", "CPU us", "sluice/redis-sem",
                                      NULL};
  t = bench_table_new(
      "pairs with the release not awaited (sluice_permit_release without a "
      "callback; the next acquire is pipelined behind it)",
      ncols);
  for (size_t i = 0; i < NLEVELS; i++) {
    char nd[32] = "-";
    if (have_node) snprintf(nd, sizeof nd, "%.2f", cells[i].pair_nowait.rps / nres[i].rps);
    bench_table_row(t, "%d|%.0f|%.2f|%s", levels[i].in_flight, cells[i].pair_nowait.rps,
                    cells[i].pair_nowait.cpu_us, nd);
  }
  bench_table_print(t, stdout);
  bench_table_free(t);
  fflush(stdout);

  bench_lat *lat = bench_lat_new();
  rc = lat ? wake_run(lat) : -1;
  bench_redis_flush(&rs);
  char wline[1][512];
  snprintf(args, sizeof args, "wake %s %d %d", rs.host, rs.port, WAKE_ITERS);
  int have_nwake = rc == 0 && node && node_lines(args, wline, 1) == 0;
  if (rc == 0) {
    static const char *const wcols[] = {"wake-up (ms)", "p50", "p99", "max", NULL};
    t = bench_table_new("blocking wake-up: release called -> waiter granted, 1-permit semaphore",
                        wcols);
    bench_table_row(t, "sluice (BRPOP wake list)|%.3f|%.3f|%.3f", bench_lat_pct(lat, 50) / 1000,
                    bench_lat_pct(lat, 99) / 1000, bench_lat_max(lat) / 1000);
    if (have_nwake)
      bench_table_row(t, "redis-semaphore (polls every 10 ms)|%.3f|%.3f|%.3f",
                      json_num(wline[0], "p50_ms"), json_num(wline[0], "p99_ms"),
                      json_num(wline[0], "max_ms"));
    bench_table_print(t, stdout);
    bench_table_free(t);
  }
  bench_lat_free(lat);
  if (contention_table() != 0) rc = -1;
  if (cluster_run() != 0) rc = -1;
  double idle = idle_waiters_run();
  if (idle >= 0)
    printf("\n%d waiters blocked on one handle (heartbeat 3 s): %.2f script calls/s over %d s\n",
           IDLE_WAITERS, idle, IDLE_SECONDS);
  if (!node)
    printf("semaphore: redis-semaphore skipped (node or bench/node/node_modules missing)\n");
  printf("%d iterations of wake-up; throughput cells best of %d interleaved runs\n", WAKE_ITERS,
         REPS);
  event_base_free(base);
  bench_redis_stop(&rs);
  return rc == 0 ? 0 : 1;
}
