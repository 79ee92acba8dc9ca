/*
 * The client: options, the command connection, and operations — one Redis
 * step each, with a deadline on a libevent timer (hiredis 0.14 has none), a
 * NOSCRIPT fallback, and completion exactly once from the loop.
 *
 * An operation's memory is referenced by two parties: hiredis (until it calls
 * our reply callback, possibly with NULL during teardown) and the caller
 * (until the op completes or is detached). It is freed when both are done, so
 * a deadline can complete an op while its late reply is still on the way.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <event2/event.h>
#include <event2/event_struct.h>

#include "core/client.h"

struct sluice__op {
  sluice_client *c;
  sluice__link link;              /* in c->ops while not done */
  sluice__link ulink;             /* in c->unsent while unsent */
  unsigned unsent : 1;
  sluice__reply_fn *fn;
  void *ud;
  struct event timer;             /* deadline, or deferred completion */
  int deferred_status;            /* status to report when timer fires early */
  unsigned in_hiredis;            /* hiredis callbacks still due (replies, WAITs) */
  unsigned waits : 1;             /* a WAIT follows it (wait_replicas) */
  redisReply *held;               /* its reply, copied, until the WAIT answers */
  unsigned done : 1;              /* fn called, or detached */
  unsigned retried : 1;           /* EVAL fallback already sent */
  unsigned sent_up : 1;           /* handed over while the connection was up */
  unsigned long ups_at_send;      /* handshakes completed when handed over */
  sluice__conn *conn;             /* where it was handed over last */
  int slot;                       /* cluster: hash slot of KEYS[1]; -1 any node */
  unsigned redirects;             /* cluster: MOVED, ASK and retries so far */
  char *ask;                      /* cluster: "host:port" of an ASK, for one send */
  struct event retry;             /* cluster: the backoff before a retry */
  uint64_t start_us;              /* monotonic: started (latency metrics) */
  const sluice__script *script;   /* NULL for plain commands */
  int argc;                       /* sent argv: "EVALSHA" sha nkeys ... */
  const char **argv;
  size_t *lens;
};

/* ---- operations ---------------------------------------------------------- */

void sluice__ignore_reply(void *userdata, int status, const redisReply *reply) {}

/* Up: the command connection, or a cluster's map with every master in use. */
static int client_up(const sluice_client *c) {
  return c->cluster ? sluice__cluster_up(c->cluster) : c->cmd.state == SLUICE_CONN_UP;
}

static void op_release_if_unused(sluice__op *op) {
  if (op->done && !op->in_hiredis && !evtimer_pending(&op->timer, NULL)) {
    evtimer_del(&op->retry);
    free(op->ask);
    sluice__reply_free(op->held);
    sluice__free(op);
  }
}

static void op_unlink(sluice__op *op) {
  sluice_client *c = op->c;
  sluice__list_remove(&c->ops, &op->link);
  if (op->unsent) sluice__list_remove(&c->unsent, &op->ulink);
  op->unsent = 0;
  c->stats.ops_in_flight--;
}

/* Count a completion: by status, by kind (script or command), latency. */
static void op_count(sluice_client *c, const sluice__op *op, int status) {
  unsigned k = op->script && op->script->index < SLUICE__LUA_COUNT ? op->script->index
                                                                   : SLUICE__LUA_COUNT;
  unsigned s = status <= 0 && -status < SLUICE_METRICS_STATUSES ? (unsigned)-status
                                                               : SLUICE_METRICS_STATUSES - 1;
  c->m.by_status[s]++;
  c->m.ops[k]++;
  if (status != SLUICE_OK) c->m.errors[k]++;
  sluice__hist_record(&c->m.latency[k], sluice__mono_us() - op->start_us);
}

/* Report status to the owner now (from the loop) and mark the op done. */
static void op_complete_replicas(sluice__op *op, int status, const redisReply *reply,
                                 int replicas) {
  if (op->done) return;
  op->done = 1;
  op_count(op->c, op, status);
  evtimer_del(&op->timer);
  evtimer_del(&op->retry);
  op_unlink(op);
  op->c->replicas = replicas;
  op->fn(op->ud, status, reply);
  op->c->replicas = -1;
}

static void op_complete(sluice__op *op, int status, const redisReply *reply) {
  op_complete_replicas(op, status, reply, -1);
}

/* An operation timed out. If nothing at all came back for a whole default
 * operation timeout, the connection is presumed dead (a host gone without a
 * reset never closes it): replace it, so callers see ECONNECTION and fail
 * fast instead of timing out one by one, and reconnect with backoff. */
static void check_connection_alive(sluice__op *op) {
  sluice__conn *conn = op->in_hiredis ? op->conn : NULL; /* else it may be gone */
  if (!conn || conn->state != SLUICE_CONN_UP) return;
  if (sluice__mono_ms() - conn->last_reply_ms < op->c->opts.op_timeout_ms) return;
  sluice__conn_fail(conn, "no reply within the operation timeout: connection presumed dead");
}

static void op_timer_cb(evutil_socket_t fd, short what, void *arg) {
  sluice__op *op = arg;
  int status = op->deferred_status ? op->deferred_status : SLUICE_ETIMEDOUT;
  if (status == SLUICE_ETIMEDOUT) {
    op->c->stats.ops_timed_out++;
    check_connection_alive(op);
  }
  op_complete(op, status, NULL);
  op_release_if_unused(op);
}

/* Complete with status on the next loop turn, never inside the caller. */
static void op_defer(sluice__op *op, int status) {
  op->deferred_status = status;
  evtimer_del(&op->timer);
  sluice__timer_in(&op->timer, 0);
}

static int op_send(sluice__op *op);
static int op_dispatch(sluice__op *op);
static void op_retry_cb(evutil_socket_t fd, short what, void *arg);
static int cluster_redirect(sluice__op *op, const redisReply *reply);

static int starts(const redisReply *r, const char *word) {
  size_t n = strlen(word);
  return r->len >= n && memcmp(r->str, word, n) == 0;
}

static int not_master(const redisReply *r) {
  return starts(r, "READONLY") || starts(r, "LOADING") || starts(r, "MASTERDOWN");
}

static int is_noscript(const redisReply *r) {
  return r->type == REDIS_REPLY_ERROR && r->len >= 8 && memcmp(r->str, "NOSCRIPT", 8) == 0;
}

