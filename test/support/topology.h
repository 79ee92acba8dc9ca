/*
 * Topology harness: a private Redis Cluster or a Sentinel-managed master for
 * a test case, so every primitive can be run against both.
 *
 * What it offers:
 *  - th_cluster_start: N = masters x (1 + replicas) redis-server processes on
 *    free loopback TCP ports (each port and its cluster bus port, +10000,
 *    probed; a node that still cannot bind is started again on another port),
 *    joined with `redis-cli --cluster create`, and returns only once every
 *    node reports cluster_state:ok, all 16384 slots, the same slot map and
 *    the same roles, and every replica's link to its master is up.
 *    `seeds` is "127.0.0.1:p1,127.0.0.1:p2,..." for redis+cluster:// URLs.
 *  - th_crc16 / th_keyslot: the cluster spec's CRC16 (XMODEM) and hash tags;
 *    th_cluster_master_for_slot / _for_key: the owning master per the last
 *    agreed slot map; th_cluster_migrate_slot: move one slot with its keys
 *    to another master; th_cluster_failover (CLUSTER FAILOVER on a replica),
 *    th_cluster_pause_master (SIGSTOP until the replica takes over),
 *    th_cluster_kill_master, th_cluster_resume_node.
 *  - th_sentinel_start: a master, one replica and three sentinels (quorum 2,
 *    down-after 1000 ms, failover-timeout 5000 ms), returning once every
 *    sentinel knows the master, the replica and the two other sentinels.
 *    `sentinels` is "127.0.0.1:s1,..." for redis+sentinel:// URLs. Helpers:
 *    the current master (SENTINEL get-master-addr-by-name), a forced
 *    SENTINEL FAILOVER, SIGSTOP or kill of the master waiting for the
 *    automatic failover, waiting for the old master to be made a replica,
 *    stop/restart of a replica, kill of one sentinel, and stop. The
 *    sentinels' INFO, hello and PING periods are shortened with SENTINEL
 *    DEBUG (1 s, 500 ms, 250 ms; see topology.c) unless
 *    TH_SENTINEL_DEFAULT_TIMERS=1.
 *
 * TH_TOPOLOGY_KEEP=1 keeps the directories (logs, nodes.conf,
 * sentinel.conf) after stop, to look at a failure.
 *
 * Every helper waits with a bound (polling every 20-50 ms) and, when the
 * bound passes, prints why on stderr ("# topology: ...") and returns -1 or
 * NULL; the case then fails with TH_ASSERT.
 *
 * Processes: each server runs in its own process group, in its own
 * directory under $TMPDIR/sluice-topo-<pid>-XXXXXX, and is killed (SIGCONT +
 * SIGKILL to the group) and its directory removed by the stop functions.
 * A case's child may also die without stopping (th_fail's _exit, the case's
 * time limit): the servers then die with it (PR_SET_PDEATHSIG), and the
 * directories are swept when the test binary exits (th_topology_init's
 * atexit; servers still running there are killed too, found by their pid
 * files and checked by their working directory). Directories left by a test
 * binary that was itself killed are swept by the next th_topology_init.
 * Call th_topology_init once in main, before th_main.
 */
#ifndef SLUICE_TEST_TOPOLOGY_H
#define SLUICE_TEST_TOPOLOGY_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include <hiredis/hiredis.h>

typedef struct th_node {
  pid_t pid; /* 0: not running (never started, stopped, or killed) */
  int port;
  int paused;     /* SIGSTOPped by a helper: skipped by the waits */
  int cut;        /* its port's packets dropped (th_sentinel_cut_master): skipped too */
  char dir[200];  /* its own directory (config, log, pid file) */
  char conf[224]; /* sentinels: their writable config file */
  char addr[24];  /* "127.0.0.1:<port>" */
  char id[41];    /* cluster node id, "" elsewhere */
  int is_master;  /* role as last agreed (cluster) or reported (sentinel) */
  int master;     /* cluster replicas: index of their master, else -1 */
} th_node;

#define TH_CLUSTER_MAX 12
#define TH_CLUSTER_SLOTS 16384

