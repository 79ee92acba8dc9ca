/* The slot map and the masters' connections; see cluster.h. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <event2/event.h>

#include <sluice/common.h>

#include "net/cluster.h"
#include "base/list.h"
#include "base/util.h"

/* A refresh at most this often: a burst of MOVED replies (a slot migrated
 * under load) costs one CLUSTER SLOTS, not one each. */
#define REFRESH_MIN_MS 100
/* While a master's connection is down, the map is asked again this often:
 * the cluster promotes a replica in its own time, and the client should
 * follow within a fraction of a second, not at its next reconnect. */
#define REFRESH_WHILE_DOWN_MS 250
/* Addresses remembered from maps (masters and replicas): where to ask when
 * every connected node is gone. */
#define BOOK_MAX 64

typedef struct node {
  sluice__link link; /* in cl->nodes */
  sluice__cluster *cl;
  sluice__endpoint ep; /* the client's, with this node's host and port */
  sluice__conn conn;
  int master;     /* serves slots in the current map */
  int was_master; /* in the map before the last one */
  int retiring;   /* draining; freed when drained */
} node;

/* One CLUSTER SLOTS in flight. hiredis calls its callback exactly once
 * (with NULL when the connection goes), so it owns its memory. */
typedef struct ask {
  sluice__cluster *cl; /* NULL once abandoned (timed out, freed) */
  node *from;
} ask;

struct sluice__cluster {
  sluice__cluster_config cfg;
  struct event_base *base;
  sluice__list nodes;
  node *slot[SLUICE__SLOTS];
  int known;   /* a map was applied */
  ask *asking; /* the refresh in flight */
  int wanted;  /* a refresh is due once possible */
  uint64_t last_ask_ms;
  struct event *refresh_timer; /* throttle, or an unanswered ask */
  struct event *apply_ev;      /* applies a map outside hiredis frames */
  redisReply *map;             /* the reply to apply */
  node *map_from;
  unsigned probe; /* next address of the book to try */
  int nbook;
  struct {
    char *host;
    int port;
  } book[BOOK_MAX];
  int closing;
  unsigned draining; /* connections still draining */
  void (*drained)(void *userdata);
  void *drained_ud;
  char err[256];
};

static void refresh_now(sluice__cluster *cl);

/* ---- nodes --------------------------------------------------------------- */

/* Every run of slots that old and the map give to two different nodes (a
 * slot unserved in either is no news), or, with `only`, that old gives to
 * `only`: one call of slots_changed each. */
static void report_changes(sluice__cluster *cl, node *const *old, const node *only) {
  for (int s = 0; s < SLUICE__SLOTS && cl->cfg.slots_changed;) {
    const node *was = old[s], *is = only ? NULL : cl->slot[s];
    int changed = only ? was == only : was && is && was != is;
    int lo = s;
    while (++s < SLUICE__SLOTS && old[s] == was && (only || cl->slot[s] == is)) {}
    if (changed) cl->cfg.slots_changed(lo, s - 1, cl->cfg.userdata);
  }
}

static void node_up(sluice__conn *conn, void *ud) {
  node *n = ud;
  sluice__cluster *cl = n->cl;
  if (cl->wanted && !cl->asking) refresh_now(cl);
  if (n->master && conn->new_node) report_changes(cl, cl->slot, n); /* restarted */
  if (cl->cfg.conn_state) cl->cfg.conn_state(conn, 1, cl->cfg.userdata);
  if (n->master && cl->cfg.node_up) cl->cfg.node_up(conn, cl->cfg.userdata);
}

static void node_down(sluice__conn *conn, int status, void *ud) {
  node *n = ud;
  sluice__cluster *cl = n->cl;
  /* A failover moves the node's slots: ask where they went. */
  sluice__cluster_refresh(cl);
  /* Before a map, every seed's failure matters: with all of them down the
   * steps waiting for a map fail instead of waiting out their deadline. */
  if (cl->cfg.conn_state) cl->cfg.conn_state(conn, 0, cl->cfg.userdata);
  if ((n->master || !cl->known) && cl->cfg.node_down)
    cl->cfg.node_down(conn, status, cl->cfg.userdata);
}

