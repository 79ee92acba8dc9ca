/*
 * The operation engine: one Redis step end to end. An op is sent to the
 * connection its route names (net/topo.h), with a deadline on a libevent
 * timer (hiredis 0.14 has none), a NOSCRIPT fallback, the WAIT that
 * wait_replicas asks for, and the topology's decision carried out when a
 * node answers that the step did not run there (MOVED, ASK, TRYAGAIN...).
 * It completes exactly once, from the loop.
 *
 * An operation's memory is referenced by two parties: hiredis (until it calls
 * our reply callback, possibly with NULL during teardown) and the caller
 * (until the op completes or is detached). It is freed when both are done, so
 * a deadline can complete an op while its late reply is still on the way.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <event2/event.h>
#include <event2/event_struct.h>

#include "core/client.h"
#include "core/args.h"
#include "core/redis_error.h"

struct sluice__op {
  sluice_client *c;
  sluice__link link;  /* in c->ops while not done */
  sluice__link ulink; /* in c->unsent while unsent */
  unsigned unsent : 1;
  sluice__conn *waiting_on; /* unsent: the handshake it waits for (NULL: a route) */
  sluice__reply_fn *fn;
  void *ud;
  struct event timer;        /* deadline, or deferred completion */
  int deferred_status;       /* status to report when timer fires early */
  unsigned in_hiredis;       /* hiredis callbacks still due (replies, WAITs) */
  unsigned waits : 1;        /* a WAIT follows it this send */
  unsigned reports : 1;      /* wait_replicas: the count is reported */
  unsigned confirms : 1;     /* --@confirm: answered once a replica has it */
  redisReply *held;          /* its reply, copied, until the WAIT answers */
  unsigned done : 1;         /* fn called, or detached */
  unsigned retried : 1;      /* EVAL fallback already sent */
  unsigned sent_up : 1;      /* handed over while the connection was up */
  unsigned long ups_at_send; /* handshakes completed when handed over */
  uint64_t node_id;          /* conn's node then (conn.h) */
  uint64_t route_node;       /* the node its route named then */
  int nkeys;
  sluice__conn *conn;           /* where it was handed over last */
  int slot;                     /* cluster: hash slot of KEYS[1]; -1 any node */
  unsigned redirects;           /* cluster: MOVED, ASK and retries so far */
  char *ask;                    /* cluster: "host:port" of an ASK, for one send */
  struct event retry;           /* cluster: the backoff before a retry */
  uint64_t start_us;            /* monotonic: started (latency metrics) */
  const sluice__script *script; /* NULL for plain commands */
  sluice__packed_argv cmd;      /* sent: "EVALSHA" sha nkeys ... */
};

/* ---- operations ---------------------------------------------------------- */

void sluice__ignore_reply(void *userdata, int status, const redisReply *reply) {}

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

/* Report status to the owner now (from the loop) and mark the op done.
 * A script's answer says where it ran, for the record (record.h). */
