/* The link to Redis Sentinel: see sentinel.h. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <event2/event.h>
#include <sluice/client.h> /* the log levels */

#include "net/conn.h"
#include "net/sentinel.h"
#include "base/util.h"

/* Sentinels known at most: the configured ones and those they report (a
 * longer configured list is kept whole, and nothing is added to it). */
#define SENTINELS_MAX 16
/* Sentinels followed for +switch-master at once: the first to announce a
 * switch is heard, whichever led the failover (the others announce it only
 * once their hello messages carry it, up to seconds later). */
#define WATCH_MAX 5
/* How soon a sentinel that said to wait is asked again: a step doubling
 * from the first to the last, each wait jittered within it (util.h). Every
 * client hears of a failover at the same moment: without the jitter, a
 * crowd of them would ask in lock step, while the sentinels fail over. */
#define AGAIN_MIN_MS 100
#define AGAIN_MAX_MS 1000
/* How long a sentinel that alone sees the master down is asked again
 * before the next one is: the waits summed, the steps' sum at least. */
#define SDOWN_PATIENCE_MS 2500
/* In doubt (sluice__sentinel_doubt): how often each sentinel is asked, how
 * long a connection to one may take, and how long its answer. A sentinel
 * that keeps answering is asked less and less often, down to once per
 * CENSUS_QUIET_MS (a replica that died leaves its master in doubt for
 * good); one that cannot be reached is tried again and again, since the
 * end of a partition is what the census listens for. */
#define CENSUS_EVERY_MS 250
#define CENSUS_CONNECT_MS 300
#define CENSUS_ANSWER_MS 500
#define CENSUS_QUIET_MS 4000
/* Room for an address a sentinel names. */
#define NAMED_MAX 256

/* A connection of the census to one sentinel. */
typedef struct census_probe {
  sluice__sentinel *s;
  sluice__endpoint ep;
  sluice__conn conn;
  int due;               /* answers due to the last question (two each) */
  uint64_t asked_ms;     /* when it was asked */
  unsigned every_ms;     /* how soon after that it is asked again */
  char named[NAMED_MAX]; /* the address its last answer named ("": none) */
  int named_port;
} census_probe;

typedef struct sentinel_addr {
  char *host; /* owned; lives as long as the link */
  int port;
} sentinel_addr;

struct sluice__sentinel {
  sluice__sentinel_config cfg;
  const sluice__endpoint *names; /* the data endpoint: master name, credentials */
  sentinel_addr *known;          /* the sentinels to try, in order */
  int nknown, maxknown;
  sluice__endpoint qep;  /* the sentinel the query connection uses now */
  int qi;                /* its index in known */
  unsigned long answers; /* times a sentinel named the master */
  sluice__conn query;
  struct event_base *base;
  sluice__endpoint wep[WATCH_MAX]; /* one sentinel each, for good */
  sluice__conn watch[WATCH_MAX];
  int nwatch;
  struct event *ask_timer;   /* a question unanswered for too long */
  struct event *again_timer; /* a failover under way: ask again soon */
  int fresh;                 /* the address was given since it went stale */
  int asking;                /* 0, or which of a question's two answers is due */
  /* The address the sentinel asked now named (its first answer). */
  char named[NAMED_MAX];
  int named_port;
  /* The newest configuration seen: the highest config epoch a sentinel we
   * took an address from reported; after a switch heard, only a newer one
   * will do (a sentinel that still names the old master is behind). */
  unsigned long long epoch;
  int epoch_known;
  int want_newer;        /* a switch heard, a failover seen: the same epoch is behind */
  int behind;            /* answers refused in a row as behind */
  unsigned again_step;   /* told to wait: the backoff's step now, or 0 */
  unsigned waited_ms;    /* and the waits since, summed */
  unsigned refusal_said; /* a bit per watch whose SUBSCRIBE was refused, logged */
  int have;              /* an address was ever given */
  int switched;          /* moved, no connection attempt since: the drops are ours */
  int doubt;             /* the master does not confirm writes: census running */
  census_probe census[WATCH_MAX];
  int ncensus;                /* probes started */
  unsigned long census_asked; /* questions the census sent, for tests */
  struct event *census_timer; /* each CENSUS_EVERY_MS while in doubt */
  char err[384];              /* room for a connection's errstr and more */
};