static int same_host(const char *a, const char *b, size_t blen) {
  return strlen(a) == blen && memcmp(a, b, blen) == 0;
}

static node *node_find(sluice__cluster *cl, const char *host, size_t hlen, int port) {
  for (sluice__link *l = cl->nodes.head; l; l = l->next) {
    node *n = sluice__container_of(l, node, link);
    if (!n->retiring && n->ep.port == port && same_host(n->ep.host, host, hlen)) return n;
  }
  return NULL;
}

/* The node at host:port, created (not yet connecting) if new. */
static node *node_get(sluice__cluster *cl, const char *host, size_t hlen, int port) {
  node *n = node_find(cl, host, hlen, port);
  if (n || cl->closing) return n;
  n = sluice__calloc(1, sizeof *n);
  if (!n) return NULL;
  n->cl = cl;
  n->ep = *cl->cfg.net.endpoint; /* shares credentials and TLS; owns only host */
  n->ep.port = port;
  n->ep.host = malloc(hlen + 1);
  sluice__conn_config cfg = {.net = cl->cfg.net,
                             .scripts = cl->cfg.scripts,
                             .count_replicas = cl->cfg.count_replicas,
                             .watch_link = 1,
                             .on_up = node_up,
                             .on_down = node_down,
                             .userdata = n};
  cfg.net.endpoint = &n->ep;
  if (!n->ep.host || sluice__conn_init(&n->conn, cl->base, &cfg) != 0) {
    free(n->ep.host);
    sluice__free(n);
    return NULL;
  }
  memcpy(n->ep.host, host, hlen);
  n->ep.host[hlen] = '\0';
  sluice__list_append(&cl->nodes, &n->link);
  return n;
}

static void node_free(node *n) {
  sluice__list_remove(&n->cl->nodes, &n->link);
  sluice__conn_shutdown(&n->conn);
  free(n->ep.host);
  sluice__free(n);
}

static void maybe_drained(sluice__cluster *cl) {
  if (cl->closing && cl->drained && !cl->draining) {
    void (*done)(void *) = cl->drained;
    cl->drained = NULL;
    done(cl->drained_ud);
  }
}

static void node_drained(sluice__conn *conn, void *ud) {
  node *n = ud;
  sluice__cluster *cl = n->cl;
  node_free(n);
  cl->draining--;
  maybe_drained(cl);
}

/* A node that serves no slots any more: its replies still due arrive, then
 * it goes. */
static void node_retire(node *n) {
  if (n->retiring) return;
  n->retiring = 1;
  n->master = 0;
  n->cl->draining++;
  sluice__conn_drain(&n->conn, n->cl->cfg.net.connect_timeout_ms, node_drained);
}

/* "host:port" (the host may be empty: like's host) into its parts. */
static int split_addr(const char *addr, size_t len, const sluice__conn *like, const char **host,
                      size_t *hlen, int *port) {
  const char *colon = NULL;
  for (size_t i = len; i > 0 && !colon; i--)
    if (addr[i - 1] == ':') colon = addr + i - 1;
  if (!colon) return -1;
  long p = 0;
  for (const char *d = colon + 1; d < addr + len; d++) {
    if (*d < '0' || *d > '9' || p > 65535) return -1;
    p = p * 10 + (*d - '0');
  }
  if (p < 1 || p > 65535) return -1;
  *host = addr;
  *hlen = (size_t)(colon - addr);
  if (*hlen == 0) {
    if (!like || !like->cfg.net.endpoint->host) return -1;
    *host = like->cfg.net.endpoint->host;
    *hlen = strlen(*host);
  }
  *port = (int)p;
  return 0;
}

int sluice__cluster_parse_redirect(const char *str, size_t len, unsigned *slot, const char **addr,
                                   size_t *alen) {
  const char *sp = memchr(str, ' ', len);
  if (!sp) return -1;
  unsigned long s = 0;
  const char *d = sp + 1;
  for (; d < str + len && *d >= '0' && *d <= '9' && s < SLUICE__SLOTS; d++)
    s = s * 10 + (unsigned long)(*d - '0');
  if (d == sp + 1 || d >= str + len || *d != ' ' || s >= SLUICE__SLOTS) return -1;
  *slot = (unsigned)s;
  *addr = d + 1;
  *alen = len - (size_t)(d + 1 - str);
  return *alen ? 0 : -1;
}