typedef struct th_cluster {
  int n, masters, replicas;
  char root[160];
  th_node node[TH_CLUSTER_MAX];
  char seeds[TH_CLUSTER_MAX * 24];
  short slot_owner[TH_CLUSTER_SLOTS]; /* node index, from the last agreed map */
} th_cluster;

typedef struct th_sentinel {
  char name[64];
  char root[160];
  th_node data[2]; /* [0] started as the master, [1] as its replica */
  th_node sent[3];
  char sentinels[80];
} th_sentinel;

/* Sweeps what earlier (killed) runs left, and registers the sweep at exit
 * of this process. Call in main before th_main. */
void th_topology_init(void);
/* redis-server and redis-cli both found (the topologies need both). */
int th_topology_available(void);
/* main of a test binary that starts topologies: checks that the servers
 * are there (missing is a failure under CI=true, else a skip), sweeps
 * (th_topology_init) and runs the cases (th_main). */
struct th_case;
int th_topology_main(int argc, char **argv, const struct th_case *cases);
/* The same on a table that is not NULL-terminated (as th_main_n), and as
 * the binary's main (as TH_MAIN). */
int th_topology_main_n(int argc, char **argv, const struct th_case *cases, size_t n);
#define TH_TOPOLOGY_MAIN(cases)                                                 \
  int main(int argc, char **argv) {                                             \
    return th_topology_main_n(argc, argv, cases, sizeof cases / sizeof *cases); \
  }
/* Topology servers of this test binary still running (any case, any
 * topology): for the final "nothing leaked" check. */
int th_topology_live_processes(void);

/* Kills and removes everything this test binary's topologies left (the
 * atexit sweep, on demand); only when none of them is in use. */
void th_topology_sweep(void);
/* Directories of this test binary's topologies present now. */
int th_topology_dirs(void);

/* A sync connection to a node (connect timeout 2 s, command timeout 5 s);
 * NULL if it cannot connect. */
redisContext *th_node_connect(const th_node *n);
/* One command on a fresh th_node_connect; NULL if it cannot connect or the
 * connection fails. The reply may be an error reply. */
redisReply *th_node_command(const th_node *n, const char *fmt, ...);
redisReply *th_node_vcommand(const th_node *n, const char *fmt, va_list ap);

/* "ACL SETUSER user reset on >pass" and the space-separated words of rule
 * (leaving out the word "+without", or "without" itself when it is a
 * channel rule "&...", when not NULL) on node n, as the default user;
 * fails the case if Redis refuses. */
void th_node_acl_user(const th_node *n, const char *user, const char *pass, const char *rule,
                      const char *without);

/* CRC16-CCITT (XMODEM: poly 0x1021, init 0), as the cluster spec defines. */
uint16_t th_crc16(const void *buf, size_t len);
/* The key's hash slot: of the part between the first '{' and the next '}'
 * when that part is not empty, else of the whole key. */
unsigned th_keyslot(const void *key, size_t len);

/* 0 on success, -1 on failure (printed), -2 when redis-server or redis-cli
 * is missing. masters >= 3 (a failover needs a majority of masters). */
int th_cluster_start(th_cluster *cl, int masters, int replicas_per_master);
void th_cluster_stop(th_cluster *cl);
th_node *th_cluster_master_for_slot(th_cluster *cl, unsigned slot);
th_node *th_cluster_master_for_key(th_cluster *cl, const char *key);
/* First live replica of master m (per the last agreed map), or NULL. */
th_node *th_cluster_replica_of(th_cluster *cl, const th_node *m);
/* Moves slot (with its keys) from its master to `to` and waits until every
 * node agrees. Returns the number of keys moved, or -1. */
long th_cluster_migrate_slot(th_cluster *cl, unsigned slot, th_node *to);
/* CLUSTER FAILOVER on one of m's replicas; waits until it is master, m its
 * replica and the cluster ok. Returns the new master or NULL. */
th_node *th_cluster_failover(th_cluster *cl, th_node *m);
/* SIGSTOP m; waits until one of its replicas has taken over (the others
 * agreeing, cluster ok). Returns the new master or NULL; m stays stopped. */
th_node *th_cluster_pause_master(th_cluster *cl, th_node *m);
/* SIGKILL m; the same wait. m stays dead (pid 0). */
th_node *th_cluster_kill_master(th_cluster *cl, th_node *m);
/* Start killed node n again as it was (port, directory, nodes.conf), empty
 * (no persistence): it claims its old role and slots until the others
 * tell it otherwise. Returns once it answers, without waiting for that. 0
 * or -1. */