static void point_at(sluice__sentinel *s, sluice__endpoint *ep, int i) {
  ep->host = s->known[i].host;
  ep->port = s->known[i].port;
}

/* ---- the list of sentinels ----------------------------------------------- */

static void watch_more(sluice__sentinel *s);

int sluice__sentinel_learn(sluice__sentinel *s, const char *host, size_t hlen, int port) {
  if (hlen == 0 || port <= 0 || port > 65535) return 0;
  for (int i = 0; i < s->nknown; i++)
    if (s->known[i].port == port && strlen(s->known[i].host) == hlen &&
        memcmp(s->known[i].host, host, hlen) == 0)
      return 0;
  if (s->nknown == s->maxknown) return 0;
  char *h = malloc(hlen + 1);
  if (!h) return -1;
  memcpy(h, host, hlen);
  h[hlen] = '\0';
  s->known[s->nknown++] = (sentinel_addr){h, port};
  return 1;
}

static void forget_all(sluice__sentinel *s) {
  for (int i = 0; i < s->nknown; i++) free(s->known[i].host);
  free(s->known);
  s->known = NULL;
  s->nknown = 0;
}

/* The sentinel that answered goes first, so that the next round of asking
 * starts with one known to work (as Redis documents for clients). */
static void prefer(sluice__sentinel *s, int i) {
  if (i == 0) return;
  sentinel_addr a = s->known[i];
  memmove(&s->known[1], &s->known[0], (size_t)i * sizeof a);
  s->known[0] = a;
  s->qi = s->qi == i ? 0 : s->qi < i ? s->qi + 1 : s->qi;
}

/* SENTINEL sentinels answers one field/value array per other sentinel:
 * its "ip" and "port" join the list. */
static void list_cb(redisAsyncContext *ac, void *r, void *privdata) {
  sluice__sentinel *s = privdata;
  redisReply *reply = r;
  if (!reply || reply->type != REDIS_REPLY_ARRAY) return; /* lost, or refused: keep the list */
  for (size_t i = 0; i < reply->elements; i++) {
    const redisReply *e = reply->element[i], *ip = NULL, *port = NULL;
    if (e->type != REDIS_REPLY_ARRAY) continue;
    for (size_t j = 0; j + 1 < e->elements; j += 2) {
      const redisReply *k = e->element[j], *v = e->element[j + 1];
      if (k->type != REDIS_REPLY_STRING || v->type != REDIS_REPLY_STRING) continue;
      if (strcmp(k->str, "ip") == 0) ip = v;
      else if (strcmp(k->str, "port") == 0) port = v;
    }
    if (ip && port) sluice__sentinel_learn(s, ip->str, ip->len, (int)strtol(port->str, NULL, 10));
  }
  watch_more(s);
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
  /* The connections the move drops reconnect to the new address, without
   * asking again (a sentinel asked now could still name the old one). */
  if (moved) {
    s->switched = 1;
    s->cfg.moved(s->cfg.userdata);
  }
  s->cfg.known(s->cfg.userdata);
  return 1;
}

/* What a sentinel's SENTINEL MASTER said: its configuration's epoch, and
 * whether it sees the master down or is failing it over. */
typedef struct master_view {
  int seen; /* answered (an ACL rule without sentinel|master refuses it) */
  unsigned long long epoch;
  int sdown, odown, failing;
  const char *ip; /* the master's address before any switch */
  int port;
} master_view;

/* Whether the comma-separated flags name f. */
static int has_flag(const char *flags, const char *f) {
  size_t n = strlen(f);
  for (const char *p = strstr(flags, f); p; p = strstr(p + 1, f))
    if ((p == flags || p[-1] == ',') && (p[n] == ',' || p[n] == '\0')) return 1;
  return 0;
}

static void read_view(const redisReply *r, master_view *v) {
  memset(v, 0, sizeof *v);
  if (r->type != REDIS_REPLY_ARRAY) return;
  for (size_t j = 0; j + 1 < r->elements; j += 2) {
    const redisReply *k = r->element[j], *x = r->element[j + 1];
    if (k->type != REDIS_REPLY_STRING || x->type != REDIS_REPLY_STRING) continue;
    if (strcmp(k->str, "flags") == 0) {
      v->sdown = has_flag(x->str, "s_down");
      v->odown = has_flag(x->str, "o_down");
      v->failing = has_flag(x->str, "failover_in_progress");
    } else if (strcmp(k->str, "config-epoch") == 0) {
      v->epoch = strtoull(x->str, NULL, 10);
      v->seen = 1;
    } else if (strcmp(k->str, "ip") == 0) {
      v->ip = x->str;
    } else if (strcmp(k->str, "port") == 0) {
      v->port = (int)strtol(x->str, NULL, 10);
    }
  }
}

