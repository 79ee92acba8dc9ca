/*
 * The failover driver of bench_failover: a child process, forked before any
 * client exists (so it holds none of their sockets), that fails a topology
 * of bench/topology.sh over ROUNDS times per kind, with plain blocking
 * hiredis, while the benchmark's loop goes on.
 *
 * For each failover it writes two lines to its pipe: "start KIND T" when it
 * acts (T: bench_now_us) and "end KIND T DONE" once the new master answers
 * (ROLE master; a single Redis: PING after its restart). A replica's
 * promotion also writes "up KIND DONE" at once, before the old master is
 * restarted or resumed and before the driver waits on anything else. After a round the
 * old master is a linked replica again (restarted first if it was killed)
 * and the topology quiet, so rounds do not overlap.
 */
#ifndef BENCH_FAILOVER_DRIVER_H
#define BENCH_FAILOVER_DRIVER_H

#include <stddef.h>

enum fo_kind {
  FO_CLUSTER_MANUAL,  /* CLUSTER FAILOVER on the replica */
  FO_CLUSTER_SIGSTOP, /* SIGSTOP of the master, resumed once the replica took over */
  FO_CLUSTER_SIGKILL, /* SIGKILL of the master, restarted once the replica took over */
  FO_SENTINEL_MANUAL, /* SENTINEL FAILOVER */
  FO_SENTINEL_SIGSTOP,
  FO_SENTINEL_SIGKILL,
  FO_SINGLE_RESTART, /* one Redis (appendfsync everysec) killed -9 and restarted */
  FO_SINGLE_EMPTY,   /* one Redis without persistence killed -9: it restarts empty */
  FO_NKINDS
};

extern const char *const fo_kind_names[FO_NKINDS];

/* The Sentinel set's master name, and the name whose slot the cluster
 * kinds fail over (the workloads' names carry it as their hash tag). */
#define FO_MASTER_NAME "fomaster"
#define FO_SLOT_NAME "fo"

/* Starts `bench/topology.sh ARGS` in a new private directory (args_fmt's
 * %s is that directory; tag names it) and copies its one line (seeds,
 * sentinels, or the single server's address) into spec. The servers are
 * stopped by fo_topology_stop, also on SIGINT, SIGTERM, SIGSEGV and
 * SIGABRT (they run detached). 0 or -1. */
int fo_topology_start(const char *tag, const char *args_fmt, char *spec, size_t cap);
void fo_topology_stop(void);

/* Runs in the child: waits for a byte on go_fd, drives kinds first..last,
 * rounds times each, on the topology that spec names (cluster seeds,
 * sentinels or the single server's host:port), and exits (0: all done). */
void fo_driver(int go_fd, int out_fd, const char *spec, enum fo_kind first, enum fo_kind last,
               int rounds) __attribute__((noreturn));

#endif
