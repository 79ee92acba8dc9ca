/* One data node: one command connection, every route goes to it. Its
 * address is the endpoint's, or what a finder (topo_sentinel.c) puts
 * there. */
#include <stdio.h>
#include <string.h>

#include "base/list.h"
#include "base/util.h"
#include "net/topo_one.h"

int sluice__topo_says(const redisReply *err, const char *word) {
  size_t n = strlen(word);
  return err->len >= n && memcmp(err->str, word, n) == 0;
}

int sluice__topo_not_master(const redisReply *err) {
  return sluice__topo_says(err, "READONLY") || sluice__topo_says(err, "LOADING") ||
         sluice__topo_says(err, "MASTERDOWN");
}

static sluice__topo_one *of(sluice__topo *t) { return (sluice__topo_one *)t; }
static const sluice__topo_one *of_c(const sluice__topo *t) { return (const sluice__topo_one *)t; }

/* ---- the connection's events ---------------------------------------------- */

/* Up: a node other than the previous one is news before anything else. */
static void one_up(sluice__conn *conn, void *ud) {
  sluice__topo *t = ud;
  if (conn->new_node) t->cfg.ev.node_changed(-1, -1, t->cfg.ev.userdata);
  t->cfg.ev.conn_state(conn, 1, t->cfg.ev.userdata);
  t->cfg.ev.up(conn, t->cfg.ev.userdata);
}

static void one_down(sluice__conn *conn, int status, void *ud) {
  sluice__topo_one *o = ud;
  if (o->finder) o->finder->stale(o);
  o->t.cfg.ev.conn_state(conn, 0, o->t.cfg.ev.userdata);
  o->t.cfg.ev.down(conn, status, o->t.cfg.ev.userdata);
}

void sluice__topo_one_routes(sluice__topo_one *o) { o->t.cfg.ev.routes(0, o->t.cfg.ev.userdata); }

/* A context exists: steps may be routed to it (they wait for its handshake). */
static void one_context(sluice__conn *conn, void *ud) { sluice__topo_one_routes(ud); }

static int one_ready(sluice__conn *conn, void *ud) {
  sluice__topo_one *o = ud;
  return !o->finder || o->finder->ready(o);
}

/* ---- the operations ------------------------------------------------------- */

static void one_start(sluice__topo *t) { sluice__conn_start(&of(t)->conn); }

static void one_free(sluice__topo *t) {
  sluice__topo_one *o = of(t);
  if (o->finder) o->finder->free(o);
  sluice__conn_shutdown(&o->conn);
  sluice__free(o);
}

static void one_drained(sluice__conn *conn, void *ud) {
  sluice__topo_one *o = ud;
  o->drained(o->drained_ud);
}

static void one_drain(sluice__topo *t, unsigned timeout_ms, void (*done)(void *ud), void *ud) {
  sluice__topo_one *o = of(t);
  if (o->finder) o->finder->stop(o);
  o->drained = done;
  o->drained_ud = ud;
  sluice__conn_drain(&o->conn, timeout_ms, one_drained);
}

/* Steps wait for the first context (its address may be being looked up);
 * once it failed they fail fast (the engine reads the connection's state). */
static int one_routing(const sluice__topo *t) {
  const sluice__conn *conn = &of_c(t)->conn;
  return !conn->ac && !conn->failed ? SLUICE_TOPO_WAIT : SLUICE_TOPO_READY;
}

static int one_up_now(const sluice__topo *t) { return of_c(t)->conn.state == SLUICE_CONN_UP; }
static int one_route_of(const sluice__topo *t, const char *key, size_t len) { return -1; }
static sluice__conn *one_conn(sluice__topo *t, int route) { return &of(t)->conn; }

static sluice__conn *one_conn_at(sluice__topo *t, const char *addr, size_t len,
                                 const sluice__conn *like) {
  return NULL; /* no ASK without a cluster */
}

/* A replica, or a node still loading or cut off from its master: the step
 * did not run. Drop the connection: the master is looked for again. */
static void one_decide(sluice__topo *t, sluice__conn *from, const redisReply *err,
                       sluice__topo_decision *d) {
  d->verdict = SLUICE_TOPO_ANSWER;
  if (!sluice__topo_not_master(err)) return;
  sluice__conn_fail(from, err->str);
  d->verdict = SLUICE_TOPO_NOT_MASTER;
}

static int one_address(sluice__topo *t, int route, const char **host, int *port) {
  if (of(t)->finder && !of(t)->finder->ready(of(t))) return 0;
  *host = t->cfg.net.endpoint->host;
  *port = t->cfg.net.endpoint->port;
  return 1;
}

static void one_stale(sluice__topo *t) {
  if (of(t)->finder) of(t)->finder->stale(of(t));
}

static void one_doubt(sluice__topo *t, int on) {
  if (of(t)->finder) of(t)->finder->doubt(of(t), on);
}

static void one_peer_up(sluice__topo *t, const sluice__conn *peer) {
  if (sluice__conn_same_node(peer, &of(t)->conn)) sluice__conn_retry_early(&of(t)->conn);
}

static const char *one_error(const sluice__topo *t) {
  return of_c(t)->finder ? of_c(t)->finder->error(of_c(t)) : "";
}

static int one_node_route(const sluice__topo *t, unsigned i) { return i == 0 ? -1 : -2; }

static void one_where(const sluice__topo *t, char *buf, size_t size) {
  const sluice__endpoint *ep = t->cfg.net.endpoint;
  if (ep->unix_path) snprintf(buf, size, "%s", ep->unix_path);
  else snprintf(buf, size, "%s:%d", ep->host ? ep->host : "?", ep->port);
}

static const sluice__topo_ops one_ops = {
    .name = "one node",
    .start = one_start,
    .free = one_free,
    .drain = one_drain,
    .routing = one_routing,
    .up = one_up_now,
    .route_of = one_route_of,
    .conn = one_conn,
    .conn_at = one_conn_at,
    .decide = one_decide,
    .address = one_address,
    .stale = one_stale,
    .doubt = one_doubt,
    .peer_up = one_peer_up,
    .error = one_error,
    .node_route = one_node_route,
    .where = one_where,
};

sluice__topo_one *sluice__topo_one_new(struct event_base *base, const sluice__topo_config *cfg,
                                       const sluice__topo_finder *finder, size_t size) {
  sluice__topo_one *o = sluice__calloc(1, size);
  if (!o) return NULL;
  o->t.ops = &one_ops;
  o->t.cfg = *cfg;
  o->finder = finder;
  sluice__conn_config cc = {.net = cfg->net,
                            .scripts = cfg->scripts,
                            .on_up = one_up,
                            .on_down = one_down,
                            .ready = one_ready,
                            .on_context = one_context,
                            .count_replicas = cfg->count_replicas,
                            .watch_link = 1,
                            .userdata = o};
  if (sluice__conn_init(&o->conn, base, &cc) != 0) {
    sluice__free(o);
    return NULL;
  }
  return o;
}

sluice__topo *sluice__topo_single_new(struct event_base *base, const sluice__topo_config *cfg) {
  sluice__topo_one *o = sluice__topo_one_new(base, cfg, NULL, sizeof *o);
  return o ? &o->t : NULL;
}
