/* Connection life cycle; see conn.h. */
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <sluice/common.h>

#include "net/conn.h"
#include "net/evloop.h"
#include "net/link_watch.h"
#include "net/resp.h"
#include "base/util.h"
#include "lua_scripts.h"
#include "net/tls.h"

static void conn_drop(sluice__conn *conn, const char *reason);

/* The whole text, bounded only by errstr itself: a fixed cut of `what`
 * (once 60 bytes) truncated reasons such as the dead-connection one. */
static void set_err(sluice__conn *conn, const char *what, const char *detail) {
  snprintf(conn->errstr, sizeof conn->errstr, "%s%s%s", what, detail ? ": " : "",
           detail ? detail : "");
}

/* The exponential step d, jittered (util.h). */
static unsigned backoff_ms(sluice__conn *conn) {
  uint64_t d = conn->cfg.net.reconnect_min_ms ? conn->cfg.net.reconnect_min_ms : 1;
  for (unsigned i = 1; i < conn->attempts && d < conn->cfg.net.reconnect_max_ms; i++) d *= 2;
  if (d > conn->cfg.net.reconnect_max_ms) d = conn->cfg.net.reconnect_max_ms;
  return sluice__jittered((uint32_t)d);
}

static void schedule_retry(sluice__conn *conn) {
  conn->state = SLUICE_CONN_WAITING;
  conn->attempts++;
  conn->retry_ms = backoff_ms(conn);
  sluice__timer_in(conn->timer, conn->retry_ms);
}

/* RESP3's verbatim string (hiredis 1.x): INFO's answer there. */
static int is_verbatim(const redisReply *r) {
#ifdef REDIS_REPLY_VERB
  return r->type == REDIS_REPLY_VERB;
#else
  (void)r;
  return 0;
#endif
}

/* INFO server's run_id; a refusal (NOPERM for a user without INFO, a
 * renamed command) leaves it unknown and fails nothing. */
static void read_run_id(sluice__conn *conn, const redisReply *reply) {
  conn->info_run_id[0] = '\0';
  if (reply->type != REDIS_REPLY_STRING && !is_verbatim(reply)) return;
  const char *p = strstr(reply->str, "run_id:");
  if (!p) return;
  p += 7;
  size_t n = strspn(p, "0123456789abcdef");
  if (n == 0 || n >= sizeof conn->info_run_id) return;
  memcpy(conn->info_run_id, p, n);
  conn->info_run_id[n] = '\0';
}

/* An optional handshake step's refusal by the ACL rule, kept for the
 * client to say (other errors: a replica refuses WAIT, and says nothing a
 * user could change). */
static void note_refusal(char *buf, size_t size, const redisReply *reply) {
  int noperm = reply->type == REDIS_REPLY_ERROR && strncmp(reply->str, "NOPERM", 6) == 0;
  snprintf(buf, size, "%s", noperm ? reply->str : "");
}

/* A number no other node of this process had: 64 bits never wrap. */
static uint64_t fresh_node_id(void) {
  static atomic_uint_fast64_t next = 1;
  return (uint64_t)atomic_fetch_add_explicit(&next, 1, memory_order_relaxed);
}

/* The handshake completed: is this the node of the previous up? Another
 * address (a Sentinel switch), or the same with another run_id (a
 * restart), is another node; an unknown run_id tells nothing. */
static void note_node(sluice__conn *conn) {
  const sluice__endpoint *ep = conn->cfg.net.endpoint;
  char addr[sizeof conn->up_addr];
  snprintf(addr, sizeof addr, "%s:%d",
           ep->unix_path ? ep->unix_path
           : ep->host    ? ep->host
                         : "",
           ep->unix_path ? 0 : ep->port);
  int had = conn->ups > 0;
  conn->new_node = had && (strcmp(addr, conn->up_addr) != 0 ||
                           (conn->run_id[0] && conn->info_run_id[0] &&
                            strcmp(conn->run_id, conn->info_run_id) != 0));
  memcpy(conn->up_addr, addr, sizeof addr);
  memcpy(conn->run_id, conn->info_run_id, sizeof conn->run_id);
  if (!had || conn->new_node) {
    conn->node_id = fresh_node_id();
    conn->had_replicas = 0;
  }
  conn->replicas_online = conn->info_replicas;
  if (conn->replicas_online > 0) conn->had_replicas = 1;
}