/* ---- the address book ---------------------------------------------------- */

static void book_add(sluice__cluster *cl, const char *host, size_t hlen, int port) {
  for (int i = 0; i < cl->nbook; i++)
    if (cl->book[i].port == port && same_host(cl->book[i].host, host, hlen)) return;
  if (cl->nbook == BOOK_MAX) return;
  char *h = malloc(hlen + 1);
  if (!h) return;
  memcpy(h, host, hlen);
  h[hlen] = '\0';
  cl->book[cl->nbook].host = h;
  cl->book[cl->nbook++].port = port;
}

/* Nothing connected can answer: start a connection to the next address of
 * the book (each node's own backoff paces its retries). */
static void probe_next(sluice__cluster *cl) {
  for (int tries = 0; tries < cl->nbook; tries++) {
    int i = (int)(cl->probe++ % (unsigned)cl->nbook);
    node *n = node_get(cl, cl->book[i].host, strlen(cl->book[i].host), cl->book[i].port);
    if (!n) continue;
    /* Idle, or waiting to retry (then it tries now). */
    if (n->conn.state == SLUICE_CONN_IDLE || n->conn.state == SLUICE_CONN_WAITING) {
      sluice__conn_start(&n->conn);
      return;
    }
  }
}

/* ---- refresh ------------------------------------------------------------- */

static void ask_cb(redisAsyncContext *ac, void *r, void *privdata) {
  ask *a = privdata;
  sluice__cluster *cl = a->cl;
  redisReply *reply = r;
  if (cl && cl->asking == a) {
    cl->asking = NULL;
    evtimer_del(cl->refresh_timer);
    if (!reply) {
      cl->wanted = 1; /* the node went: its on_down asks again */
    } else if (reply->type == REDIS_REPLY_ARRAY) {
      sluice__reply_free(cl->map);
      cl->map = sluice__reply_dup(reply);
      cl->map_from = a->from;
      event_active(cl->apply_ev, 0, 0);
    } else {
      snprintf(cl->err, sizeof cl->err, "CLUSTER SLOTS: %s",
               reply->type == REDIS_REPLY_ERROR ? reply->str : "unexpected reply");
      /* Not a cluster (or not yet): say so to those waiting for a map, and
       * ask again after the longest backoff. */
      sluice__timer_in(cl->refresh_timer, cl->cfg.net.reconnect_max_ms);
      cl->wanted = 1;
      if (cl->cfg.map_changed) cl->cfg.map_changed(cl->cfg.userdata);
    }
  }
  sluice__free(a);
}

static node *up_node(sluice__cluster *cl) {
  node *any = NULL;
  for (sluice__link *l = cl->nodes.head; l; l = l->next) {
    node *n = sluice__container_of(l, node, link);
    if (n->retiring || n->conn.state != SLUICE_CONN_UP) continue;
    if (n->master) return n;
    if (!any) any = n;
  }
  return any;
}

static void refresh_now(sluice__cluster *cl) {
  if (cl->closing) return;
  cl->wanted = 1;
  if (cl->asking) return;
  uint64_t now = sluice__mono_ms(), since = now - cl->last_ask_ms;
  if (cl->last_ask_ms && since < REFRESH_MIN_MS) {
    if (!evtimer_pending(cl->refresh_timer, NULL))
      sluice__timer_in(cl->refresh_timer, REFRESH_MIN_MS - since);
    return;
  }
  node *n = up_node(cl);
  if (!n) {
    /* Whichever node comes up first asks (node_up); meanwhile try the
     * addresses we know, one per connect timeout. */
    probe_next(cl);
    sluice__timer_in(cl->refresh_timer, cl->cfg.net.connect_timeout_ms);
    return;
  }
  ask *a = sluice__calloc(1, sizeof *a);
  if (!a) {
    sluice__timer_in(cl->refresh_timer, REFRESH_MIN_MS);
    return;
  }
  a->cl = cl;
  a->from = n;
  const char *argv[2] = {"CLUSTER", "SLOTS"};
  if (sluice__conn_send(&n->conn, ask_cb, a, 2, argv, NULL) != REDIS_OK) {
    sluice__free(a);
    sluice__timer_in(cl->refresh_timer, REFRESH_MIN_MS);
    return;
  }
  cl->asking = a;
  cl->wanted = 0;
  cl->last_ask_ms = now;
  sluice__timer_in(cl->refresh_timer, cl->cfg.net.connect_timeout_ms);
}