enum verdict { TAKE, BEHIND, ELSEWHERE, WAIT };

/* Whether the address a sentinel named may be used.
 *  - It is failing the master over and still names the old address, or
 *    agrees with the others that it is down: wait for it to name the new
 *    master (once it has promoted one, it names it at once).
 *  - It alone sees the master down: wait too (a failover may follow), but
 *    after a few questions ask another (it may be cut off from the master
 *    alone).
 *  - Its configuration is older than the newest seen, or, after a switch
 *    was heard or a failover seen under way, not newer: it names a master
 *    that another sentinel has replaced. The old master can answer ROLE
 *    master for seconds after the switch (until a sentinel demotes it, or
 *    restarted empty), so it is behind: ask the next. */
static enum verdict judge(const sluice__sentinel *s, const master_view *v) {
  if (!v->seen) return TAKE; /* no view (the ACL refused it): the address alone */
  int promoted = !v->ip || strcmp(v->ip, s->named) != 0 || v->port != s->named_port;
  if (v->failing) return promoted ? TAKE : WAIT;
  if (v->odown) return WAIT;
  if (v->sdown) return s->waited_ms < SDOWN_PATIENCE_MS ? WAIT : ELSEWHERE;
  if (s->epoch_known && (v->epoch < s->epoch || (s->want_newer && v->epoch == s->epoch)))
    return BEHIND;
  return TAKE;
}

/* This sentinel works: it goes first, the others it knows join the list,
 * and its address stands. */
static void take(sluice__sentinel *s, const master_view *v) {
  if (v->seen && (!s->epoch_known || v->epoch > s->epoch)) s->epoch = v->epoch;
  s->epoch_known |= v->seen;
  s->want_newer = s->behind = 0;
  s->again_step = s->waited_ms = 0;
  s->answers++;
  prefer(s, s->qi);
  const char *argv[3] = {"SENTINEL", "sentinels", s->names->master_name};
  sluice__conn_send(&s->query, list_cb, s, 3, argv, NULL);
  if (!set_address(s, s->named, strlen(s->named), s->named_port))
    sluice__conn_fail(&s->query, "sentinel: out of memory");
}

unsigned sluice__sentinel_again_ms(unsigned *step) {
  *step = *step ? *step * 2 : AGAIN_MIN_MS;
  if (*step > AGAIN_MAX_MS) *step = AGAIN_MAX_MS;
  return sluice__jittered(*step);
}

static void master_cb(redisAsyncContext *ac, void *r, void *privdata) {
  sluice__sentinel *s = privdata;
  if (s->asking != 2) return;
  s->asking = 0;
  evtimer_del(s->ask_timer);
  if (!r) return; /* lost: the query connection's on_down moves on */
  master_view v;
  read_view(r, &v);
  enum verdict d = judge(s, &v);
  /* Every sentinel behind in a row: the newest they have is the newest
   * (a failover that failed leaves the epoch as it was). */
  if (d == BEHIND && ++s->behind >= s->nknown) d = TAKE;
  if (d == TAKE) {
    take(s, &v);
    return;
  }
  /* Unless it fails, a failover ends with a newer epoch: a sentinel that
   * names the old master with clean flags and the old epoch later (it
   * reached the old master restarted before it heard of the switch) is
   * behind. */
  if (d != BEHIND) s->want_newer = 1;
  if (d == WAIT) {
    snprintf(s->err, sizeof s->err, "sentinel %s:%d: master '%s' is %s", s->qep.host, s->qep.port,
             s->names->master_name,
             v.failing ? "being failed over"
             : v.odown ? "down"
                       : "down for this sentinel");
    if (!s->again_step) s->cfg.note(SLUICE_LOG_INFO, s->err, s->cfg.userdata); /* once a wait */
    /* The switch is heard at once (+switch-master): asking again is the
     * fallback, and backs off. */
    unsigned wait = sluice__sentinel_again_ms(&s->again_step);
    s->waited_ms += wait;
    sluice__timer_in(s->again_timer, wait);
    return;
  }
  s->again_step = s->waited_ms = 0;
  snprintf(s->err, sizeof s->err, "sentinel %s:%d %s: it names %s:%d (config epoch %llu)",
           s->qep.host, s->qep.port,
           d == BEHIND ? "is behind the last switch" : "cannot reach the master", s->named,
           s->named_port, v.epoch);
  s->cfg.note(SLUICE_LOG_INFO, s->err, s->cfg.userdata);
  sluice__conn_fail(&s->query, s->err); /* try the next sentinel */
}