static void op_reply_cb(redisAsyncContext *ac, void *r, void *privdata) {
  sluice__op *op = privdata;
  redisReply *reply = r;
  op->in_hiredis--;
  if (reply) op->conn->last_reply_ms = sluice__mono_ms(); /* alive: a reply came on it */
  if (op->done) {
    op_release_if_unused(op);
    return;
  }
  if (!reply) {
    /* Connection lost or context freed: possibly inside redisAsyncFree, so
     * report from our own timer, outside hiredis. Redis may have run a
     * command that left on a connection that was up; one that only waited
     * behind a handshake that never completed did not run. */
    sluice__conn *conn = op->conn;
    int maybe_ran = op->sent_up || conn->ups > op->ups_at_send;
    op_defer(op, op->c->closing ? SLUICE_ECANCELED : maybe_ran ? SLUICE_EINDOUBT : SLUICE_ECONNECTION);
    return;
  }
  if (op->c->cluster && reply->type == REDIS_REPLY_ERROR && cluster_redirect(op, reply)) return;
  if (op->script && !op->retried && is_noscript(reply)) {
    /* Redis restarted or SCRIPT FLUSH: send the body once (EVAL loads it). */
    op->retried = 1;
    op->c->stats.noscript_reloads++;
    sluice__log(op->c, SLUICE_LOG_INFO,
                "script %s missing in Redis (restarted, or SCRIPT FLUSH): sent again with EVAL",
                op->script->name);
    op->argv[0] = "EVAL";
    op->argv[1] = op->script->body;
    op->lens[0] = 4;
    op->lens[1] = op->script->len;
    if (op_send(op) != 0) op_defer(op, SLUICE_ECONNECTION);
    return;
  }
  if (reply->type == REDIS_REPLY_ERROR && not_master(reply)) {
    /* A replica, or a node still loading or cut off from its master: the
     * step did not run. Find the master again (a failover). */
    snprintf(op->c->last_error, sizeof op->c->last_error, "Redis: %s", reply->str);
    sluice__conn_fail(op->conn, reply->str);
    op_complete(op, SLUICE_ECONNECTION, NULL);
    op_release_if_unused(op);
    return;
  }
  if (reply->type == REDIS_REPLY_ERROR) /* Redis's own words reach the user */
    snprintf(op->c->last_error, sizeof op->c->last_error, "Redis: %s", reply->str);
  if (op->waits && reply->type != REDIS_REPLY_ERROR && (op->held = sluice__reply_dup(reply)))
    return; /* the answer goes out with the WAIT's count */
  op_complete(op, reply->type == REDIS_REPLY_ERROR ? SLUICE_EREDIS : SLUICE_OK, reply);
  op_release_if_unused(op);
}

/* ---- replica acknowledgement (wait_replicas) ----------------------------- */

/* WAIT blocks the connection it is sent on until the replicas answer or its
 * timeout passes, and every command pipelined behind it waits too. So the
 * scripts that write in one loop turn share one WAIT per connection (it
 * covers every write sent before it), and once a connection's replicas fell
 * short its WAITs use SHORT_WAIT_MS, with a longer probe (PROBE_WAIT_MS at
 * most) once per PROBE_EVERY_MS to notice their return: a missing replica
 * stalls the connection for wait_timeout_ms once, then for a millisecond a
 * turn, instead of wait_timeout_ms a step. */
#define SHORT_WAIT_MS 1
#define PROBE_WAIT_MS 50
#define PROBE_EVERY_MS 1000

typedef struct wait_batch {
  sluice_client *c;
  sluice__link link;              /* in c->wait_open until sent */
  sluice__conn *conn;
  size_t n;
  sluice__op **ops;               /* each holds an in_hiredis count for us */
  size_t cap;
} wait_batch;

/* The WAIT's answer: how many replicas acknowledged every write before it.
 * The steps ran either way; a count short of wait_replicas is reported, not
 * turned into a failure. */
static void wait_reply_cb(redisAsyncContext *ac, void *r, void *privdata) {
  wait_batch *w = privdata;
  redisReply *reply = r;
  sluice_client *c = w->c;
  long long n = reply && reply->type == REDIS_REPLY_INTEGER ? reply->integer : 0;
  int enough = n >= (long long)c->opts.wait_replicas;
  if (reply) w->conn->replicas_short = !enough; /* else the conn may be gone */
  for (size_t i = 0; i < w->n; i++) {
    sluice__op *op = w->ops[i];
    op->in_hiredis--;
    if (!op->done && op->held) { /* else: re-sent after a NOSCRIPT or redirect, or too late */
      if (!enough) c->stats.writes_not_replicated++;
      op_complete_replicas(op, SLUICE_OK, op->held, enough);
    }
    op_release_if_unused(op);
  }
  free(w->ops);
  sluice__free(w);
}

/* From the loop, after the turn's scripts were handed to hiredis: one WAIT
 * per connection that wrote. */
static void send_waits(evutil_socket_t fd, short what, void *arg) {
  sluice_client *c = arg;
  uint64_t now = sluice__mono_ms();
  while (c->wait_open.head) {
    wait_batch *w = sluice__container_of(c->wait_open.head, wait_batch, link);
    sluice__list_remove(&c->wait_open, &w->link);
    sluice__conn *conn = w->conn;
    conn->wait_open = NULL;
    unsigned t = c->opts.wait_timeout_ms;
    if (conn->replicas_short) {
      if (now - conn->wait_probe_ms < PROBE_EVERY_MS) t = SHORT_WAIT_MS;
      else if (t > PROBE_WAIT_MS) t = PROBE_WAIT_MS;
    }
    if (t > SHORT_WAIT_MS) conn->wait_probe_ms = now;
    char nb[24], tb[24];
    const char *argv[3] = {"WAIT", nb, tb};
    size_t lens[3] = {4, sluice__fmt_u64(nb, c->opts.wait_replicas), sluice__fmt_u64(tb, t)};
    if (sluice__conn_send(conn, wait_reply_cb, w, 3, argv, lens) == REDIS_OK) continue;
    /* No WAIT can follow (the connection went): the steps answer alone. */
    for (size_t i = 0; i < w->n; i++) {
      sluice__op *op = w->ops[i];
      op->in_hiredis--;
      op->waits = 0;
      op_release_if_unused(op);
    }
    free(w->ops);
    sluice__free(w);
  }
}

/* op was just sent on op->conn: the turn's WAIT on that connection covers it. */
static void wait_join(sluice__op *op) {
  sluice_client *c = op->c;
  sluice__conn *conn = op->conn;
  wait_batch *w = conn->wait_open;
  if (!w) {
    if (!(w = sluice__calloc(1, sizeof *w))) goto no_wait;
    w->c = c;
    w->conn = conn;
    conn->wait_open = w;
    sluice__list_append(&c->wait_open, &w->link);
    event_active(c->wait_ev, 0, 0);
  }
  if (w->n == w->cap) {
    size_t cap = w->cap ? 2 * w->cap : 8;
    sluice__op **ops = realloc(w->ops, cap * sizeof *ops);
    if (!ops) goto no_wait;
    w->ops = ops;
    w->cap = cap;
  }
  w->ops[w->n++] = op;
  op->in_hiredis++;
  return;
no_wait:
  op->waits = 0; /* out of memory: answered without the count */
}

/* Scripts that only read need no WAIT. */
static int script_writes(const sluice__script *s) {
  return s != &sluice__lua_sem_status && s != &sluice__lua_dq_status &&
         s != &sluice__lua_dq_dead && s != &sluice__lua_top_scan && s != &sluice__lua_ping &&
         s != &sluice__lua_blk_interrupt;
}

/* Where op goes: the one connection, or in a cluster the master of its
 * slot (or the node an ASK named). NULL: nowhere now. */
