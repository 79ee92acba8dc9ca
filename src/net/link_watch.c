#include <event2/event.h>

#include "base/util.h"
#include "net/conn.h"
#include "net/link_watch.h"

/* Far above a round trip on any link sluice is meant for, far below the
 * seconds the retransmission timer reaches in a partition. */
#define LINK_SILENCE_MS 500
#define LINK_TICK_MS 250
/* Silent this long, the link held answers back long enough that TCP's
 * retransmission timer has doubled past a second: the blocking
 * connections restart once it answers (a lossy but working link, whose
 * silences are shorter, keeps them). */
#define LINK_HELD_MS 1500
#define LINK_PROBE_EVERY_MS 100
#define LINK_PROBE_CONNECT_MS 300

struct sluice__link_watch {
  sluice__conn *conn;    /* watched */
  struct event *tick;    /* while answers are due */
  struct event *stop_ev; /* ends the probe from the loop */
  sluice__conn probe;    /* while probing */
  int probing;
  const void *head_seen;  /* the reply hiredis waits for first, at the last look */
  uint64_t heard_ms;      /* the last time an answer came, as far as we know */
  uint64_t reply_seen_ms; /* conn->last_reply_ms at the last look */
  uint32_t retrans_base;  /* the socket's retransmissions when answers became due */
};

static const void *first_due(const sluice__conn *conn) {
  return conn->ac ? (const void *)conn->ac->replies.head : NULL;
}

/* How long the connection has been silent with answers due, if that is
 * LINK_SILENCE_MS or more and the socket lost segments meanwhile (sent
 * again, or its timer is backing off); else 0. */
static uint64_t stuck(sluice__link_watch *w, uint64_t now) {
  sluice__conn *conn = w->conn;
  uint32_t n;
  int timed_out;
  if (conn->state != SLUICE_CONN_UP || !first_due(conn)) return 0;
  if (first_due(conn) != w->head_seen || conn->last_reply_ms != w->reply_seen_ms) {
    w->head_seen = first_due(conn);
    w->reply_seen_ms = conn->last_reply_ms;
    w->heard_ms = now;
  }
  if (now - w->heard_ms < LINK_SILENCE_MS || sluice__conn_tcp_loss(conn, &n, &timed_out) != 0 ||
      (n == w->retrans_base && !timed_out))
    return 0;
  return now - w->heard_ms;
}

static void probe_stop(sluice__link_watch *w) {
  if (!w->probing) return;
  w->probing = 0;
  sluice__conn_shutdown(&w->probe);
}

/* Inside a hiredis callback: the probe itself ends from the loop. */
static void probe_up(sluice__conn *probe, void *ud) {
  sluice__link_watch *w = ud;
  if (stuck(w, sluice__mono_ms())) {
    w->conn->link_trouble = 1;
    sluice__conn_fail(w->conn,
                      "no answer on a link that lost packets, while a new connection "
                      "got one: replaced");
  }
  event_active(w->stop_ev, 0, 0);
}

static void probe_start(sluice__link_watch *w) {
  const sluice__net_config *net = &w->conn->cfg.net;
  sluice__conn_config cfg = {.net = *net, .on_up = probe_up, .userdata = w};
  if (w->probing) return;
  if (cfg.net.connect_timeout_ms > LINK_PROBE_CONNECT_MS)
    cfg.net.connect_timeout_ms = LINK_PROBE_CONNECT_MS;
  cfg.net.reconnect_min_ms = cfg.net.reconnect_max_ms = LINK_PROBE_EVERY_MS;
  if (sluice__conn_init(&w->probe, w->conn->base, &cfg) != 0) return;
  w->probing = 1;
  sluice__conn_start(&w->probe);
}

static void stop_cb(evutil_socket_t fd, short what, void *arg) { probe_stop(arg); }

static void tick_cb(evutil_socket_t fd, short what, void *arg) {
  sluice__link_watch *w = arg;
  if (!first_due(w->conn) || w->conn->state != SLUICE_CONN_UP) {
    probe_stop(w); /* answered, or replaced: watching starts again with the next command */
    return;
  }
  uint64_t silent = stuck(w, sluice__mono_ms());
  if (silent) {
    if (silent >= LINK_HELD_MS) w->conn->link_trouble = 1;
    probe_start(w);
  } else {
    probe_stop(w);
  }
  sluice__timer_in(w->tick, LINK_TICK_MS);
}

sluice__link_watch *sluice__link_watch_new(sluice__conn *conn) {
  sluice__link_watch *w = sluice__calloc(1, sizeof *w);
  if (!w) return NULL;
  w->conn = conn;
  w->tick = evtimer_new(conn->base, tick_cb, w);
  w->stop_ev = event_new(conn->base, -1, 0, stop_cb, w);
  if (!w->tick || !w->stop_ev) {
    sluice__link_watch_free(w);
    return NULL;
  }
  return w;
}

void sluice__link_watch_free(sluice__link_watch *w) {
  if (!w) return;
  probe_stop(w);
  if (w->tick) event_free(w->tick);
  if (w->stop_ev) event_free(w->stop_ev);
  sluice__free(w);
}

void sluice__link_watch_sent(sluice__link_watch *w) {
  /* A unix socket loses no packets: nothing to watch, no timer to run. */
  redisAsyncContext *ac = w->conn->ac;
  if (!ac || ac->c.connection_type != REDIS_CONN_TCP || evtimer_pending(w->tick, NULL)) return;
  w->head_seen = first_due(w->conn);
  w->reply_seen_ms = w->conn->last_reply_ms;
  w->heard_ms = sluice__mono_ms();
  int timed_out;
  if (sluice__conn_tcp_loss(w->conn, &w->retrans_base, &timed_out) != 0) w->retrans_base = 0;
  sluice__timer_in(w->tick, LINK_TICK_MS);
}