/* SENTINEL get-master-addr-by-name's answer into named (NAMED_MAX bytes)
 * and *port; 0 when it names no address. */
static int read_named(const redisReply *reply, char *named, int *port) {
  long p = 0;
  if (reply->type == REDIS_REPLY_ARRAY && reply->elements == 2 &&
      reply->element[0]->type == REDIS_REPLY_STRING &&
      reply->element[1]->type == REDIS_REPLY_STRING && reply->element[0]->len < NAMED_MAX)
    p = strtol(reply->element[1]->str, NULL, 10);
  if (p <= 0 || p >= 65536) return 0;
  memcpy(named, reply->element[0]->str, reply->element[0]->len + 1);
  *port = (int)p;
  return 1;
}

static void addr_cb(redisAsyncContext *ac, void *r, void *privdata) {
  sluice__sentinel *s = privdata;
  redisReply *reply = r;
  if (s->asking != 1) return;
  s->asking = 0;
  if (!reply) return;
  if (read_named(reply, s->named, &s->named_port)) {
    s->asking = 2; /* SENTINEL MASTER's answer decides */
    return;
  }
  evtimer_del(s->ask_timer);
  snprintf(s->err, sizeof s->err, "sentinel %s:%d %s master '%s'%s%s", s->qep.host, s->qep.port,
           reply->type == REDIS_REPLY_ERROR ? "refused to name" : "does not know",
           s->names->master_name, reply->type == REDIS_REPLY_ERROR ? ": " : "",
           reply->type == REDIS_REPLY_ERROR ? reply->str : "");
  sluice__conn_fail(&s->query, s->err); /* try the next sentinel */
}

/* One question, two commands in one round trip: the address (which names
 * the promoted replica as soon as the failover reconfigures the others)
 * and the sentinel's view of the master, to judge it by. */
static void ask(sluice__sentinel *s) {
  if (s->asking || s->query.state != SLUICE_CONN_UP) return;
  const char *addr[3] = {"SENTINEL", "get-master-addr-by-name", s->names->master_name};
  const char *view[3] = {"SENTINEL", "master", s->names->master_name};
  if (sluice__conn_send(&s->query, addr_cb, s, 3, addr, NULL) != REDIS_OK) return;
  sluice__conn_send(&s->query, master_cb, s, 3, view, NULL);
  s->asking = 1;
  evtimer_del(s->again_timer);
  sluice__timer_in(s->ask_timer, s->cfg.net.connect_timeout_ms);
}

static void again_cb(evutil_socket_t fd, short what, void *arg) {
  sluice__sentinel *s = arg;
  if (!s->fresh) ask(s);
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
  evtimer_del(s->again_timer);                    /* asked again once a connection is up */
  if (strncmp(conn->errstr, "sentinel ", 9) == 0) /* our own verdict */
    snprintf(s->err, sizeof s->err, "%s", conn->errstr);
  else
    snprintf(s->err, sizeof s->err, "sentinel %s:%d: %s", s->qep.host, s->qep.port, conn->errstr);
  s->qi = (s->qi + 1) % s->nknown;
  point_at(s, &s->qep, s->qi);
}

/* ---- following failovers ------------------------------------------------- */

/* "+switch-master" says "<name> <old ip> <old port> <new ip> <new port>",
 * once from each sentinel. A switch away from the address in use is
 * taken; any other (one we missed the start of, or a late echo of an older
 * one) makes us ask a sentinel rather than trust it. */