static sluice__conn *op_route(sluice__op *op) {
  sluice_client *c = op->c;
  if (!c->cluster) return &c->cmd;
  if (op->ask) return sluice__cluster_conn_at(c->cluster, op->ask, strlen(op->ask), op->conn);
  return sluice__cluster_conn(c->cluster, op->slot);
}

static void ignore_asking(redisAsyncContext *ac, void *r, void *privdata) {}

static int op_send(sluice__op *op) {
  sluice__conn *conn = op_route(op);
  if (!conn) return SLUICE_ECONNECTION;
  /* ASKING lets the importing node serve the one command that follows it
   * on the same connection. */
  static const char *asking[1] = {"ASKING"};
  if (op->ask && sluice__conn_send(conn, ignore_asking, NULL, 1, asking, NULL) != REDIS_OK)
    return SLUICE_ECONNECTION;
  if (sluice__conn_send(conn, op_reply_cb, op, op->argc, op->argv, op->lens) != REDIS_OK)
    return SLUICE_ECONNECTION;
  op->conn = conn;
  op->in_hiredis++;
  if (op->waits) wait_join(op);
  op->sent_up = conn->state == SLUICE_CONN_UP;
  op->ups_at_send = conn->ups;
  return SLUICE_OK;
}

/* Build an op whose argv is head[0..nhead) followed by args[0..nargs), all
 * copied into one allocation: the caller's buffers may go at once. */
static sluice__op *op_new(sluice_client *c, int nhead, const char *const *head,
                          const size_t *headlens, int nargs, const char *const *args,
                          const size_t *lens) {
  size_t bytes = 0;
  int argc = nhead + nargs;
  for (int i = 0; i < nhead; i++) bytes += headlens[i] + 1;
  for (int i = 0; i < nargs; i++) bytes += (lens ? lens[i] : strlen(args[i])) + 1;
  size_t fixed = sizeof(sluice__op) + (size_t)argc * (sizeof(char *) + sizeof(size_t));
  sluice__op *op = sluice__calloc(1, fixed + bytes);
  if (!op) return NULL;
  op->c = c;
  op->argc = argc;
  op->argv = (const char **)(op + 1);
  op->lens = (size_t *)(op->argv + argc);
  char *p = (char *)(op->lens + argc);
  for (int i = 0; i < argc; i++) {
    const char *src = i < nhead ? head[i] : args[i - nhead];
    size_t n = i < nhead ? headlens[i] : lens ? lens[i - nhead] : strlen(src);
    memcpy(p, src, n);
    p[n] = '\0';
    op->argv[i] = p;
    op->lens[i] = n;
    p += n + 1;
  }
  evtimer_assign(&op->timer, c->base, op_timer_cb, op);
  evtimer_assign(&op->retry, c->base, op_retry_cb, op);
  op->slot = -1;
  return op;
}

/* Send op now, or queue it until the first connection (or the cluster's
 * first map) exists: 0. A status < 0 when it cannot go: it never left. */
static int op_dispatch(sluice__op *op) {
  sluice_client *c = op->c;
  sluice__conn *conn = &c->cmd;
  int waits_first = c->cluster ? !sluice__cluster_known(c->cluster)
                               : !c->cmd.ac && !c->cmd.failed;
  if (c->cluster && waits_first && !sluice__cluster_reachable(c->cluster))
    return SLUICE_ECONNECTION; /* no map, and every node tried failed */
  if (waits_first) {
    /* No context (its address is being looked up) or no map yet: wait
     * for it, within the deadline. */
    op->unsent = 1;
    sluice__list_append(&c->unsent, &op->ulink);
    return SLUICE_OK;
  }
  if (c->cluster && !(conn = op_route(op))) {
    snprintf(c->last_error, sizeof c->last_error,
             "Redis Cluster: no node serves slot %d (the map is being refreshed)", op->slot);
    return SLUICE_ECONNECTION;
  }
  /* Fail fast once the connection was lost: callers never wait out a
   * reconnect. Before the first connection, ops queue behind the handshake. */
  if (conn->state != SLUICE_CONN_UP && conn->failed) return SLUICE_ECONNECTION;
  return op_send(op);
}

static void op_retry_cb(evutil_socket_t fd, short what, void *arg) {
  sluice__op *op = arg;
  int rc = op_dispatch(op);
  if (rc != SLUICE_OK) {
    op_complete(op, rc, NULL);
    op_release_if_unused(op);
  }
}

/* Redirect limits: a step follows at most this many MOVED/ASK replies and
 * retries, waiting RETRY_MIN_MS, doubling up to RETRY_MAX_MS, in between
 * retries (its deadline bounds them too). */
#define MAX_REDIRECTS 16
#define RETRY_MIN_MS 10
#define RETRY_MAX_MS 200

/* A cluster's answer that the step did not run here: follow MOVED and ASK
 * at once; retry after a backoff on TRYAGAIN (a slot moving), CLUSTERDOWN,
 * and the signs of a failover (READONLY: our map names a replica; LOADING,
 * MASTERDOWN). 1 when handled, 0 for any other error. */
static int cluster_redirect(sluice__op *op, const redisReply *r) {
  sluice_client *c = op->c;
  int moved = starts(r, "MOVED "), ask = starts(r, "ASK ");
  int again = starts(r, "TRYAGAIN") || starts(r, "CLUSTERDOWN") || not_master(r);
  unsigned slot;
  const char *addr;
  size_t len;
  if (!moved && !ask && !again) return 0;
  snprintf(c->last_error, sizeof c->last_error, "Redis: %s", r->str);
  if (++op->redirects > MAX_REDIRECTS) {
    snprintf(c->last_error, sizeof c->last_error,
             "Redis Cluster: no node ran the step after %d redirects and retries; the last "
             "said: %.300s", MAX_REDIRECTS, r->str);
    op_complete(op, SLUICE_ECONNECTION, NULL);
    op_release_if_unused(op);
    return 1;
  }
  free(op->ask);
  op->ask = NULL;
  if ((moved || ask) && sluice__cluster_parse_redirect(r->str, r->len, &slot, &addr, &len) != 0) {
    op_complete(op, SLUICE_EPROTOCOL, NULL); /* a redirect we cannot read */
    op_release_if_unused(op);
    return 1;
  }
  if (moved || ask) {
    if (moved) sluice__cluster_moved(c->cluster, slot, addr, len, op->conn);
    if (ask && (op->ask = malloc(len + 1))) {
      memcpy(op->ask, addr, len);
      op->ask[len] = '\0';
    }
    int rc = op_dispatch(op);
    if (rc != SLUICE_OK) {
      op_complete(op, rc, NULL);
      op_release_if_unused(op);
    }
    return 1;
  }
  if (!starts(r, "TRYAGAIN")) sluice__cluster_refresh(c->cluster);
  unsigned delay = RETRY_MIN_MS;
  for (unsigned i = 1; i < op->redirects && delay < RETRY_MAX_MS; i++) delay *= 2;
  sluice__timer_in(&op->retry, delay < RETRY_MAX_MS ? delay : RETRY_MAX_MS);
  return 1;
}

