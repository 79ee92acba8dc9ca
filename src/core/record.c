/* The record of unreplicated writes: see record.h. */
#include <stdlib.h>
#include <string.h>

#include <event2/event.h>

#include "core/client.h"
#include "core/args.h"
#include "core/redis_error.h"

/* INFO replication per node with entries, at most this often... */
#define POLL_MS 100
/* ...and this often once its oldest entry is SLOW_AFTER_MS old: replicas
 * acknowledge about once a second, so a longer wait means they lag or are
 * gone, and asking ten times a second would not hasten them. */
#define SLOW_POLL_MS 1000
#define SLOW_AFTER_MS 2000
/* Marks kept per node: with a replica acknowledging once a second, about
 * ten are outstanding at the fastest poll. */
#define MARKS_MAX 32
/* A full record is logged at most this often. */
#define FULL_LOG_MS 10000
/* A replay that failed where it may succeed later (the connection stayed
 * up; a node still getting ready) goes again after RETRY_MIN_MS, doubling
 * up to RETRY_MAX_MS, for as long as it stays within the record's bounds. */
#define RETRY_MIN_MS 50
#define RETRY_MAX_MS 2000

typedef struct rec_entry {
  sluice__link all;     /* in rec->all, oldest first */
  sluice__link by_node; /* in its node's list, or in rec->pending (node_id 0) */
  sluice_client *c;
  uint64_t seq, node_id, acked_ms;
  uint64_t origin;   /* the node that answered it first */
  uint64_t due_ms;   /* pending: not sent again before (retry backoff) */
  unsigned tries;    /* replays in a row that failed */
  unsigned long ups; /* its node's handshake that answered it */
  int route;
  const sluice__write_kind *kind;
  unsigned items;
  const sluice__script *script;
  int nkeys;
  sluice__packed_argv cmd; /* the script's KEYS and ARGV */
} rec_entry;

struct rec_node {
  uint64_t id;          /* conn.h's node_id */
  int route;            /* a route it served last: finds its connection */
  sluice__list entries; /* oldest first */
  size_t n;
  uint64_t newest;      /* its newest entry's seq */
  uint64_t next_ms;     /* no INFO before */
  unsigned asking : 1;  /* an INFO in flight */
  unsigned refused : 1; /* INFO refused (ACL): the time window decides */
  /* Points of the node's replication stream, oldest first: the entries up
   * to seq were written before offset off. A replica that acknowledged
   * off has them. */
  struct rec_mark {
    uint64_t seq;
    long long off;
  } marks[MARKS_MAX];
  unsigned nmarks;
};

/* One INFO in flight. */
typedef struct rec_ask {
  sluice_client *c;
  sluice__conn *conn;
  uint64_t node_id, upto; /* the newest entry answered before it was sent */
} rec_ask;

static void keep(sluice_client *c, rec_entry *e, const sluice__answered *a);

/* ---- entries -------------------------------------------------------------- */

static rec_entry *entry_new(sluice_client *c, const sluice__write_kind *kind, unsigned items,
                            const sluice__script *s, int nkeys, int argc, const char *const *argv,
                            const size_t *lens) {
  sluice__packed_argv cmd;
  rec_entry *e = sluice__argv_pack(sizeof *e, (sluice__strs){argc, argv, lens}, (sluice__strs){0},
                                   &cmd);
  if (!e) return NULL;
  *e = (rec_entry){.c = c, .kind = kind, .items = items, .script = s, .nkeys = nkeys, .cmd = cmd};
  return e;
}

static rec_node *node_find(sluice__record *r, uint64_t id) {
  for (size_t i = 0; i < r->nnodes; i++)
    if (r->nodes[i].id == id) return &r->nodes[i];
  return NULL;
}

static rec_node *node_get(sluice__record *r, uint64_t id) {
  rec_node *nd = node_find(r, id);
  if (nd) return nd;
  if (r->nnodes == r->capnodes) {
    size_t cap = r->capnodes ? 2 * r->capnodes : 4;
    rec_node *v = realloc(r->nodes, cap * sizeof *v);
    if (!v) return NULL;
    r->nodes = v;
    r->capnodes = cap;
  }
  nd = &r->nodes[r->nnodes++];
  memset(nd, 0, sizeof *nd);
  nd->id = id;
  return nd;
}

