/* The topology layer's entry points: pick a backend, then ask it. */
#include "net/topo.h"

sluice__topo *sluice__topo_new(struct event_base *base, const sluice__topo_config *cfg) {
  const sluice__endpoint *ep = cfg->net.endpoint;
  if (ep->cluster) return sluice__topo_cluster_new(base, cfg);
  if (ep->master_name) return sluice__topo_sentinel_new(base, cfg);
  return sluice__topo_single_new(base, cfg);
}

void sluice__topo_start(sluice__topo *t) { t->ops->start(t); }

void sluice__topo_free(sluice__topo *t) {
  if (t) t->ops->free(t);
}

void sluice__topo_drain(sluice__topo *t, unsigned timeout_ms, void (*done)(void *ud), void *ud) {
  t->ops->drain(t, timeout_ms, done, ud);
}

void sluice__topo_closing(sluice__topo *t) { t->closing = 1; }
int sluice__topo_routing(const sluice__topo *t) { return t->ops->routing(t); }
int sluice__topo_up(const sluice__topo *t) { return t->ops->up(t); }

int sluice__topo_route_of(const sluice__topo *t, const char *key, size_t len) {
  return t->ops->route_of(t, key, len);
}

sluice__conn *sluice__topo_conn(sluice__topo *t, int route) { return t->ops->conn(t, route); }

sluice__conn *sluice__topo_conn_at(sluice__topo *t, const char *addr, size_t len,
                                   const sluice__conn *like) {
  return t->ops->conn_at(t, addr, len, like);
}

void sluice__topo_decide(sluice__topo *t, sluice__conn *from, const redisReply *err,
                         sluice__topo_decision *d) {
  t->ops->decide(t, from, err, d);
}

int sluice__topo_address(sluice__topo *t, int route, const char **host, int *port) {
  return t->ops->address(t, route, host, port);
}

void sluice__topo_stale(sluice__topo *t) { t->ops->stale(t); }
void sluice__topo_doubt(sluice__topo *t, int on) { t->ops->doubt(t, on); }
void sluice__topo_peer_up(sluice__topo *t, const sluice__conn *peer) { t->ops->peer_up(t, peer); }
const char *sluice__topo_error(const sluice__topo *t) { return t->ops->error(t); }
int sluice__topo_node_route(const sluice__topo *t, unsigned i) { return t->ops->node_route(t, i); }

void sluice__topo_where(const sluice__topo *t, char *buf, size_t size) {
  t->ops->where(t, buf, size);
}