static int op_start(sluice_client *c, sluice__op *op, unsigned timeout_ms,
                    sluice__reply_fn *fn, void *ud, sluice__op **out) {
  op->fn = fn;
  op->ud = ud;
  sluice__list_append(&c->ops, &op->link);
  c->stats.ops_in_flight++;
  c->stats.ops_started++;
  op->start_us = sluice__mono_us();
  if (op->script) c->m.evals++;
  else c->m.commands++;
  if (!client_up(c)) c->m.queued_connecting++;
  if (out) *out = op;
  sluice__timer_in(&op->timer, timeout_ms ? timeout_ms : c->opts.op_timeout_ms);
  int rc = op_dispatch(op);
  if (rc != SLUICE_OK) op_defer(op, rc);
  return SLUICE_OK;
}

/* sluice__eval, on the node serving slot (-1: KEYS[1]'s, or any master
 * for a script without keys). */
static int eval_at(sluice_client *c, int slot, const sluice__script *s, int nkeys, int argc,
                   const char *const *argv, const size_t *lens, unsigned timeout_ms,
                   sluice__reply_fn *fn, void *ud, sluice__op **out) {
  if (!c || !s || !fn || nkeys < 0 || argc < nkeys || (argc && !argv)) return SLUICE_EINVAL;
  if (c->sealed) return SLUICE_ECLOSED;
  if (nkeys > 255) return SLUICE_EINVAL;
  char nk[8];
  const char *head[3] = {"EVALSHA", s->sha, nk};
  size_t headlens[3] = {7, 40, sluice__fmt_u64(nk, (uint64_t)nkeys)};
  sluice__op *op = op_new(c, 3, head, headlens, argc, argv, lens);
  if (!op) return SLUICE_ENOMEM;
  op->script = s;
  op->waits = c->opts.wait_replicas > 0 && script_writes(s);
  op->slot = slot;
  if (slot < 0 && nkeys > 0) op->slot = (int)sluice__keyslot(argv[0], lens ? lens[0] : strlen(argv[0]));
  return op_start(c, op, timeout_ms, fn, ud, out);
}

int sluice__eval(sluice_client *c, const sluice__script *s, int nkeys, int argc,
                 const char *const *argv, const size_t *lens, unsigned timeout_ms,
                 sluice__reply_fn *fn, void *ud, sluice__op **out) {
  return eval_at(c, -1, s, nkeys, argc, argv, lens, timeout_ms, fn, ud, out);
}

int sluice__command(sluice_client *c, int argc, const char *const *argv,
                    const size_t *lens, unsigned timeout_ms, sluice__reply_fn *fn,
                    void *ud, sluice__op **out) {
  if (!c || !fn || argc < 1 || !argv) return SLUICE_EINVAL;
  if (c->sealed) return SLUICE_ECLOSED;
  sluice__op *op = op_new(c, 0, NULL, NULL, argc, argv, lens);
  if (!op) return SLUICE_ENOMEM;
  return op_start(c, op, timeout_ms, fn, ud, out);
}

void sluice__op_detach(sluice__op *op) {
  if (!op || op->done) return;
  op->done = 1;
  evtimer_del(&op->timer);
  op_unlink(op);
  op_release_if_unused(op);
}

/* ---- connection events --------------------------------------------------- */

/* Ops that waited for the first context (or the cluster's first map) go
 * now, in order; with none to be had, they fail as never sent. */
static void send_unsent(sluice_client *c, int fail) {
  while (c->unsent.head) {
    sluice__op *op = sluice__container_of(c->unsent.head, sluice__op, ulink);
    sluice__list_remove(&c->unsent, &op->ulink);
    op->unsent = 0;
    int rc = fail ? SLUICE_ECONNECTION : op_dispatch(op);
    if (rc != SLUICE_OK) op_defer(op, rc);
  }
}

/* The first context exists, its handshake queued: the ops that waited go
 * behind it. */
static void cmd_context(sluice__conn *conn, void *ud) { send_unsent(ud, 0); }

/* A cluster map arrived, or the cluster said it has none for us. */
static void map_changed(void *ud) {
  sluice_client *c = ud;
  if (c->closing) return;
  if (sluice__cluster_known(c->cluster)) {
    send_unsent(c, 0);
  } else if (*sluice__cluster_error(c->cluster)) {
    snprintf(c->last_error, sizeof c->last_error, "%s", sluice__cluster_error(c->cluster));
    send_unsent(c, 1);
  }
  if (c->blocker) sluice__blocker_remap(c->blocker);
}

int sluice__client_ready(sluice__conn *conn, void *ud) {
  sluice_client *c = ud;
  return !c->sentinel || sluice__sentinel_address(c->sentinel);
}

void sluice__client_data_down(sluice_client *c) {
  if (c->sentinel) sluice__sentinel_stale(c->sentinel);
  if (c->cluster) sluice__cluster_refresh(c->cluster);
}

/* The sentinels named a new master: connections to the old one go now
 * (it may accept writes for seconds and lose them). */
static void master_moved(void *ud) {
  sluice_client *c = ud;
  if (c->closing) return;
  sluice__conn_fail(&c->cmd, "the master moved (sentinel failover)");
  if (c->blocker) sluice__blocker_moved(c->blocker);
}

static void master_known(void *ud) {
  sluice_client *c = ud;
  if (c->closing) return; /* the close sequence owns the connections now */
  if (c->cmd.state == SLUICE_CONN_RESOLVING) sluice__conn_start(&c->cmd);
  if (c->blocker) sluice__blocker_kick(c->blocker);
}

/* "host:port", the socket path, or a cluster's seeds, for log messages. */
static const char *where(const sluice_client *c, const sluice__conn *conn, char *buf,
                         size_t size) {
  const sluice__endpoint *ep = conn ? conn->cfg.endpoint : &c->endpoint;
  if (ep->unix_path) snprintf(buf, size, "%s", ep->unix_path);
  else if (!conn && ep->cluster)
    snprintf(buf, size, "the cluster at %s:%d%s", ep->seed_hosts[0], ep->seed_ports[0],
             ep->nseeds > 1 ? ",..." : "");
  else snprintf(buf, size, "%s:%d", ep->host ? ep->host : "?", ep->port);
  return buf;
}

/* A data connection's handshake completed: the command connection, or in
 * a cluster one master's. */
static void data_up(sluice__conn *conn, void *ud) {
  sluice_client *c = ud;
  char w[128];
  conn->last_reply_ms = c->up_since_ms = sluice__mono_ms();
  if (conn->ups > 1) c->stats.reconnects++;
  if (c->m_fails)
    sluice__log(c, SLUICE_LOG_INFO, "connected to %s after %u failed attempt(s)",
                where(c, conn, w, sizeof w), c->m_fails);
  else
    sluice__log(c, SLUICE_LOG_INFO, "connected to %s", where(c, conn, w, sizeof w));
  c->m_fails = 0;
  c->m_last_down[0] = '\0';
  if (c->blocker) sluice__blocker_kick(c->blocker);
  sluice__guard_home_resume(&c->home); /* releases first, then everyone else */
  if (client_up(c) && !c->m_up) {
    c->m_up = 1;
    if (c->state_cb) c->state_cb(c, 1, SLUICE_OK, c->state_ud);
  }
}