static void refresh_timer_cb(evutil_socket_t fd, short what, void *arg) {
  sluice__cluster *cl = arg;
  if (cl->asking) { /* unanswered: that node is not well; ask another */
    node *n = cl->asking->from;
    cl->asking->cl = NULL;
    cl->asking = NULL;
    sluice__conn_fail(&n->conn, "CLUSTER SLOTS unanswered within the connect timeout");
  }
  if (cl->wanted) refresh_now(cl);
}

void sluice__cluster_refresh(sluice__cluster *cl) { refresh_now(cl); }

/* A node entry of CLUSTER SLOTS: [host, port, id, ...]. The empty host
 * means "the address you reached me at"; "?" an unknown one. */
static int entry_addr(const redisReply *e, const node *from, const char **host, size_t *hlen,
                      int *port) {
  const redisReply *h = sluice__reply_at(e, 0), *p = sluice__reply_at(e, 1);
  int64_t v;
  if (!h || h->type != REDIS_REPLY_STRING || !p || sluice__reply_i64(p, &v) || v < 1 || v > 65535)
    return -1;
  if (h->len == 1 && h->str[0] == '?') return -1;
  *host = h->str;
  *hlen = h->len;
  if (h->len == 0) {
    *host = from->ep.host;
    *hlen = strlen(from->ep.host);
  }
  *port = (int)v;
  return 0;
}

static int master_down(const sluice__cluster *cl) {
  for (const sluice__link *l = cl->nodes.head; l; l = l->next) {
    const node *n = sluice__container_of(l, node, link);
    if (n->master && n->conn.failed && n->conn.state != SLUICE_CONN_UP) return 1;
  }
  return 0;
}

/* fresh becomes the map (and keeps the old one, for report_changes: empty
 * before the first map, which changes nobody's node); masters are marked. */
static void install_map(sluice__cluster *cl, node **fresh) {
  for (unsigned s = 0; s < SLUICE__SLOTS; s++) {
    node *was = cl->slot[s];
    cl->slot[s] = fresh[s];
    fresh[s] = cl->known ? was : NULL;
  }
  for (sluice__link *l = cl->nodes.head; l; l = l->next) {
    node *n = sluice__container_of(l, node, link);
    n->was_master = n->master;
    n->master = 0;
  }
  for (unsigned s = 0; s < SLUICE__SLOTS; s++)
    if (cl->slot[s]) cl->slot[s]->master = 1;
  cl->known = 1;
}

