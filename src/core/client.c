/*
 * The client: options, new and close, accessors, and what it does when the
 * topology (net/topo.h) reports a connection up or down or its routes
 * changed. Steps are the engine's (engine.c), blocking waits the
 * blocker's (blocker.c), the log hook log.c's, key names keys.c's.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <event2/event.h>

#include "core/client.h"
#include "core/redis_error.h"

/* ---- the topology's events ------------------------------------------------ */

/* Routes changed: steps waiting for one go (or fail when none can be
 * had), blocking connections follow. */
static void routes_changed(int none, void *ud) {
  sluice_client *c = ud;
  if (sluice__topo_routing(c->topo) == SLUICE_TOPO_READY) {
    sluice__engine_send_unsent(c, SLUICE__WAITERS_ALL, NULL);
  } else if (none) {
    snprintf(c->last_error, sizeof c->last_error, "%s", sluice__topo_error(c->topo));
    sluice__engine_fail_unsent(c, SLUICE__WAITERS_ALL, NULL);
  }
  if (c->blocker && !c->closing) sluice__blocker_remap(c->blocker);
}

/* Every route's node was replaced (a Sentinel switch): the blocking
 * connections to the old one go too. */
static void master_moved(void *ud) {
  sluice_client *c = ud;
  if (c->blocker && !c->closing) sluice__blocker_moved(c->blocker);
}

/* The topology has something to say (a sentinel's answer not taken, a
 * refused subscription): a line in the client's log. */
static void note(int level, const char *what, void *ud) { sluice__log(ud, level, "%s", what); }

/* The node behind routes lo..hi is another one: what Redis acknowledged
 * on the old one may be gone there. Before any new step goes there, the
 * writes no replica was known to have are sent again (record.h), then the
 * objects on those routes reconcile: permits held are re-asserted, waiters
 * and consumers look again. */
static void node_changed(int lo, int hi, void *ud) {
  sluice_client *c = ud;
  c->node_changes++;
  if (lo < 0) sluice__log(c, SLUICE_LOG_INFO, "a different Redis node serves every key now");
  else sluice__log(c, SLUICE_LOG_INFO, "a different Redis node serves slots %d-%d now", lo, hi);
  if (c->closing || !c->rec.on) return;
  sluice__record_replay(c, lo, hi);
  sluice__guard_home_node_changed(&c->home, lo, hi);
}

/* A connection's handshake completed: the steps that waited for it go,
 * in order, before anything else. Or it failed: they fail with its error
 * (in last_error for a data connection; else said here). */
static void conn_state(sluice__conn *conn, int up, void *ud) {
  sluice_client *c = ud;
  if (up) {
    if (c->rec.on && !c->closing) sluice__record_conn_up(c, conn);
    sluice__engine_send_unsent(c, SLUICE__WAITERS_OF_CONN, conn);
    return;
  }
  snprintf(c->last_error, sizeof c->last_error, "%s", conn->errstr);
  sluice__engine_fail_unsent(c, SLUICE__WAITERS_OF_CONN, conn);
}

/* "host:port" or the socket path of conn, for log messages. */
static const char *where(const sluice__conn *conn, char *buf, size_t size) {
  const sluice__endpoint *ep = conn->cfg.net.endpoint;
  if (ep->unix_path) snprintf(buf, size, "%s", ep->unix_path);
  else snprintf(buf, size, "%s:%d", ep->host ? ep->host : "?", ep->port);
  return buf;
}

/* The handshake's optional steps that an ACL rule refused: said once per
 * client, as errors, since what they serve then fails silently. */
static void note_refusals(sluice_client *c, const sluice__conn *conn) {
  if (conn->info_refused[0] && !c->said_info_refused++)
    sluice__log(c, SLUICE_LOG_ERROR,
                "INFO refused (%s): a restart of Redis cannot be told from a reconnect, so the "
                "writes and permits it lost are not restored",
                conn->info_refused);
  if (conn->wait_refused[0] && !c->said_wait_refused++ && c->rec.on)
    sluice__log(c, SLUICE_LOG_ERROR,
                "WAIT refused (%s): acknowledged writes are kept for replay_window_ms, not "
                "until a replica has them",
                conn->wait_refused);
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
                where(conn, w, sizeof w), c->m_fails);
  else sluice__log(c, SLUICE_LOG_INFO, "connected to %s", where(conn, w, sizeof w));
  c->m_fails = 0;
  c->m_last_down[0] = '\0';
  note_refusals(c, conn);
  if (c->blocker) sluice__blocker_kick(c->blocker, conn);
  /* Back after the link failed it: the blocking connections to the node
   * shared the link, and one still up may sit on an answer the node holds
   * back. (After a restart of the node they reconnect by themselves.) */
  if (conn->link_trouble) sluice__client_link_recovered(c, conn);
  sluice__guard_home_resume(&c->home); /* releases first, then everyone else */
  if (sluice__topo_up(c->topo) && !c->m_up) {
    c->m_up = 1;
    if (c->state_cb) c->state_cb(c, 1, SLUICE_OK, c->state_ud);
  }
}

