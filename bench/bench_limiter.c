/*
 * Rate limiters: decisions per second, latency (p50/p99) and the client's
 * CPU time per decision of each algorithm at 1, 50 and 500 checks in flight
 * on one sluice client, in two workloads:
 *  - random: every check takes 1 unit for a random key of KEYSPACE keys
 *    ("%012u", the names redis-benchmark's -r __rand_int__ produces), limit
 *    LIMIT per PERIOD_MS, so every check passes and writes;
 *  - hot: every check on one key, limit HOT_LIMIT per PERIOD_MS (so every
 *    check still passes and writes: the costly path); the sliding log, whose
 *    key holds at most SLUICE_RL_LOG_ENTRIES_MAX entries, that many per
 *    HOT_LOG_PERIOD_MS.
 * Beside it in the same run:
 *  - redis-benchmark sending the same script with the KEYS/ARGV the library
 *    sends for a call of ONE request (built with the same sluice__rl_check_*
 *    functions), -c 1 for 1 in flight, -c 50 for 50, -c 50 -P 10 for 500.
 *    sluice sends every check ready in one loop turn as one call of up to
 *    255 requests, so above 1 in flight the ratio is what batching saves;
 *  - rate-limiter-flexible's RateLimiterRedis (ioredis; a fixed window, one
 *    Lua script per consume) doing the fixed-window job, when node and the
 *    peer packages are installed.
 * "client CPU us/op" is getrusage user+sys of the client process over the
 * measured phase (redis-benchmark: of the child; Node: process.cpuUsage).
 *
 * Each cell runs sluice and redis-benchmark alternately REPS times and keeps
 * the best run of each: on a shared 2-core machine a neighbour's burst can
 * halve any single run, and the best of interleaved runs is what the two
 * clients can do under the same conditions.
 */
#include "bench.h"

#include <stdlib.h>
#include <string.h>

#include <event2/event.h>
#include <sluice/sluice.h>

#include "limiter/limiter.h"
#include "limiter/rl_args.h"

#define KEYSPACE 10000
#define LIMIT 1000
#define HOT_LIMIT 1000000000
#define PERIOD_MS 10000
#define REPS 3

/* A workload: keys drawn from keyspace ("%012u"), limit per period_ms. */
typedef struct workload {
  const char *name;
  unsigned keyspace, limit, period_ms;
} workload;

static const workload workloads[] = {{"random", KEYSPACE, LIMIT, PERIOD_MS},
                                     {"hot", 1, HOT_LIMIT, PERIOD_MS}};

/* The sliding log keeps one entry per request, at most
 * SLUICE_RL_LOG_ENTRIES_MAX (a cost of 1 needs a limit no larger): its hot
 * key gets that limit per HOT_LOG_PERIOD_MS, short enough that every check
 * still passes. */
#define HOT_LOG_PERIOD_MS 250

static workload for_algo(const workload *w, sluice_rl_algo algo) {
  workload x = *w;
  if (algo == SLUICE_RL_SLIDING_LOG && x.limit > SLUICE_RL_LOG_ENTRIES_MAX)
    x.limit = SLUICE_RL_LOG_ENTRIES_MAX, x.period_ms = HOT_LOG_PERIOD_MS;
  return x;
}

typedef struct level {
  int in_flight, requests;
  int rb_clients, rb_pipeline;
} level;

static const level levels[] = {{1, 10000, 1, 1}, {50, 50000, 50, 1}, {500, 50000, 50, 10}};
static const sluice_rl_algo algos[] = {SLUICE_RL_FIXED, SLUICE_RL_SLIDING_LOG,
                                       SLUICE_RL_SLIDING_COUNTER, SLUICE_RL_GCRA};

typedef struct result {
  double rps, p50_ms, p99_ms, cpu_us;
  long allowed, denied, errors;
  double per_sleep; /* checks per voluntary context switch */
} result;

typedef struct runner runner;
typedef struct slot {
  runner *r;
  uint64_t t0;
} slot;

struct runner {
  sluice_limiter *lim;
  unsigned keyspace;
  int total, sent, done;
  uint32_t rng;
  bench_lat *lat;
  result res;
};

static uint32_t next_rand(uint32_t *s) { /* xorshift32 */
  *s ^= *s << 13;
  *s ^= *s >> 17;
  *s ^= *s << 5;
  return *s;
}

static void send_one(slot *s);