/* Take e out of the record (it stays allocated). */
static void unlink_entry(sluice__record *r, rec_entry *e) {
  sluice__list_remove(&r->all, &e->all);
  if (e->node_id) {
    rec_node *nd = node_find(r, e->node_id);
    sluice__list_remove(&nd->entries, &e->by_node);
    nd->n--;
  } else {
    sluice__list_remove(&r->pending, &e->by_node);
  }
  r->n--;
  r->bytes -= e->cmd.bytes;
}

static void drop_entry(sluice__record *r, rec_entry *e) {
  unlink_entry(r, e);
  sluice__free(e);
}

static rec_entry *entry_of(sluice__link *l) { return sluice__container_of(l, rec_entry, all); }
static rec_entry *node_entry(sluice__link *l) {
  return sluice__container_of(l, rec_entry, by_node);
}

/* Logged at most every FULL_LOG_MS. */
static void log_full(sluice_client *c, const char *what) {
  sluice__record *r = &c->rec;
  uint64_t now = sluice__mono_ms();
  if (r->full_logged_ms && now - r->full_logged_ms < FULL_LOG_MS) return;
  r->full_logged_ms = now;
  sluice__log(c, SLUICE_LOG_WARN,
              "record of unreplicated writes full (%zu entries, %zu bytes; bounds %zu, %zu): %s; "
              "%llu dropped so far",
              r->n, r->bytes, r->max_entries, r->max_bytes, what, (unsigned long long)r->dropped);
}

/* Whether e may be kept. Nothing kept ever falls out: the kinds that make
 * room first (has_room: pushes) are refused before they are sent once the
 * record is full (sluice__record_room), so past the bounds only what was
 * in flight then, and the kinds never refused (releases, settlements,
 * cancels: refusing them would hold permits and messages longer), come
 * in. Those stop at twice the bounds: a drop a failover could undo,
 * counted and logged. */
static int may_keep(sluice_client *c, const rec_entry *e) {
  sluice__record *r = &c->rec;
  if (e->kind->has_room ||
      (r->n < 2 * r->max_entries && r->bytes + e->cmd.bytes <= 2 * r->max_bytes))
    return 1;
  r->dropped++;
  log_full(c, "a release, settlement or cancel is not kept");
  return 0;
}

int sluice__record_room(sluice_client *c) {
  sluice__record *r = &c->rec;
  if (!r->on) return SLUICE_OK;
  if (r->n + r->pushes_sent < r->max_entries && r->bytes < r->max_bytes) {
    r->pushes_sent++;
    return SLUICE_OK;
  }
  log_full(c, "pushes are refused (SLUICE_EFULL) until a replica has the writes");
  return SLUICE_EFULL;
}

void sluice__record_room_free(sluice_client *c) {
  sluice__record *r = &c->rec;
  if (r->on && r->pushes_sent) r->pushes_sent--;
}

/* ---- replication ---------------------------------------------------------- */

/* The connection that reaches nd's node for its route, if it is up. */
static sluice__conn *node_conn(sluice_client *c, const rec_node *nd) {
  sluice__conn *conn = c->closing ? NULL : sluice__topo_conn(c->topo, nd->route);
  return conn && conn->node_id == nd->id && conn->state == SLUICE_CONN_UP ? conn : NULL;
}

/* A node seen with a replica (conn->had_replicas, kept per node across
 * reconnects) keeps its entries until one has them, even while none is
 * online: a master cut off from its replicas may be replaced by one of
 * them, and what it holds alone would then be undone. */
static int has_replicas(const rec_node *nd, const sluice__conn *conn) {
  return !nd->refused && conn->had_replicas;
}

/* Entries up to seq upto are on a replica. */
static void confirm(sluice__record *r, rec_node *nd, uint64_t upto) {
  while (nd->entries.head && node_entry(nd->entries.head)->seq <= upto)
    drop_entry(r, node_entry(nd->entries.head));
}

/* Without replicas: an entry goes once the node answered anything
 * window_ms after it. */
static void sweep_window(sluice__record *r, rec_node *nd, const sluice__conn *conn) {
  if (has_replicas(nd, conn)) return;
  while (nd->entries.head &&
         node_entry(nd->entries.head)->acked_ms + r->window_ms <= conn->last_reply_ms)
    drop_entry(r, node_entry(nd->entries.head));
}

/* What INFO replication says of a master: its offset now, and how many
 * replicas are online and the furthest offset one of them acknowledged.
 * -1: not a master's answer (a replica now, or a fake). */