static void data_down(sluice__conn *conn, int status, void *ud) {
  sluice_client *c = ud;
  sluice__client_data_down(c);
  /* Ops that waited for a first connection that failed were never sent. */
  if (!c->cluster || !sluice__cluster_reachable(c->cluster)) send_unsent(c, 1);
  const char *serr = c->sentinel ? sluice__sentinel_error(c->sentinel) : "";
  char w[128];
  where(c, conn, w, sizeof w);
  if (c->cluster) /* which node, of several */
    snprintf(c->last_error, sizeof c->last_error, "%.120s: %.300s", w, conn->errstr);
  else
    snprintf(c->last_error, sizeof c->last_error, "%.240s%s%.260s", conn->errstr,
             *serr ? "; " : "", serr);
  c->m_up = 0;
  if (conn->was_up) {
    c->m.disconnects++;
    sluice__log(c, SLUICE_LOG_WARN, "connection to %s down: %s; reconnecting in %u ms", w,
                conn->errstr, conn->retry_ms);
  } else {
    /* The same failure again and again (a wrong password, a server that
     * stays down) is worth one line at its level; the repeats go to DEBUG. */
    int again = strcmp(c->m_last_down, conn->errstr) == 0;
    c->m.connect_failures++;
    c->m_fails++;
    sluice__log(c, again ? SLUICE_LOG_DEBUG : conn->handshake_failed ? SLUICE_LOG_ERROR : SLUICE_LOG_WARN,
                "%s %s: %s; retrying in %u ms (attempt %u)",
                conn->handshake_failed ? "handshake failed with" : "cannot connect to", w,
                conn->errstr, conn->retry_ms, c->m_fails);
  }
  snprintf(c->m_last_down, sizeof c->m_last_down, "%s", conn->errstr);
  if (c->state_cb && !c->closing) c->state_cb(c, 0, status, c->state_ud);
}

/* ---- public API ---------------------------------------------------------- */

void sluice_client_options_init(sluice_client_options *o) {
  if (!o) return;
  memset(o, 0, sizeof *o);
  o->host = "127.0.0.1";
  o->port = 6379;
  o->key_prefix = "sluice:";
  o->connect_timeout_ms = 2000;
  o->op_timeout_ms = 5000;
  o->reconnect_min_ms = 50;
  o->reconnect_max_ms = 2000;
}

static int dup_opt(char **dst, const char *src) {
  *dst = NULL;
  if (!src) return SLUICE_OK;
  *dst = strdup(src);
  return *dst ? SLUICE_OK : SLUICE_ENOMEM;
}

static int build_endpoint(sluice_client *c, const sluice_client_options *o) {
  if (o->url) return sluice__parse_url(o->url, &c->endpoint);
  sluice__endpoint *ep = &c->endpoint;
  if (!o->unix_path && (o->port <= 0 || o->port > 65535)) return SLUICE_EINVAL;
  if (o->db < 0) return SLUICE_EINVAL;
  ep->port = o->port;
  ep->db = o->db;
  if (dup_opt(&ep->host, o->host ? o->host : "127.0.0.1") || dup_opt(&ep->unix_path, o->unix_path) ||
      dup_opt(&ep->username, o->username) || dup_opt(&ep->password, o->password)) {
    sluice__endpoint_clear(ep);
    return SLUICE_ENOMEM;
  }
  if (o->cluster_seeds) {
    int rc = o->unix_path || o->master_name ? SLUICE_EINVAL : sluice__endpoint_cluster(ep, o->cluster_seeds);
    if (rc) sluice__endpoint_clear(ep);
    return rc;
  }
  if (o->master_name) {
    int rc = o->unix_path ? SLUICE_EINVAL
                          : sluice__endpoint_sentinels(ep, o->master_name, o->sentinels,
                                                       o->sentinel_username, o->sentinel_password);
    if (rc) sluice__endpoint_clear(ep);
    return rc;
  }
  return SLUICE_OK;
}

static void client_destroy(sluice_client *c) {
  sluice__sentinel_free(c->sentinel);
  sluice__cluster_free(c->cluster);
  sluice__endpoint_clear(&c->endpoint);
  free(c->key_prefix);
  if (c->reaper) event_free(c->reaper);
  if (c->log_ev) event_free(c->log_ev);
  if (c->wait_ev) event_free(c->wait_ev);
  if (c->clock_ev) event_free(c->clock_ev);
  sluice__guard_home_clear(&c->home);
  sluice__free(c);
}

/* The client's memory goes once it is reaped and every object is gone. */
static void maybe_release(sluice_client *c) {
  if (c->reaped && !c->home.guards.head) client_destroy(c);
}

static void home_empty(sluice__guard_home *h) {
  maybe_release(sluice__container_of(h, sluice_client, home));
}

static void reaper_cb(evutil_socket_t fd, short what, void *arg);
static void cmd_drained(sluice__conn *conn, void *ud);
static void cluster_drained(void *ud);
static void log_deliver(evutil_socket_t fd, short what, void *arg);
static void clock_check(evutil_socket_t fd, short what, void *arg);