static void on_done(sluice_limiter *lim, int status, const sluice_rl_result *res, void *ud) {
  slot *s = ud;
  runner *r = s->r;
  bench_lat_add(r->lat, (double)(bench_now_us() - s->t0));
  r->done++;
  if (status != SLUICE_OK) r->res.errors++;
  else if (res->allowed) r->res.allowed++;
  else r->res.denied++;
  if (r->sent < r->total) send_one(s);
}

static void send_one(slot *s) {
  runner *r = s->r;
  char key[16];
  snprintf(key, sizeof key, "%012u", next_rand(&r->rng) % r->keyspace);
  s->t0 = bench_now_us();
  r->sent++;
  if (sluice_limiter_check(r->lim, key, 1, on_done, s) != SLUICE_OK) {
    r->done++;
    r->res.errors++;
  }
}

/* total checks with in_flight outstanding; returns 0 or -1. */
static int run_sluice(struct event_base *base, sluice_limiter *lim, unsigned keyspace,
                      int in_flight, int total, result *out) {
  runner r = {lim, keyspace, total, 0, 0, 2463534242u, bench_lat_new(), {0, 0, 0, 0, 0, 0, 0, 0}};
  slot *slots = calloc((size_t)in_flight, sizeof *slots);
  if (!r.lat || !slots) return -1;
  bench_cpu cpu = bench_cpu_start();
  uint64_t t0 = bench_now_us();
  for (int i = 0; i < in_flight && r.sent < total; i++) {
    slots[i].r = &r;
    send_one(&slots[i]);
  }
  while (r.done < total) event_base_loop(base, EVLOOP_ONCE);
  double secs = (double)(bench_now_us() - t0) / 1e6;
  r.res.cpu_us = bench_cpu_us_per_op(&cpu, total);
  r.res.per_sleep = bench_cpu_ops_per_sleep(&cpu, total);
  r.res.rps = total / secs;
  r.res.p50_ms = bench_lat_pct(r.lat, 50) / 1000;
  r.res.p99_ms = bench_lat_pct(r.lat, 99) / 1000;
  *out = r.res;
  bench_lat_free(r.lat);
  free(slots);
  return r.res.errors ? -1 : 0;
}

static sluice_limiter *make_limiter(sluice_client *c, sluice_rl_algo algo, const char *name,
                                    const workload *w) {
  sluice_limiter_options o;
  sluice_limiter *lim = NULL;
  sluice_limiter_options_init(&o);
  o.algo = algo;
  o.limit = w->limit;
  o.period_ms = w->period_ms;
  if (sluice_limiter_new(c, name, &o, &lim) != SLUICE_OK) return NULL;
  return lim;
}

static const sluice__script *script_of(sluice_rl_algo algo) {
  switch (algo) {
    case SLUICE_RL_FIXED: return &sluice__lua_rl_fixed;
    case SLUICE_RL_SLIDING_LOG: return &sluice__lua_rl_sliding_log;
    case SLUICE_RL_SLIDING_COUNTER: return &sluice__lua_rl_sliding_counter;
    default: return &sluice__lua_rl_gcra;
  }
}

/* The same script with the KEYS/ARGV the library sends for a call of one
 * request (cost 1, no peek), from redis-benchmark. */

/* A redis-benchmark run as a result: its CPU and sleeps are the child's. */
static result rb_result(const bench_rb_result *rb, const bench_cpu *cpu, long requests) {
  return (result){.rps = rb->rps,
                  .p50_ms = rb->p50_ms,
                  .p99_ms = rb->p99_ms,
                  .cpu_us = bench_cpu_children_us_per_op(cpu, requests),
                  .per_sleep = bench_cpu_children_ops_per_sleep(cpu, requests)};
}

static int run_rb(const bench_redis *rs, sluice_client *c, sluice_rl_algo algo, const char *name,
                  const workload *w, const level *lv, result *out) {
  char sha[41];
  if (bench_script_load(rs, script_of(algo), sha) != 0) return -1;
  sluice_limiter *lim = make_limiter(c, algo, name, w);
  char *key = lim ? sluice__rl_redis_key(lim, "__rand_int__") : NULL;
  sluice_limiter_free(lim);
  if (!key) return -1;
  sluice__rl_call call = {w->limit, w->period_ms, w->limit};
  sluice__args a;
  int rc = sluice__args_init(&a, RL_CHECK_ARGS_HEAD + RL_CHECK_ARGS_PER,
                             RL_CHECK_NUMS_HEAD + RL_CHECK_NUMS_PER);
  if (rc == 0) {
    sluice__rl_check_key(&a, key);
    sluice__rl_check_head(&a, &call);
    sluice__rl_check_item(&a, 1, 0, REDIS_FOREVER_MS);
    rc = a.failed ? -1 : 0;
  }
  bench_rb_opts o = {lv->rb_clients, lv->requests, lv->rb_pipeline, (int)w->keyspace, 0};
  bench_rb_result rb;
  bench_cpu cpu = bench_cpu_start();
  if (rc == 0) rc = bench_evalsha(rs, &o, sha, a.nkeys, a.argc, a.argv, &rb);
  sluice__args_clear(&a);
  free(key);
  if (rc == 0) *out = rb_result(&rb, &cpu, lv->requests);
  return rc;
}