static int read_replication(const redisReply *reply, long long *master_off, int *online,
                            long long *acked) {
  if (reply->type != REDIS_REPLY_STRING && reply->type != REDIS_REPLY_STATUS) return -1;
  const char *s = reply->str, *p = strstr(s, "master_repl_offset:");
  if (!strstr(s, "role:master") || !p) return -1;
  *master_off = strtoll(p + 19, NULL, 10);
  *online = 0;
  *acked = -1;
  for (p = strstr(s, "\nslave"); p; p = strstr(p + 1, "\nslave")) {
    const char *eol = strchr(p + 1, '\n'), *st = strstr(p, "state=online"),
               *off = strstr(p, ",offset=");
    if (!st || !off || (eol && (st > eol || off > eol))) continue;
    long long o = strtoll(off + 8, NULL, 10);
    (*online)++;
    if (o > *acked) *acked = o;
  }
  return 0;
}

/* Entries up to upto were written before offset off. */
static void add_mark(rec_node *nd, uint64_t upto, long long off) {
  if (nd->nmarks && nd->marks[nd->nmarks - 1].seq >= upto) return; /* nothing newer */
  if (nd->nmarks == MARKS_MAX) nd->nmarks--; /* the newest gives way: later, not lost */
  nd->marks[nd->nmarks++] = (struct rec_mark){upto, off};
}

/* A replica acknowledged offset acked: the marks it passed confirm. */
static void confirm_marks(sluice__record *r, rec_node *nd, long long acked) {
  unsigned k = 0;
  while (k < nd->nmarks && nd->marks[k].off <= acked) k++;
  if (!k) return;
  confirm(r, nd, nd->marks[k - 1].seq);
  memmove(nd->marks, nd->marks + k, (nd->nmarks - k) * sizeof nd->marks[0]);
  nd->nmarks -= k;
}

static void note_refused(sluice__record *r, rec_node *nd, sluice_client *c, const char *why) {
  nd->refused = 1;
  if (!r->info_refused_logged++)
    sluice__log(c, SLUICE_LOG_ERROR,
                "INFO refused (%s): writes are kept for replay_window_ms instead of until a "
                "replica has them",
                why);
}

static void info_answered(redisAsyncContext *ac, void *reply_, void *privdata) {
  rec_ask *w = privdata;
  redisReply *reply = reply_;
  sluice__record *r = &w->c->rec;
  rec_node *nd = node_find(r, w->node_id);
  uint64_t now = sluice__mono_ms();
  long long off, acked;
  int online;
  if (nd) nd->asking = 0;
  if (nd && reply) {
    w->conn->last_reply_ms = now; /* it is alive: the time window counts on it */
    if (read_replication(reply, &off, &online, &acked) == 0) {
      if (online > 0) w->conn->had_replicas = 1;
      add_mark(nd, w->upto, off);
      if (online > 0) confirm_marks(r, nd, acked);
    } else if (reply->type == REDIS_REPLY_ERROR && !nd->refused &&
               strncmp(reply->str, "NOPERM", 6) == 0) {
      note_refused(r, nd, w->c, reply->str);
    }
    sweep_window(r, nd, w->conn);
    uint64_t oldest = nd->entries.head ? node_entry(nd->entries.head)->acked_ms : now;
    nd->next_ms = now + (now - oldest >= SLOW_AFTER_MS ? SLOW_POLL_MS : POLL_MS);
  }
  sluice__free(w);
}

/* Ask nd's node how far its replicas are (or, without replicas, whether
 * it is alive a window after the oldest entry), when that is due. The
 * offset it answers covers every entry answered before the question. */
static void maybe_ask(sluice_client *c, rec_node *nd, sluice__conn *conn, uint64_t now) {
  sluice__record *r = &c->rec;
  if (nd->asking || !nd->n) return;
  if (has_replicas(nd, conn)) {
    if (now < nd->next_ms) return;
  } else {
    uint64_t due = node_entry(nd->entries.head)->acked_ms + r->window_ms;
    if (now < due || conn->last_reply_ms >= due) return;
  }
  rec_ask *w = sluice__calloc(1, sizeof *w);
  if (!w) return;
  *w = (rec_ask){c, conn, nd->id, nd->newest};
  static const char *argv[2] = {"INFO", "replication"};
  if (sluice__conn_send(conn, info_answered, w, 2, argv, NULL) != REDIS_OK) {
    sluice__free(w);
    return;
  }
  nd->asking = 1;
}