static void handshake_cb(redisAsyncContext *ac, void *r, void *privdata) {
  sluice__conn *conn = ac->data;
  redisReply *reply = r;
  const char *step = privdata;
  if (!conn || conn->ac != ac || !reply || conn->draining) return; /* dropped meanwhile */
  /* The first failing step ends the attempt: the replies still due (they
   * were pipelined behind it) neither replace its error nor count as up. */
  if (conn->handshake_failed) return;
  if (strcmp(step, "INFO") == 0) {
    read_run_id(conn, reply);
    note_refusal(conn->info_refused, sizeof conn->info_refused, reply);
    return;
  }
  if (strcmp(step, "WAIT") == 0) { /* refused (ACL, a replica): unknown, fails nothing */
    conn->info_replicas = reply->type == REDIS_REPLY_INTEGER ? (int)reply->integer : -1;
    note_refusal(conn->wait_refused, sizeof conn->wait_refused, reply);
    return;
  }
  if (reply->type == REDIS_REPLY_ERROR) {
    conn->handshake_failed = 1;
    set_err(conn, step, reply->str);
    sluice__conn_fail(conn, NULL);
    return;
  }
  /* A sentinel's answer is checked: a failover may have made it a replica. */
  if (strcmp(step, "ROLE") == 0 && !(reply->type == REDIS_REPLY_ARRAY && reply->elements > 0 &&
                                     reply->element[0]->type == REDIS_REPLY_STRING &&
                                     strcmp(reply->element[0]->str, "master") == 0)) {
    conn->handshake_failed = 1;
    set_err(conn, "ROLE", "not a master (a failover may be under way)");
    sluice__conn_fail(conn, NULL);
    return;
  }
  if (strcmp(step, "PING") != 0) return;
  evtimer_del(conn->timer);
  note_node(conn);
  conn->state = SLUICE_CONN_UP;
  conn->failed = 0;
  conn->attempts = 0;
  conn->retried_early = 0;
  conn->ups++;
  conn->errstr[0] = '\0';
  if (conn->cfg.on_up) conn->cfg.on_up(conn, conn->cfg.userdata);
}

/* A TLS connection that fails before its handshake completes most often
 * failed in TLS (certificate refused, client certificate missing), which
 * hiredis reports only as an I/O error: say what OpenSSL saw instead. Only
 * from hiredis callbacks for the current context, while conn->ssl lives. */
static void tls_reason(sluice__conn *conn) {
  char why[160];
  if (conn->ssl && conn->state == SLUICE_CONN_CONNECTING &&
      sluice__tls_explain(conn->ssl, why, sizeof why))
    set_err(conn, "connect failed", why);
}

static void connect_cb(const redisAsyncContext *ac, int status) {
  sluice__conn *conn = ac->data;
  if (!conn || conn->ac != ac) return;
  if (status != REDIS_OK) {
    /* hiredis frees the context after this returns (0.14: ac->err may be 0,
     * the text is in errstr). */
    set_err(conn, "connect failed", ac->errstr[0] ? ac->errstr : ac->c.errstr);
    tls_reason(conn);
    conn->ac = NULL;
    conn->failed = 1;
    conn->was_up = 0;
    evtimer_del(conn->timer);
    schedule_retry(conn);
    if (conn->cfg.on_down) conn->cfg.on_down(conn, SLUICE_ECONNECTION, conn->cfg.userdata);
  }
}

static void disconnect_cb(const redisAsyncContext *ac, int status) {
  sluice__conn *conn = ac->data;
  if (!conn || conn->ac != ac) return; /* our own conn_drop: already handled */
  if (conn->draining) {
    conn->ac = NULL;                   /* hiredis frees it after we return */
    event_active(conn->drop_ev, 0, 0); /* report from outside hiredis */
    return;
  }
  /* A refused handshake step said why already: the server closing after
   * it (a broken pipe) is not the news. */
  if (!conn->handshake_failed)
    set_err(conn, "connection lost",
            conn->refusal.refused ? conn->refusal.why
            : ac->errstr[0]       ? ac->errstr
                                  : NULL);
  tls_reason(conn);
  conn->ac = NULL; /* hiredis frees it after we return */
  conn->failed = 1;
  conn->was_up = conn->state == SLUICE_CONN_UP;
  evtimer_del(conn->timer);
  schedule_retry(conn);
  if (conn->cfg.on_down) conn->cfg.on_down(conn, SLUICE_ECONNECTION, conn->cfg.userdata);
}

