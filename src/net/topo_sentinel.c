/* The master a set of Sentinels names: one command connection, to the
 * address the Sentinel link (sentinel.c) found, asked again before every
 * reconnect and after every failure; a switch drops it at once. */
#include "base/list.h"
#include "base/util.h"
#include "net/sentinel.h"
#include "net/topo_one.h"

typedef struct topo_sentinel {
  sluice__topo_one one;
  sluice__sentinel *link; /* NULL once the client closes */
  sluice__endpoint *data; /* the endpoint whose host/port the link sets */
} topo_sentinel;

static topo_sentinel *of(sluice__topo *t) { return (topo_sentinel *)t; }

/* The connection may connect once the link named the master. */
static int ready(sluice__conn *conn, void *ud) {
  topo_sentinel *s = of(ud);
  return s->link && sluice__sentinel_address(s->link);
}

/* The sentinels named a new master: connections to the old one go now
 * (it may accept writes for seconds and lose them). */
static void master_moved(void *ud) {
  topo_sentinel *s = ud;
  if (s->one.t.closing) return;
  sluice__conn_fail(&s->one.conn, "the master moved (sentinel failover)");
  s->one.t.cfg.ev.moved(s->one.t.cfg.ev.userdata);
}

static void master_known(void *ud) {
  topo_sentinel *s = ud;
  if (s->one.t.closing) return; /* the close sequence owns the connections now */
  if (s->one.conn.state == SLUICE_CONN_RESOLVING) sluice__conn_start(&s->one.conn);
  s->one.t.cfg.ev.routes(0, s->one.t.cfg.ev.userdata);
}

static void sentinel_free(sluice__topo *t) {
  topo_sentinel *s = of(t);
  sluice__sentinel_free(s->link);
  sluice__conn_shutdown(&s->one.conn);
  sluice__free(s);
}

/* No new address is needed any more: the link goes first. */
static void sentinel_drain(sluice__topo *t, unsigned timeout_ms, void (*done)(void *ud), void *ud) {
  sluice__sentinel_free(of(t)->link);
  of(t)->link = NULL;
  sluice__topo_one_drain(t, timeout_ms, done, ud);
}

static int sentinel_address(sluice__topo *t, int route, const char **host, int *port) {
  topo_sentinel *s = of(t);
  if (!s->link || !sluice__sentinel_address(s->link)) return 0;
  *host = s->data->host;
  *port = s->data->port;
  return 1;
}

static void sentinel_stale(sluice__topo *t) {
  if (of(t)->link) sluice__sentinel_stale(of(t)->link);
}

static const char *sentinel_error(const sluice__topo *t) {
  const topo_sentinel *s = (const topo_sentinel *)t;
  return s->link ? sluice__sentinel_error(s->link) : "";
}

static const sluice__topo_ops sentinel_ops = {
    .name = "sentinel",
    .start = sluice__topo_one_start,
    .free = sentinel_free,
    .drain = sentinel_drain,
    .routing = sluice__topo_one_routing,
    .up = sluice__topo_one_up,
    .route_of = sluice__topo_one_route_of,
    .conn = sluice__topo_one_conn,
    .conn_at = sluice__topo_one_conn_at,
    .decide = sluice__topo_one_decide,
    .address = sentinel_address,
    .stale = sentinel_stale,
    .error = sentinel_error,
    .node_route = sluice__topo_one_node_route,
    .where = sluice__topo_one_where,
};

sluice__topo *sluice__topo_sentinel_new(struct event_base *base, const sluice__topo_config *cfg) {
  topo_sentinel *s = sluice__calloc(1, sizeof *s);
  if (!s) return NULL;
  s->one.t.ops = &sentinel_ops;
  /* The link writes the master's address into the client's endpoint. */
  s->data = (sluice__endpoint *)cfg->net.endpoint;
  sluice__sentinel_config sc = {.data = s->data,
                                .net = cfg->net,
                                .moved = master_moved,
                                .known = master_known,
                                .userdata = s};
  if (!(s->link = sluice__sentinel_new(base, &sc))) {
    sluice__free(s);
    return NULL;
  }
  if (sluice__topo_one_init(&s->one, base, cfg, ready) != 0) {
    sluice__sentinel_free(s->link);
    sluice__free(s);
    return NULL;
  }
  return &s->one.t;
}

sluice__sentinel *sluice__topo_sentinel_link(sluice__topo *t) {
  return t->ops == &sentinel_ops ? of(t)->link : NULL;
}