static void watch_cb(redisAsyncContext *ac, void *r, void *privdata) {
  sluice__sentinel *s = privdata;
  redisReply *reply = r;
  if (!reply || reply->type != REDIS_REPLY_ARRAY || reply->elements != 3 ||
      reply->element[2]->type != REDIS_REPLY_STRING)
    return;
  const char *m = reply->element[2]->str;
  size_t nlen = strlen(s->names->master_name);
  if (strncmp(m, s->names->master_name, nlen) != 0 || m[nlen] != ' ') return;
  char old_ip[64], ip[64];
  int old_port, port;
  if (sscanf(m + nlen, " %63s %d %63s %d", old_ip, &old_port, ip, &port) != 4 || port <= 0 ||
      port > 65535)
    return;
  const sluice__endpoint *d = s->cfg.data;
  int from_ours = d->host && strcmp(d->host, old_ip) == 0 && d->port == old_port;
  int to_ours = d->host && strcmp(d->host, ip) == 0 && d->port == port;
  if (from_ours) {
    s->want_newer = 1; /* the sentinels still naming it are behind */
    set_address(s, ip, strlen(ip), port);
  } else if (!to_ours) {
    s->fresh = 0;
    ask(s);
  }
}

static void watch_up(sluice__conn *conn, void *ud) {
  const char *argv[2] = {"SUBSCRIBE", "+switch-master"};
  sluice__conn_send(conn, watch_cb, ud, 2, argv, NULL);
}

/* A SUBSCRIBE the sentinel's ACL rule refuses (no +subscribe, or no
 * &+switch-master) ends the watch's connection: hiredis drops a
 * subscribed context on an error reply. */
static int subscribe_refused(const sluice__conn *conn) {
  return conn->was_up && strstr(conn->errstr, "NOPERM") != NULL;
}

/* Switches are then heard only by asking, seconds late: said once per
 * watch, as a warning. */
static void say_refused(sluice__sentinel *s, const sluice__conn *conn) {
  unsigned bit = 1u << (conn - s->watch);
  if (s->refusal_said & bit) return;
  s->refusal_said |= bit;
  const sluice__endpoint *ep = conn->cfg.net.endpoint;
  char what[400]; /* the log keeps a line's first 239 bytes: the server's words last */
  snprintf(what, sizeof what,
           "sentinel %s:%d refused SUBSCRIBE +switch-master: failovers are heard late, by asking; "
           "its ACL rule needs +subscribe &+switch-master (sluice acl --sentinel): %s",
           ep->host, ep->port, strstr(conn->errstr, "NOPERM"));
  s->cfg.note(SLUICE_LOG_WARN, what, s->cfg.userdata);
}

/* A watch stays with its sentinel (the connection retries it); the others
 * still watch meanwhile. One refused retries at the backoff's cap: its
 * handshake succeeds, so the backoff would start over each time. */
static void watch_down(sluice__conn *conn, int status, void *ud) {
  if (!subscribe_refused(conn)) return;
  say_refused(ud, conn);
  sluice__conn_retry_slowly(conn);
}

/* ---- in doubt: a census of the sentinels ------------------------------- */

/* A sentinel of the census names an address under a configuration newer
 * than any we took, with the master up for it: that failover happened, and
 * it is taken as a switch heard (the sentinel we ask, cut off with the old
 * master, may name it for as long as the partition lasts). */
static void census_heard(census_probe *p, const master_view *v) {
  sluice__sentinel *s = p->s;
  if (!v->seen || v->failing || v->odown || v->sdown || !s->epoch_known || v->epoch <= s->epoch)
    return;
  s->epoch = v->epoch;
  s->want_newer = s->behind = 0;
  const sluice__endpoint *d = s->cfg.data;
  if (d->host && strcmp(d->host, p->named) == 0 && d->port == p->named_port) return;
  char what[400];
  snprintf(what, sizeof what, "sentinel %s:%d names %s:%d under a newer configuration (epoch %llu)",
           p->ep.host, p->ep.port, p->named, p->named_port, v->epoch);
  s->cfg.note(SLUICE_LOG_INFO, what, s->cfg.userdata);
  set_address(s, p->named, strlen(p->named), p->named_port);
}

static void census_addr_cb(redisAsyncContext *ac, void *r, void *privdata) {
  census_probe *p = privdata;
  p->due--;
  if (!r || !read_named(r, p->named, &p->named_port)) p->named[0] = '\0';
}

static void census_view_cb(redisAsyncContext *ac, void *r, void *privdata) {
  census_probe *p = privdata;
  p->due--;
  if (!r || !p->named[0] || !p->s->doubt) return;
  master_view v;
  read_view(r, &v);
  census_heard(p, &v);
}