static void send_handshake(sluice__conn *conn) {
  const sluice__endpoint *ep = conn->cfg.net.endpoint;
  if (ep->password) {
    const char *argv[3] = {"AUTH", ep->username ? ep->username : ep->password, ep->password};
    int argc = ep->username ? 3 : 2;
    sluice__conn_send(conn, handshake_cb, (void *)"AUTH", argc, argv, NULL);
  }
  if (ep->db) {
    char db[24];
    sluice__fmt_i64(db, ep->db);
    const char *argv[2] = {"SELECT", db};
    sluice__conn_send(conn, handshake_cb, (void *)"SELECT", 2, argv, NULL);
  }
  /* Before anything that could be replicated: with no write of its own
   * yet, WAIT counts every replica online. */
  if (conn->cfg.count_replicas) {
    const char *wait[3] = {"WAIT", "0", "0"};
    sluice__conn_send(conn, handshake_cb, (void *)"WAIT", 3, wait, NULL);
  }
  for (const struct sluice__script *const *sc = conn->cfg.scripts; sc && *sc; sc++) {
    const char *argv[3] = {"SCRIPT", "LOAD", (*sc)->body};
    size_t lens[3] = {6, 4, (*sc)->len};
    sluice__conn_send(conn, handshake_cb, (void *)"SCRIPT LOAD", 3, argv, lens);
  }
  if (ep->master_name) {
    const char *role[1] = {"ROLE"};
    sluice__conn_send(conn, handshake_cb, (void *)"ROLE", 1, role, NULL);
  }
  const char *info[2] = {"INFO", "server"};
  sluice__conn_send(conn, handshake_cb, (void *)"INFO", 2, info, NULL);
  const char *ping[1] = {"PING"};
  sluice__conn_send(conn, handshake_cb, (void *)"PING", 1, ping, NULL);
}

static void finish_drain(sluice__conn *conn) {
  redisAsyncContext *ac = conn->ac;
  void (*drained)(sluice__conn *, void *) = conn->drained;
  conn->ac = NULL;
  conn->drained = NULL;
  evtimer_del(conn->timer);
  if (ac) redisAsyncFree(ac); /* timed out: pending callbacks get NULL */
  if (drained) drained(conn, conn->cfg.userdata);
}

static void timer_cb(evutil_socket_t fd, short what, void *arg) {
  sluice__conn *conn = arg;
  if (conn->draining) {
    finish_drain(conn);
  } else if (conn->state == SLUICE_CONN_CONNECTING) {
    char why[160];
    set_err(
        conn,
        conn->ssl && sluice__tls_timed_out(conn->ssl, why, sizeof why) ? why : "connect timed out",
        NULL);
    conn_drop(conn, NULL);
  } else if (conn->state == SLUICE_CONN_RESOLVING) {
    set_err(conn,
            conn->cfg.net.endpoint->cluster
                ? "no address: the cluster map names no node for this slot yet"
                : "no address: the sentinels did not name the master in time",
            NULL);
    conn_drop(conn, NULL);
  } else if (conn->state == SLUICE_CONN_WAITING) {
    sluice__conn_start(conn);
  }
}

static void drop_cb(evutil_socket_t fd, short what, void *arg) {
  sluice__conn *conn = arg;
  if (conn->draining) {
    finish_drain(conn);
  } else if (conn->ac) {
    conn_drop(conn, NULL);
  } else if (conn->down_pending) {
    conn->down_pending = 0;
    if (conn->cfg.on_down) conn->cfg.on_down(conn, SLUICE_ECONNECTION, conn->cfg.userdata);
  }
}

