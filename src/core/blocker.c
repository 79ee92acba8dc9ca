/*
 * The blocking side: connections that sit in BRPOP over the lists the
 * client's primitives wait on, so N local waiters never mean N
 * connections. Elements are dispatched to the oldest listener of the key
 * they came from.
 *
 * Listeners are grouped: one group (one connection, one BRPOP) for every
 * key on one Redis; on a cluster, one group per hash slot waited on, since
 * a BRPOP's keys must share a slot. Every key of one primitive shares its
 * slot, so N waiters on one semaphore still share one connection. A group
 * with no listeners closes after IDLE_CLOSE_MS.
 *
 * When a group's key set changes while BRPOP is blocked, a token pushed to
 * the group's control list (also in the BRPOP, and in the same slot) makes
 * it return so it can be re-issued with the new keys. A list keeps the
 * token even if BRPOP was not yet blocked, so no change is ever missed.
 *
 * Each BRPOP is capped (BLOCK_SECONDS) and watched by a timer a little
 * longer, so a half-open connection is noticed and replaced. Precise
 * deadlines never rely on BRPOP timeouts (Redis checks them only on its hz
 * tick); primitives keep their own libevent timers.
 *
 * On a cluster a wake-up stays a hint: MOVED (the slot migrated), -UNBLOCKED
 * (a failover) or a lost connection make the group re-resolve its slot's
 * master and reconnect, and every listener re-checks its state then, so a
 * lost or duplicated wake-up costs a round trip, never a permit.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <event2/event.h>

#include "core/blocker.h"
#include "net/slot.h"
#include "core/redis_error.h"

/* Long enough that an idle client costs Redis almost nothing, short enough
 * that a half-open connection is replaced within a minute. */
#define BLOCK_SECONDS 30
#define BLOCK_SECONDS_TEXT "30"
#define WATCHDOG_MARGIN_MS 3000
#define CTL_EXPIRE_MS "60000"
/* A group nobody listens on keeps its connection this long (waiters come
 * and go), then closes it. */
#define IDLE_CLOSE_MS 60000

typedef struct group group;

struct sluice__listener {
  group *g;          /* NULL once the blocker is gone */
  sluice__link link; /* in g->listeners, oldest first */
  char *key;
  sluice__wake_fn *fn;
  void *ud;
  unsigned notify_gen;
};

struct group {
  sluice__blocker *b;
  sluice__link link;   /* in b->groups */
  int slot;            /* -1: every key (one Redis) */
  sluice__endpoint ep; /* the route's node: host and port its own */
  sluice__conn conn;
  sluice__list listeners;
  char *ctl_key;
  struct event *watchdog;
  struct event *kick;    /* (re)issue BRPOP from the loop */
  struct event *idle;    /* closes the group when nobody listens */
  sluice__op *interrupt; /* the control token on its way */
  int waiting;           /* a BRPOP is outstanding */
  int refused;           /* the ACL refused the last BRPOP */
  int dirty;             /* key set changed since it was sent */
  unsigned notify_gen;
};

struct sluice__blocker {
  sluice__blocker_env env;
  sluice__list groups;
};

static void issue(group *g);
static void notify_all(group *g);

static void interrupt_done(void *ud, int status, const redisReply *reply) {
  group *g = ud;
  g->interrupt = NULL;
  if (status == SLUICE_EREDIS) /* e.g. the ACL refuses one of its commands */
    sluice__log(g->b->env.c, SLUICE_LOG_ERROR,
                "the blocking call could not be told of new keys (%s): their wake-ups wait "
                "until it returns, within " BLOCK_SECONDS_TEXT " s",
                sluice_client_last_error(g->b->env.c));
}

/* Make an outstanding BRPOP return so the new key set takes effect. */
static void key_set_changed(group *g) {
  g->dirty = 1;
  if (!g->waiting) {
    event_active(g->kick, 0, 0);
    return;
  }
  if (g->interrupt) return;
  const char *argv[2] = {g->ctl_key, CTL_EXPIRE_MS};
  sluice__eval(g->b->env.c, &sluice__lua_blk_interrupt, 1, 2, argv, NULL, 0, interrupt_done, g,
               &g->interrupt);
}

static sluice__listener *first_listener(group *g, const char *key, size_t len) {
  for (sluice__link *k = g->listeners.head; k; k = k->next) {
    sluice__listener *l = sluice__container_of(k, sluice__listener, link);
    if (strlen(l->key) == len && memcmp(l->key, key, len) == 0) return l;
  }
  return NULL;
}

