/* The link to Redis Sentinel: see sentinel.h. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <event2/event.h>

#include "conn.h"
#include "sentinel.h"
#include "sluice-internal.h"

struct sluice__sentinel {
  sluice__sentinel_config cfg;
  const sluice__endpoint *list;   /* the data endpoint: its sentinels */
  sluice__endpoint qep, wep;      /* the sentinel each connection uses now */
  int qi, wi;                     /* their indexes in the list */
  sluice__conn query, watch;
  struct event *ask_timer;        /* a question unanswered for too long */
  int fresh;                      /* the address was given since it went stale */
  int asking;                     /* a question is in flight */
  int have;                       /* an address was ever given */
  char err[384];                  /* room for a connection's errstr and more */
};

static void point_at(sluice__sentinel *s, sluice__endpoint *ep, int i) {
  ep->host = s->list->sentinel_hosts[i];
  ep->port = s->list->sentinel_ports[i];
}

/* ---- asking -------------------------------------------------------------- */

static int set_address(sluice__sentinel *s, const char *host, size_t hlen, int port) {
  sluice__endpoint *d = s->cfg.data;
  int changed = !d->host || strlen(d->host) != hlen || memcmp(d->host, host, hlen) != 0 ||
                d->port != port;
  if (changed) {
    char *h = malloc(hlen + 1);
    if (!h) return 0;
    memcpy(h, host, hlen);
    h[hlen] = '\0';
    free(d->host);
    d->host = h;
    d->port = port;
  }
  int moved = changed && s->have;
  s->have = s->fresh = 1;
  s->err[0] = '\0';
  if (moved) s->cfg.moved(s->cfg.userdata);
  s->cfg.known(s->cfg.userdata);
  return 1;
}

static void ask_cb(redisAsyncContext *ac, void *r, void *privdata) {
  sluice__sentinel *s = privdata;
  redisReply *reply = r;
  if (!s->asking) return;
  s->asking = 0;
  evtimer_del(s->ask_timer);
  if (!reply) return; /* lost: the query connection's on_down moves on */
  long port = 0;
  if (reply->type == REDIS_REPLY_ARRAY && reply->elements == 2 &&
      reply->element[0]->type == REDIS_REPLY_STRING &&
      reply->element[1]->type == REDIS_REPLY_STRING)
    port = strtol(reply->element[1]->str, NULL, 10);
  if (port > 0 && port < 65536 &&
      set_address(s, reply->element[0]->str, reply->element[0]->len, (int)port))
    return;
  snprintf(s->err, sizeof s->err, "sentinel %s:%d %s master '%s'%s%s", s->qep.host, s->qep.port,
           reply->type == REDIS_REPLY_ERROR ? "refused to name" : "does not know",
           s->list->master_name, reply->type == REDIS_REPLY_ERROR ? ": " : "",
           reply->type == REDIS_REPLY_ERROR ? reply->str : "");
  sluice__conn_fail(&s->query, s->err); /* try the next sentinel */
}

static void ask(sluice__sentinel *s) {
  if (s->asking || s->query.state != SLUICE_CONN_UP) return;
  const char *argv[3] = {"SENTINEL", "get-master-addr-by-name", s->list->master_name};
  if (sluice__conn_send(&s->query, ask_cb, s, 3, argv, NULL) != REDIS_OK) return;
  s->asking = 1;
  sluice__timer_in(s->ask_timer, s->cfg.connect_timeout_ms);
}

static void ask_timeout_cb(evutil_socket_t fd, short what, void *arg) {
  sluice__sentinel *s = arg;
  if (!s->asking) return;
  s->asking = 0;
  snprintf(s->err, sizeof s->err, "sentinel %s:%d did not answer", s->qep.host, s->qep.port);
  sluice__conn_fail(&s->query, s->err);
}

static void query_up(sluice__conn *conn, void *ud) {
  sluice__sentinel *s = ud;
  if (!s->fresh) ask(s);
}

/* A sentinel that failed gives way to the next; the one that answers
 * stays. */
