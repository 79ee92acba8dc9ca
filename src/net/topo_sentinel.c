/* The master a set of Sentinels names: a one-node topology (topo_single.c)
 * whose address the Sentinel link (sentinel.c) finds, asked again before
 * every reconnect and after every failure; a switch drops the connection
 * at once. */
#include "base/util.h"
#include "net/sentinel.h"
#include "net/topo_one.h"

typedef struct topo_sentinel {
  sluice__topo_one one;
  sluice__sentinel *link; /* NULL once the client closes */
} topo_sentinel;

static topo_sentinel *of(sluice__topo_one *o) { return (topo_sentinel *)o; }

static int ready(sluice__topo_one *o) {
  return of(o)->link && sluice__sentinel_address(of(o)->link);
}

static void stale(sluice__topo_one *o) {
  if (of(o)->link) sluice__sentinel_stale(of(o)->link);
}

static void doubt(sluice__topo_one *o, int on) {
  if (of(o)->link) sluice__sentinel_doubt(of(o)->link, on);
}

static const char *error(const sluice__topo_one *o) {
  const topo_sentinel *s = (const topo_sentinel *)o;
  return s->link ? sluice__sentinel_error(s->link) : "";
}

/* No new address is needed any more: the link goes first. */
static void stop(sluice__topo_one *o) {
  sluice__sentinel_free(of(o)->link);
  of(o)->link = NULL;
}

static const sluice__topo_finder sentinel_finder = {ready, stale, doubt, error, stop, stop};

/* The sentinels named a new master: connections to the old one go now
 * (it may accept writes for seconds and lose them), and one waiting out the
 * backoff that the dead old master built up connects to the new one at
 * once (after a SIGKILL that wait is up to reconnect_max_ms, which the
 * steps queued meanwhile would wait too). */
static void master_moved(void *ud) {
  topo_sentinel *s = ud;
  if (s->one.t.closing) return;
  sluice__conn_fail(&s->one.conn, "the master moved (sentinel failover)");
  s->one.t.cfg.ev.moved(s->one.t.cfg.ev.userdata);
  sluice__conn_retry_now(&s->one.conn);
}

static void note(int level, const char *what, void *ud) {
  topo_sentinel *s = ud;
  if (!s->one.t.closing) s->one.t.cfg.ev.note(level, what, s->one.t.cfg.ev.userdata);
}

static void master_known(void *ud) {
  topo_sentinel *s = ud;
  if (s->one.t.closing) return; /* the close sequence owns the connections now */
  if (s->one.conn.state == SLUICE_CONN_RESOLVING) sluice__conn_start(&s->one.conn);
  sluice__topo_one_routes(&s->one);
}

sluice__topo *sluice__topo_sentinel_new(struct event_base *base, const sluice__topo_config *cfg) {
  topo_sentinel *s = (topo_sentinel *)sluice__topo_one_new(base, cfg, &sentinel_finder, sizeof *s);
  if (!s) return NULL;
  /* The link writes the master's address into the client's endpoint. */
  sluice__sentinel_config sc = {.data = (sluice__endpoint *)cfg->net.endpoint,
                                .net = cfg->net,
                                .moved = master_moved,
                                .known = master_known,
                                .note = note,
                                .userdata = s};
  if (!(s->link = sluice__sentinel_new(base, &sc))) {
    sluice__topo_free(&s->one.t);
    return NULL;
  }
  return &s->one.t;
}

sluice__sentinel *sluice__topo_sentinel_link(sluice__topo *t) {
  sluice__topo_one *o = (sluice__topo_one *)t;
  return t->ops->many || o->finder != &sentinel_finder ? NULL : of(o)->link;
}
