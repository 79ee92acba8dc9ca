/* A Redis Cluster's slots: the map and the masters' connections are
 * cluster.c's; this file routes keys to slots and reads the cluster's
 * redirects and errors into decisions. */
#include <stdio.h>

#include "base/util.h"
#include "net/cluster.h"
#include "net/slot.h"
#include "net/topo_one.h"

typedef struct topo_cluster {
  sluice__topo t;
  sluice__cluster *cl;
} topo_cluster;

static sluice__cluster *cl_of(const sluice__topo *t) { return ((const topo_cluster *)t)->cl; }

static void node_up(sluice__conn *conn, void *ud) {
  sluice__topo *t = ud;
  t->cfg.ev.up(conn, t->cfg.ev.userdata);
}

static void conn_state(sluice__conn *conn, int up, void *ud) {
  sluice__topo *t = ud;
  t->cfg.ev.conn_state(conn, up, t->cfg.ev.userdata);
}

static void node_down(sluice__conn *conn, int status, void *ud) {
  sluice__topo *t = ud;
  t->cfg.ev.down(conn, status, t->cfg.ev.userdata);
}

static void slots_changed(int lo, int hi, void *ud) {
  sluice__topo *t = ud;
  if (!t->closing) t->cfg.ev.node_changed(lo, hi, t->cfg.ev.userdata);
}

/* A map arrived, or the cluster said it has none for us. */
static void map_changed(void *ud) {
  sluice__topo *t = ud;
  sluice__cluster *cl = ((topo_cluster *)t)->cl;
  int none = !sluice__cluster_known(cl) && *sluice__cluster_error(cl);
  if (!t->closing) t->cfg.ev.routes(none, t->cfg.ev.userdata);
}

static void cluster_start(sluice__topo *t) {} /* cluster.c asks for a map at once */

static void cluster_free(sluice__topo *t) {
  sluice__cluster_free(cl_of(t));
  sluice__free(t);
}

static void cluster_drain(sluice__topo *t, unsigned timeout_ms, void (*done)(void *ud), void *ud) {
  sluice__cluster_drain(cl_of(t), timeout_ms, done, ud);
}

static int cluster_routing(const sluice__topo *t) {
  if (sluice__cluster_known(cl_of(t))) return SLUICE_TOPO_READY;
  return sluice__cluster_reachable(cl_of(t)) ? SLUICE_TOPO_WAIT : SLUICE_TOPO_NONE;
}

static int cluster_up(const sluice__topo *t) { return sluice__cluster_up(cl_of(t)); }

static int cluster_route_of(const sluice__topo *t, const char *key, size_t len) {
  return (int)sluice__keyslot(key, len);
}

static sluice__conn *cluster_conn(sluice__topo *t, int route) {
  return sluice__cluster_conn(((topo_cluster *)t)->cl, route);
}

static sluice__conn *cluster_conn_at(sluice__topo *t, const char *addr, size_t len,
                                     const sluice__conn *like) {
  return sluice__cluster_conn_at(((topo_cluster *)t)->cl, addr, len, like);
}

/* MOVED: the slot is served elsewhere from now on (the map is patched and
 * refreshed); ASK: one step goes there; TRYAGAIN (a slot moving),
 * CLUSTERDOWN, UNBLOCKED and the signs of a failover (READONLY: our map
 * names a replica; LOADING, MASTERDOWN): later, after a fresh map. */
static void cluster_decide(sluice__topo *t, sluice__conn *from, const redisReply *err,
                           sluice__topo_decision *d) {
  sluice__cluster *cl = ((topo_cluster *)t)->cl;
  int moved = sluice__topo_says(err, "MOVED "), ask = sluice__topo_says(err, "ASK ");
  unsigned slot;
  d->verdict = SLUICE_TOPO_ANSWER;
  if (moved || ask) {
    d->verdict = SLUICE_TOPO_UNREADABLE;
    if (sluice__cluster_parse_redirect(err->str, err->len, &slot, &d->addr, &d->addr_len) != 0)
      return;
    if (moved) sluice__cluster_moved(cl, slot, d->addr, d->addr_len, from);
    d->verdict = moved ? SLUICE_TOPO_RESEND : SLUICE_TOPO_ASK;
    return;
  }
  int again = sluice__topo_says(err, "TRYAGAIN");
  if (!again && !sluice__topo_says(err, "CLUSTERDOWN") && !sluice__topo_says(err, "UNBLOCKED") &&
      !sluice__topo_not_master(err))
    return;
  if (!again) sluice__cluster_refresh(cl);
  d->verdict = SLUICE_TOPO_BACKOFF;
}

static int cluster_address(sluice__topo *t, int route, const char **host, int *port) {
  return sluice__cluster_address(((topo_cluster *)t)->cl, (unsigned)route, host, port);
}

static void cluster_stale(sluice__topo *t) { sluice__cluster_refresh(((topo_cluster *)t)->cl); }

/* Nothing to look for: a deposed master learns its demotion from the
 * cluster's gossip as soon as a partition ends, and its answers (MOVED)
 * then redirect us. */
static void cluster_doubt(sluice__topo *t, int on) {}
static void cluster_peer_up(sluice__topo *t, const sluice__conn *peer) {
  sluice__cluster_peer_up(cl_of(t), peer);
}

static const char *cluster_error(const sluice__topo *t) { return sluice__cluster_error(cl_of(t)); }

static int cluster_node_route(const sluice__topo *t, unsigned i) {
  int slot = sluice__cluster_master_slot(cl_of(t), i);
  return slot < 0 ? -2 : slot;
}

static void cluster_where(const sluice__topo *t, char *buf, size_t size) {
  const sluice__endpoint *ep = t->cfg.net.endpoint;
  snprintf(buf, size, "the cluster at %s:%d%s", ep->seed_hosts[0], ep->seed_ports[0],
           ep->nseeds > 1 ? ",..." : "");
}

static const sluice__topo_ops cluster_ops = {
    .name = "cluster",
    .start = cluster_start,
    .many = 1,
    .free = cluster_free,
    .drain = cluster_drain,
    .routing = cluster_routing,
    .up = cluster_up,
    .route_of = cluster_route_of,
    .conn = cluster_conn,
    .conn_at = cluster_conn_at,
    .decide = cluster_decide,
    .address = cluster_address,
    .stale = cluster_stale,
    .doubt = cluster_doubt,
    .peer_up = cluster_peer_up,
    .error = cluster_error,
    .node_route = cluster_node_route,
    .where = cluster_where,
};

sluice__topo *sluice__topo_cluster_new(struct event_base *base, const sluice__topo_config *cfg) {
  topo_cluster *tc = sluice__calloc(1, sizeof *tc);
  if (!tc) return NULL;
  tc->t.ops = &cluster_ops;
  tc->t.cfg = *cfg;
  sluice__cluster_config cc = {.net = cfg->net,
                               .count_replicas = cfg->count_replicas,
                               .scripts = cfg->scripts,
                               .node_up = node_up,
                               .node_down = node_down,
                               .conn_state = conn_state,
                               .map_changed = map_changed,
                               .slots_changed = slots_changed,
                               .userdata = &tc->t};
  if (!(tc->cl = sluice__cluster_new(base, &cc))) {
    sluice__free(tc);
    return NULL;
  }
  return &tc->t;
}