static void keep_best(result *best, const result *r) {
  if (r->rps > best->rps) *best = *r;
}

static int run_node_once(const bench_redis *rs, const workload *w, const level *lv, result *out) {
  char cmd[1024], line[512];
  snprintf(cmd, sizeof cmd, "node '%s/limiter.js' %s %d %d %d %u %u %d", bench_node_dir(), rs->host,
           rs->port, lv->in_flight, lv->requests, w->keyspace, w->limit, w->period_ms);
  FILE *p = popen(cmd, "r");
  if (!p) return -1;
  int got = fgets(line, sizeof line, p) != NULL;
  if (pclose(p) != 0 || !got) return -1;
  memset(out, 0, sizeof *out);
  const char *rps = strstr(line, "\"rps\":"), *p50 = strstr(line, "\"p50_ms\":"),
             *p99 = strstr(line, "\"p99_ms\":"), *cpu = strstr(line, "\"cpu_us_per_op\":");
  if (!rps || !p50 || !p99 || !cpu) return -1;
  out->rps = atof(rps + 6);
  out->p50_ms = atof(p50 + 9);
  out->p99_ms = atof(p99 + 9);
  out->cpu_us = atof(cpu + 16);
  return 0;
}

static int run_node(const bench_redis *rs, const workload *w, const level *lv, result *best) {
  result one;
  memset(best, 0, sizeof *best);
  for (int i = 0; i < REPS; i++) {
    if (run_node_once(rs, w, lv, &one) != 0) return -1;
    keep_best(best, &one);
  }
  return 0;
}

static int wait_connected(struct event_base *base, sluice_client *c) {
  uint64_t end = bench_now_us() + 3000000;
  while (!sluice_client_is_connected(c) && bench_now_us() < end) event_base_loop(base, EVLOOP_ONCE);
  return sluice_client_is_connected(c) ? 0 : -1;
}

/* One algorithm at one level in one workload: sluice and redis-benchmark
 * alternately, each on its own keys (names of equal length), best of REPS. */
static int bench_pair(const bench_redis *rs, struct event_base *base, sluice_client *c, size_t wi,
                      size_t ai, size_t li, bench_table *t, result *ours) {
  workload wa = for_algo(&workloads[wi], algos[ai]);
  const workload *w = &wa;
  char name[32], rbname[32];
  result rb = {0}, one;
  snprintf(name, sizeof name, "s%zu%zu%zu", wi, ai, li);
  snprintf(rbname, sizeof rbname, "r%zu%zu%zu", wi, ai, li);
  sluice_limiter *lim = make_limiter(c, algos[ai], name, w);
  if (!lim) return -1;
  int have_rb = bench_have_redis_benchmark();
  int rc = run_sluice(base, lim, w->keyspace, 50, 2000, &one); /* script cached, buffers grown */
  memset(ours, 0, sizeof *ours);
  for (int i = 0; i < REPS && rc == 0; i++) {
    rc = run_sluice(base, lim, w->keyspace, levels[li].in_flight, levels[li].requests, &one);
    keep_best(ours, &one);
    if (have_rb && run_rb(rs, c, algos[ai], rbname, w, &levels[li], &one) == 0)
      keep_best(&rb, &one);
    else have_rb = 0;
  }
  sluice_limiter_free(lim);
  if (rc != 0) return -1;
  bench_table_row(t, "%s|%s|%d|%.0f|%.3f|%.3f|%.1f%%|%.2f|%s%.0f|%.3f|%.3f|%.2f|%.2f", w->name,
                  sluice_rl_algo_name(algos[ai]), levels[li].in_flight, ours->rps, ours->p50_ms,
                  ours->p99_ms, 100.0 * (double)ours->allowed / levels[li].requests, ours->cpu_us,
                  have_rb ? "" : "n/a ", rb.rps, rb.p50_ms, rb.p99_ms, rb.cpu_us,
                  have_rb ? ours->rps / rb.rps : 0.0);
  return 0;
}

