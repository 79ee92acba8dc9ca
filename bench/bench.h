/*
 * Shared helpers for sluice benchmarks (bench/bench_*.c).
 *
 * Method (see bench/README.md): redis-server runs pinned to CPU 0 and the
 * client (this process, and redis-benchmark) to CPU 1 when the machine has
 * two or more CPUs and taskset exists; compare numbers only as ratios taken
 * in the same run.
 *
 * A benchmark binary calls bench_redis_start(), which starts a private
 * redis-server on a free TCP port of 127.0.0.1 — unless SLUICE_BENCH_REDIS
 * ("host:port", set by bench/run.sh) names a server to share, which it then
 * uses and never stops.
 */
#ifndef SLUICE_BENCH_H
#define SLUICE_BENCH_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/types.h>

#include <sluice/client.h>

#include "lua_scripts.h"

/* CPU for redis-server and CPU for the client side. */
#define BENCH_CPU_SERVER 0
#define BENCH_CPU_CLIENT 1

typedef struct bench_redis {
  pid_t pid; /* 0 when the server is shared (not ours to stop) */
  char host[64];
  int port;
  char url[96];  /* "redis://host:port", for sluice_client_new */
  char dir[128]; /* private temp dir of a server we started */
} bench_redis;

/* Number of online CPUs (at least 1). */
int bench_ncpus(void);
/* Whether pinning applies: 2+ CPUs and taskset on PATH. */
int bench_can_pin(void);
/* Pin the calling process to one CPU. Returns 0, or -1 (errno set). */
int bench_pin_self(int cpu);

/* Start (or attach to, see above) a redis-server and wait until it answers
 * PING. Returns 0, or -1 with a message on stderr. */
int bench_redis_start(bench_redis *r);
/* Stop a server bench_redis_start started (no-op for a shared one). */
void bench_redis_stop(bench_redis *r);
/* FLUSHALL on r; returns 0 or -1. */
int bench_redis_flush(const bench_redis *r);

/* SCRIPT LOAD one embedded script (e.g. &sluice__lua_sem_acquire) into r and
 * copy its SHA1 into sha (41 bytes). Returns 0, or -1 when the server refuses
 * it or the returned SHA differs from the one computed at build time. */
int bench_script_load(const bench_redis *r, const sluice__script *script, char sha[41]);

typedef struct bench_rb_opts {
  int clients;  /* -c, 0: 50 */
  int requests; /* -n, 0: 100000 */
  int pipeline; /* -P, 0: 1 */
  int keyspace; /* -r: replace __rand_int__ in keys/args; 0: off */
  int cluster;  /* --cluster: r is one seed; a key must contain "{tag}",
                      which each connection replaces with a tag of a slot of
                      its node (connections spread over the masters);
                      run with --threads 1 */
} bench_rb_opts;

typedef struct bench_rb_result {
  double rps;
  double avg_ms, p50_ms, p99_ms, max_ms;
} bench_rb_result;

/* Whether redis-benchmark is on PATH. */
int bench_have_redis_benchmark(void);
/* Run redis-benchmark against r (pinned to BENCH_CPU_CLIENT when possible)
 * with the command argv[0..argc-1], e.g. {"EVALSHA", sha, "1", "k", "5"},
 * and parse its --csv line. Returns 0, or -1 if it failed (e.g. NOSCRIPT)
 * with its output on stderr. */
int bench_redis_benchmark(const bench_redis *r, const bench_rb_opts *opts, int argc,
                          const char *const *argv, bench_rb_result *out);
/* The same for "EVALSHA <sha> <numkeys> <keys_and_args...>". */
int bench_evalsha(const bench_redis *r, const bench_rb_opts *opts, const char *sha, int numkeys,
                  int nargs, const char *const *keys_and_args, bench_rb_result *out);

/* Latency recorder: samples in microseconds. */
typedef struct bench_lat bench_lat;
/* Returns a recorder to free with bench_lat_free(), or NULL on ENOMEM. */
bench_lat *bench_lat_new(void);
void bench_lat_free(bench_lat *l);
/* Returns 0, or -1 on ENOMEM (the sample is dropped). */
int bench_lat_add(bench_lat *l, double us);
size_t bench_lat_count(const bench_lat *l);
/* Percentile p in [0, 100] (nearest rank); 0 when empty. */
double bench_lat_pct(bench_lat *l, double p);
double bench_lat_max(bench_lat *l);
double bench_lat_mean(const bench_lat *l);
void bench_lat_reset(bench_lat *l);