/* The last error: the connection's, with the topology's own news (why the
 * sentinels named no master) or, when several nodes serve, which node. */
static void note_down(sluice_client *c, const sluice__conn *conn, const char *w) {
  const char *terr = sluice__topo_error(c->topo);
  if (c->topo->ops->many)
    snprintf(c->last_error, sizeof c->last_error, "%.120s: %.300s", w, conn->errstr);
  else
    snprintf(c->last_error, sizeof c->last_error, "%.240s%s%.260s", conn->errstr, *terr ? "; " : "",
             terr);
}

static void data_down(sluice__conn *conn, int status, void *ud) {
  sluice_client *c = ud;
  char w[128];
  /* A lost connection is named by the node it reached: after a Sentinel
   * switch the endpoint names the new master already. */
  if (conn->was_up && !conn->cfg.net.endpoint->unix_path)
    snprintf(w, sizeof w, "%.127s", conn->up_addr);
  else where(conn, w, sizeof w);
  note_down(c, conn, w); /* first: the steps failed below report it */
  /* Steps that waited for a first connection that failed were never sent. */
  if (sluice__topo_routing(c->topo) != SLUICE_TOPO_WAIT)
    sluice__engine_fail_unsent(c, SLUICE__WAITERS_FOR_ROUTE, NULL);
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
    sluice__log(c,
                again                    ? SLUICE_LOG_DEBUG
                : conn->handshake_failed ? SLUICE_LOG_ERROR
                                         : SLUICE_LOG_WARN,
                "%s %s: %s; retrying in %u ms (attempt %u)",
                conn->handshake_failed ? "handshake failed with" : "cannot connect to", w,
                conn->errstr, conn->retry_ms, c->m_fails);
  }
  snprintf(c->m_last_down, sizeof c->m_last_down, "%s", conn->errstr);
  if (c->state_cb && !c->closing) c->state_cb(c, 0, status, c->state_ud);
}

/* ---- blocking waits ------------------------------------------------------ */

/* The blocker is made on the first listen, given what it needs once. */
int sluice__listen(sluice_client *c, const char *key, sluice__wake_fn *fn, void *ud,
                   sluice__listener **out) {
  if (!c || !key || !fn || !out) return SLUICE_EINVAL;
  if (c->closing) return SLUICE_ECLOSED;
  if (!c->blocker) {
    sluice__blocker_env env = {c, c->base, c->topo, c->net, c->id};
    if (!(c->blocker = sluice__blocker_new(&env))) return SLUICE_ENOMEM;
  }
  return sluice__blocker_listen(c->blocker, key, fn, ud, out);
}

/* ---- public API ---------------------------------------------------------- */

/* A cap's index in sluice__caps: a few pointers to compare. One missing
 * from the list (a library bug) has none: every reserve fails, and no test
 * of its primitive passes. */
#define NO_CAP ((size_t)-1)
static size_t cap_index(const sluice__cap_def *cap) {
  for (size_t i = 0; sluice__caps[i]; i++)
    if (sluice__caps[i] == cap) return i;
  return NO_CAP;
}

int sluice__client_reserve(sluice_client *c, const sluice__cap_def *cap, size_t n) {
  size_t i = cap_index(cap);
  if (i == NO_CAP) return SLUICE_EINVAL;
  if (n > c->cap[i] - c->used[i]) return SLUICE_EFULL;
  c->used[i] += (unsigned)n;
  return SLUICE_OK;
}

void sluice__client_release(sluice_client *c, const sluice__cap_def *cap, size_t n) {
  size_t i = cap_index(cap);
  if (i != NO_CAP) c->used[i] -= (unsigned)n;
}

/* A confirmation WAIT's timeout without wait_timeout_ms: a replica on a
 * slow, lossy link (200 ms each way, 20 % loss) mostly answers in time; at
 * 500 ms the partition harness's `slow` left the permit ungranted for 6.1 s
 * in a row, at 1000 ms for 4.5 s. */
#define CONFIRM_WAIT_MS 1000

/* A cap's option in the options (sluice__cap_def.option). */
static unsigned *cap_option(sluice_client_options *o, const sluice__cap_def *cap) {
  return (unsigned *)(void *)((char *)o + cap->option);
}