/* The ACL refuses BRPOP: a permanent state, not a broken connection, so
 * no reconnect (which would loop at once, every listener re-checking each
 * time). Say it once; let the listeners re-check, and try again, every
 * reconnect_max_ms, briefly blocking so that the ACL's fix shows soon. */
static void refused(group *g, const char *err) {
  const sluice__blocker_env *env = &g->b->env;
  char text[512];
  sluice__error_text(text, sizeof text, NULL, "brpop", err);
  sluice__client_set_error(env->c, text);
  sluice__log(env->c, g->refused ? SLUICE_LOG_DEBUG : SLUICE_LOG_ERROR,
              "wake-ups refused (%s): waiters and consumers re-check every %u ms instead", text,
              env->net.reconnect_max_ms);
  g->refused = 1;
  sluice__timer_in(g->watchdog, env->net.reconnect_max_ms);
  notify_all(g);
}

static void brpop_cb(redisAsyncContext *ac, void *r, void *privdata) {
  group *g = privdata;
  redisReply *reply = r;
  g->waiting = 0;
  evtimer_del(g->watchdog);
  if (!reply) return; /* connection lost: on_down/on_up take over */
  if (reply->type == REDIS_REPLY_ARRAY && reply->elements == 2 &&
      reply->element[0]->type == REDIS_REPLY_STRING &&
      reply->element[1]->type == REDIS_REPLY_STRING) {
    const redisReply *k = reply->element[0], *v = reply->element[1];
    sluice__listener *l = first_listener(g, k->str, k->len);
    /* Re-issue first: the listener may start, stop or free things. */
    event_active(g->kick, 0, 0);
    if (l) l->fn(l->ud, v->str, v->len);
    return;
  }
  if (reply->type == REDIS_REPLY_ERROR && sluice__refused_by_acl(reply->str)) {
    refused(g, reply->str);
    return;
  }
  if (g->refused) {
    g->refused = 0;
    sluice__log(g->b->env.c, SLUICE_LOG_INFO, "BRPOP allowed again: wake-ups flow");
  }
  if (reply->type == REDIS_REPLY_ERROR) {
    /* MOVED: the slot migrated; -UNBLOCKED: a failover; NOAUTH after a
     * restart with new config... Reconnect (to the slot's master now). */
    sluice__topo_decision d; /* the topology learns from it (MOVED patches the map) */
    sluice__topo_decide(g->b->env.topo, &g->conn, reply, &d);
    sluice__conn_fail(&g->conn, reply->str);
    return;
  }
  event_active(g->kick, 0, 0); /* timeout (nil): go again */
}

static void issue(group *g) {
  size_t n = 0, cap = 2;
  if (g->waiting || g->conn.state != SLUICE_CONN_UP) return;
  if (g->refused && evtimer_pending(g->watchdog, NULL)) return; /* its retry comes */
  for (sluice__link *k = g->listeners.head; k; k = k->next) cap++;
  if (cap == 2) return; /* nobody listens: stay idle */
  const char **argv = malloc((cap + 1) * sizeof *argv);
  if (!argv) {
    sluice__timer_in(g->watchdog, 100); /* retry later rather than stall */
    return;
  }
  argv[n++] = "BRPOP";
  for (sluice__link *k = g->listeners.head; k; k = k->next) {
    sluice__listener *l = sluice__container_of(k, sluice__listener, link);
    if (first_listener(g, l->key, strlen(l->key)) == l) argv[n++] = l->key;
  }
  argv[n++] = g->ctl_key;
  argv[n++] = g->refused ? "1" : BLOCK_SECONDS_TEXT;
  if (sluice__conn_send(&g->conn, brpop_cb, g, (int)n, argv, NULL) == REDIS_OK) {
    g->waiting = 1;
    g->dirty = 0;
    sluice__timer_in(g->watchdog, BLOCK_SECONDS * 1000 + WATCHDOG_MARGIN_MS);
  }
  free(argv);
}

static void kick_cb(evutil_socket_t fd, short what, void *arg) { issue(arg); }

static void watchdog_cb(evutil_socket_t fd, short what, void *arg) {
  group *g = arg;
  if (g->waiting) {
    g->waiting = 0;
    sluice__conn_fail(&g->conn, "blocking call overdue");
  } else {
    issue(g);
  }
}

/* Tell every listener to re-check: wake-ups may have been lost with the
 * old connection. Callbacks may add or remove listeners (even the last
 * one, which only arms the idle timer), so restart the walk after each. */