/* Monotonic clock in microseconds. */
uint64_t bench_now_us(void);

/* SLUICE_BENCH_REPLAY_OFF=1: clients made with replay_off, to compare the
 * normal path's cost with and without the record of unreplicated writes. */
int bench_replay_off(void);

/* SLUICE_BENCH_REPLICA_ACK_OFF=1: clients made with
 * sluice_client_set_replica_ack(c, 0), to measure what waiting for a
 * replica's acknowledgement of grants and renewals costs (bench/run.sh
 * --replica gives the server one). */
void bench_replica_ack(sluice_client *c);

/* CPU time (user + system, getrusage) spent over a phase, per operation:
 *   bench_cpu c = bench_cpu_start();  ... run ops ...
 *   double self = bench_cpu_us_per_op(&c, ops);
 * self counts this process (the library under test); children counts the
 * children waited for during the phase (redis-benchmark, a Node peer).
 * Sleeps are voluntary context switches: the process had nothing to do
 * until a server answered. Each one ends in a wake-up, which on a virtual
 * machine costs tens of microseconds of the sleeper's CPU. */
typedef struct bench_cpu {
  uint64_t self_us, children_us;
  uint64_t self_sleeps, children_sleeps;
} bench_cpu;
bench_cpu bench_cpu_start(void);
double bench_cpu_us_per_op(const bench_cpu *start, long ops);
double bench_cpu_children_us_per_op(const bench_cpu *start, long ops);
/* Operations per sleep over the phase (0: none slept). */
double bench_cpu_ops_per_sleep(const bench_cpu *start, long ops);
double bench_cpu_children_ops_per_sleep(const bench_cpu *start, long ops);

/* Tiny table printer: columns are right-aligned except the first. With
 * SLUICE_BENCH_TSV=FILE set, each printed table is also appended to FILE as
 * tab-separated values under a "# title" line (bench/charts.sh reads them). */
typedef struct bench_table bench_table;
/* cols is a NULL-terminated list of headers (copied). NULL on ENOMEM. */
bench_table *bench_table_new(const char *title, const char *const *cols);
/* Add a row; cells are separated by '|' in the formatted string, e.g.
 * bench_table_row(t, "%s|%.0f|%.2f", name, rps, ratio). */
void bench_table_row(bench_table *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void bench_table_print(const bench_table *t, FILE *out);
void bench_table_free(bench_table *t);

/* ---- the private Redis Cluster of bench/run.sh ----------------------------
 * run.sh starts 3 masters (no replicas, bench/topology.sh) pinned to the
 * server CPU and names them in SLUICE_BENCH_CLUSTER ("host:port,..."); a
 * benchmark run without it skips its cluster section. */
#define BENCH_CLUSTER_MAX 8

typedef struct bench_cluster {
  int n; /* masters */
  bench_redis node[BENCH_CLUSTER_MAX];
  char seeds[BENCH_CLUSTER_MAX * 24];
  char url[BENCH_CLUSTER_MAX * 24 + 20]; /* "redis+cluster://seeds" */
} bench_cluster;

/* 0 when attached, 1 when SLUICE_BENCH_CLUSTER is unset (prints that the
 * cluster section is skipped), -1 when a node does not answer. */
int bench_cluster_attach(bench_cluster *cl);
/* FLUSHALL on every master; 0 or -1. */
int bench_cluster_flush(const bench_cluster *cl);
/* bench_script_load on every master (EVALSHA may land on any). */
int bench_cluster_script_load(const bench_cluster *cl, const sluice__script *script, char sha[41]);

/* Absolute path of bench/topology.sh (private clusters and Sentinel sets). */
const char *bench_topology_script(void);

/* Whether the Node peer benchmarks can run: node on PATH and
 * bench/node/node_modules installed (bench/run.sh does that). */
int bench_node_available(void);
/* Absolute path of bench/node in the source tree. */
const char *bench_node_dir(void);

#endif
