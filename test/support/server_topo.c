/* The binary's server as a cluster or a sentinel set; see server_topo.h. */
#include "server_topo.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "topology.h"

/* The behavioural cases never fail a node over, so the cluster has no
 * replicas: it starts in half the time, and a master slowed down by a
 * sanitizer can never be replaced (losing its keys) in the middle of a
 * case. Failover is test_topology's and the failover tests' subject. */
enum { CLUSTER_MASTERS = 3, CLUSTER_REPLICAS = 0 };
#define SENTINEL_MASTER_NAME "sluice-test"

static th_cluster cluster;
static th_sentinel sentinel;
static th_topo running = TH_TOPO_STANDALONE;

int th__server_topo_parse(th_topo *out) {
  const char *v = getenv("TH_TOPOLOGY");
  if (!v || !*v || strcmp(v, "standalone") == 0) *out = TH_TOPO_STANDALONE;
  else if (strcmp(v, "cluster") == 0) *out = TH_TOPO_CLUSTER;
  else if (strcmp(v, "sentinel") == 0) *out = TH_TOPO_SENTINEL;
  else {
    printf("Bail out! TH_TOPOLOGY=%s: not standalone, cluster or sentinel\n", v);
    return -1;
  }
  return 0;
}

int th__server_topo_start(th_topo kind) {
  if (!th_topology_available()) return -2;
  th_topology_init();
  int rc = -1;
  if (kind == TH_TOPO_CLUSTER) {
    rc = th_cluster_start(&cluster, CLUSTER_MASTERS, CLUSTER_REPLICAS);
    if (rc == 0) {
      /* Only the masters as seeds: the library is to find the rest. */
      size_t off = (size_t)snprintf(th_server.url, sizeof th_server.url, "redis+cluster://");
      for (int i = 0, n = 0; i < cluster.n; i++)
        if (cluster.node[i].is_master)
          off += (size_t)snprintf(th_server.url + off, sizeof th_server.url - off, "%s%s",
                                  n++ ? "," : "", cluster.node[i].addr);
    }
  } else if (kind == TH_TOPO_SENTINEL) {
    rc = th_sentinel_start(&sentinel, SENTINEL_MASTER_NAME);
    if (rc == 0)
      snprintf(th_server.url, sizeof th_server.url, "redis+sentinel://%s/%s", sentinel.sentinels,
               SENTINEL_MASTER_NAME);
  }
  if (rc == 0) running = kind;
  return rc;
}

void th__server_topo_stop(void) {
  if (running == TH_TOPO_CLUSTER) th_cluster_stop(&cluster);
  if (running == TH_TOPO_SENTINEL) th_sentinel_stop(&sentinel);
  running = TH_TOPO_STANDALONE;
}

int th__server_topo_masters(void) { return running == TH_TOPO_CLUSTER ? cluster.masters : 1; }

/* The i-th master as the cluster agreed at start (the cases move no slot). */
static th_node *cluster_master(int i) {
  for (int k = 0; k < cluster.n; k++)
    if (cluster.node[k].is_master && i-- == 0) return &cluster.node[k];
  return NULL;
}

redisContext *th__server_topo_master(int i) {
  /* Under Sentinel, ask: a case may have left the master elsewhere. */
  th_node *n = running == TH_TOPO_CLUSTER ? cluster_master(i) : th_sentinel_master(&sentinel);
  return n ? th_node_connect(n) : NULL;
}

pid_t th__server_topo_pid(const char *key) {
  th_node *n = running == TH_TOPO_CLUSTER ? th_cluster_master_for_key(&cluster, key)
                                          : th_sentinel_master(&sentinel);
  return n ? n->pid : 0;
}

/* "MOVED 3999 127.0.0.1:6381" or "ASK ...": the node's port, 0 otherwise. */
static int redirect_port(const redisReply *r, int *asking) {
  if (!r || r->type != REDIS_REPLY_ERROR) return 0;
  *asking = strncmp(r->str, "ASK ", 4) == 0;
  if (!*asking && strncmp(r->str, "MOVED ", 6) != 0) return 0;
  const char *colon = strrchr(r->str, ':');
  return colon ? atoi(colon + 1) : 0;
}

redisReply *th__server_topo_command(const char *cmd, size_t len) {
  if (running != TH_TOPO_CLUSTER) {
    redisContext *c = th__server_topo_master(0);
    redisReply *r = NULL;
    if (c && redisAppendFormattedCommand(c, cmd, len) == REDIS_OK) redisGetReply(c, (void **)&r);
    if (c) redisFree(c);
    return r;
  }
  th_node *first = cluster_master(0);
  int port = first ? first->port : 0, asking = 0;
  /* A few hops: a key mid-migration answers ASK once, then its node. */
  for (int hop = 0; port && hop < 5; hop++) {
    th_node at = {.port = port};
    redisContext *c = th_node_connect(&at);
    if (!c) return NULL;
    redisReply *r = NULL;
    if (asking) redisAppendCommand(c, "ASKING");
    if (redisAppendFormattedCommand(c, cmd, len) == REDIS_OK) {
      if (asking && redisGetReply(c, (void **)&r) == REDIS_OK) freeReplyObject(r);
      r = NULL;
      redisGetReply(c, (void **)&r);
    }
    redisFree(c);
    port = redirect_port(r, &asking);
    if (!port) return r;
    freeReplyObject(r);
  }
  return NULL;
}