static void poll_cb(evutil_socket_t fd, short what, void *arg) {
  sluice_client *c = arg;
  sluice__record *r = &c->rec;
  uint64_t now = sluice__mono_ms();
  for (size_t i = 0; i < r->nnodes;) {
    rec_node *nd = &r->nodes[i];
    sluice__conn *conn = node_conn(c, nd);
    if (conn) {
      sweep_window(r, nd, conn);
      maybe_ask(c, nd, conn, now);
    }
    if (!nd->n && !nd->asking) {
      r->nodes[i] = r->nodes[--r->nnodes]; /* no entry points into it */
      continue;
    }
    i++;
  }
  if (r->nnodes) sluice__timer_in(r->poll, POLL_MS);
}

/* ---- replays -------------------------------------------------------------- */

static void send_again(sluice_client *c, rec_entry *e);

/* Worth sending again: the step may not have reached the node (a transport
 * status), or the node refused it for now (still loading, busy, not
 * writable yet). Anything else it refused for good. */
static int retryable(int status, const redisReply *reply) {
  if (status == SLUICE_ECONNECTION || status == SLUICE_EINDOUBT || status == SLUICE_ETIMEDOUT)
    return 1;
  return status == SLUICE_EREDIS && reply && reply->type == REDIS_REPLY_ERROR &&
         sluice__transient_error(reply->str);
}

/* Of a replay's answer, the writes that changed something: every script
 * kept here answers an integer per item first (a push more after them),
 * > 0 when it acted (a release that
 * found its permit, a push queued rather than refused as a duplicate, a
 * settlement or cancel that found its message). */
static unsigned acted(const redisReply *reply, unsigned items) {
  if (reply->type == REDIS_REPLY_INTEGER) return reply->integer > 0;
  unsigned n = 0;
  for (size_t i = 0; reply->type == REDIS_REPLY_ARRAY && i < reply->elements && i < items; i++)
    n += reply->element[i]->type == REDIS_REPLY_INTEGER && reply->element[i]->integer > 0;
  return n;
}

static void arm_retry(sluice__record *r, uint64_t in_ms) {
  if (evtimer_pending(r->retry, NULL)) return;
  sluice__timer_in(r->retry, in_ms);
}

/* e failed for now: pending again, sent once its route's connection
 * completes a handshake or, while it stays up, after a backoff. */
static void park(sluice_client *c, rec_entry *e) {
  sluice__record *r = &c->rec;
  unsigned delay = RETRY_MIN_MS;
  for (unsigned i = 0; i < e->tries && delay < RETRY_MAX_MS; i++) delay *= 2;
  if (delay > RETRY_MAX_MS) delay = RETRY_MAX_MS;
  e->tries++;
  e->due_ms = sluice__mono_ms() + delay;
  e->node_id = 0;
  if (!may_keep(c, e)) {
    sluice__free(e);
    return;
  }
  e->seq = ++r->seq;
  sluice__list_append(&r->all, &e->all);
  sluice__list_append(&r->pending, &e->by_node);
  r->n++;
  r->bytes += e->cmd.bytes;
  arm_retry(r, delay);
}

/* A kind's replay counter, taken on its first replay: the library's kinds
 * are fewer than SLUICE__RECORD_KINDS_MAX, so one is always free. */
static void count_replayed(sluice__record *r, const sluice__write_kind *kind, unsigned items) {
  for (size_t i = 0; i < SLUICE__RECORD_KINDS_MAX; i++) {
    if (r->replayed[i].kind && r->replayed[i].kind != kind) continue;
    r->replayed[i].kind = kind;
    r->replayed[i].n += items;
    return;
  }
}

static void replayed(void *ud, int status, const redisReply *reply) {
  rec_entry *e = ud;
  sluice_client *c = e->c;
  sluice__record *r = &c->rec;
  r->replaying--;
  if (c->closing) status = SLUICE_ECANCELED;
  if (status == SLUICE_OK && c->answered) {
    count_replayed(r, e->kind, e->items);
    r->restored += acted(reply, e->items);
    e->tries = 0;
    keep(c, e, c->answered); /* the new node's replicas may not have it yet */
    return;
  }
  if (retryable(status, reply)) {
    park(c, e);
    return;
  }
  if (status != SLUICE_ECANCELED && status != SLUICE_ECLOSED) {
    r->dropped++;
    sluice__log(c, SLUICE_LOG_WARN,
                "a write sent again to a new Redis node was refused and is dropped (%s%s%s)",
                sluice_err_name(status), status == SLUICE_EREDIS ? ": " : "",
                status == SLUICE_EREDIS && reply ? reply->str : "");
  }
  sluice__free(e);
}

