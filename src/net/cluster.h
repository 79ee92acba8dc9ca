/*
 * The client's view of a Redis Cluster (redis+cluster:// URLs): the slot
 * map, one pipelined command connection per master, and the map's upkeep.
 *
 *  - The map comes from the cluster itself (CLUSTER SLOTS), asked of any
 *    node that is up; at first of the seed nodes, later of any node the map
 *    named (masters and replicas), so the client finds its way back even
 *    when every seed is gone.
 *  - A master's connection is created when a step first goes to one of its
 *    slots, loads the scripts in its handshake (a promoted replica never saw
 *    SCRIPT LOAD), and is reused across refreshes, found by address.
 *    Connections to nodes that no longer own slots are drained and freed.
 *  - Refreshes: one at a time, at most one per REFRESH_MIN_MS, on MOVED and
 *    on every connection failure. A MOVED also patches its one slot at once,
 *    so the step that met it can be resent before the refresh answers.
 */
#ifndef SLUICE_CLUSTER_H
#define SLUICE_CLUSTER_H

#include <stddef.h>

#include "net/conn.h"
#include "net/slot.h"
#include "net/url.h"

struct event_base;
struct sluice__script;
typedef struct sluice__cluster sluice__cluster;

typedef struct sluice__cluster_config {
  sluice__net_config net; /* endpoint: seeds, credentials, TLS */
  const struct sluice__script *const *scripts;
  int count_replicas; /* every node's handshake asks (conn.h) */
  /* A master's connection came up / went down (as conn.h's on_up/on_down). */
  void (*node_up)(sluice__conn *conn, void *userdata);
  void (*node_down)(sluice__conn *conn, int status, void *userdata);
  /* Any node's connection (a master's, an ASK's target...) finished its
   * handshake (up 1) or failed or was lost (up 0): before node_up or
   * node_down, when those follow. */
  void (*conn_state)(sluice__conn *conn, int up, void *userdata);
  /* A new map is in place (or no map could be had: then
   * sluice__cluster_error says why): steps waiting for one may go, blocking
   * waits re-resolve their node. */
  void (*map_changed)(void *userdata);
  /* Slots lo..hi are served by another node than before: a new owner in
   * the map (a failover, a MOVED, a migration), or their master answers
   * with a new run_id (a restart). Called once per change, before the new
   * map is announced (map_changed) or the restarted master's node_up. */
  void (*slots_changed)(int lo, int hi, void *userdata);
  void *userdata;
} sluice__cluster_config;

sluice__cluster *sluice__cluster_new(struct event_base *base, const sluice__cluster_config *cfg);
/* Shuts every connection down (pending replies are dropped) and frees. */
void sluice__cluster_free(sluice__cluster *cl);
/* Close gracefully: every connection drains (conn.h), then done runs. */
void sluice__cluster_drain(sluice__cluster *cl, unsigned timeout_ms, void (*done)(void *userdata),
                           void *userdata);

/* 1 once a map is known. */
int sluice__cluster_known(const sluice__cluster *cl);
/* 0 when no map is known and every node tried has failed (steps waiting
 * for a map should fail now); 1 otherwise. */
int sluice__cluster_reachable(const sluice__cluster *cl);
/* 1 when a map is known and no master connection in use is down. */
int sluice__cluster_up(const sluice__cluster *cl);
/* The command connection of the master serving slot (slot < 0: the master
 * of the lowest slot),
 * started if it was not; NULL when no map is known yet or no node serves
 * the slot (a refresh is then under way). */
sluice__conn *sluice__cluster_conn(sluice__cluster *cl, int slot);
/* The connection to the node at "host:port" (created and started if
 * needed), for ASK; the empty host means `like`'s host. NULL on a bad
 * address or OOM. */
sluice__conn *sluice__cluster_conn_at(sluice__cluster *cl, const char *addr, size_t len,
                                      const sluice__conn *like);
/* MOVED slot addr (met on conn `from`): the slot is served there from now
 * on, and the whole map is refreshed in the background. 0, or -1 for a bad
 * address. */
int sluice__cluster_moved(sluice__cluster *cl, unsigned slot, const char *addr, size_t len,
                          const sluice__conn *from);
/* "MOVED <slot> <host:port>" or "ASK ..." (str[0..len)): its parts, 0; or
 * -1 when it does not read so. */
int sluice__cluster_parse_redirect(const char *str, size_t len, unsigned *slot, const char **addr,
                                   size_t *alen);
/* Ask for a fresh map (a connection failed, or a step met a sign of
 * failover). Throttled, one at a time. */
void sluice__cluster_refresh(sluice__cluster *cl);
/* peer, a connection of the client's own, finished its handshake: the
 * connection to the node at its address retries early (conn.h). */
void sluice__cluster_peer_up(sluice__cluster *cl, const sluice__conn *peer);
/* The address the slot's master has in the map (host, port), for the
 * blocking connections; 0 when none is known (a refresh is requested). */
int sluice__cluster_address(sluice__cluster *cl, unsigned slot, const char **host, int *port);
/* The lowest slot of the i-th master (ordered by that slot), or -1 when
 * there are no more: lets a scan visit each master once. */
int sluice__cluster_master_slot(const sluice__cluster *cl, unsigned i);
/* Why no map could be had or the last refresh failed ("" if none). */
const char *sluice__cluster_error(const sluice__cluster *cl);

#endif