static void notify_all(group *g) {
  unsigned gen = ++g->notify_gen;
  for (;;) {
    sluice__listener *l = NULL;
    for (sluice__link *k = g->listeners.head; k && !l; k = k->next) {
      sluice__listener *x = sluice__container_of(k, sluice__listener, link);
      if (x->notify_gen != gen) l = x;
    }
    if (!l) break;
    l->notify_gen = gen;
    l->fn(l->ud, NULL, 0);
  }
}

/* Up: the node is back, so the command connection to it need not wait out
 * its backoff either (the topology finds it). */
static void blk_up(sluice__conn *conn, void *ud) {
  group *g = ud;
  sluice__log(g->b->env.c, SLUICE_LOG_INFO, "blocking connection up (wake-ups flow)");
  issue(g);
  sluice__topo_peer_up(g->b->env.topo, conn);
  if (conn->ups > 1) notify_all(g);
}

static void blk_down(sluice__conn *conn, int status, void *ud) {
  group *g = ud;
  sluice__log(g->b->env.c, SLUICE_LOG_WARN, "blocking connection down: %s; reconnecting in %u ms",
              conn->errstr, conn->retry_ms);
  g->waiting = 0;
  evtimer_del(g->watchdog);
  sluice__topo_stale(g->b->env.topo);
}

/* The address to connect to, the topology's for the group's route: the one
 * Redis, the sentinels' master, or the current master of the slot. */
static int blk_ready(sluice__conn *conn, void *ud) {
  group *g = ud;
  const char *host;
  int port;
  if (!sluice__topo_address(g->b->env.topo, g->slot, &host, &port)) return 0;
  if (host && (!g->ep.host || strcmp(g->ep.host, host) != 0)) {
    char *h = strdup(host);
    if (!h) return 0;
    free(g->ep.host);
    g->ep.host = h;
  }
  g->ep.port = port;
  return 1;
}

static void group_free(group *g) {
  sluice__list_remove(&g->b->groups, &g->link);
  for (sluice__link *k = g->listeners.head; k; k = k->next) /* orphaned */
    sluice__container_of(k, sluice__listener, link)->g = NULL;
  sluice__op_detach(g->interrupt);
  sluice__conn_shutdown(&g->conn); /* brpop_cb runs inside, with NULL */
  if (g->watchdog) event_free(g->watchdog);
  if (g->kick) event_free(g->kick);
  if (g->idle) event_free(g->idle);
  free(g->ctl_key);
  free(g->ep.host);
  sluice__free(g);
}

static void idle_cb(evutil_socket_t fd, short what, void *arg) {
  group *g = arg;
  if (!g->listeners.head) group_free(g);
}

/* "<prefix>blk:{<id>}:ctl", or on a cluster a key in the group's slot:
 * "<prefix>blk:{<key's tag>}:ctl:<id>". */
static char *ctl_key_for(const sluice__blocker_env *env, const char *key) {
  if (!env->topo->ops->many) return sluice__key(env->c, "blk", env->id, "ctl");
  const char *part;
  size_t plen;
  char part_id[48] = "ctl:";
  sluice__hashed_part(key, strlen(key), &part, &plen);
  char *tag = malloc(plen + 1);
  if (!tag) return NULL;
  memcpy(tag, part, plen);
  tag[plen] = '\0';
  snprintf(part_id + 4, sizeof part_id - 4, "%s", env->id);
  char *k = sluice__key(env->c, "blk", tag, part_id);
  free(tag);
  return k;
}

static group *group_new(sluice__blocker *b, int slot, const char *key) {
  const sluice__blocker_env *env = &b->env;
  group *g = sluice__calloc(1, sizeof *g);
  if (!g) return NULL;
  g->b = b;
  g->slot = slot;
  g->ep = *env->net.endpoint; /* credentials and TLS shared; the address its own */
  g->ep.host = NULL;
  sluice__list_append(&b->groups, &g->link);
  g->ctl_key = ctl_key_for(env, key);
  g->watchdog = evtimer_new(env->base, watchdog_cb, g);
  g->kick = event_new(env->base, -1, 0, kick_cb, g);
  g->idle = evtimer_new(env->base, idle_cb, g);
  sluice__conn_config cfg = {
      .net = env->net, .on_up = blk_up, .on_down = blk_down, .ready = blk_ready, .userdata = g};
  cfg.net.endpoint = &g->ep;
  if (!g->ctl_key || !g->watchdog || !g->kick || !g->idle ||
      sluice__conn_init(&g->conn, env->base, &cfg)) {
    group_free(g);
    return NULL;
  }
  sluice__conn_start(&g->conn);
  return g;
}