static void node_table(const bench_redis *rs, const result fixed[2][3]) {
  const char *cols[] = {"keys",   "in flight", "sluice/s",      "p50 ms",
                        "p99 ms", "CPU us/op", "rlflex/s",      "p50 ms",
                        "p99 ms", "CPU us/op", "sluice/rlflex", NULL};
  bench_table *t = bench_table_new(
      "fixed window: sluice vs rate-limiter-flexible RateLimiterRedis (ioredis), same server; "
      "client CPU us/op",
      cols);
  for (size_t wi = 0; wi < 2; wi++) {
    for (size_t li = 0; li < 3; li++) {
      const result *f = &fixed[wi][li];
      result n;
      if (f->rps <= 0) continue; /* workload not selected */
      if (run_node(rs, &workloads[wi], &levels[li], &n) != 0) {
        fprintf(stderr, "bench_limiter: node peer failed at %d in flight\n", levels[li].in_flight);
        continue;
      }
      bench_table_row(t, "%s|%d|%.0f|%.3f|%.3f|%.2f|%.0f|%.3f|%.3f|%.2f|%.2f", workloads[wi].name,
                      levels[li].in_flight, f->rps, f->p50_ms, f->p99_ms, f->cpu_us, n.rps,
                      n.p50_ms, n.p99_ms, n.cpu_us, f->rps / n.rps);
    }
  }
  bench_table_print(t, stdout);
  bench_table_free(t);
}

/* Whether argv selects the name (no name of that list given: all). */
static int selected(int argc, char **argv, const char *name, int is_workload) {
  int any = 0;
  for (int i = 1; i < argc; i++) {
    int w = strcmp(argv[i], "hot") == 0 || strcmp(argv[i], "random") == 0;
    if (w != is_workload) continue;
    any = 1;
    if (strcmp(argv[i], name) == 0) return 1;
  }
  return !any;
}

/* ---- cluster ---------------------------------------------------------------- */

/* The same workloads and levels on the private 3-master cluster and, in the
 * same run, on the standalone server (random: 10,000 keys, their slots
 * spread over the masters; hot: one key, so one master), then
 * redis-benchmark's script on both with -c min(N,3) -P N/c: --cluster needs
 * "{tag}" in the key, which each connection replaces with a tag of its own
 * node's slots, so the key's hash tag is swapped for "{tag}" on both sides
 * (same length to within a few bytes). The servers share one core here:
 * this shows the client's routing cost, not scaling. */
static int rb_cluster_key(sluice_client *c, sluice_rl_algo algo, const workload *w, char *out,
                          size_t cap) {
  sluice_limiter *lim = make_limiter(c, algo, "rb", w);
  char *key = lim ? sluice__rl_redis_key(lim, "__rand_int__") : NULL;
  sluice_limiter_free(lim);
  if (!key) return -1;
  char *open = strchr(key, '{'), *close = open ? strchr(open, '}') : NULL;
  if (!close) {
    free(key);
    return -1;
  }
  *close = '\0';
  snprintf(out, cap, "%.*s{tag}%s%s", (int)(open - key), key, open + 1, close + 1);
  free(key);
  return 0;
}

static int cl_rb(const bench_redis *at, int cluster, const char *sha, const char *key,
                 const workload *w, const level *lv, result *out) {
  sluice__rl_call call = {w->limit, w->period_ms, w->limit};
  sluice__args a;
  if (sluice__args_init(&a, RL_CHECK_ARGS_HEAD + RL_CHECK_ARGS_PER,
                        RL_CHECK_NUMS_HEAD + RL_CHECK_NUMS_PER) != 0)
    return -1;
  sluice__rl_check_key(&a, key);
  sluice__rl_check_head(&a, &call);
  sluice__rl_check_item(&a, 1, 0, REDIS_FOREVER_MS);
  int clients = lv->in_flight < 3 ? lv->in_flight : 3;
  bench_rb_opts o = {clients, lv->requests, lv->in_flight / clients, (int)w->keyspace, cluster};
  bench_rb_result rb;
  bench_cpu cpu = bench_cpu_start();
  int rc = a.failed ? -1 : bench_evalsha(at, &o, sha, a.nkeys, a.argc, a.argv, &rb);
  sluice__args_clear(&a);
  if (rc == 0) *out = rb_result(&rb, &cpu, lv->requests);
  return rc;
}

