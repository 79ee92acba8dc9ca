/*
 * The blocking side: one extra connection per client that sits in a single
 * BRPOP over every list the client's primitives wait on, so N local waiters
 * never mean N connections. Elements are dispatched to the oldest listener
 * of the key they came from.
 *
 * When the key set changes while BRPOP is blocked, a token pushed to the
 * client's own control list (also in the BRPOP) makes it return so it can be
 * re-issued with the new keys. A list keeps the token even if BRPOP was not
 * yet blocked, so no change is ever missed.
 *
 * Each BRPOP is capped (BLOCK_SECONDS) and watched by a timer a little
 * longer, so a half-open connection is noticed and replaced. Precise
 * deadlines never rely on BRPOP timeouts (Redis checks them only on its hz
 * tick); primitives keep their own libevent timers.
 */
#include <stdlib.h>
#include <string.h>

#include <event2/event.h>

#include "client-private.h"

/* Long enough that an idle client costs Redis almost nothing, short enough
 * that a half-open connection is replaced within a minute. */
#define BLOCK_SECONDS 30
#define BLOCK_SECONDS_TEXT "30"
#define WATCHDOG_MARGIN_MS 3000
#define CTL_EXPIRE_MS "60000"

struct sluice__listener {
  sluice__blocker *b;            /* NULL once the blocker is gone */
  sluice__link link;             /* in b->listeners, oldest first */
  char *key;
  sluice__wake_fn *fn;
  void *ud;
  unsigned notify_gen;
};

struct sluice__blocker {
  sluice_client *c;
  sluice__conn conn;
  sluice__list listeners;
  char *ctl_key;
  struct event *watchdog;
  struct event *kick;            /* (re)issue BRPOP from the loop */
  int waiting;                   /* a BRPOP is outstanding */
  int dirty;                     /* key set changed since it was sent */
  int interrupt_sent;            /* a control token is on its way */
  unsigned notify_gen;
};

static void issue(sluice__blocker *b);

static void interrupt_done(void *ud, int status, const redisReply *reply) {
  sluice__blocker *b = ud;
  b->interrupt_sent = 0;
}

/* Make an outstanding BRPOP return so the new key set takes effect. */
static void key_set_changed(sluice__blocker *b) {
  b->dirty = 1;
  if (!b->waiting) {
    event_active(b->kick, 0, 0);
    return;
  }
  if (b->interrupt_sent) return;
  const char *argv[2] = {b->ctl_key, CTL_EXPIRE_MS};
  if (sluice__eval(b->c, &sluice__lua_blk_interrupt, 1, 2, argv, NULL, 0, interrupt_done, b,
                   NULL) == 0)
    b->interrupt_sent = 1;
}

static sluice__listener *first_listener(sluice__blocker *b, const char *key, size_t len) {
  for (sluice__link *k = b->listeners.head; k; k = k->next) {
    sluice__listener *l = sluice__container_of(k, sluice__listener, link);
    if (strlen(l->key) == len && memcmp(l->key, key, len) == 0) return l;
  }
  return NULL;
}

static void brpop_cb(redisAsyncContext *ac, void *r, void *privdata) {
  sluice__blocker *b = privdata;
  redisReply *reply = r;
  b->waiting = 0;
  evtimer_del(b->watchdog);
  if (!reply) return; /* connection lost: on_down/on_up take over */
  if (reply->type == REDIS_REPLY_ARRAY && reply->elements == 2 &&
      reply->element[0]->type == REDIS_REPLY_STRING &&
      reply->element[1]->type == REDIS_REPLY_STRING) {
    const redisReply *k = reply->element[0], *v = reply->element[1];
    sluice__listener *l = first_listener(b, k->str, k->len);
    /* Re-issue first: the listener may start, stop or free things. */
    event_active(b->kick, 0, 0);
    if (l) l->fn(l->ud, v->str, v->len);
    return;
  }
  if (reply->type == REDIS_REPLY_ERROR) {
    /* e.g. NOAUTH after a restart with new config: reconnect with backoff. */
    sluice__conn_fail(&b->conn, reply->str);
    return;
  }
  event_active(b->kick, 0, 0); /* timeout (nil): go again */
}

static void issue(sluice__blocker *b) {
  size_t n = 0, cap = 2;
  if (b->waiting || b->conn.state != SLUICE_CONN_UP) return;
  for (sluice__link *k = b->listeners.head; k; k = k->next) cap++;
  if (cap == 2) return; /* nobody listens: stay idle */
  const char **argv = malloc((cap + 1) * sizeof *argv);
  if (!argv) {
    sluice__timer_in(b->watchdog, 100); /* retry later rather than stall */
    return;
  }
  argv[n++] = "BRPOP";
  for (sluice__link *k = b->listeners.head; k; k = k->next) {
    sluice__listener *l = sluice__container_of(k, sluice__listener, link);
    if (first_listener(b, l->key, strlen(l->key)) == l) argv[n++] = l->key;
  }
  argv[n++] = b->ctl_key;
  argv[n++] = BLOCK_SECONDS_TEXT;
  if (sluice__conn_send(&b->conn, brpop_cb, b, (int)n, argv, NULL) == REDIS_OK) {
    b->waiting = 1;
    b->dirty = 0;
    sluice__timer_in(b->watchdog, BLOCK_SECONDS * 1000 + WATCHDOG_MARGIN_MS);
  }
  free(argv);
}