static void send_again(sluice_client *c, rec_entry *e) {
  int rc = sluice__eval_at(c, e->route, e->script, e->nkeys, e->cmd.argc, e->cmd.argv, e->cmd.lens,
                           0, replayed, e, NULL);
  if (rc != SLUICE_OK) {
    sluice__free(e); /* the client closes */
    return;
  }
  c->rec.replaying++;
}

/* Pending entries whose backoff ended go again if their route's connection
 * is up (else its handshake sends them: sluice__record_conn_up); the timer
 * comes back while any is left. */
static void retry_cb(evutil_socket_t fd, short what, void *arg) {
  sluice_client *c = arg;
  sluice__record *r = &c->rec;
  uint64_t now = sluice__mono_ms(), next = RETRY_MAX_MS;
  if (c->closing) return;
  for (sluice__link *l = r->pending.head, *nl; l; l = nl) {
    nl = l->next;
    rec_entry *e = node_entry(l);
    const sluice__conn *to = sluice__topo_conn(c->topo, e->route);
    if (e->due_ms <= now && to && to->state == SLUICE_CONN_UP) {
      unlink_entry(r, e);
      send_again(c, e);
    } else if (e->due_ms > now && e->due_ms - now < next) {
      next = e->due_ms - now;
    }
  }
  if (r->pending.head) arm_retry(r, next);
}

static int in_routes(int route, int lo, int hi) { return lo < 0 || (route >= lo && route <= hi); }

/* The route names a node that answered e already: a map that flaps back
 * (a stale map, then the fresh one again) is no loss there, and sending e
 * again would only deliver a consumed message twice. Node ids change with
 * a restart, so a node that came back empty is another one. */
static int answered_there(sluice_client *c, const rec_entry *e) {
  const sluice__conn *to = sluice__topo_conn(c->topo, e->route);
  return to && to->node_id && (to->node_id == e->origin || to->node_id == e->node_id);
}

void sluice__record_replay(sluice_client *c, int lo, int hi) {
  sluice__record *r = &c->rec;
  unsigned n = 0;
  for (sluice__link *l = r->all.head, *next; l; l = next) {
    next = l->next;
    rec_entry *e = entry_of(l);
    if (!in_routes(e->route, lo, hi) || answered_there(c, e)) continue;
    unlink_entry(r, e);
    send_again(c, e);
    n++;
  }
  if (n)
    sluice__log(c, SLUICE_LOG_INFO, "%u write(s) not yet on a replica sent again to the new node",
                n);
}

void sluice__record_conn_up(sluice_client *c, const sluice__conn *conn) {
  sluice__record *r = &c->rec;
  for (sluice__link *l = r->pending.head, *next; l; l = next) {
    next = l->next;
    rec_entry *e = node_entry(l);
    if (sluice__topo_conn(c->topo, e->route) != conn) continue;
    unlink_entry(r, e);
    send_again(c, e);
  }
}

/* ---- keeping -------------------------------------------------------------- */

/* Kept under the node that answered it, or sent again at once when its
 * route named another node by the time the answer came (an old master
 * answering what it had queued before it learnt it was replaced). */
static void keep(sluice_client *c, rec_entry *e, const sluice__answered *a) {
  sluice__record *r = &c->rec;
  /* Before a send at once: its route is where it goes (a cluster slot). */
  e->route = a->route;
  if (!e->origin) e->origin = a->node_id;
  sluice__conn *now_at = sluice__topo_conn(c->topo, a->route);
  if (now_at && now_at->node_id != a->route_node) {
    send_again(c, e);
    return;
  }
  if (!may_keep(c, e)) {
    sluice__free(e);
    return;
  }
  rec_node *nd = node_get(r, a->node_id);
  if (!nd) {
    sluice__free(e);
    r->dropped++;
    return;
  }
  e->node_id = a->node_id;
  e->ups = a->ups;
  e->acked_ms = sluice__mono_ms();
  e->seq = ++r->seq;
  nd->route = a->route;
  nd->newest = e->seq;
  sluice__list_append(&nd->entries, &e->by_node);
  nd->n++;
  sluice__list_append(&r->all, &e->all);
  r->n++;
  r->bytes += e->cmd.bytes;
  if (!evtimer_pending(r->poll, NULL)) sluice__timer_in(r->poll, POLL_MS);
}