static int cluster_run(const bench_redis *rs, struct event_base *base, int argc, char **argv) {
  bench_cluster cl;
  int at = bench_cluster_attach(&cl);
  if (at != 0) return at > 0 ? 0 : -1;
  const char *urls[2] = {rs->url, cl.url};
  sluice_client *cs[2] = {NULL, NULL};
  for (int k = 0; k < 2; k++) {
    sluice_client_options o;
    sluice_client_options_init(&o);
    o.replay_off = bench_replay_off();
    o.url = urls[k];
    if (sluice_client_new(base, &o, &cs[k]) != SLUICE_OK || wait_connected(base, cs[k]) != 0) {
      fprintf(stderr, "bench_limiter: cannot connect to %s\n", urls[k]);
      return -1;
    }
  }
  const char *cols[] = {
      "keys",      "algorithm",          "in flight",       "standalone/s",   "p50 ms",
      "p99 ms",    "CPU us/op",          "cluster/s",       "p50 ms",         "p99 ms",
      "CPU us/op", "cluster/standalone", "rb standalone/s", "rb --cluster/s", NULL};
  char title[256];
  snprintf(title, sizeof title,
           "cluster (%d masters, one core between them) vs standalone, same run; redis-benchmark "
           "-c min(N,3) -P N/c on each ({tag} key)",
           cl.n);
  bench_table *t = bench_table_new(title, cols);
  const char *cpu_cols[] = {"keys",
                            "algorithm",
                            "in flight",
                            "standalone CPU us/op",
                            "ops/sleep",
                            "cluster CPU us/op",
                            "ops/sleep",
                            "CPU cluster/standalone",
                            "rb standalone CPU us/op",
                            "ops/sleep",
                            "rb --cluster CPU us/op",
                            "ops/sleep",
                            "rb CPU cluster/standalone",
                            NULL};
  bench_table *cpu = bench_table_new(
      "client CPU per check, the same runs as above: sluice, and redis-benchmark running the "
      "same script (CPU of the redis-benchmark process); ops/sleep: checks per voluntary "
      "context switch (getrusage)",
      cpu_cols);
  int rc = t && cpu ? 0 : -1;
  for (size_t wi = 0; wi < 2 && rc == 0; wi++) {
    if (!selected(argc, argv, workloads[wi].name, 1)) continue;
    for (size_t ai = 0; ai < 4 && rc == 0; ai++) {
      if (!selected(argc, argv, sluice_rl_algo_name(algos[ai]), 0)) continue;
      workload wa = for_algo(&workloads[wi], algos[ai]);
      const workload *w = &wa;
      char sha[41], key[160];
      int have_rb = bench_have_redis_benchmark() &&
                    bench_script_load(rs, script_of(algos[ai]), sha) == 0 &&
                    bench_cluster_script_load(&cl, script_of(algos[ai]), sha) == 0 &&
                    rb_cluster_key(cs[0], algos[ai], w, key, sizeof key) == 0;
      for (size_t li = 0; li < 3 && rc == 0; li++) {
        const level *lv = &levels[li];
        result best[2], rb[2], one;
        memset(best, 0, sizeof best);
        memset(rb, 0, sizeof rb);
        sluice_limiter *lims[2];
        for (int k = 0; k < 2; k++) {
          char name[32];
          snprintf(name, sizeof name, "c%zu%zu%zu", wi, ai, li);
          lims[k] = make_limiter(cs[k], algos[ai], name, w);
          if (!lims[k] || run_sluice(base, lims[k], w->keyspace, 50, 2000, &one) != 0) rc = -1;
        }
        for (int rep = 0; rep < REPS && rc == 0; rep++)
          for (int k = 0; k < 2 && rc == 0; k++) {
            rc = run_sluice(base, lims[k], w->keyspace, lv->in_flight, lv->requests, &one);
            keep_best(&best[k], &one);
            if (have_rb && cl_rb(k ? &cl.node[0] : rs, k, sha, key, w, lv, &one) == 0)
              keep_best(&rb[k], &one);
          }
        for (int k = 0; k < 2; k++) sluice_limiter_free(lims[k]);
        if (rc == 0)
          bench_table_row(t, "%s|%s|%d|%.0f|%.3f|%.3f|%.2f|%.0f|%.3f|%.3f|%.2f|%.2f|%.0f|%.0f",
                          w->name, sluice_rl_algo_name(algos[ai]), lv->in_flight, best[0].rps,
                          best[0].p50_ms, best[0].p99_ms, best[0].cpu_us, best[1].rps,
                          best[1].p50_ms, best[1].p99_ms, best[1].cpu_us, best[1].rps / best[0].rps,
                          rb[0].rps, rb[1].rps);
        if (rc == 0)
          bench_table_row(cpu, "%s|%s|%d|%.2f|%.1f|%.2f|%.1f|%.2f|%.2f|%.1f|%.2f|%.1f|%.2f",
                          w->name, sluice_rl_algo_name(algos[ai]), lv->in_flight, best[0].cpu_us,
                          best[0].per_sleep, best[1].cpu_us, best[1].per_sleep,
                          best[1].cpu_us / best[0].cpu_us, rb[0].cpu_us, rb[0].per_sleep,
                          rb[1].cpu_us, rb[1].per_sleep,
                          rb[0].cpu_us > 0 ? rb[1].cpu_us / rb[0].cpu_us : 0);
      }
      bench_redis_flush(rs);
      bench_cluster_flush(&cl);
    }
  }
  if (rc == 0) bench_table_print(t, stdout);
  if (rc == 0) bench_table_print(cpu, stdout);
  bench_table_free(t);
  bench_table_free(cpu);
  printf("cluster: rate-limiter-flexible not run on the cluster (not measured here)\n");
  for (int k = 0; k < 2; k++) sluice_client_free(cs[k]);
  return rc;
}