static void query_down(sluice__conn *conn, int status, void *ud) {
  sluice__sentinel *s = ud;
  s->asking = 0;
  evtimer_del(s->ask_timer);
  if (strncmp(conn->errstr, "sentinel ", 9) == 0) /* our own verdict */
    snprintf(s->err, sizeof s->err, "%s", conn->errstr);
  else
    snprintf(s->err, sizeof s->err, "sentinel %s:%d: %s", s->qep.host, s->qep.port,
             conn->errstr);
  s->qi = (s->qi + 1) % s->list->nsentinels;
  point_at(s, &s->qep, s->qi);
}

/* ---- following failovers ------------------------------------------------- */

/* "+switch-master" says "<name> <old ip> <old port> <new ip> <new port>". */
static void watch_cb(redisAsyncContext *ac, void *r, void *privdata) {
  sluice__sentinel *s = privdata;
  redisReply *reply = r;
  if (!reply || reply->type != REDIS_REPLY_ARRAY || reply->elements != 3 ||
      reply->element[2]->type != REDIS_REPLY_STRING)
    return;
  const char *m = reply->element[2]->str;
  size_t nlen = strlen(s->list->master_name);
  if (strncmp(m, s->list->master_name, nlen) != 0 || m[nlen] != ' ') return;
  char ip[64];
  int port;
  if (sscanf(m + nlen, " %*s %*d %63s %d", ip, &port) != 2 || port <= 0 || port > 65535) return;
  set_address(s, ip, strlen(ip), port);
}

static void watch_up(sluice__conn *conn, void *ud) {
  const char *argv[2] = {"SUBSCRIBE", "+switch-master"};
  sluice__conn_send(conn, watch_cb, ud, 2, argv, NULL);
}

static void watch_down(sluice__conn *conn, int status, void *ud) {
  sluice__sentinel *s = ud;
  s->wi = (s->wi + 1) % s->list->nsentinels;
  point_at(s, &s->wep, s->wi);
}

/* ---- life cycle ---------------------------------------------------------- */

static int link_init(sluice__sentinel *s, struct event_base *base, sluice__conn *conn,
                     sluice__endpoint *ep, void (*up)(sluice__conn *, void *),
                     void (*down)(sluice__conn *, int, void *)) {
  ep->username = s->list->sentinel_username;
  ep->password = s->list->sentinel_password;
  sluice__conn_config cfg = {.endpoint = ep,
                             .connect_timeout_ms = s->cfg.connect_timeout_ms,
                             .reconnect_min_ms = s->cfg.reconnect_min_ms,
                             .reconnect_max_ms = s->cfg.reconnect_max_ms,
                             .on_up = up,
                             .on_down = down,
                             .userdata = s};
  return sluice__conn_init(conn, base, &cfg);
}

sluice__sentinel *sluice__sentinel_new(struct event_base *base, const sluice__sentinel_config *cfg) {
  sluice__sentinel *s = sluice__calloc(1, sizeof *s);
  if (!s) return NULL;
  s->cfg = *cfg;
  s->list = cfg->data;
  point_at(s, &s->qep, 0);
  point_at(s, &s->wep, 0);
  s->ask_timer = evtimer_new(base, ask_timeout_cb, s);
  if (!s->ask_timer || link_init(s, base, &s->query, &s->qep, query_up, query_down) != 0) {
    if (s->ask_timer) event_free(s->ask_timer);
    sluice__free(s);
    return NULL;
  }
  if (link_init(s, base, &s->watch, &s->wep, watch_up, watch_down) != 0) {
    sluice__conn_shutdown(&s->query);
    event_free(s->ask_timer);
    sluice__free(s);
    return NULL;
  }
  sluice__conn_start(&s->query);
  sluice__conn_start(&s->watch);
  return s;
}

void sluice__sentinel_free(sluice__sentinel *s) {
  if (!s) return;
  s->asking = 0;
  sluice__conn_shutdown(&s->query);
  sluice__conn_shutdown(&s->watch);
  event_free(s->ask_timer);
  sluice__free(s);
}

int sluice__sentinel_address(sluice__sentinel *s) {
  if (s->fresh && s->cfg.data->host) return 1;
  ask(s);
  return 0;
}

void sluice__sentinel_stale(sluice__sentinel *s) { s->fresh = 0; }

const char *sluice__sentinel_error(const sluice__sentinel *s) { return s->err; }
