/* One Redis: one command connection, every route goes to it. */
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

static void one_up(sluice__conn *conn, void *ud) {
  sluice__topo *t = ud;
  if (conn->new_node) t->cfg.ev.node_changed(-1, -1, t->cfg.ev.userdata);
  t->cfg.ev.up(conn, t->cfg.ev.userdata);
}

static void one_down(sluice__conn *conn, int status, void *ud) {
  sluice__topo *t = ud;
  t->ops->stale(t);
  t->cfg.ev.down(conn, status, t->cfg.ev.userdata);
}

/* A context exists, its handshake queued: steps may be handed over. */
static void one_context(sluice__conn *conn, void *ud) {
  sluice__topo *t = ud;
  t->cfg.ev.routes(0, t->cfg.ev.userdata);
}

int sluice__topo_one_init(sluice__topo_one *o, struct event_base *base,
                          const sluice__topo_config *cfg,
                          int (*ready)(sluice__conn *conn, void *userdata)) {
  o->t.cfg = *cfg;
  sluice__conn_config cc = {.net = cfg->net,
                            .scripts = cfg->scripts,
                            .on_up = one_up,
                            .on_down = one_down,
                            .ready = ready,
                            .on_context = one_context,
                            .userdata = &o->t};
  return sluice__conn_init(&o->conn, base, &cc);
}

static void one_drained(sluice__conn *conn, void *ud) {
  sluice__topo_one *o = sluice__container_of(conn, sluice__topo_one, conn);
  o->drained(o->drained_ud);
}

void sluice__topo_one_drain(sluice__topo *t, unsigned timeout_ms, void (*done)(void *ud),
                            void *ud) {
  sluice__topo_one *o = (sluice__topo_one *)t;
  o->drained = done;
  o->drained_ud = ud;
  sluice__conn_drain(&o->conn, timeout_ms, one_drained);
}

void sluice__topo_one_start(sluice__topo *t) { sluice__conn_start(&((sluice__topo_one *)t)->conn); }

/* Steps wait for the first context (its address may be being looked up);
 * once it failed they fail fast (sluice__topo_conn's state says so). */
int sluice__topo_one_routing(const sluice__topo *t) {
  const sluice__topo_one *o = (const sluice__topo_one *)t;
  return !o->conn.ac && !o->conn.failed ? SLUICE_TOPO_WAIT : SLUICE_TOPO_READY;
}

int sluice__topo_one_up(const sluice__topo *t) {
  return ((const sluice__topo_one *)t)->conn.state == SLUICE_CONN_UP;
}

int sluice__topo_one_route_of(const sluice__topo *t, const char *key, size_t len) { return -1; }

sluice__conn *sluice__topo_one_conn(sluice__topo *t, int route) {
  return &((sluice__topo_one *)t)->conn;
}

sluice__conn *sluice__topo_one_conn_at(sluice__topo *t, const char *addr, size_t len,
                                       const sluice__conn *like) {
  return NULL; /* no ASK without a cluster */
}

/* A replica, or a node still loading or cut off from its master: the step
 * did not run. Drop the connection: the master is looked for again. */
void sluice__topo_one_decide(sluice__topo *t, sluice__conn *from, const redisReply *err,
                             sluice__topo_decision *d) {
  d->verdict = SLUICE_TOPO_ANSWER;
  if (!sluice__topo_not_master(err)) return;
  sluice__conn_fail(from, err->str);
  d->verdict = SLUICE_TOPO_NOT_MASTER;
}

int sluice__topo_one_node_route(const sluice__topo *t, unsigned i) { return i == 0 ? -1 : -2; }

void sluice__topo_one_where(const sluice__topo *t, char *buf, size_t size) {
  const sluice__endpoint *ep = t->cfg.net.endpoint;
  if (ep->unix_path) snprintf(buf, size, "%s", ep->unix_path);
  else snprintf(buf, size, "%s:%d", ep->host ? ep->host : "?", ep->port);
}

/* ---- one Redis ----------------------------------------------------------- */

typedef struct single {
  sluice__topo_one one;
} single;

static void single_free(sluice__topo *t) {
  single *s = (single *)t;
  sluice__conn_shutdown(&s->one.conn);
  sluice__free(s);
}

static int single_address(sluice__topo *t, int route, const char **host, int *port) {
  *host = t->cfg.net.endpoint->host;
  *port = t->cfg.net.endpoint->port;
  return 1;
}

static void single_stale(sluice__topo *t) {}
static const char *single_error(const sluice__topo *t) { return ""; }

static const sluice__topo_ops single_ops = {
    .name = "single",
    .start = sluice__topo_one_start,
    .free = single_free,
    .drain = sluice__topo_one_drain,
    .routing = sluice__topo_one_routing,
    .up = sluice__topo_one_up,
    .route_of = sluice__topo_one_route_of,
    .conn = sluice__topo_one_conn,
    .conn_at = sluice__topo_one_conn_at,
    .decide = sluice__topo_one_decide,
    .address = single_address,
    .stale = single_stale,
    .error = single_error,
    .node_route = sluice__topo_one_node_route,
    .where = sluice__topo_one_where,
};

sluice__topo *sluice__topo_single_new(struct event_base *base, const sluice__topo_config *cfg) {
  single *s = sluice__calloc(1, sizeof *s);
  if (!s) return NULL;
  s->one.t.ops = &single_ops;
  if (sluice__topo_one_init(&s->one, base, cfg, NULL) != 0) {
    sluice__free(s);
    return NULL;
  }
  return &s->one.t;
}