static int recording(const sluice_client *c) {
  const sluice__answered *a = c->answered;
  return c->rec.on && a && a->replicated != 1 && !c->closing;
}

void sluice__record_answered(sluice_client *c, const sluice__write_kind *kind, unsigned items) {
  if (!recording(c)) return;
  const sluice__answered *a = c->answered;
  rec_entry *e = entry_new(c, kind, items, a->script, a->nkeys, a->argc, a->argv, a->lens);
  if (e) keep(c, e, a);
  else c->rec.dropped++;
}

void sluice__record_answered_as(sluice_client *c, const sluice__write_kind *kind, unsigned items,
                                const sluice__args *args) {
  if (!recording(c) || args->failed) return;
  rec_entry *e = entry_new(c, kind, items, c->answered->script, args->nkeys, args->argc, args->argv,
                           args->lens);
  if (e) keep(c, e, c->answered);
  else c->rec.dropped++;
}

int sluice__answered_args(const sluice_client *c, int *argc, const char *const **argv,
                          const size_t **lens) {
  if (!c->answered) return SLUICE_EINVAL;
  *argc = c->answered->argc;
  *argv = c->answered->argv;
  *lens = c->answered->lens;
  return SLUICE_OK;
}

int sluice__record_on(const sluice_client *c) { return c->rec.on; }

void sluice__record_permits(sluice_client *c, unsigned restored, unsigned lost) {
  c->rec.permits_restored += restored;
  c->rec.permits_lost += lost;
}

/* ---- life cycle ----------------------------------------------------------- */

int sluice__record_init(sluice_client *c) {
  sluice__record *r = &c->rec;
  const sluice_client_options *o = &c->opts;
  r->on = !o->replay_off;
  r->window_ms = o->replay_window_ms ? o->replay_window_ms : SLUICE_REPLAY_WINDOW_MS;
  r->max_entries = o->replay_max_entries ? o->replay_max_entries : SLUICE_REPLAY_MAX_ENTRIES;
  r->max_bytes = o->replay_max_bytes ? o->replay_max_bytes : SLUICE_REPLAY_MAX_BYTES;
  r->poll = evtimer_new(c->base, poll_cb, c);
  r->retry = evtimer_new(c->base, retry_cb, c);
  return r->poll && r->retry ? SLUICE_OK : SLUICE_ENOMEM;
}

/* The client closes: nothing will be replayed; the poll stops (WAITs in
 * flight are answered by the drain, or with NULL). */
void sluice__record_close(sluice_client *c) {
  sluice__record *r = &c->rec;
  while (r->all.head) drop_entry(r, entry_of(r->all.head));
  if (r->poll) evtimer_del(r->poll);
  if (r->retry) evtimer_del(r->retry);
}

/* After the topology is gone: WAITs in flight have been answered (NULL). */
void sluice__record_clear(sluice_client *c) {
  sluice__record *r = &c->rec;
  while (r->all.head) drop_entry(r, entry_of(r->all.head));
  free(r->nodes);
  r->nodes = NULL;
  r->nnodes = r->capnodes = 0;
  if (r->poll) event_free(r->poll);
  if (r->retry) event_free(r->retry);
  r->poll = r->retry = NULL;
}

void sluice__record_metrics(const sluice_client *c, sluice_client_metrics *out) {
  const sluice__record *r = &c->rec;
  for (size_t i = 0; i < SLUICE__RECORD_KINDS_MAX && r->replayed[i].kind; i++)
    if (r->replayed[i].kind->replay_metric) /* its field: a uint64_t (engine.h) */
      *(uint64_t *)(void *)((char *)out + r->replayed[i].kind->replay_metric) = r->replayed[i].n;
  out->replay_restored = r->restored;
  out->permits_restored = r->permits_restored;
  out->permits_lost = r->permits_lost;
  out->record_dropped = r->dropped;
  out->record_entries = r->n;
  out->record_bytes = r->bytes;
  out->record_oldest_ms = r->all.head ? sluice__mono_ms() - entry_of(r->all.head)->acked_ms : 0;
}