/* Each cap from its option, the option's default filled in as before. */
static void caps_init(sluice_client *c) {
  for (size_t i = 0; sluice__caps[i]; i++) {
    unsigned *opt = cap_option(&c->opts, sluice__caps[i]);
    if (!*opt) *opt = sluice__caps[i]->dflt;
    c->cap[i] = *opt;
  }
}

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
  for (size_t i = 0; sluice__caps[i]; i++)
    if (sluice__caps[i]->preset) *cap_option(o, sluice__caps[i]) = sluice__caps[i]->dflt;
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
  if (dup_opt(&ep->host, o->host ? o->host : "127.0.0.1") ||
      dup_opt(&ep->unix_path, o->unix_path) || dup_opt(&ep->username, o->username) ||
      dup_opt(&ep->password, o->password)) {
    sluice__endpoint_clear(ep);
    return SLUICE_ENOMEM;
  }
  if (o->cluster_seeds) {
    int rc = o->unix_path || o->master_name ? SLUICE_EINVAL
                                            : sluice__endpoint_cluster(ep, o->cluster_seeds);
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
  sluice__topo_free(c->topo);
  sluice__record_clear(c); /* after the topology: its WAITs are answered */
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
static void topo_drained(void *ud);

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
  caps_init(c);
  if (c->opts.reconnect_max_ms < c->opts.reconnect_min_ms)
    c->opts.reconnect_max_ms = c->opts.reconnect_min_ms > 2000 ? c->opts.reconnect_min_ms : 2000;
  /* The WAIT must answer within the step's deadline. */
  c->confirm_wait_ms = c->opts.wait_timeout_ms ? c->opts.wait_timeout_ms : CONFIRM_WAIT_MS;
  if (c->confirm_wait_ms >= c->opts.op_timeout_ms)
    c->confirm_wait_ms = c->opts.op_timeout_ms / 2 ? c->opts.op_timeout_ms / 2 : 1;
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
  c->log_ev = event_new(base, -1, 0, sluice__log_deliver_cb, c);
  c->wait_ev = event_new(base, -1, 0, sluice__engine_wait_cb, c);
  c->clock_ev = event_new(base, -1, 0, sluice__clock_check_cb, c);
  sluice__random_hex(c->id);
  c->net = (sluice__net_config){.endpoint = &c->endpoint,
                                .connect_timeout_ms = c->opts.connect_timeout_ms,
                                .reconnect_min_ms = c->opts.reconnect_min_ms,
                                .reconnect_max_ms = c->opts.reconnect_max_ms};
  sluice__topo_config tcfg = {
      .net = c->net,
      .scripts = sluice__lua_all,
      .count_replicas = !c->opts.replay_off,
      .ev = {data_up, data_down, conn_state, routes_changed, master_moved, node_changed, note, c}};
  if (!c->key_prefix || !c->reaper || !c->log_ev || !c->clock_ev || !c->wait_ev ||
      sluice__record_init(c) != 0 || sluice__guard_home_init(&c->home, base, home_empty) != 0 ||
      !(c->topo = sluice__topo_new(base, &tcfg))) {
    client_destroy(c);
    return SLUICE_ENOMEM;
  }
  sluice__topo_start(c->topo);
  *out = c;
  return SLUICE_OK;
}

void sluice_client_set_state_cb(sluice_client *c, sluice_client_state_cb *cb, void *ud) {
  if (!c) return;
  c->state_cb = cb;
  c->state_ud = ud;
}

int sluice_client_is_connected(const sluice_client *c) {
  return c && !c->closing && sluice__topo_up(c->topo);
}

const char *sluice_client_last_error(const sluice_client *c) {
  if (!c) return sluice__endpoint_error(); /* why sluice_client_new failed */
  /* Still looking for the master or the map: the topology's answer is the news. */
  return c->last_error[0] ? c->last_error : sluice__topo_error(c->topo);
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
  sluice__engine_cancel_all(c);
  sluice__record_close(c);
  if (c->blocker) {
    sluice__blocker_free(c->blocker);
    c->blocker = NULL;
  }
  /* Let steps already sent (releases, leaves) reach Redis before we go. */
  unsigned grace = c->opts.op_timeout_ms < 2000 ? c->opts.op_timeout_ms : 2000;
  sluice__topo_drain(c->topo, grace, topo_drained, c);
}

static void topo_drained(void *ud) {
  sluice_client *c = ud;
  sluice__topo_free(c->topo);
  c->topo = NULL;
  if (c->close_cb) c->close_cb(c->close_ud); /* may free the client's objects */
  c->reaped = 1;
  maybe_release(c);
}

