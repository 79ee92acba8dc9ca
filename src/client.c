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
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <event2/event.h>
#include <event2/event_struct.h>

#include "client-private.h"

struct sluice__op {
  sluice_client *c;
  sluice__link link;              /* in c->ops while not done */
  sluice__link ulink;             /* in c->unsent while unsent */
  unsigned unsent : 1;
  sluice__reply_fn *fn;
  void *ud;
  struct event timer;             /* deadline, or deferred completion */
  int deferred_status;            /* status to report when timer fires early */
  unsigned in_hiredis : 1;        /* hiredis will still call reply_cb */
  unsigned done : 1;              /* fn called, or detached */
  unsigned retried : 1;           /* EVAL fallback already sent */
  unsigned sent_up : 1;           /* handed over while the connection was up */
  unsigned long ups_at_send;      /* handshakes completed when handed over */
  const sluice__script *script;   /* NULL for plain commands */
  int argc;                       /* sent argv: "EVALSHA" sha nkeys ... */
  const char **argv;
  size_t *lens;
};

/* ---- operations ---------------------------------------------------------- */

static void op_release_if_unused(sluice__op *op) {
  if (op->done && !op->in_hiredis && !evtimer_pending(&op->timer, NULL)) {
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

/* Report status to the owner now (from the loop) and mark the op done. */
static void op_complete(sluice__op *op, int status, const redisReply *reply) {
  if (op->done) return;
  op->done = 1;
  evtimer_del(&op->timer);
  op_unlink(op);
  op->fn(op->ud, status, reply);
}

/* An operation timed out. If nothing at all came back for a whole default
 * operation timeout, the connection is presumed dead (a host gone without a
 * reset never closes it): replace it, so callers see ECONNECTION and fail
 * fast instead of timing out one by one, and reconnect with backoff. */
static void check_connection_alive(sluice_client *c) {
  if (c->cmd.state != SLUICE_CONN_UP) return;
  if (sluice__mono_ms() - c->last_reply_ms < c->opts.op_timeout_ms) return;
  sluice__conn_fail(&c->cmd, "no reply within the operation timeout: connection presumed dead");
}

static void op_timer_cb(evutil_socket_t fd, short what, void *arg) {
  sluice__op *op = arg;
  int status = op->deferred_status ? op->deferred_status : SLUICE_ETIMEDOUT;
  if (status == SLUICE_ETIMEDOUT) {
    op->c->stats.ops_timed_out++;
    check_connection_alive(op->c);
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
  op->in_hiredis = 0;
  if (reply) op->c->last_reply_ms = sluice__mono_ms();
  if (op->done) {
    op_release_if_unused(op);
    return;
  }
  if (!reply) {
    /* Connection lost or context freed: possibly inside redisAsyncFree, so
     * report from our own timer, outside hiredis. Redis may have run a
     * command that left on a connection that was up; one that only waited
     * behind a handshake that never completed did not run. */
    sluice__conn *conn = &op->c->cmd;
    int maybe_ran = op->sent_up || conn->ups > op->ups_at_send;
    op_defer(op, op->c->closing ? SLUICE_ECANCELED : maybe_ran ? SLUICE_EINDOUBT : SLUICE_ECONNECTION);
    return;
  }
  if (op->script && !op->retried && is_noscript(reply)) {
    /* Redis restarted or SCRIPT FLUSH: send the body once (EVAL loads it). */
    op->retried = 1;
    op->c->stats.noscript_reloads++;
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
    sluice__conn_fail(&op->c->cmd, reply->str);
    op_complete(op, SLUICE_ECONNECTION, NULL);
    op_release_if_unused(op);
    return;
  }
  if (reply->type == REDIS_REPLY_ERROR) /* Redis's own words reach the user */
    snprintf(op->c->last_error, sizeof op->c->last_error, "Redis: %s", reply->str);
  op_complete(op, reply->type == REDIS_REPLY_ERROR ? SLUICE_EREDIS : SLUICE_OK, reply);
  op_release_if_unused(op);
}

static int op_send(sluice__op *op) {
  sluice__conn *conn = &op->c->cmd;
  if (sluice__conn_send(conn, op_reply_cb, op, op->argc, op->argv, op->lens) != REDIS_OK)
    return SLUICE_ECONNECTION;
  op->in_hiredis = 1;
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
  return op;
}

static int op_start(sluice_client *c, sluice__op *op, unsigned timeout_ms,
                    sluice__reply_fn *fn, void *ud, sluice__op **out) {
  op->fn = fn;
  op->ud = ud;
  sluice__list_append(&c->ops, &op->link);
  c->stats.ops_in_flight++;
  c->stats.ops_started++;
  if (out) *out = op;
  /* Fail fast once the connection was lost: callers never wait out a
   * reconnect. Before the first connection, ops queue behind the handshake. */
  if (c->cmd.state != SLUICE_CONN_UP && c->cmd.failed) {
    op_defer(op, SLUICE_ECONNECTION);
    return SLUICE_OK;
  }
  sluice__timer_in(&op->timer, timeout_ms ? timeout_ms : c->opts.op_timeout_ms);
  if (!c->cmd.ac && !c->cmd.failed) {
    /* The first connection has no context yet (its address is being
     * looked up): the op waits for it, within its deadline. */
    op->unsent = 1;
    sluice__list_append(&c->unsent, &op->ulink);
    return SLUICE_OK;
  }
  if (op_send(op) != 0) op_defer(op, SLUICE_ECONNECTION);
  return SLUICE_OK;
}

int sluice__eval(sluice_client *c, const sluice__script *s, int nkeys, int argc,
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
  return op_start(c, op, timeout_ms, fn, ud, out);
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

/* The first context exists, its handshake queued: the ops that waited go
 * behind it, in order. */
static void cmd_context(sluice__conn *conn, void *ud) {
  sluice_client *c = ud;
  while (c->unsent.head) {
    sluice__op *op = sluice__container_of(c->unsent.head, sluice__op, ulink);
    sluice__list_remove(&c->unsent, &op->ulink);
    op->unsent = 0;
    if (op_send(op) != 0) op_defer(op, SLUICE_ECONNECTION);
  }
}

int sluice__client_ready(sluice__conn *conn, void *ud) {
  sluice_client *c = ud;
  return !c->sentinel || sluice__sentinel_address(c->sentinel);
}

void sluice__client_data_down(sluice_client *c) {
  if (c->sentinel) sluice__sentinel_stale(c->sentinel);
}

/* The sentinels named a new master: connections to the old one go now
 * (it may accept writes for seconds and lose them). */
static void master_moved(void *ud) {
  sluice_client *c = ud;
  sluice__conn_fail(&c->cmd, "the master moved (sentinel failover)");
  if (c->blocker) sluice__blocker_moved(c->blocker);
}

static void master_known(void *ud) {
  sluice_client *c = ud;
  if (c->cmd.state == SLUICE_CONN_RESOLVING) sluice__conn_start(&c->cmd);
  if (c->blocker) sluice__blocker_kick(c->blocker);
}

static void cmd_up(sluice__conn *conn, void *ud) {
  sluice_client *c = ud;
  c->last_reply_ms = c->up_since_ms = sluice__mono_ms();
  if (conn->ups > 1) c->stats.reconnects++;
  if (c->blocker) sluice__blocker_kick(c->blocker);
  sluice__guard_home_resume(&c->home); /* releases first, then everyone else */
  if (c->state_cb) c->state_cb(c, 1, SLUICE_OK, c->state_ud);
}

static void cmd_down(sluice__conn *conn, int status, void *ud) {
  sluice_client *c = ud;
  sluice__client_data_down(c);
  const char *serr = c->sentinel ? sluice__sentinel_error(c->sentinel) : "";
  snprintf(c->last_error, sizeof c->last_error, "%.240s%s%.260s", conn->errstr, *serr ? "; " : "",
           serr);
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
  sluice__endpoint_clear(&c->endpoint);
  free(c->key_prefix);
  if (c->reaper) event_free(c->reaper);
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
  if (!c->opts.connect_timeout_ms) c->opts.connect_timeout_ms = 2000;
  if (!c->opts.op_timeout_ms) c->opts.op_timeout_ms = 5000;
  if (!c->opts.reconnect_min_ms) c->opts.reconnect_min_ms = 50;
  if (c->opts.reconnect_max_ms < c->opts.reconnect_min_ms)
    c->opts.reconnect_max_ms = c->opts.reconnect_min_ms > 2000 ? c->opts.reconnect_min_ms : 2000;
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
  sluice__random_hex(c->id);
  sluice__conn_config cfg = {.endpoint = &c->endpoint,
                             .connect_timeout_ms = c->opts.connect_timeout_ms,
                             .reconnect_min_ms = c->opts.reconnect_min_ms,
                             .reconnect_max_ms = c->opts.reconnect_max_ms,
                             .scripts = sluice__lua_all,
                             .on_up = cmd_up,
                             .on_down = cmd_down,
                             .ready = sluice__client_ready,
                             .on_context = cmd_context,
                             .userdata = c};
  sluice__sentinel_config scfg = {&c->endpoint, c->opts.connect_timeout_ms,
                                  c->opts.reconnect_min_ms, c->opts.reconnect_max_ms,
                                  master_moved, master_known, c};
  if (!c->key_prefix || !c->reaper || sluice__guard_home_init(&c->home, base, home_empty) != 0 ||
      (c->endpoint.master_name && !(c->sentinel = sluice__sentinel_new(base, &scfg))) ||
      sluice__conn_init(&c->cmd, base, &cfg) != 0) {
    client_destroy(c);
    return SLUICE_ENOMEM;
  }
  sluice__conn_start(&c->cmd);
  *out = c;
  return SLUICE_OK;
}

void sluice_client_set_state_cb(sluice_client *c, sluice_client_state_cb *cb, void *ud) {
  if (!c) return;
  c->state_cb = cb;
  c->state_ud = ud;
}

int sluice_client_is_connected(const sluice_client *c) {
  return c && !c->closing && c->cmd.state == SLUICE_CONN_UP;
}

const char *sluice_client_last_error(const sluice_client *c) {
  if (!c) return sluice__endpoint_error(); /* why sluice_client_new failed */
  /* Still looking for the master: the sentinels' answer is the news. */
  if (!c->last_error[0] && c->sentinel) return sluice__sentinel_error(c->sentinel);
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
  /* Let steps already sent (releases, leaves) reach Redis before we go. */
  unsigned grace = c->opts.op_timeout_ms < 2000 ? c->opts.op_timeout_ms : 2000;
  sluice__conn_drain(&c->cmd, grace, cmd_drained);
}

static void cmd_drained(sluice__conn *conn, void *ud) {
  sluice_client *c = ud;
  sluice__conn_shutdown(&c->cmd);
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

uint64_t sluice__client_up_since(const sluice_client *c) { return c->up_since_ms; }

void sluice__client_note_abandoned(sluice_client *c, const char *permit_id) {
  c->stats.releases_abandoned++;
  snprintf(c->cmd.errstr, sizeof c->cmd.errstr,
           "closed while Redis was unreachable: %llu permit release(s) could not be sent; "
           "those leases expire by themselves",
           (unsigned long long)c->stats.releases_abandoned);
}

unsigned sluice__client_route(const sluice_client *c, const char *key) { return 0; }

int sluice__client_closing(const sluice_client *c) { return c->closing; }
struct event_base *sluice__client_base(const sluice_client *c) { return c->base; }
unsigned sluice__client_op_timeout(const sluice_client *c) { return c->opts.op_timeout_ms; }

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