int sluice_client_new(struct event_base *base, const sluice_client_options *opts,
                      sluice_client **out) {
  sluice_client_options defaults;
  int rc;
  if (out) *out = NULL;
  if (!base || !out) return SLUICE_EINVAL;
  if (!opts) {
    sluice_client_options_init(&defaults);
    opts = &defaults;
  }
  sluice_client *c = sluice__calloc(1, sizeof *c);
  if (!c) return SLUICE_ENOMEM;
  c->base = base;
  c->opts = *opts;
  c->replicas = -1;
  if (!c->opts.connect_timeout_ms) c->opts.connect_timeout_ms = 2000;
  if (!c->opts.op_timeout_ms) c->opts.op_timeout_ms = 5000;
  if (!c->opts.reconnect_min_ms) c->opts.reconnect_min_ms = 50;
  if (!c->opts.max_pending_pushes) c->opts.max_pending_pushes = 100000;
  if (c->opts.reconnect_max_ms < c->opts.reconnect_min_ms)
    c->opts.reconnect_max_ms = c->opts.reconnect_min_ms > 2000 ? c->opts.reconnect_min_ms : 2000;
  /* The WAIT must answer within the step's deadline. */
  if (c->opts.wait_replicas && !c->opts.wait_timeout_ms) c->opts.wait_timeout_ms = 100;
  if (c->opts.wait_replicas && c->opts.wait_timeout_ms >= c->opts.op_timeout_ms)
    c->opts.wait_timeout_ms = c->opts.op_timeout_ms / 2 ? c->opts.op_timeout_ms / 2 : 1;
  rc = build_endpoint(c, opts);
  if (!rc) rc = sluice__endpoint_finish(&c->endpoint, opts); /* TLS */
  if (rc) {
    sluice__free(c);
    return rc;
  }
  c->opts.url = c->opts.host = c->opts.unix_path = NULL;
  c->opts.username = c->opts.password = NULL;
  c->key_prefix = strdup(opts->key_prefix ? opts->key_prefix : "sluice:");
  c->opts.key_prefix = c->key_prefix;
  c->reaper = event_new(base, -1, 0, reaper_cb, c);
  c->log_ev = event_new(base, -1, 0, log_deliver, c);
  c->wait_ev = event_new(base, -1, 0, send_waits, c);
  c->clock_ev = event_new(base, -1, 0, clock_check, c);
  sluice__random_hex(c->id);
  sluice__conn_config cfg = {.endpoint = &c->endpoint,
                             .connect_timeout_ms = c->opts.connect_timeout_ms,
                             .reconnect_min_ms = c->opts.reconnect_min_ms,
                             .reconnect_max_ms = c->opts.reconnect_max_ms,
                             .scripts = sluice__lua_all,
                             .on_up = data_up,
                             .on_down = data_down,
                             .ready = sluice__client_ready,
                             .on_context = cmd_context,
                             .userdata = c};
  sluice__sentinel_config scfg = {&c->endpoint, c->opts.connect_timeout_ms,
                                  c->opts.reconnect_min_ms, c->opts.reconnect_max_ms,
                                  master_moved, master_known, c};
  sluice__cluster_config ccfg = {.ep = &c->endpoint,
                                 .connect_timeout_ms = c->opts.connect_timeout_ms,
                                 .reconnect_min_ms = c->opts.reconnect_min_ms,
                                 .reconnect_max_ms = c->opts.reconnect_max_ms,
                                 .scripts = sluice__lua_all,
                                 .node_up = data_up,
                                 .node_down = data_down,
                                 .map_changed = map_changed,
                                 .userdata = c};
  if (!c->key_prefix || !c->reaper || !c->log_ev || !c->clock_ev || !c->wait_ev ||
      sluice__guard_home_init(&c->home, base, home_empty) != 0 ||
      (c->endpoint.master_name && !(c->sentinel = sluice__sentinel_new(base, &scfg))) ||
      sluice__conn_init(&c->cmd, base, &cfg) != 0) {
    client_destroy(c);
    return SLUICE_ENOMEM;
  }
  /* A cluster's connections are its masters' (cluster.c); c->cmd stays idle. */
  if (c->endpoint.cluster && !(c->cluster = sluice__cluster_new(base, &ccfg))) {
    sluice__conn_shutdown(&c->cmd);
    client_destroy(c);
    return SLUICE_ENOMEM;
  }
  if (!c->cluster) sluice__conn_start(&c->cmd);
  *out = c;
  return SLUICE_OK;
}

void sluice_client_set_state_cb(sluice_client *c, sluice_client_state_cb *cb, void *ud) {
  if (!c) return;
  c->state_cb = cb;
  c->state_ud = ud;
}

int sluice_client_is_connected(const sluice_client *c) {
  return c && !c->closing && client_up(c);
}

const char *sluice_client_last_error(const sluice_client *c) {
  if (!c) return sluice__endpoint_error(); /* why sluice_client_new failed */
  /* Still looking for the master: the sentinels' answer is the news. */
  if (!c->last_error[0] && c->sentinel) return sluice__sentinel_error(c->sentinel);
  if (!c->last_error[0] && c->cluster) return sluice__cluster_error(c->cluster);
  return c->last_error;
}

void sluice_client_get_health(const sluice_client *c, sluice_client_health *out) {
  if (!c || !out) return;
  out->command_up = sluice_client_is_connected(c);
  out->blocking_up = c->closing || !c->blocker ? -1 : sluice__blocker_up(c->blocker);
}

void sluice_client_get_stats(const sluice_client *c, sluice_client_stats *out) {
  if (!c || !out) return;
  *out = c->stats;
}

/* The close sequence, from the loop: every object cancels its pending
 * operations (releases they queue still go out), remaining ops complete
 * with ECANCELED, connections go, close_cb runs. */
static void reaper_cb(evutil_socket_t fd, short what, void *arg) {
  sluice_client *c = arg;
  send_waits(-1, 0, c); /* none may wait for a turn that is not coming */
  sluice__guard_home_close(&c->home);
  c->sealed = 1;
  while (c->ops.head) {
    sluice__op *op = sluice__container_of(c->ops.head, sluice__op, link);
    op_complete(op, SLUICE_ECANCELED, NULL);
    op_release_if_unused(op);
  }
  if (c->blocker) {
    sluice__blocker_free(c->blocker);
    c->blocker = NULL;
  }
  /* No new address is needed any more: the sentinel link goes now. */
  sluice__sentinel_free(c->sentinel);
  c->sentinel = NULL;
  /* Let steps already sent (releases, leaves) reach Redis before we go. */
  unsigned grace = c->opts.op_timeout_ms < 2000 ? c->opts.op_timeout_ms : 2000;
  if (c->cluster) sluice__cluster_drain(c->cluster, grace, cluster_drained, c);
  else sluice__conn_drain(&c->cmd, grace, cmd_drained);
}

static void cluster_drained(void *ud) { cmd_drained(NULL, ud); }

static void cmd_drained(sluice__conn *conn, void *ud) {
  sluice_client *c = ud;
  sluice__conn_shutdown(&c->cmd);
  sluice__cluster_free(c->cluster);
  c->cluster = NULL;
  if (c->close_cb) c->close_cb(c->close_ud); /* may free the client's objects */
  c->reaped = 1;
  maybe_release(c);
}

void sluice_client_close(sluice_client *c, sluice_close_cb *cb, void *ud) {
  if (!c || c->closing) return;
  c->closing = 1;
  c->close_cb = cb;
  c->close_ud = ud;
  event_active(c->reaper, 0, 0);
}

void sluice_client_free(sluice_client *c) { sluice_client_close(c, NULL, NULL); }

struct sluice__guard_home *sluice__client_home(sluice_client *c) { return &c->home; }

int sluice__client_replicated(const sluice_client *c) { return c->replicas; }

uint64_t sluice__client_up_since(const sluice_client *c) { return c->up_since_ms; }

void sluice__client_note_abandoned(sluice_client *c, const char *permit_id) {
  c->stats.releases_abandoned++;
  sluice__log(c, SLUICE_LOG_ERROR,
              "closed while Redis was unreachable: release of permit %s abandoned; its lease "
              "expires by itself", permit_id);
  snprintf(c->last_error, sizeof c->last_error,
           "closed while Redis was unreachable: %llu permit release(s) could not be sent; "
           "those leases expire by themselves",
           (unsigned long long)c->stats.releases_abandoned);
}

unsigned sluice__client_route(const sluice_client *c, const char *key) {
  return c->cluster ? sluice__keyslot(key, strlen(key)) : 0;
}

int sluice__client_closing(const sluice_client *c) { return c->closing; }
struct event_base *sluice__client_base(const sluice_client *c) { return c->base; }
unsigned sluice__client_op_timeout(const sluice_client *c) { return c->opts.op_timeout_ms; }

int sluice__client_push_reserve(sluice_client *c, size_t n) {
  if (n > c->opts.max_pending_pushes - c->pending_pushes) return SLUICE_EFULL;
  c->pending_pushes += (unsigned)n;
  return SLUICE_OK;
}