void sluice_client_close(sluice_client *c, sluice_close_cb *cb, void *ud) {
  if (!c || c->closing) return;
  c->closing = 1;
  sluice__topo_closing(c->topo);
  c->close_cb = cb;
  c->close_ud = ud;
  event_active(c->reaper, 0, 0);
}

void sluice_client_free(sluice_client *c) { sluice_client_close(c, NULL, NULL); }

struct sluice__guard_home *sluice__client_home(sluice_client *c) {
  return &c->home;
}

int sluice__client_replicated(const sluice_client *c) { return c->replicas; }

int sluice_client_set_replica_ack(sluice_client *c, int on) {
  if (!c) return SLUICE_EINVAL;
  c->replica_ack_off = !on;
  return SLUICE_OK;
}

unsigned sluice__client_wait_count(const sluice_client *c) {
  return c->opts.wait_replicas ? c->opts.wait_replicas : 1;
}

int sluice__client_confirms(sluice_client *c, int route) {
  if (c->replica_ack_off) return 0;
  const sluice__conn *conn = sluice__topo_conn(c->topo, route);
  return conn && conn->had_replicas;
}

int sluice__client_unconfirmed(sluice_client *c, int route, int replicated) {
  return replicated == 0 && sluice__client_confirms(c, route);
}

uint64_t sluice__client_up_since(const sluice_client *c) { return c->up_since_ms; }

void sluice__client_note_abandoned(sluice_client *c, const char *permit_id) {
  c->stats.releases_abandoned++;
  sluice__log(c, SLUICE_LOG_ERROR,
              "closed while Redis was unreachable: release of permit %s abandoned; its lease "
              "expires by itself",
              permit_id);
  snprintf(c->last_error, sizeof c->last_error,
           "closed while Redis was unreachable: %llu permit release(s) could not be sent; "
           "those leases expire by themselves",
           (unsigned long long)c->stats.releases_abandoned);
}

unsigned sluice__client_route(const sluice_client *c, const char *key) {
  int route = sluice__topo_route_of(c->topo, key, strlen(key));
  return route < 0 ? 0 : (unsigned)route;
}

int sluice__client_may_spread(const sluice_client *c) { return c->topo->ops->many; }

const void *sluice__client_spread_node(sluice_client *c, unsigned route) {
  if (!c->topo->ops->many) return NULL;
  const sluice__conn *conn = sluice__topo_conn(c->topo, (int)route);
  return conn && !(conn->spread_refused_ups && conn->spread_refused_ups == conn->ups) ? conn : NULL;
}

void sluice__client_spread_declined(sluice_client *c, unsigned route, const char *why) {
  sluice__conn *conn = sluice__topo_conn(c->topo, (int)route);
  if (!conn || !conn->ups || sluice__not_served_here(why) || conn->spread_refused_ups == conn->ups)
    return;
  conn->spread_refused_ups = conn->ups;
  sluice__log(c, SLUICE_LOG_WARN,
              "a cluster node refused a call across slots (%s): its calls go slot by slot "
              "until it reconnects",
              why);
}

void sluice__client_link_recovered(sluice_client *c, sluice__conn *conn) {
  char w[128];
  conn->link_trouble = 0;
  if (!c->blocker || c->closing) return;
  sluice__log(c, SLUICE_LOG_INFO,
              "the link to %s lost packets and was silent: its blocking connections start afresh",
              where(conn, w, sizeof w));
  sluice__blocker_restart(c->blocker, conn);
}

void sluice__client_set_error(sluice_client *c, const char *text) {
  snprintf(c->last_error, sizeof c->last_error, "%s", text);
}

int sluice__client_closing(const sluice_client *c) { return c->closing; }

void *sluice__handle_alloc(sluice_client *c, size_t size, int *rc) {
  void *h = c->closing ? NULL : sluice__calloc(1, size);
  *rc = h ? SLUICE_OK : c->closing ? SLUICE_ECLOSED : SLUICE_ENOMEM;
  return h;
}

void sluice__handle_attach(sluice_client *c, sluice__guard *g, const sluice__guard_ops *ops,
                           const sluice__obj_view *view) {
  sluice__guard_attach(g, &c->home, ops);
  g->view = *view;
}

struct event_base *sluice__client_base(const sluice_client *c) {
  return c->base;
}
unsigned sluice__client_op_timeout(const sluice_client *c) { return c->opts.op_timeout_ms; }
sluice__rclock *sluice__client_rclock(sluice_client *c) { return &c->rclock; }