void sluice__conn_drain(sluice__conn *conn, unsigned timeout_ms,
                        void (*drained)(sluice__conn *conn, void *userdata)) {
  conn->draining = 1;
  conn->drained = drained;
  conn->cfg.on_up = NULL;
  conn->cfg.on_down = NULL;
  evtimer_del(conn->timer);
  if (!conn->ac || conn->state != SLUICE_CONN_UP) {
    event_active(conn->drop_ev, 0, 0);
    return;
  }
  sluice__timer_in(conn->timer, timeout_ms);
  /* Waits for the replies still due, then disconnects (and may call
   * disconnect_cb right here when none are due). */
  redisAsyncDisconnect(conn->ac);
}

int sluice__conn_init(sluice__conn *conn, struct event_base *base, const sluice__conn_config *cfg) {
  memset(conn, 0, sizeof *conn);
  conn->cfg = *cfg;
  conn->replicas_online = -1;
  conn->base = base;
  conn->timer = evtimer_new(base, timer_cb, conn);
  conn->drop_ev = event_new(base, -1, 0, drop_cb, conn);
  if (cfg->watch_link) conn->watch = sluice__link_watch_new(conn);
  if (!conn->timer || !conn->drop_ev || (cfg->watch_link && !conn->watch)) {
    if (conn->timer) event_free(conn->timer);
    if (conn->drop_ev) event_free(conn->drop_ev);
    sluice__link_watch_free(conn->watch);
    return SLUICE_ENOMEM;
  }
  return SLUICE_OK;
}

/* A connect that failed at once (e.g. no such socket): retry later, and
 * report it from the loop, since we may be inside sluice_client_new. */
static void start_failed(sluice__conn *conn) {
  conn->failed = 1;
  conn->was_up = 0;
  conn->down_pending = 1;
  schedule_retry(conn);
  event_active(conn->drop_ev, 0, 0);
}

void sluice__conn_start(sluice__conn *conn) {
  const sluice__endpoint *ep = conn->cfg.net.endpoint;
  redisAsyncContext *ac;
  if (conn->state != SLUICE_CONN_IDLE && conn->state != SLUICE_CONN_WAITING &&
      conn->state != SLUICE_CONN_RESOLVING)
    return;
  evtimer_del(conn->timer);
  if (conn->cfg.ready && !conn->cfg.ready(conn, conn->cfg.userdata)) {
    conn->state = SLUICE_CONN_RESOLVING;
    sluice__timer_in(conn->timer, conn->cfg.net.connect_timeout_ms);
    return;
  }
  ac = ep->unix_path ? redisAsyncConnectUnix(ep->unix_path) : redisAsyncConnect(ep->host, ep->port);
  if (!ac || ac->err) {
    set_err(conn, "connect failed", ac ? ac->errstr : "out of memory");
    if (ac) redisAsyncFree(ac);
    start_failed(conn);
    return;
  }
  ac->data = conn;
  conn->ssl = NULL;
  /* TLS starts before the loop is attached, as hiredis expects. */
  if (ep->tls) {
    char why[160];
    if (sluice__tls_attach(ep, ac, &conn->ssl, why, sizeof why) != 0) {
      set_err(conn, "connect failed", why);
      redisAsyncFree(ac);
      start_failed(conn);
      return;
    }
  }
  /* Lets the kernel notice a peer that vanished without a reset. */
  if (!ep->unix_path) redisEnableKeepAlive(&ac->c);
  /* Order matters: setting the connect callback already asks the adapter to
   * watch for writability, so the loop must be attached first. */
  if (sluice__evloop_attach(ac, conn->base) != REDIS_OK ||
      sluice__reply_bounds_attach(ac, &conn->refusal) != SLUICE_OK) {
    set_err(conn, "connect failed", "cannot attach to event loop");
    redisAsyncFree(ac);
    start_failed(conn);
    return;
  }
  redisAsyncSetConnectCallback(ac, connect_cb);
  redisAsyncSetDisconnectCallback(ac, disconnect_cb);
  conn->ac = ac;
  conn->state = SLUICE_CONN_CONNECTING;
  conn->handshake_failed = 0;
  conn->info_run_id[0] = '\0';
  conn->info_replicas = -1;
  conn->info_refused[0] = conn->wait_refused[0] = '\0';
  sluice__timer_in(conn->timer, conn->cfg.net.connect_timeout_ms);
  send_handshake(conn);
  if (conn->cfg.on_context) conn->cfg.on_context(conn, conn->cfg.userdata);
}

