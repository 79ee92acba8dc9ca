/*
 * The topology layer: where a client's steps go, behind one table of
 * operations (libevent's bufferevent_ops is the model). One backend per
 * file: topo_single.c (one Redis), topo_sentinel.c (the master Sentinel
 * names) and topo_cluster.c (a cluster's slots). Its users, the op engine
 * (core/engine.c) and the blocker (core/blocker.c), never ask which backend
 * they have.
 *
 * A backend routes a key (a route: a hash slot, or -1 for "any node") to a
 * connection, connects (handshake included) through conn.c, reports up and down
 * through the events below, and turns a node's error reply into a decision
 * (sluice__topo_decide). It never sends or resends a step itself: the
 * engine does what the decision says.
 *
 * A fourth topology is a new file with its own sluice__topo_ops, and a line
 * in sluice__topo_new choosing it from the endpoint.
 */
#ifndef SLUICE_TOPO_H
#define SLUICE_TOPO_H

#include <stddef.h>

#include <hiredis/hiredis.h>

#include "net/conn.h"
#include "net/url.h"

struct event_base;
struct sluice__script;
typedef struct sluice__topo sluice__topo;

/* What the topology tells its user, from the loop. */
typedef struct sluice__topo_events {
  /* A data connection's handshake completed / it was lost or an attempt
   * failed (conn.h's on_up and on_down). */
  void (*up)(sluice__conn *conn, void *userdata);
  void (*down)(sluice__conn *conn, int status, void *userdata);
  /* Any connection steps may be routed to (a data connection, an ASK's
   * target) finished its handshake (up 1: steps waiting for it go) or
   * failed or was lost (up 0: they fail). Before up or down. */
  void (*conn_state)(sluice__conn *conn, int up, void *userdata);
  /* Routes changed: a first connection or map exists (steps waiting for a
   * route may go), a master was named, slots moved (blocking connections
   * re-resolve); or, with none set, no route can be had (the cluster has
   * no map for us: sluice__topo_error says why) and waiting steps fail. */
  void (*routes)(int none, void *userdata);
  /* Every route's node was replaced at once (a Sentinel switch): drop the
   * connections to the old one now, it may accept writes and lose them. */
  void (*moved)(void *userdata);
  /* The node behind routes lo..hi is another one than before (-1, -1:
   * every route): a new master after a Sentinel switch, a slot's new owner
   * after a cluster failover or a MOVED, the same address answering with a
   * new run_id after a restart. Once per change, from the loop, before any
   * step goes to the new node through these routes. A run_id that could
   * not be read (INFO refused: NOPERM) hides a restart, never fails. */
  void (*node_changed)(int lo, int hi, void *userdata);
  /* Something worth a line in the client's log, at a sluice_log_level (a
   * sentinel's answer not taken, and why; a sentinel refusing to tell of
   * failovers at once). */
  void (*note)(int level, const char *what, void *userdata);
  void *userdata;
} sluice__topo_events;

typedef struct sluice__topo_config {
  sluice__net_config net;                      /* endpoint, timeouts, reconnect */
  const struct sluice__script *const *scripts; /* loaded in every handshake */
  int count_replicas;                          /* data connections ask (conn.h) */
  sluice__topo_events ev;
} sluice__topo_config;

/* sluice__topo_routing: */
enum {
  SLUICE_TOPO_NONE = -1, /* no route can be had now: steps fail */
  SLUICE_TOPO_WAIT = 0,  /* none yet (first connect, first map): steps wait */
  SLUICE_TOPO_READY = 1  /* ask sluice__topo_conn */
};

/* What to do with a step a node answered with an error. */
typedef enum sluice__topo_verdict {
  SLUICE_TOPO_ANSWER,     /* the step ran (or Redis refused it): report the error */
  SLUICE_TOPO_RESEND,     /* resend at once to the route's node (MOVED: map patched) */
  SLUICE_TOPO_ASK,        /* resend once to `addr`, after ASKING */
  SLUICE_TOPO_BACKOFF,    /* resend after a backoff (TRYAGAIN, CLUSTERDOWN...) */
  SLUICE_TOPO_NOT_MASTER, /* not a master (READONLY, LOADING...): connection dropped */
  SLUICE_TOPO_UNREADABLE  /* a redirect that does not parse */
} sluice__topo_verdict;

typedef struct sluice__topo_decision {
  sluice__topo_verdict verdict;
  const char *addr; /* ASK: "host:port" inside the reply */
  size_t addr_len;
} sluice__topo_decision;