static void op_complete_replicas(sluice__op *op, int status, const redisReply *reply,
                                 int replicas) {
  if (op->done) return;
  sluice_client *c = op->c;
  op->done = 1;
  op_count(c, op, status);
  evtimer_del(&op->timer);
  evtimer_del(&op->retry);
  op_unlink(op);
  sluice__answered a = {op->script,       op->nkeys,      op->cmd.argc - 3, op->cmd.argv + 3,
                        op->cmd.lens + 3, op->slot,       op->conn,         op->node_id,
                        op->ups_at_send,  op->route_node, replicas};
  const sluice__answered *outer = c->answered;
  c->answered = status == SLUICE_OK && op->script ? &a : NULL;
  c->replicas = replicas;
  op->fn(op->ud, status, reply);
  c->replicas = -1;
  c->answered = outer;
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
  unsigned whole = op->c->opts.op_timeout_ms;
  if (!conn || conn->state != SLUICE_CONN_UP) return;
  /* A tenth of slack: libevent dates a timer from its cached time, which
   * can be behind the clock read here, so a timer may fire a little before
   * a whole timeout has passed since the last reply. */
  if (sluice__mono_ms() - conn->last_reply_ms + whole / 10 < whole) return;
  conn->link_trouble = 1; /* its blocking siblings restart once it is back (client.c) */
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
static int op_redirect(sluice__op *op, const redisReply *reply);

/* Complete with status now, and let go of the op if nobody else holds it. */
static void op_finish(sluice__op *op, int status) {
  op_complete(op, status, NULL);
  op_release_if_unused(op);
}

static int is_noscript(const redisReply *r) {
  return r->type == REDIS_REPLY_ERROR && r->len >= 8 && memcmp(r->str, "NOSCRIPT", 8) == 0;
}

/* A reply: the connection is alive. One after the link watch saw it
 * silent while losing packets (net/link_watch.h) means the path is back,
 * and the node's answers on other connections may still be held back. */
static void note_reply(sluice__op *op) {
  sluice__conn *conn = op->conn;
  conn->last_reply_ms = sluice__mono_ms();
  if (conn->link_trouble) sluice__client_link_recovered(op->c, conn);
}

static void op_reply_cb(redisAsyncContext *ac, void *r, void *privdata) {
  sluice__op *op = privdata;
  redisReply *reply = r;
  op->in_hiredis--;
  if (reply) note_reply(op);
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
    int refused = conn->refusal.refused && conn->refusal.privdata == op; /* reply_bounds.h */
    op_defer(op, op->c->closing ? SLUICE_ECANCELED
                 : refused      ? SLUICE_EPROTOCOL
                 : maybe_ran    ? SLUICE_EINDOUBT
                                : SLUICE_ECONNECTION);
    return;
  }
  if (reply->type == REDIS_REPLY_ERROR && op_redirect(op, reply)) return;
  if (op->script && !op->retried && is_noscript(reply)) {
    /* Redis restarted or SCRIPT FLUSH: send the body once (EVAL loads it). */
    op->retried = 1;
    op->c->stats.noscript_reloads++;
    sluice__log(op->c, SLUICE_LOG_INFO,
                "script %s missing in Redis (restarted, or SCRIPT FLUSH): sent again with EVAL",
                op->script->name);
    op->cmd.argv[0] = "EVAL";
    op->cmd.argv[1] = op->script->body;
    op->cmd.lens[0] = 4;
    op->cmd.lens[1] = op->script->len;
    if (op_send(op) != 0) op_defer(op, SLUICE_ECONNECTION);
    return;
  }
  if (reply->type == REDIS_REPLY_ERROR) /* Redis's own words reach the user */
    sluice__error_text(op->c->last_error, sizeof op->c->last_error, op->script, op->cmd.argv[0],
                       reply->str);
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

/* A step that must be confirmed (a grant, a renewal: --@confirm in its
 * script) on a node seen with a replica gets a WAIT too, unless
 * sluice_client_set_replica_ack(c, 0). Its WAIT keeps the whole confirmation timeout even
 * while replicas fall short: a shortened one would fail live grants on a
 * slow link, where a replica does answer, only late. */
typedef struct wait_batch {
  sluice_client *c;
  sluice__link link; /* in c->wait_open until sent */
  sluice__conn *conn;
  int confirms; /* a step in it must be confirmed */
  size_t n;
  sluice__op **ops; /* each holds an in_hiredis count for us */
  size_t cap;
} wait_batch;

/* The WAIT's answer: how many replicas acknowledged every write before it.
 * The steps ran either way; a short count is reported with the answer
 * (sluice__client_replicated): wait_replicas only reports it, a step that
 * must be confirmed is given back by its owner. */
static void wait_reply_cb(redisAsyncContext *ac, void *r, void *privdata) {
  wait_batch *w = privdata;
  redisReply *reply = r;
  sluice_client *c = w->c;
  long long n = reply && reply->type == REDIS_REPLY_INTEGER ? reply->integer : 0;
  int enough = n >= (long long)sluice__client_wait_count(c);
  if (reply && n > 0) w->conn->had_replicas = 1;
  if (reply && reply->type == REDIS_REPLY_ERROR) /* e.g. the ACL refuses WAIT: say it once */
    sluice__log(c, w->conn->replicas_short ? SLUICE_LOG_DEBUG : SLUICE_LOG_ERROR,
                "WAIT failed (%s): writes are reported as not replicated", reply->str);
  if (reply) { /* else the conn may be gone */
    w->conn->replicas_short = !enough;
    /* A master seen with replicas that none acknowledges may be cut off
     * from them, and replaced: the topology looks for news of a failover.
     * A refused WAIT (an ACL rule) says nothing either way. */
    if (reply->type == REDIS_REPLY_INTEGER)
      sluice__topo_doubt(c->topo, n == 0 && w->conn->had_replicas);
  }
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
    unsigned t = w->confirms ? c->confirm_wait_ms : c->opts.wait_timeout_ms;
    if (conn->replicas_short && !w->confirms) {
      if (now - conn->wait_probe_ms < PROBE_EVERY_MS) t = SHORT_WAIT_MS;
      else if (t > PROBE_WAIT_MS) t = PROBE_WAIT_MS;
    }
    if (t > SHORT_WAIT_MS) conn->wait_probe_ms = now;
    char nb[24], tb[24];
    const char *argv[3] = {"WAIT", nb, tb};
    size_t lens[3] = {4, sluice__fmt_u64(nb, sluice__client_wait_count(c)), sluice__fmt_u64(tb, t)};
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
  w->confirms |= op->confirms;
  op->in_hiredis++;
  return;
no_wait:
  op->waits = 0; /* out of memory: answered without the count */
}

/* Where op goes: its route's node, or the node an ASK named. NULL:
 * nowhere now. */
static sluice__conn *op_route(sluice__op *op) {
  sluice__topo *t = op->c->topo;
  if (op->ask) return sluice__topo_conn_at(t, op->ask, strlen(op->ask), op->conn);
  return sluice__topo_conn(t, op->slot);
}

/* ASKING's answer is OK; an error (the ACL refusing it) is only logged:
 * the step that follows is refused in turn and redirected again. */
static void asking_cb(redisAsyncContext *ac, void *r, void *privdata) {
  const redisReply *reply = r;
  if (reply && reply->type == REDIS_REPLY_ERROR)
    sluice__log(privdata, SLUICE_LOG_ERROR, "ASKING failed: %s", reply->str);
}

static int op_send(sluice__op *op) {
  sluice__conn *conn = op_route(op);
  if (!conn) return SLUICE_ECONNECTION;
  /* ASKING lets the importing node serve the one command that follows it
   * on the same connection. */
  static const char *asking[1] = {"ASKING"};
  if (op->ask && sluice__conn_send(conn, asking_cb, op->c, 1, asking, NULL) != REDIS_OK)
    return SLUICE_ECONNECTION;
  if (sluice__conn_send(conn, op_reply_cb, op, op->cmd.argc, op->cmd.argv, op->cmd.lens) !=
      REDIS_OK)
    return SLUICE_ECONNECTION;
  op->conn = conn;
  op->in_hiredis++;
  op->waits = op->reports || (op->confirms && conn->had_replicas);
  if (op->waits) wait_join(op);
  op->sent_up = conn->state == SLUICE_CONN_UP;
  op->ups_at_send = conn->ups;
  op->node_id = conn->node_id;
  sluice__conn *home = op->ask ? sluice__topo_conn(op->c->topo, op->slot) : conn;
  op->route_node = home ? home->node_id : 0;
  return SLUICE_OK;
}

/* Build an op whose argv is head[0..nhead) followed by args[0..nargs), all
 * copied into one allocation: the caller's buffers may go at once. */
static sluice__op *op_new(sluice_client *c, int nhead, const char *const *head,
                          const size_t *headlens, int nargs, const char *const *args,
                          const size_t *lens) {
  sluice__packed_argv cmd;
  sluice__op *op = sluice__argv_pack(sizeof *op, (sluice__strs){nhead, head, headlens},
                                     (sluice__strs){nargs, args, lens}, &cmd);
  if (!op) return NULL;
  op->c = c;
  op->cmd = cmd;
  evtimer_assign(&op->timer, c->base, op_timer_cb, op);
  evtimer_assign(&op->retry, c->base, op_retry_cb, op);
  op->slot = -1;
  return op;
}

/* Queue op until conn's handshake completes (conn NULL: until a route
 * exists), within its deadline. */
static int op_wait(sluice__op *op, sluice__conn *conn) {
  op->unsent = 1;
  op->waiting_on = conn;
  sluice__list_append(&op->c->unsent, &op->ulink);
  return SLUICE_OK;
}

/* Send op now, or queue it until its route exists (no context or no map
 * yet) or its connection's handshake completed: 0. A status < 0 when it
 * cannot go: it never left. */
static int op_dispatch(sluice__op *op) {
  sluice_client *c = op->c;
  sluice__conn *conn;
  int routing = sluice__topo_routing(c->topo);
  if (routing == SLUICE_TOPO_NONE) return SLUICE_ECONNECTION; /* every node tried failed */
  if (routing == SLUICE_TOPO_WAIT) return op_wait(op, NULL);
  if (!(conn = op_route(op))) {
    snprintf(c->last_error, sizeof c->last_error,
             "Redis Cluster: no node serves slot %d (the map is being refreshed)", op->slot);
    return SLUICE_ECONNECTION;
  }
  if (conn->state == SLUICE_CONN_UP) return op_send(op);
  /* Fail fast once the connection was lost: callers never wait out a
   * reconnect. A connection not up yet gets nothing before its handshake
   * completed (a failed SELECT must not leave the step in database 0):
   * the step waits, and fails with the handshake's error if it fails. */
  return conn->failed ? SLUICE_ECONNECTION : op_wait(op, conn);
}

static void op_retry_cb(evutil_socket_t fd, short what, void *arg) {
  sluice__op *op = arg;
  int rc = op_dispatch(op);
  if (rc != SLUICE_OK) op_finish(op, rc);
}

/* Redirect limits: a step follows at most this many MOVED/ASK replies and
 * retries, waiting RETRY_MIN_MS, doubling up to RETRY_MAX_MS, in between
 * retries (its deadline bounds them too). */
#define MAX_REDIRECTS 16
#define RETRY_MIN_MS 10
#define RETRY_MAX_MS 200

/* An error reply, read by the topology (sluice__topo_decide): the step ran
 * (0: the caller reports it), or it did not and the decision is carried
 * out here, where every resend starts. 1 when handled. */
static int op_redirect(sluice__op *op, const redisReply *r) {
  sluice_client *c = op->c;
  sluice__topo_decision d;
  sluice__topo_decide(c->topo, op->conn, r, &d);
  if (d.verdict == SLUICE_TOPO_ANSWER) return 0;
  snprintf(c->last_error, sizeof c->last_error, "Redis: %s", r->str);
  if (d.verdict == SLUICE_TOPO_NOT_MASTER || d.verdict == SLUICE_TOPO_UNREADABLE) {
    op_finish(op, d.verdict == SLUICE_TOPO_NOT_MASTER ? SLUICE_ECONNECTION : SLUICE_EPROTOCOL);
    return 1;
  }
  if (++op->redirects > MAX_REDIRECTS) {
    snprintf(c->last_error, sizeof c->last_error,
             "Redis Cluster: no node ran the step after %d redirects and retries; the last "
             "said: %.300s",
             MAX_REDIRECTS, r->str);
    op_finish(op, SLUICE_ECONNECTION);
    return 1;
  }
  free(op->ask);
  op->ask = NULL;
  if (d.verdict == SLUICE_TOPO_ASK && (op->ask = malloc(d.addr_len + 1))) {
    memcpy(op->ask, d.addr, d.addr_len);
    op->ask[d.addr_len] = '\0';
  }
  if (d.verdict == SLUICE_TOPO_BACKOFF) {
    unsigned delay = RETRY_MIN_MS;
    for (unsigned i = 1; i < op->redirects && delay < RETRY_MAX_MS; i++) delay *= 2;
    sluice__timer_in(&op->retry, delay < RETRY_MAX_MS ? delay : RETRY_MAX_MS);
    return 1;
  }
  int rc = op_dispatch(op);
  if (rc != SLUICE_OK) op_finish(op, rc);
  return 1;
}

static int op_start(sluice_client *c, sluice__op *op, unsigned timeout_ms, sluice__reply_fn *fn,
                    void *ud, sluice__op **out) {
  op->fn = fn;
  op->ud = ud;
  sluice__list_append(&c->ops, &op->link);
  c->stats.ops_in_flight++;
  c->stats.ops_started++;
  op->start_us = sluice__mono_us();
  if (op->script) c->m.evals++;
  else c->m.commands++;
  if (!sluice__topo_up(c->topo)) c->m.queued_connecting++;
  if (out) *out = op;
  sluice__timer_in(&op->timer, timeout_ms ? timeout_ms : c->opts.op_timeout_ms);
  int rc = op_dispatch(op);
  if (rc != SLUICE_OK) op_defer(op, rc);
  return SLUICE_OK;
}

/* EVALSHA sha nkeys argv..., or with spread EVALSHA sha 0 nkeys argv...
 * (the script takes its keys among ARGV: _spread.lua). */
static int eval_start(sluice_client *c, int slot, int spread, const sluice__script *s, int nkeys,
                      int argc, const char *const *argv, const size_t *lens, unsigned timeout_ms,
                      sluice__reply_fn *fn, void *ud, sluice__op **out) {
  if (!c || !s || !fn || nkeys < 0 || argc < nkeys || (argc && !argv)) return SLUICE_EINVAL;
  if (c->sealed) return SLUICE_ECLOSED;
  if (nkeys > 255) return SLUICE_EINVAL;
  char nk[8];
  size_t nklen = sluice__fmt_u64(nk, (uint64_t)nkeys);
  const char *head[4] = {"EVALSHA", s->sha, spread ? "0" : nk, nk};
  size_t headlens[4] = {7, 40, spread ? 1 : nklen, nklen};
  sluice__op *op = op_new(c, 3 + spread, head, headlens, argc, argv, lens);
  if (!op) return SLUICE_ENOMEM;
  op->script = s;
  op->nkeys = spread ? 0 : nkeys;
  op->reports = c->opts.wait_replicas > 0 && !s->no_wait;
  op->confirms = s->confirm && !c->replica_ack_off;
  op->slot = slot;
  if (slot < 0 && nkeys > 0)
    op->slot = sluice__topo_route_of(c->topo, argv[0], lens ? lens[0] : strlen(argv[0]));
  return op_start(c, op, timeout_ms, fn, ud, out);
}

int sluice__eval_at(sluice_client *c, int slot, const sluice__script *s, int nkeys, int argc,
                    const char *const *argv, const size_t *lens, unsigned timeout_ms,
                    sluice__reply_fn *fn, void *ud, sluice__op **out) {
  return eval_start(c, slot, 0, s, nkeys, argc, argv, lens, timeout_ms, fn, ud, out);
}

int sluice__eval_spread(sluice_client *c, unsigned route, const sluice__script *s, int nkeys,
                        int argc, const char *const *argv, const size_t *lens, unsigned timeout_ms,
                        sluice__reply_fn *fn, void *ud, sluice__op **out) {
  return eval_start(c, (int)route, 1, s, nkeys, argc, argv, lens, timeout_ms, fn, ud, out);
}

int sluice__eval(sluice_client *c, const sluice__script *s, int nkeys, int argc,
                 const char *const *argv, const size_t *lens, unsigned timeout_ms,
                 sluice__reply_fn *fn, void *ud, sluice__op **out) {
  return sluice__eval_at(c, -1, s, nkeys, argc, argv, lens, timeout_ms, fn, ud, out);
}

int sluice__command(sluice_client *c, int argc, const char *const *argv, const size_t *lens,
                    unsigned timeout_ms, sluice__reply_fn *fn, void *ud, sluice__op **out) {
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

void sluice__pending_detach_all(sluice__list *l) {
  for (sluice__link *k = l->head; k; k = k->next) {
    sluice__pending *p = sluice__container_of(k, sluice__pending, link);
    sluice__op_detach(p->op);
    p->op = NULL;
  }
}

/* ---- what the client asks of the engine ---------------------------------- */

/* The waiting ops that `which` picks go now, in order (they may queue
 * again), or, with fail, fail as never sent; the others keep waiting. */
static void settle(sluice_client *c, int which, const sluice__conn *conn, int fail) {
  sluice__list pending = c->unsent;
  c->unsent.head = c->unsent.tail = NULL;
  while (pending.head) {
    sluice__op *op = sluice__container_of(pending.head, sluice__op, ulink);
    sluice__list_remove(&pending, &op->ulink);
    op->unsent = 0;
    int picked = which == SLUICE__WAITERS_ALL ||
                 (which == SLUICE__WAITERS_OF_CONN ? op->waiting_on == conn : !op->waiting_on);
    if (!picked) {
      op_wait(op, op->waiting_on);
      continue;
    }
    int rc = fail ? SLUICE_ECONNECTION : op_dispatch(op);
    if (rc != SLUICE_OK) op_defer(op, rc);
  }
}

void sluice__engine_send_unsent(sluice_client *c, int which, const sluice__conn *conn) {
  settle(c, which, conn, 0);
}

void sluice__engine_fail_unsent(sluice_client *c, int which, const sluice__conn *conn) {
  settle(c, which, conn, 1);
}

void sluice__engine_cancel_all(sluice_client *c) {
  send_waits(-1, 0, c); /* none may wait for a turn that is not coming */
  while (c->ops.head)
    op_finish(sluice__container_of(c->ops.head, sluice__op, link), SLUICE_ECANCELED);
}

unsigned sluice__engine_waiting_connect(const sluice_client *c) {
  unsigned n = 0;
  for (const sluice__link *l = c->ops.head; l; l = l->next)
    if (!sluice__container_of(l, sluice__op, link)->sent_up) n++;
  return n;
}

void sluice__engine_wait_cb(evutil_socket_t fd, short what, void *arg) {
  send_waits(fd, what, arg);
}