void sluice__client_push_release(sluice_client *c, size_t n) { c->pending_pushes -= (unsigned)n; }

char *sluice__key(const sluice_client *c, const char *kind, const char *name, const char *part) {
  size_t plen = strlen(c->key_prefix), klen = strlen(kind), nlen = strlen(name);
  size_t tlen = part ? strlen(part) + 1 : 0;
  char *k = malloc(plen + klen + nlen + tlen + 5);
  if (!k) return NULL;
  char *p = k;
  memcpy(p, c->key_prefix, plen), p += plen;
  memcpy(p, kind, klen), p += klen;
  *p++ = ':';
  *p++ = '{';
  memcpy(p, name, nlen), p += nlen;
  *p++ = '}';
  if (part) {
    *p++ = ':';
    memcpy(p, part, tlen - 1), p += tlen - 1;
  }
  *p = '\0';
  return k;
}

/* ---- metrics ------------------------------------------------------------- */

static void latency_of(const sluice__hist *h, sluice_latency *out) {
  out->count = h->count;
  out->p50_us = sluice__hist_quantile(h, 0.50);
  out->p99_us = sluice__hist_quantile(h, 0.99);
  out->max_us = h->max;
}

void sluice__latency_of(const sluice__hist *h, sluice_latency *out) { latency_of(h, out); }

static const char *step_name(unsigned k) {
  return k < SLUICE__LUA_COUNT ? sluice__lua_all[k]->name : "command";
}

const sluice__hist *sluice__client_step_hist(const sluice_client *c, const char *step) {
  for (unsigned k = 0; k <= SLUICE__LUA_COUNT; k++)
    if (strcmp(step_name(k), step) == 0) return &c->m.latency[k];
  return NULL;
}

const sluice__guard_home *sluice__client_objects(const sluice_client *c) { return &c->home; }

void sluice_client_get_metrics(const sluice_client *c, sluice_client_metrics *out) {
  if (!out) return;
  memset(out, 0, sizeof *out);
  if (!c) return;
  out->evals = c->m.evals;
  out->commands = c->m.commands;
  memcpy(out->by_status, c->m.by_status, sizeof out->by_status);
  out->reconnects = c->stats.reconnects;
  out->connect_failures = c->m.connect_failures;
  out->disconnects = c->m.disconnects;
  out->noscript_reloads = c->stats.noscript_reloads;
  out->queued_connecting = c->m.queued_connecting;
  out->in_flight = c->stats.ops_in_flight;
  out->releases_abandoned = c->stats.releases_abandoned;
  if (!client_up(c))
    for (const sluice__link *l = c->ops.head; l; l = l->next)
      if (!sluice__container_of(l, sluice__op, link)->sent_up) out->waiting_connect++;
  for (unsigned k = 0; k <= SLUICE__LUA_COUNT && out->nkinds < SLUICE_METRICS_MAX_KINDS; k++) {
    if (!c->m.ops[k]) continue;
    sluice_op_metrics *m = &out->kinds[out->nkinds++];
    m->name = step_name(k);
    m->ops = c->m.ops[k];
    m->errors = c->m.errors[k];
    latency_of(&c->m.latency[k], &m->latency);
  }
}

/* ---- log hook ------------------------------------------------------------ */

#define LOG_RING (sizeof ((sluice_client *)0)->log_ring / sizeof ((sluice_client *)0)->log_ring[0])

int sluice__log_enabled(const sluice_client *c) { return c && c->log_cb; }

void sluice__log(sluice_client *c, int level, const char *fmt, ...) {
  va_list ap;
  if (!c || !c->log_cb) return;
  if (c->log_len == LOG_RING) { /* keep the newest */
    c->log_head = (c->log_head + 1) % LOG_RING;
    c->log_len--;
    c->log_dropped++;
  }
  unsigned slot = (c->log_head + c->log_len++) % LOG_RING;
  c->log_ring[slot].level = level;
  va_start(ap, fmt);
  vsnprintf(c->log_ring[slot].msg, sizeof c->log_ring[slot].msg, fmt, ap);
  va_end(ap);
  event_active(c->log_ev, 0, 0);
}

/* From the loop: each message is copied out before the callback runs, which
 * may log again, change the hook or close the client. */
static void log_deliver(evutil_socket_t fd, short what, void *arg) {
  sluice_client *c = arg;
  char msg[sizeof c->log_ring[0].msg];
  if (c->log_dropped && c->log_cb) {
    snprintf(msg, sizeof msg, "%u log message(s) dropped (the queue holds %u)", c->log_dropped,
             (unsigned)LOG_RING);
    c->log_dropped = 0;
    c->log_cb(c, SLUICE_LOG_WARN, msg, c->log_ud);
  }
  while (c->log_len && c->log_cb) {
    int level = c->log_ring[c->log_head].level;
    memcpy(msg, c->log_ring[c->log_head].msg, sizeof msg);
    c->log_head = (c->log_head + 1) % LOG_RING;
    c->log_len--;
    c->log_cb(c, level, msg, c->log_ud);
  }
}

/* libevent offers no way to ask which clock a base reads, so measure it:
 * spin a few loop turns and look at the steps of the base's cached time.
 * A precise clock moves by microseconds between turns; CLOCK_MONOTONIC_COARSE
 * (what event_base_new() picks on Linux) only by whole ticks of 1-4 ms. */
#define CLOCK_CHECK_STEPS 3
#define CLOCK_CHECK_MAX_US 50000

static void clock_check(evutil_socket_t fd, short what, void *arg) {
  sluice_client *c = arg;
  struct timeval tv;
  if (c->clock_checked || c->closing || event_base_gettimeofday_cached(c->base, &tv) != 0) return;
  int64_t now = (int64_t)tv.tv_sec * 1000000 + tv.tv_usec;
  if (c->clock_turns++ == 0) {
    c->clock_start_us = sluice__mono_us();
  } else if (now != c->clock_last_us) {
    uint64_t step = (uint64_t)(now > c->clock_last_us ? now - c->clock_last_us : c->clock_last_us - now);
    if (!c->clock_min_step_us || step < c->clock_min_step_us) c->clock_min_step_us = step;
    c->clock_steps++;
  }
  c->clock_last_us = now;
  uint64_t spent = sluice__mono_us() - c->clock_start_us;
  if (c->clock_steps < CLOCK_CHECK_STEPS && spent < CLOCK_CHECK_MAX_US) {
    /* A zero timer, not event_active: events activated from a callback run
     * in the same loop iteration, before the cached time is refreshed. */
    sluice__timer_in(c->clock_ev, 0);
    return;
  }
  c->clock_checked = 1;
  uint64_t res = c->clock_steps ? c->clock_min_step_us : spent;
  if (res >= 2000)
    sluice__log(c, SLUICE_LOG_WARN,
                "the event_base's clock moves in steps of %.1f ms (a coarse clock): every "
                "deadline, lease and retry timer may fire that late; create the base with "
                "EVENT_BASE_FLAG_PRECISE_TIMER (see sluice/client.h)",
                (double)res / 1000);
  else
    sluice__log(c, SLUICE_LOG_DEBUG, "event_base clock steps: %llu us (precise)",
                (unsigned long long)res);
}