static void apply_map(evutil_socket_t fd, short what, void *arg) {
  sluice__cluster *cl = arg;
  redisReply *map = cl->map;
  node *from = cl->map_from;
  cl->map = NULL;
  node **fresh = map && !cl->closing ? calloc(SLUICE__SLOTS, sizeof *fresh) : NULL;
  if (!fresh) {
    sluice__reply_free(map);
    if (cl->closing) maybe_drained(cl);
    else if (map) refresh_now(cl); /* out of memory: try again later */
    return;
  }
  int bad = 0;
  for (size_t i = 0; i < map->elements; i++) {
    const redisReply *r = map->element[i];
    int64_t lo, hi;
    const char *host;
    size_t hlen;
    int port;
    if (r->type != REDIS_REPLY_ARRAY || r->elements < 3 || sluice__reply_i64(r->element[0], &lo) ||
        sluice__reply_i64(r->element[1], &hi) || lo < 0 || hi < lo || hi >= SLUICE__SLOTS) {
      bad = 1;
      continue;
    }
    for (size_t j = 2; j < r->elements; j++) /* master, then replicas */
      if (entry_addr(r->element[j], from, &host, &hlen, &port) == 0) book_add(cl, host, hlen, port);
    if (entry_addr(r->element[2], from, &host, &hlen, &port) != 0) continue;
    node *n = node_get(cl, host, hlen, port);
    if (!n) {
      bad = 1;
      continue;
    }
    for (int64_t s = lo; s <= hi; s++) fresh[s] = n;
  }
  sluice__reply_free(map);
  if (bad) snprintf(cl->err, sizeof cl->err, "CLUSTER SLOTS: part of the map was unreadable");
  else cl->err[0] = '\0';
  install_map(cl, fresh);
  /* Nodes that serve nothing now go (seeds that are replicas, failed-over
   * masters); the rest stay, found again by address. */
  for (sluice__link *l = cl->nodes.head, *next; l; l = next) {
    next = l->next;
    node *n = sluice__container_of(l, node, link);
    if (!n->master && !n->retiring) node_retire(n);
  }
  report_changes(cl, fresh, NULL);
  free(fresh);
  if (cl->cfg.map_changed) cl->cfg.map_changed(cl->cfg.userdata);
  /* A connection that was up before its node became a master (a seed, a
   * promoted replica) is announced now, as if it had just come up. */
  for (sluice__link *l = cl->nodes.head, *next; l && !cl->closing; l = next) {
    next = l->next;
    node *n = sluice__container_of(l, node, link);
    if (n->master && !n->was_master && n->conn.state == SLUICE_CONN_UP && cl->cfg.node_up)
      cl->cfg.node_up(&n->conn, cl->cfg.userdata);
  }
  if (cl->wanted) {
    refresh_now(cl);
  } else if (master_down(cl)) {
    cl->wanted = 1;
    sluice__timer_in(cl->refresh_timer, REFRESH_WHILE_DOWN_MS);
  }
}

/* ---- public -------------------------------------------------------------- */

sluice__cluster *sluice__cluster_new(struct event_base *base, const sluice__cluster_config *cfg) {
  sluice__cluster *cl = sluice__calloc(1, sizeof *cl);
  if (!cl) return NULL;
  cl->cfg = *cfg;
  cl->base = base;
  cl->refresh_timer = evtimer_new(base, refresh_timer_cb, cl);
  cl->apply_ev = event_new(base, -1, 0, apply_map, cl);
  if (!cl->refresh_timer || !cl->apply_ev) {
    sluice__cluster_free(cl);
    return NULL;
  }
  const sluice__endpoint *ep = cfg->net.endpoint;
  for (int i = 0; i < ep->nseeds; i++)
    book_add(cl, ep->seed_hosts[i], strlen(ep->seed_hosts[i]), ep->seed_ports[i]);
  /* Every seed at once: the first to answer gives the map, so one seed
   * that is down costs nothing. */
  for (int i = 0; i < cl->nbook; i++) {
    node *n = node_get(cl, cl->book[i].host, strlen(cl->book[i].host), cl->book[i].port);
    if (n) sluice__conn_start(&n->conn);
  }
  cl->wanted = 1;
  return cl;
}

void sluice__cluster_free(sluice__cluster *cl) {
  if (!cl) return;
  cl->closing = 1;
  if (cl->asking) cl->asking->cl = NULL;
  cl->asking = NULL;
  while (cl->nodes.head) node_free(sluice__container_of(cl->nodes.head, node, link));
  if (cl->refresh_timer) event_free(cl->refresh_timer);
  if (cl->apply_ev) event_free(cl->apply_ev);
  sluice__reply_free(cl->map);
  for (int i = 0; i < cl->nbook; i++) free(cl->book[i].host);
  sluice__free(cl);
}

void sluice__cluster_drain(sluice__cluster *cl, unsigned timeout_ms, void (*done)(void *ud),
                           void *ud) {
  cl->closing = 1;
  cl->drained = done;
  cl->drained_ud = ud;
  evtimer_del(cl->refresh_timer);
  event_del(cl->apply_ev);
  for (sluice__link *l = cl->nodes.head; l; l = l->next) {
    node *n = sluice__container_of(l, node, link);
    if (n->retiring) continue; /* already draining */
    n->retiring = 1;
    cl->draining++;
    sluice__conn_drain(&n->conn, timeout_ms, node_drained);
  }
  /* Drains report from the loop; with none, so does this. */
  if (!cl->draining) event_active(cl->apply_ev, 0, 0);
}