/* bench_limiter [ALGO...] [hot|random]: only the named algorithms and
 * workloads (the Node peer needs fixed). */
int main(int argc, char **argv) {
  bench_redis rs;
  if (bench_redis_start(&rs) != 0) return 1;
  if (bench_can_pin()) bench_pin_self(BENCH_CPU_CLIENT);
  printf(
      "limiter: Redis at %s, %d CPUs, pinning %s; random: %d keys, limit %d per %d ms; "
      "hot: 1 key, limit %d per %d ms (sliding-log: %u per %d ms)\n",
      rs.url, bench_ncpus(), bench_can_pin() ? "on (server CPU 0, client CPU 1)" : "off", KEYSPACE,
      LIMIT, PERIOD_MS, HOT_LIMIT, PERIOD_MS, SLUICE_RL_LOG_ENTRIES_MAX, HOT_LOG_PERIOD_MS);
  struct event_base *base = event_base_new();
  sluice_client_options o;
  sluice_client_options_init(&o);
  o.replay_off = bench_replay_off();
  o.url = rs.url;
  sluice_client *c = NULL;
  int rc = base && sluice_client_new(base, &o, &c) == SLUICE_OK ? wait_connected(base, c) : -1;
  const char *cols[] = {"keys",    "algorithm", "in flight",     "sluice/s", "p50 ms", "p99 ms",
                        "allowed", "CPU us/op", "redis-bench/s", "p50 ms",   "p99 ms", "CPU us/op",
                        "ratio",   NULL};
  bench_table *t = bench_table_new(
      "rate limiters: sluice vs redis-benchmark (same script, KEYS/ARGV of a one-request call); "
      "client CPU us/op",
      cols);
  result fixed[2][3];
  memset(fixed, 0, sizeof fixed);
  for (size_t wi = 0; wi < 2 && rc == 0; wi++) {
    if (!selected(argc, argv, workloads[wi].name, 1)) continue;
    for (size_t ai = 0; ai < 4 && rc == 0; ai++) {
      if (!selected(argc, argv, sluice_rl_algo_name(algos[ai]), 0)) continue;
      for (size_t li = 0; li < 3 && rc == 0; li++) {
        result other;
        rc = bench_pair(&rs, base, c, wi, ai, li, t, ai == 0 ? &fixed[wi][li] : &other);
      }
    }
  }
  if (rc == 0) bench_table_print(t, stdout);
  bench_table_free(t);
  int want_node = rc == 0 && selected(argc, argv, "fixed", 0); /* it compares fixed windows */
  if (want_node && bench_node_available()) node_table(&rs, fixed);
  else if (want_node)
    printf("limiter: node peer skipped (node or bench/node/node_modules missing)\n");
  if (rc == 0 && cluster_run(&rs, base, argc, argv) != 0) rc = -1;
  if (c) sluice_client_free(c);
  if (base) {
    event_base_dispatch(base);
    event_base_free(base);
  }
  bench_redis_stop(&rs);
  if (rc != 0) fprintf(stderr, "bench_limiter: failed\n");
  return rc == 0 ? 0 : 1;
}