/* Free the context now; only from outside hiredis callbacks. */
static void conn_drop(sluice__conn *conn, const char *reason) {
  redisAsyncContext *ac = conn->ac;
  if (reason) set_err(conn, reason, NULL);
  conn->ac = NULL;
  conn->failed = 1;
  conn->was_up = conn->state == SLUICE_CONN_UP;
  evtimer_del(conn->timer);
  schedule_retry(conn);
  /* Pending callbacks run inside with NULL replies; disconnect_cb ignores
   * it because conn->ac no longer matches. */
  if (ac) redisAsyncFree(ac);
  if (conn->cfg.on_down) conn->cfg.on_down(conn, SLUICE_ECONNECTION, conn->cfg.userdata);
}

void sluice__conn_retry_now(sluice__conn *conn) {
  if (conn->state != SLUICE_CONN_WAITING && conn->state != SLUICE_CONN_RESOLVING) return;
  conn->attempts = 0;
  sluice__conn_start(conn);
}

void sluice__conn_retry_early(sluice__conn *conn) {
  if (conn->state != SLUICE_CONN_WAITING || conn->retried_early) return;
  conn->retried_early = 1;
  conn->attempts = 0;
  sluice__conn_start(conn);
}

void sluice__conn_retry_slowly(sluice__conn *conn) {
  if (conn->state != SLUICE_CONN_WAITING) return;
  conn->retry_ms = sluice__jittered(conn->cfg.net.reconnect_max_ms);
  sluice__timer_in(conn->timer, conn->retry_ms);
}

static int same_text(const char *a, const char *b) { return a && b && strcmp(a, b) == 0; }

int sluice__conn_same_node(const sluice__conn *a, const sluice__conn *b) {
  const sluice__endpoint *x = a->cfg.net.endpoint, *y = b->cfg.net.endpoint;
  if (x->unix_path || y->unix_path) return same_text(x->unix_path, y->unix_path);
  return x->port == y->port && same_text(x->host, y->host);
}

int sluice__conn_tcp_loss(const sluice__conn *conn, uint32_t *resent, int *timed_out) {
  struct tcp_info ti;
  socklen_t len = sizeof ti;
  if (!conn->ac || conn->ac->c.connection_type != REDIS_CONN_TCP) return -1;
  if (getsockopt(conn->ac->c.fd, IPPROTO_TCP, TCP_INFO, &ti, &len) != 0 ||
      len < offsetof(struct tcp_info, tcpi_total_retrans) + sizeof ti.tcpi_total_retrans)
    return -1;
  *resent = ti.tcpi_total_retrans;
  *timed_out = ti.tcpi_backoff > 0;
  return 0;
}

void sluice__conn_fail(sluice__conn *conn, const char *reason) {
  if (reason) set_err(conn, reason, NULL);
  if (conn->ac) event_active(conn->drop_ev, 0, 0);
}

void sluice__conn_shutdown(sluice__conn *conn) {
  redisAsyncContext *ac = conn->ac;
  conn->ac = NULL;
  conn->state = SLUICE_CONN_IDLE;
  conn->cfg.on_up = NULL;
  conn->cfg.on_down = NULL;
  if (conn->timer) event_free(conn->timer);
  if (conn->drop_ev) event_free(conn->drop_ev);
  conn->timer = conn->drop_ev = NULL;
  sluice__link_watch_free(conn->watch);
  conn->watch = NULL;
  if (ac) redisAsyncFree(ac);
}

int sluice__conn_send(sluice__conn *conn, redisCallbackFn *fn, void *privdata, int argc,
                      const char **argv, const size_t *lens) {
  if (!conn->ac) return REDIS_ERR;
  char small[4096]; /* a step of one request fits: no allocation */
  size_t n = sluice__resp_size(argc, argv, lens);
  char *cmd = n < sizeof small ? small : malloc(n + 1);
  if (!cmd) return REDIS_ERR;
  sluice__resp_write(cmd, argc, argv, lens);
  int rc = redisAsyncFormattedCommand(conn->ac, fn, privdata, cmd, n);
  if (cmd != small) free(cmd);
  if (rc == REDIS_OK && conn->watch && conn->state == SLUICE_CONN_UP)
    sluice__link_watch_sent(conn->watch);
  return rc;
}