int sluice__cluster_known(const sluice__cluster *cl) { return cl->known; }

int sluice__cluster_reachable(const sluice__cluster *cl) {
  if (cl->known) return 1;
  for (const sluice__link *l = cl->nodes.head; l; l = l->next) {
    const node *n = sluice__container_of(l, node, link);
    if (n->conn.state == SLUICE_CONN_UP || !n->conn.failed) return 1;
  }
  return 0;
}

int sluice__cluster_up(const sluice__cluster *cl) {
  if (!cl->known) return 0;
  for (const sluice__link *l = cl->nodes.head; l; l = l->next) {
    const node *n = sluice__container_of(l, node, link);
    if (n->master && n->conn.state != SLUICE_CONN_IDLE && n->conn.state != SLUICE_CONN_UP &&
        n->conn.failed)
      return 0;
  }
  return 1;
}

/* slot < 0 (a step without keys): the master of the lowest slot, so that a
 * scan's first master is always the same one. */
static node *master_for(sluice__cluster *cl, int slot) {
  if (slot < 0) slot = sluice__cluster_master_slot(cl, 0);
  return slot < 0 ? NULL : cl->slot[slot & (SLUICE__SLOTS - 1)];
}

sluice__conn *sluice__cluster_conn(sluice__cluster *cl, int slot) {
  if (!cl->known || cl->closing) return NULL;
  node *n = master_for(cl, slot);
  if (!n) {
    refresh_now(cl);
    return NULL;
  }
  if (n->conn.state == SLUICE_CONN_IDLE) sluice__conn_start(&n->conn);
  return &n->conn;
}

sluice__conn *sluice__cluster_conn_at(sluice__cluster *cl, const char *addr, size_t len,
                                      const sluice__conn *like) {
  const char *host;
  size_t hlen;
  int port;
  if (cl->closing || split_addr(addr, len, like, &host, &hlen, &port) != 0) return NULL;
  node *n = node_get(cl, host, hlen, port);
  if (!n) return NULL;
  if (n->conn.state == SLUICE_CONN_IDLE) sluice__conn_start(&n->conn);
  return &n->conn;
}

int sluice__cluster_moved(sluice__cluster *cl, unsigned slot, const char *addr, size_t len,
                          const sluice__conn *from) {
  const char *host;
  size_t hlen;
  int port;
  if (slot >= SLUICE__SLOTS || split_addr(addr, len, from, &host, &hlen, &port) != 0) return -1;
  node *n = node_get(cl, host, hlen, port);
  if (!n) return -1;
  node *was = cl->slot[slot];
  cl->slot[slot] = n;
  n->master = 1;
  if (was && was != n && cl->cfg.slots_changed)
    cl->cfg.slots_changed((int)slot, (int)slot, cl->cfg.userdata);
  refresh_now(cl);
  return 0;
}

void sluice__cluster_peer_up(sluice__cluster *cl, const sluice__conn *peer) {
  for (sluice__link *l = cl->nodes.head; l; l = l->next) {
    node *n = sluice__container_of(l, node, link);
    if (!n->retiring && sluice__conn_same_node(peer, &n->conn)) sluice__conn_retry_early(&n->conn);
  }
}

int sluice__cluster_address(sluice__cluster *cl, unsigned slot, const char **host, int *port) {
  node *n = cl->known && slot < SLUICE__SLOTS ? cl->slot[slot] : NULL;
  if (!n) {
    refresh_now(cl);
    return 0;
  }
  *host = n->ep.host;
  *port = n->ep.port;
  return 1;
}

int sluice__cluster_master_slot(const sluice__cluster *cl, unsigned i) {
  const node *seen[SLUICE__SLOTS / 64 + 1];
  unsigned nseen = 0;
  for (unsigned s = 0; s < SLUICE__SLOTS; s++) {
    const node *n = cl->slot[s];
    unsigned k = 0;
    if (!n) continue;
    while (k < nseen && seen[k] != n) k++;
    if (k < nseen) continue;
    if (nseen == i) return (int)s;
    if (nseen < sizeof seen / sizeof seen[0]) seen[nseen++] = n;
  }
  return -1;
}

const char *sluice__cluster_error(const sluice__cluster *cl) { return cl->err; }