typedef struct sluice__topo_ops {
  const char *name;
  int many; /* routes go to several nodes (a key's route picks one) */
  void (*start)(sluice__topo *t);
  void (*free)(sluice__topo *t);
  void (*drain)(sluice__topo *t, unsigned timeout_ms, void (*done)(void *ud), void *ud);
  int (*routing)(const sluice__topo *t);
  int (*up)(const sluice__topo *t);
  int (*route_of)(const sluice__topo *t, const char *key, size_t len);
  sluice__conn *(*conn)(sluice__topo *t, int route);
  sluice__conn *(*conn_at)(sluice__topo *t, const char *addr, size_t len, const sluice__conn *like);
  void (*decide)(sluice__topo *t, sluice__conn *from, const redisReply *err,
                 sluice__topo_decision *d);
  int (*address)(sluice__topo *t, int route, const char **host, int *port);
  void (*stale)(sluice__topo *t);
  void (*doubt)(sluice__topo *t, int on);
  void (*peer_up)(sluice__topo *t, const sluice__conn *peer);
  const char *(*error)(const sluice__topo *t);
  int (*node_route)(const sluice__topo *t, unsigned i);
  void (*where)(const sluice__topo *t, char *buf, size_t size);
} sluice__topo_ops;

struct sluice__topo {
  const sluice__topo_ops *ops;
  sluice__topo_config cfg;
  int closing; /* the client closes: routes are no news any more */
};

/* The backend the endpoint names (cluster seeds, a master name, or one
 * Redis); NULL on OOM. */
sluice__topo *sluice__topo_new(struct event_base *base, const sluice__topo_config *cfg);
/* Start connecting: events may fire inside this call (a unix socket
 * connects at once), so the user has stored t first. */
void sluice__topo_start(sluice__topo *t);
/* Shut every connection down (pending replies are dropped) and free. */
void sluice__topo_free(sluice__topo *t);
/* Close gracefully: no new address is looked for, connections drain
 * (conn.h), then done runs. */
void sluice__topo_drain(sluice__topo *t, unsigned timeout_ms, void (*done)(void *ud), void *ud);
/* The client closes: events about routes stop (connections are the
 * close sequence's now). */
void sluice__topo_closing(sluice__topo *t);
/* SLUICE_TOPO_NONE, _WAIT or _READY (above). */
int sluice__topo_routing(const sluice__topo *t);
/* 1 when every connection in use is up. */
int sluice__topo_up(const sluice__topo *t);
/* The route of a key: its hash slot on a cluster, else -1 (one node). */
int sluice__topo_route_of(const sluice__topo *t, const char *key, size_t len);
/* The connection serving route (started if it was not); NULL when none
 * does now (a cluster's map is being refreshed). */
sluice__conn *sluice__topo_conn(sluice__topo *t, int route);
/* The connection to "host:port" (an ASK's target), like `like`'s
 * credentials; NULL on a bad address or OOM. */
sluice__conn *sluice__topo_conn_at(sluice__topo *t, const char *addr, size_t len,
                                   const sluice__conn *like);
/* What to do with err, an error reply that came on `from`. The one place
 * that reads MOVED, ASK, TRYAGAIN, CLUSTERDOWN, READONLY, LOADING,
 * MASTERDOWN and UNBLOCKED: MOVED patches the map (and asks for a fresh
 * one), a sign of failover asks for a fresh map or master, NOT_MASTER has
 * dropped `from` already. */
void sluice__topo_decide(sluice__topo *t, sluice__conn *from, const redisReply *err,
                         sluice__topo_decision *d);
/* Where a connection of the user's own for route must go (the blocker's):
 * 1 with host and port set (host NULL: the endpoint's own, a unix socket),
 * 0 when not known yet (a `routes` event follows). */
int sluice__topo_address(sluice__topo *t, int route, const char **host, int *port);
/* A data connection failed: look for the master or map again. */
void sluice__topo_stale(sluice__topo *t);
/* on 1: the node stopped confirming writes (no replica acknowledged its
 * WAIT: cut off from them, it may be being replaced), so look for news of
 * a failover actively until on 0 (a replica acknowledged one again). */
void sluice__topo_doubt(sluice__topo *t, int on);
/* peer, a connection of the user's own (the blocker's), finished its
 * handshake: its node is back, so the topology's connection to the same
 * address, if waiting out a reconnect backoff, tries again now
 * (sluice__conn_retry_early: once per backoff episode). */
void sluice__topo_peer_up(sluice__topo *t, const sluice__conn *peer);
/* Why no route can be had, or the last lookup failed ("" if none). */
const char *sluice__topo_error(const sluice__topo *t);
/* The route of the i-th node that serves keys (a cluster: the lowest slot
 * of the i-th master), or -2 past the last: a scan visits each once. */
int sluice__topo_node_route(const sluice__topo *t, unsigned i);
/* "host:port", a socket path, or a cluster's seeds, for messages. */
void sluice__topo_where(const sluice__topo *t, char *buf, size_t size);

/* For tests: the Sentinel backend's link (NULL for the others). */
struct sluice__sentinel *sluice__topo_sentinel_link(sluice__topo *t);

/* The backends' constructors (sluice__topo_new picks one). */
sluice__topo *sluice__topo_single_new(struct event_base *base, const sluice__topo_config *cfg);
sluice__topo *sluice__topo_sentinel_new(struct event_base *base, const sluice__topo_config *cfg);
sluice__topo *sluice__topo_cluster_new(struct event_base *base, const sluice__topo_config *cfg);

#endif
