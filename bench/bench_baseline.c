/*
 * Baseline: what Redis alone costs on this machine, measured in the same run
 * as the other benchmarks so their numbers can be read as ratios of it.
 *
 *  - redis-benchmark throughput of PING and of an EVALSHA of the smallest
 *    embedded script (ping.lua: one TIME call), unpipelined and pipelined;
 *  - round-trip latency of that EVALSHA from one synchronous hiredis client.
 */
#include "bench.h"

#include <stdlib.h>
#include <string.h>

#include <hiredis/hiredis.h>

#define LAT_SAMPLES 5000

static int throughput(const bench_redis *r, const char *sha, bench_table *t) {
  static const int depths[] = {1, 16};
  for (size_t i = 0; i < sizeof depths / sizeof depths[0]; i++) {
    bench_rb_opts o = {.clients = 50, .requests = 200000, .pipeline = depths[i]};
    bench_rb_result ping, eval;
    const char *ping_argv[] = {"PING"};
    if (bench_redis_benchmark(r, &o, 1, ping_argv, &ping) != 0) return -1;
    if (bench_evalsha(r, &o, sha, 0, 0, NULL, &eval) != 0) return -1;
    bench_table_row(t, "PING|%d|%.0f|%.3f|%.3f|1.00", depths[i], ping.rps, ping.p50_ms,
                    ping.p99_ms);
    bench_table_row(t, "EVALSHA ping.lua|%d|%.0f|%.3f|%.3f|%.2f", depths[i], eval.rps, eval.p50_ms,
                    eval.p99_ms, eval.rps / ping.rps);
  }
  return 0;
}

static int latency(const bench_redis *r, const char *sha, bench_table *t) {
  struct timeval tv = {2, 0};
  redisContext *c = redisConnectWithTimeout(r->host, r->port, tv);
  if (!c || c->err) {
    fprintf(stderr, "bench_baseline: connect: %s\n", c ? c->errstr : "out of memory");
    if (c) redisFree(c);
    return -1;
  }
  bench_lat *lat = bench_lat_new();
  int rc = lat ? 0 : -1;
  for (int i = 0; i < LAT_SAMPLES && rc == 0; i++) {
    uint64_t t0 = bench_now_us();
    redisReply *rep = redisCommand(c, "EVALSHA %s 0", sha);
    uint64_t t1 = bench_now_us();
    if (!rep || rep->type != REDIS_REPLY_INTEGER) rc = -1;
    if (rep) freeReplyObject(rep);
    if (rc == 0) rc = bench_lat_add(lat, (double)(t1 - t0));
  }
  if (rc == 0)
    bench_table_row(t, "EVALSHA ping.lua, 1 sync client|%zu|%.1f|%.1f|%.1f", bench_lat_count(lat),
                    bench_lat_pct(lat, 50), bench_lat_pct(lat, 99), bench_lat_max(lat));
  else fprintf(stderr, "bench_baseline: EVALSHA failed\n");
  bench_lat_free(lat);
  redisFree(c);
  return rc;
}

int main(void) {
  bench_redis r;
  if (bench_redis_start(&r) != 0) return 1;
  if (bench_can_pin()) bench_pin_self(BENCH_CPU_CLIENT);
  printf("baseline: Redis at %s, %d CPUs, pinning %s\n", r.url, bench_ncpus(),
         bench_can_pin() ? "on (server CPU 0, client CPU 1)" : "off");

  char sha[41];
  int rc = bench_script_load(&r, &sluice__lua_ping, sha);

  const char *tcols[] = {"command", "pipeline", "req/s", "p50 ms", "p99 ms", "vs PING", NULL};
  bench_table *tt = bench_table_new("baseline: redis-benchmark, 50 clients", tcols);
  if (rc == 0 && bench_have_redis_benchmark()) rc = throughput(&r, sha, tt);
  else if (rc == 0) printf("baseline: redis-benchmark not found, throughput skipped\n");

  const char *lcols[] = {"operation", "samples", "p50 us", "p99 us", "max us", NULL};
  bench_table *lt = bench_table_new("baseline: round trip", lcols);
  if (rc == 0) rc = latency(&r, sha, lt);

  if (rc == 0) {
    bench_table_print(tt, stdout);
    bench_table_print(lt, stdout);
  }
  bench_table_free(tt);
  bench_table_free(lt);
  bench_redis_stop(&r);
  return rc == 0 ? 0 : 1;
}