static void census_ask(census_probe *p, uint64_t now) {
  const char *addr[3] = {"SENTINEL", "get-master-addr-by-name", p->s->names->master_name};
  const char *view[3] = {"SENTINEL", "master", p->s->names->master_name};
  if (p->conn.state != SLUICE_CONN_UP) return;
  if (p->due) { /* unanswered too long: a silent link, connect again */
    if (now - p->asked_ms >= CENSUS_ANSWER_MS)
      sluice__conn_fail(&p->conn, "sentinel: no answer to the census");
    return;
  }
  if (now - p->asked_ms < p->every_ms) return;
  if (sluice__conn_send(&p->conn, census_addr_cb, p, 3, addr, NULL) != REDIS_OK) return;
  p->due++;
  if (sluice__conn_send(&p->conn, census_view_cb, p, 3, view, NULL) == REDIS_OK) p->due++;
  p->asked_ms = now;
  p->s->census_asked++;
  p->every_ms = p->every_ms ? p->every_ms * 2 : CENSUS_EVERY_MS;
  if (p->every_ms > CENSUS_QUIET_MS) p->every_ms = CENSUS_QUIET_MS;
}

/* (Re)connected: asked at once. */
static void census_up(sluice__conn *conn, void *ud) {
  census_probe *p = ud;
  p->every_ms = 0;
  census_ask(p, sluice__mono_ms());
}

static sluice__conn_config link_config(sluice__sentinel *s, sluice__endpoint *ep,
                                       void (*up)(sluice__conn *, void *),
                                       void (*down)(sluice__conn *, int, void *), void *ud);

static void census_stop(sluice__sentinel *s) {
  for (int i = 0; i < s->ncensus; i++) sluice__conn_shutdown(&s->census[i].conn);
  s->ncensus = 0;
}

/* From the loop (a timer): while in doubt, a probe starts for each known
 * sentinel not probed yet (up to WATCH_MAX) and each one up is asked; once
 * doubt ends, the probes go. */
static void census_tick(evutil_socket_t fd, short what, void *arg) {
  sluice__sentinel *s = arg;
  if (!s->doubt) {
    census_stop(s);
    return;
  }
  uint64_t now = sluice__mono_ms();
  for (int i = 0; i < s->nknown && s->ncensus < WATCH_MAX; i++) {
    int probed = 0;
    for (int k = 0; k < s->ncensus && !probed; k++)
      probed = s->census[k].ep.host == s->known[i].host;
    if (probed) continue;
    census_probe *p = &s->census[s->ncensus];
    memset(p, 0, sizeof *p);
    p->s = s;
    point_at(s, &p->ep, i);
    sluice__conn_config cfg = link_config(s, &p->ep, census_up, NULL, p);
    if (cfg.net.connect_timeout_ms > CENSUS_CONNECT_MS)
      cfg.net.connect_timeout_ms = CENSUS_CONNECT_MS;
    cfg.net.reconnect_min_ms = cfg.net.reconnect_max_ms = CENSUS_EVERY_MS / 2;
    if (sluice__conn_init(&p->conn, s->base, &cfg) != 0) break;
    s->ncensus++;
    sluice__conn_start(&p->conn);
  }
  for (int i = 0; i < s->ncensus; i++) census_ask(&s->census[i], now);
  sluice__timer_in(s->census_timer, CENSUS_EVERY_MS);
}

void sluice__sentinel_doubt(sluice__sentinel *s, int on) {
  if (s->doubt == !!on) return;
  s->doubt = !!on;
  if (on)
    s->cfg.note(SLUICE_LOG_DEBUG, "the master does not confirm writes: asking every sentinel",
                s->cfg.userdata);
  evtimer_del(s->census_timer);
  sluice__timer_in(s->census_timer, 0); /* probes start or stop from the loop */
}

/* ---- life cycle ---------------------------------------------------------- */

static sluice__conn_config link_config(sluice__sentinel *s, sluice__endpoint *ep,
                                       void (*up)(sluice__conn *, void *),
                                       void (*down)(sluice__conn *, int, void *), void *ud) {
  ep->username = s->names->sentinel_username;
  ep->password = s->names->sentinel_password;
  sluice__conn_config cfg = {.net = s->cfg.net, .on_up = up, .on_down = down, .userdata = ud};
  cfg.net.endpoint = ep;
  return cfg;
}