sluice__blocker *sluice__blocker_new(const sluice__blocker_env *env) {
  sluice__blocker *b = sluice__calloc(1, sizeof *b);
  if (b) b->env = *env;
  return b;
}

#define EACH_GROUP(b, g)                                                     \
  for (sluice__link *g##_l = (b)->groups.head, *g##_n; g##_l; g##_l = g##_n) \
    for (group *g = (g##_n = g##_l->next, sluice__container_of(g##_l, group, link)); g; g = NULL)

void sluice__blocker_moved(sluice__blocker *b) {
  EACH_GROUP(b, g) sluice__conn_fail(&g->conn, "the master moved (sentinel failover)");
}

void sluice__blocker_restart(sluice__blocker *b, const sluice__conn *data) {
  EACH_GROUP(b, g) {
    if (g->conn.state == SLUICE_CONN_UP && sluice__conn_same_node(&g->conn, data))
      sluice__conn_fail(&g->conn, "its node's link lost packets: answers may be held back");
  }
}

void sluice__blocker_kick(sluice__blocker *b, const sluice__conn *data) {
  EACH_GROUP(b, g) {
    /* Where its next attempt goes: the route's node may have changed. */
    if (g->conn.state == SLUICE_CONN_WAITING && blk_ready(&g->conn, g) &&
        sluice__conn_same_node(&g->conn, data))
      sluice__conn_retry_early(&g->conn);
  }
}

void sluice__blocker_remap(sluice__blocker *b) {
  EACH_GROUP(b, g) {
    const char *host;
    int port;
    if (!sluice__topo_address(b->env.topo, g->slot, &host, &port)) continue;
    int moved = host && g->ep.host && (strcmp(g->ep.host, host) != 0 || g->ep.port != port);
    /* The address it waited for is known now: go, its backoff counted on.
     * Another address: the failed attempts were the old node's, no reason
     * to wait. The same address that failed waits out its backoff (every
     * connect attempt of the command connection says routes changed). */
    if (g->conn.state == SLUICE_CONN_RESOLVING) sluice__conn_start(&g->conn);
    else if (g->conn.state == SLUICE_CONN_WAITING && moved) sluice__conn_retry_now(&g->conn);
    else if (moved && g->conn.state != SLUICE_CONN_WAITING)
      sluice__conn_fail(&g->conn, "the route moved to another node");
  }
}

int sluice__blocker_up(const sluice__blocker *b) {
  int listened = 0;
  for (const sluice__link *l = b->groups.head; l; l = l->next) {
    const group *g = sluice__container_of(l, group, link);
    if (!g->listeners.head) continue;
    listened = 1;
    if (g->conn.state != SLUICE_CONN_UP || g->refused) return 0;
  }
  return listened ? 1 : -1;
}

void sluice__blocker_free(sluice__blocker *b) {
  if (!b) return;
  while (b->groups.head) group_free(sluice__container_of(b->groups.head, group, link));
  sluice__free(b);
}

int sluice__blocker_listen(sluice__blocker *b, const char *key, sluice__wake_fn *fn, void *ud,
                           sluice__listener **out) {
  int slot = sluice__topo_route_of(b->env.topo, key, strlen(key));
  group *g = NULL;
  EACH_GROUP(b, x) if (x->slot == slot) g = x;
  if (!g && !(g = group_new(b, slot, key))) return SLUICE_ENOMEM;
  sluice__listener *l = sluice__calloc(1, sizeof *l);
  if (!l || !(l->key = strdup(key))) {
    sluice__free(l);
    if (!g->listeners.head) sluice__timer_in(g->idle, IDLE_CLOSE_MS);
    return SLUICE_ENOMEM;
  }
  int new_key = first_listener(g, key, strlen(key)) == NULL;
  evtimer_del(g->idle);
  l->g = g;
  l->fn = fn;
  l->ud = ud;
  l->notify_gen = g->notify_gen;
  sluice__list_append(&g->listeners, &l->link);
  if (new_key) key_set_changed(g);
  *out = l;
  return SLUICE_OK;
}

void sluice__unlisten(sluice__listener *l) {
  if (!l) return;
  group *g = l->g;
  if (g) {
    sluice__list_remove(&g->listeners, &l->link);
    if (!first_listener(g, l->key, strlen(l->key))) key_set_changed(g);
    if (!g->listeners.head) sluice__timer_in(g->idle, IDLE_CLOSE_MS);
  }
  free(l->key);
  sluice__free(l);
}