int th_cluster_restart_node(th_cluster *cl, th_node *n);
/* SIGCONT a paused node; waits until it has rejoined (as a replica, if it
 * was failed over) and the whole cluster agrees again. 0 or -1. */
int th_cluster_resume_node(th_cluster *cl, th_node *n);
/* A failover that loses writes: th_cluster_hold_replicas pauses (SIGSTOP)
 * m's live replicas and makes m drop their links (CLIENT KILL TYPE
 * replica), so what m acknowledges from then on reaches none of them; th_cluster_kill_held then kills m, resumes them and waits until one
 * has taken over (as th_cluster_kill_master). Keep the hold short (well
 * under the node timeout): a replica that seems down is not promoted. */
int th_cluster_hold_replicas(th_cluster *cl, th_node *m);
th_node *th_cluster_kill_held(th_cluster *cl, th_node *m);
/* Waits until every live node agrees (state ok, same map and roles,
 * replicas linked). 0 or -1. */
int th_cluster_wait_ok(th_cluster *cl, unsigned timeout_ms);

/* 0, -1 (printed) or -2 (redis-server missing). */
int th_sentinel_start(th_sentinel *s, const char *master_name);
void th_sentinel_stop(th_sentinel *s);
/* The master as sentinel s1 (or the first one that answers) reports it
 * (SENTINEL get-master-addr-by-name), matched to a data node; NULL if
 * none answers or the address is not one of ours. */
th_node *th_sentinel_master(th_sentinel *s);
/* The data node that is not th_sentinel_master. */
th_node *th_sentinel_replica(th_sentinel *s);
/* SENTINEL FAILOVER; waits until every sentinel reports the replica as the
 * master and it answers ROLE master. New master or NULL. The old master is
 * not a replica yet: see th_sentinel_wait_replica. */
th_node *th_sentinel_failover(th_sentinel *s);
/* Waits until the data node that is not the master is its linked replica
 * (ROLE, listed by the master) and every sentinel lists it as a linked
 * replica and knows the other sentinels: after a failover, before WAIT
 * tests or another failover (which needs a good replica). 0 or -1. */
int th_sentinel_wait_replica(th_sentinel *s, unsigned timeout_ms);
/* SIGSTOP / SIGKILL the master; waits for the automatic failover (every
 * sentinel reports the replica, which answers ROLE master). New master or
 * NULL. The old master stays paused / dead. */
th_node *th_sentinel_pause_master(th_sentinel *s);
th_node *th_sentinel_kill_master(th_sentinel *s);
/* SIGCONT a paused data node; waits until the sentinels have made it a
 * linked replica of the current master. 0 or -1. */
int th_sentinel_resume_node(th_sentinel *s, th_node *n);
/* A partition of the master: every TCP packet to or from its port dropped
 * (iptables, so only inside a network namespace of the caller's own: the
 * rules hold for the whole namespace), the master alive behind it; waits
 * for the failover. New master or NULL. th_sentinel_heal_node drops the
 * rules and waits until the sentinels have made the node a linked replica
 * of the current master: 0 or -1. */
th_node *th_sentinel_cut_master(th_sentinel *s);
int th_sentinel_heal_node(th_sentinel *s, th_node *n);
/* The same loss of writes: th_sentinel_hold_replica pauses the replica
 * and cuts its link;
 * th_sentinel_kill_held kills the master, resumes the replica and waits for
 * the automatic failover to it. New master or NULL. */
int th_sentinel_hold_replica(th_sentinel *s);
th_node *th_sentinel_kill_held(th_sentinel *s);
/* Kill the replica; start it again (same port, empty) as a replica of the
 * current master and wait until its link is up and the master lists it. */
int th_sentinel_replica_stop(th_sentinel *s);
int th_sentinel_replica_restart(th_sentinel *s);
/* Kill sentinel i (0..2); the others go on without it (they still count it
 * among the sentinels they know). 0, or -1 if it was not running. */
int th_sentinel_stop_one(th_sentinel *s, int i);

#endif