static int link_init(sluice__sentinel *s, struct event_base *base, sluice__conn *conn,
                     sluice__endpoint *ep, void (*up)(sluice__conn *, void *),
                     void (*down)(sluice__conn *, int, void *)) {
  sluice__conn_config cfg = link_config(s, ep, up, down, s);
  return sluice__conn_init(conn, base, &cfg);
}

/* Watch known sentinels not yet watched, up to WATCH_MAX. */
static void watch_more(sluice__sentinel *s) {
  for (int i = 0; i < s->nknown && s->nwatch < WATCH_MAX; i++) {
    int watched = 0;
    for (int w = 0; w < s->nwatch && !watched; w++) watched = s->wep[w].host == s->known[i].host;
    if (watched) continue;
    sluice__endpoint *ep = &s->wep[s->nwatch];
    point_at(s, ep, i);
    if (link_init(s, s->base, &s->watch[s->nwatch], ep, watch_up, watch_down) != 0) return;
    sluice__conn_start(&s->watch[s->nwatch++]);
  }
}

sluice__sentinel *sluice__sentinel_new(struct event_base *base,
                                       const sluice__sentinel_config *cfg) {
  sluice__sentinel *s = sluice__calloc(1, sizeof *s);
  if (!s) return NULL;
  s->cfg = *cfg;
  s->names = cfg->data;
  int n = cfg->data->nsentinels;
  s->maxknown = n > SENTINELS_MAX ? n : SENTINELS_MAX;
  s->known = calloc((size_t)s->maxknown, sizeof *s->known);
  int seeded = s->known != NULL;
  for (int i = 0; seeded && i < n; i++) {
    const char *h = cfg->data->sentinel_hosts[i];
    seeded = sluice__sentinel_learn(s, h, strlen(h), cfg->data->sentinel_ports[i]) >= 0;
  }
  if (!seeded || s->nknown == 0) {
    forget_all(s);
    sluice__free(s);
    return NULL;
  }
  point_at(s, &s->qep, 0);
  s->base = base;
  s->ask_timer = evtimer_new(base, ask_timeout_cb, s);
  s->again_timer = evtimer_new(base, again_cb, s);
  s->census_timer = evtimer_new(base, census_tick, s);
  if (!s->ask_timer || !s->again_timer || !s->census_timer ||
      link_init(s, base, &s->query, &s->qep, query_up, query_down) != 0) {
    if (s->ask_timer) event_free(s->ask_timer);
    if (s->again_timer) event_free(s->again_timer);
    if (s->census_timer) event_free(s->census_timer);
    forget_all(s);
    sluice__free(s);
    return NULL;
  }
  sluice__conn_start(&s->query);
  watch_more(s);
  return s;
}

void sluice__sentinel_free(sluice__sentinel *s) {
  if (!s) return;
  s->asking = 0;
  sluice__conn_shutdown(&s->query);
  for (int w = 0; w < s->nwatch; w++) sluice__conn_shutdown(&s->watch[w]);
  census_stop(s);
  event_free(s->ask_timer);
  event_free(s->again_timer);
  event_free(s->census_timer);
  forget_all(s);
  sluice__free(s);
}

int sluice__sentinel_address(sluice__sentinel *s) {
  if (s->fresh && s->cfg.data->host) {
    s->switched = 0; /* from this attempt on, a failure is news */
    return 1;
  }
  ask(s);
  return 0;
}

void sluice__sentinel_stale(sluice__sentinel *s) {
  if (!s->switched) s->fresh = 0;
}

const char *sluice__sentinel_error(const sluice__sentinel *s) { return s->err; }

int sluice__sentinel_count(const sluice__sentinel *s) { return s->nknown; }

const char *sluice__sentinel_at(const sluice__sentinel *s, int i, int *port) {
  if (i < 0 || i >= s->nknown) return NULL;
  if (port) *port = s->known[i].port;
  return s->known[i].host;
}

unsigned long sluice__sentinel_answers(const sluice__sentinel *s) { return s->answers; }

int sluice__sentinel_census(const sluice__sentinel *s, unsigned long *asked) {
  if (asked) *asked = s->census_asked;
  return s->ncensus;
}