void sluice_client_set_log_cb(sluice_client *c, sluice_log_cb *cb, void *ud) {
  if (!c) return;
  int was_on = c->log_cb != NULL;
  c->log_cb = cb;
  c->log_ud = ud;
  if (!cb) {
    c->log_len = c->log_dropped = 0;
    return;
  }
  if (!was_on && (c->cluster ? !sluice__cluster_known(c->cluster)
                             : c->cmd.state == SLUICE_CONN_CONNECTING)) {
    char w[128];
    sluice__log(c, SLUICE_LOG_INFO, "connecting to %s", where(c, NULL, w, sizeof w));
  }
  if (!c->clock_checked && !c->clock_turns) sluice__timer_in(c->clock_ev, 0);
}

const char *sluice_log_level_name(int level) {
  switch (level) {
  case SLUICE_LOG_ERROR: return "ERROR";
  case SLUICE_LOG_WARN: return "WARN";
  case SLUICE_LOG_INFO: return "INFO";
  case SLUICE_LOG_DEBUG: return "DEBUG";
  default: return "?";
  }
}

/* ---- discovery ----------------------------------------------------------- */

typedef struct scan_req {
  sluice_client *c;
  sluice_scan_cb *cb;
  void *ud;
  unsigned node;                  /* cluster: which master (by its lowest slot) */
} scan_req;

/* On a cluster the cursor names the master too: SCAN visits one node's
 * keys, so the scan goes through the masters one after another, the
 * master's index in the bits above NODE_CURSOR_BITS. */
#define NODE_CURSOR_BITS 40
#define NODE_CURSOR_MASK ((UINT64_C(1) << NODE_CURSOR_BITS) - 1)

static void scan_done(void *ud, int status, const redisReply *r) {
  scan_req *q = ud;
  sluice_scan_entry *e = NULL;
  size_t n = 0;
  uint64_t next = 0;
  const redisReply *cur = sluice__reply_at(r, 0);
  if (status == SLUICE_OK) {
    if (!cur || cur->type != REDIS_REPLY_STRING || (r->elements - 1) % 5)
      status = SLUICE_EPROTOCOL;
    else
      next = strtoull(cur->str, NULL, 10);
  }
  if (status == SLUICE_OK) {
    n = (r->elements - 1) / 5;
    e = calloc(n + 1, sizeof *e);
    if (!e) status = SLUICE_ENOMEM, n = 0;
  }
  for (size_t i = 0; status == SLUICE_OK && i < n; i++) {
    redisReply *const *f = r->element + 1 + 5 * i;
    int64_t ttl;
    for (int j = 0; j < 4; j++)
      if (f[j]->type != REDIS_REPLY_STRING) status = SLUICE_EPROTOCOL;
    if (status != SLUICE_OK || sluice__reply_i64(f[4], &ttl)) {
      status = SLUICE_EPROTOCOL;
      break;
    }
    e[i].name = f[0]->str;
    e[i].key = f[1]->len ? f[1]->str : NULL;
    e[i].algo = f[2]->len ? f[2]->str : NULL;
    e[i].state = f[3]->len ? f[3]->str : NULL;
    e[i].ttl_ms = ttl;
  }
  if (status != SLUICE_OK) n = 0, next = 0;
  if (status == SLUICE_OK && q->c->cluster) {
    if (next > NODE_CURSOR_MASK) status = SLUICE_EPROTOCOL, n = 0, next = 0;
    else if (next) next |= (uint64_t)q->node << NODE_CURSOR_BITS;
    else if (sluice__cluster_master_slot(q->c->cluster, q->node + 1) >= 0)
      next = (uint64_t)(q->node + 1) << NODE_CURSOR_BITS;
  }
  q->cb(q->c, status, next, status == SLUICE_OK ? e : NULL, n, q->ud);
  free(e);
  sluice__free(q);
}

/* s with the glob characters of SCAN's MATCH escaped, appended to out. */
static size_t glob_escape(char *out, const char *s) {
  size_t n = 0;
  for (; *s; s++) {
    if (strchr("*?[]\\", *s)) out[n++] = '\\';
    out[n++] = *s;
  }
  return n;
}

int sluice_client_scan(sluice_client *c, const char *kind, const char *match, uint64_t cursor,
                       sluice_scan_cb *cb, void *ud) {
  const char *tail;
  if (!c || !kind || !cb) return SLUICE_EINVAL;
  if (c->closing) return SLUICE_ECLOSED;
  if (strcmp(kind, "sem") == 0) tail = "}:meta";
  else if (strcmp(kind, "dq") == 0) tail = "}:h";
  else if (strcmp(kind, "rl") == 0) tail = "}:*";
  else return SLUICE_EINVAL;
  if (!match || !*match) match = "*";
  size_t plen = strlen(c->key_prefix), mlen = strlen(match);
  char *head = malloc(plen + 8), *pat = malloc(2 * plen + 2 * mlen + 48);
  if (!head || !pat) {
    free(head);
    free(pat);
    return SLUICE_ENOMEM;
  }
  snprintf(head, plen + 8, "%s%s:{", c->key_prefix, kind);
  size_t n = glob_escape(pat, c->key_prefix);
  n += (size_t)sprintf(pat + n, "%s:{", kind);
  /* A limiter's tag is "<name length>:<name>:<key>": a plain name pins its
   * length; a glob cannot, so it may also match inside the key. */
  if (strcmp(kind, "rl") == 0 && !strpbrk(match, "*?[\\"))
    n += (size_t)sprintf(pat + n, "%zu:%s:*", mlen, match);
  else if (strcmp(kind, "rl") == 0 && strcmp(match, "*") != 0)
    n += (size_t)sprintf(pat + n, "*:%s:*", match);
  else
    n += (size_t)sprintf(pat + n, "%s", match);
  sprintf(pat + n, "%s", tail);
  char cur[24];
  int slot = -1;
  unsigned node = 0;
  if (c->cluster) {
    node = (unsigned)(cursor >> NODE_CURSOR_BITS);
    cursor &= NODE_CURSOR_MASK;
    slot = sluice__cluster_master_slot(c->cluster, node);
    if (slot < 0 && node > 0) { /* the map changed under the scan: it ends */
      free(head);
      free(pat);
      return SLUICE_EINVAL;
    }
  }
  sluice__fmt_u64(cur, cursor);
  const char *argv[5] = {cur, pat, "200", kind, head};
  scan_req *q = sluice__calloc(1, sizeof *q);
  int rc = SLUICE_ENOMEM;
  if (q) {
    q->c = c;
    q->cb = cb;
    q->ud = ud;
    q->node = node;
    rc = eval_at(c, slot, &sluice__lua_top_scan, 0, 5, argv, NULL, 0, scan_done, q, NULL);
    if (rc != SLUICE_OK) sluice__free(q);
  }
  free(head);
  free(pat);
  return rc;
}