static void kick_cb(evutil_socket_t fd, short what, void *arg) { issue(arg); }

static void watchdog_cb(evutil_socket_t fd, short what, void *arg) {
  sluice__blocker *b = arg;
  if (b->waiting) {
    b->waiting = 0;
    sluice__conn_fail(&b->conn, "blocking call overdue");
  } else {
    issue(b);
  }
}

/* Tell every listener to re-check: wake-ups may have been lost with the
 * old connection. Callbacks may add or remove listeners, so restart the
 * walk after each call. */
static void notify_all(sluice__blocker *b) {
  unsigned gen = ++b->notify_gen;
  for (;;) {
    sluice__listener *l = NULL;
    for (sluice__link *k = b->listeners.head; k && !l; k = k->next) {
      sluice__listener *x = sluice__container_of(k, sluice__listener, link);
      if (x->notify_gen != gen) l = x;
    }
    if (!l) break;
    l->notify_gen = gen;
    l->fn(l->ud, NULL, 0);
  }
}

static void blk_up(sluice__conn *conn, void *ud) {
  sluice__blocker *b = ud;
  sluice__log(b->c, SLUICE_LOG_INFO, "blocking connection up (wake-ups flow)");
  issue(b);
  if (conn->ups > 1) notify_all(b);
}

static void blk_down(sluice__conn *conn, int status, void *ud) {
  sluice__blocker *b = ud;
  sluice__log(b->c, SLUICE_LOG_WARN, "blocking connection down: %s; reconnecting in %u ms",
              conn->errstr, conn->retry_ms);
  b->waiting = 0;
  evtimer_del(b->watchdog);
  sluice__client_data_down(b->c);
}

static int blk_ready(sluice__conn *conn, void *ud) {
  sluice__blocker *b = ud;
  return sluice__client_ready(conn, b->c);
}

sluice__blocker *sluice__blocker_new(sluice_client *c) {
  sluice__blocker *b = sluice__calloc(1, sizeof *b);
  if (!b) return NULL;
  b->c = c;
  b->ctl_key = sluice__key(c, "blk", c->id, "ctl");
  b->watchdog = evtimer_new(c->base, watchdog_cb, b);
  b->kick = event_new(c->base, -1, 0, kick_cb, b);
  sluice__conn_config cfg = {.endpoint = &c->endpoint,
                             .connect_timeout_ms = c->opts.connect_timeout_ms,
                             .reconnect_min_ms = c->opts.reconnect_min_ms,
                             .reconnect_max_ms = c->opts.reconnect_max_ms,
                             .on_up = blk_up,
                             .on_down = blk_down,
                             .ready = blk_ready,
                             .userdata = b};
  if (!b->ctl_key || !b->watchdog || !b->kick || sluice__conn_init(&b->conn, c->base, &cfg)) {
    free(b->ctl_key);
    if (b->watchdog) event_free(b->watchdog);
    if (b->kick) event_free(b->kick);
    sluice__free(b);
    return NULL;
  }
  sluice__conn_start(&b->conn);
  return b;
}

void sluice__blocker_moved(sluice__blocker *b) {
  sluice__conn_fail(&b->conn, "the master moved (sentinel failover)");
}

void sluice__blocker_kick(sluice__blocker *b) {
  if (b->conn.state != SLUICE_CONN_WAITING && b->conn.state != SLUICE_CONN_RESOLVING) return;
  b->conn.attempts = 0;
  sluice__conn_start(&b->conn);
}

int sluice__blocker_up(const sluice__blocker *b) {
  if (!b->listeners.head) return -1;
  return b->conn.state == SLUICE_CONN_UP;
}

void sluice__blocker_free(sluice__blocker *b) {
  if (!b) return;
  for (sluice__link *k = b->listeners.head; k; k = k->next) /* orphaned */
    sluice__container_of(k, sluice__listener, link)->b = NULL;
  sluice__conn_shutdown(&b->conn);
  event_free(b->watchdog);
  event_free(b->kick);
  free(b->ctl_key);
  sluice__free(b);
}

int sluice__listen(sluice_client *c, const char *key, sluice__wake_fn *fn, void *ud,
                   sluice__listener **out) {
  if (!c || !key || !fn || !out) return SLUICE_EINVAL;
  if (c->closing) return SLUICE_ECLOSED;
  if (!c->blocker && !(c->blocker = sluice__blocker_new(c))) return SLUICE_ENOMEM;
  sluice__blocker *b = c->blocker;
  sluice__listener *l = sluice__calloc(1, sizeof *l);
  if (!l || !(l->key = strdup(key))) {
    sluice__free(l);
    return SLUICE_ENOMEM;
  }
  int new_key = first_listener(b, key, strlen(key)) == NULL;
  l->b = b;
  l->fn = fn;
  l->ud = ud;
  l->notify_gen = b->notify_gen;
  sluice__list_append(&b->listeners, &l->link);
  if (new_key) key_set_changed(b);
  *out = l;
  return SLUICE_OK;
}

void sluice__unlisten(sluice__listener *l) {
  if (!l) return;
  sluice__blocker *b = l->b;
  if (b) {
    sluice__list_remove(&b->listeners, &l->link);
    if (!first_listener(b, l->key, strlen(l->key))) key_set_changed(b);
  }
  free(l->key);
  sluice__free(l);
}
