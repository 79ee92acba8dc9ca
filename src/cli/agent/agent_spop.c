/* The SPOP front: HAProxy's SPOE filter connects, says HELLO, then sends
 * NOTIFY frames (many in flight on one connection: pipelining), each
 * answered by an ACK whose set-var actions carry the decision:
 * txn.<prefix>.allowed (1 or 0), .retry_after_ms and .remaining (-1 when
 * unknown). Memory per connection is bounded: a frame is at most the
 * negotiated max-frame-size (the input buffer stops reading past it), and
 * at most SPOP_INFLIGHT_MAX NOTIFYs are decided at once before reading
 * pauses. */
#include <arpa/inet.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <event2/listener.h>

#include "agent.h"
#include "spop_frame.h"
#include "../cli.h"

#define SPOP_INFLIGHT_MAX 64

typedef struct spop_conn spop_conn;

/* A NOTIFY being decided; outlives its connection if that closes first. */
typedef struct spop_pending {
  spop_conn *conn; /* NULL once the connection is gone */
  uint64_t stream_id, frame_id;
  struct spop_pending *prev, *next;
} spop_pending;

struct spop_conn {
  agent_spop *srv;
  spop_conn *prev, *next; /* all of srv's */
  struct bufferevent *bev;
  uint32_t frame_max;
  int hello_done, closing, inflight;
  spop_pending *pending;
};

struct agent_spop {
  struct event_base *base;
  struct evconnlistener *lis;
  agent_rules **rules;
  spop_conn *all;
  unsigned conns, conns_max, idle_timeout_s;
};

static void conn_free(spop_conn *c) {
  for (spop_pending *p = c->pending; p; p = p->next) p->conn = NULL;
  bufferevent_free(c->bev);
  if (c->prev) c->prev->next = c->next;
  else c->srv->all = c->next;
  if (c->next) c->next->prev = c->prev;
  c->srv->conns--;
  free(c);
}

static void on_close_now(evutil_socket_t fd, short what, void *ud) {
  (void)fd, (void)what;
  conn_free(ud);
}

static void on_flushed(struct bufferevent *bev, void *ud) {
  (void)bev;
  spop_conn *c = ud;
  if (c->closing) conn_free(c);
}

/* Send frame (len bytes), then close once it is written: from the loop,
 * never inside this call, so callers may still look at c. */
static void close_after(spop_conn *c, const uint8_t *frame, size_t len) {
  static const struct timeval now = {0, 0};
  c->closing = 1;
  bufferevent_disable(c->bev, EV_READ);
  if (len) bufferevent_write(c->bev, frame, len);
  if (evbuffer_get_length(bufferevent_get_output(c->bev)) == 0 &&
      event_base_once(c->srv->base, -1, EV_TIMEOUT, on_close_now, c, &now) != 0)
    bufferevent_disable(c->bev, EV_WRITE); /* left to the idle timeout */
}

static void disconnect(spop_conn *c, uint32_t status, const char *message) {
  uint8_t buf[256];
  agent_rules *rules = *c->srv->rules;
  if (status != SPOP_ERR_NONE && rules->stats) rules->stats->protocol_errors[1]++;
  size_t n = spop_agent_disconnect(buf, sizeof buf, status, message);
  close_after(c, buf, n);
}

static void on_decision(const agent_verdict *v, int n, int allowed, int64_t retry_after_ms,
                        void *ud) {
  spop_pending *p = ud;
  spop_conn *c = p->conn;
  if (c) {
    agent_count_answer(*c->srv->rules, 1, allowed);
    int64_t remaining = -1;
    for (int i = 0; i < n; i++)
      if (v[i].checked && (remaining < 0 || v[i].res.remaining < remaining))
        remaining = v[i].res.remaining;
    /* The permits of concurrency rules, for the response's sluice-release. */
    char permits[AGENT_RULES_MAX * AGENT_PERMIT_ID_MAX] = "";
    size_t used = 0;
    for (int i = 0; i < n; i++)
      if (v[i].permit[0]) {
        size_t len = strlen(v[i].permit);
        if (used) permits[used++] = ',';
        memcpy(permits + used, v[i].permit, len + 1);
        used += len;
      }
    uint8_t buf[256 + sizeof permits];
    spop_out o = {buf, sizeof buf, 0, 0};
    spop_out_begin(&o, SPOP_ACK, p->stream_id, p->frame_id);
    spop_out_set_var_int(&o, "allowed", allowed);
    spop_out_set_var_int(&o, "retry_after_ms", allowed ? 0 : retry_after_ms);
    spop_out_set_var_int(&o, "remaining", remaining);
    if (used) spop_out_set_var_str(&o, "permit", permits);
    size_t len = spop_out_end(&o);
    if (!c->closing && len) bufferevent_write(c->bev, buf, len);
    if (p->prev) p->prev->next = p->next;
    else c->pending = p->next;
    if (p->next) p->next->prev = p->prev;
    if (c->inflight-- == SPOP_INFLIGHT_MAX && !c->closing) bufferevent_enable(c->bev, EV_READ);
  }
  free(p);
}

static const char *arg_of(const void *ctx, const char *name) { return spop_notify_arg(ctx, name); }

/* The response's message: give back the permits its request took. */
static void release(spop_conn *c, const spop_frame *f, const spop_notify *msg) {
  const char *ids = spop_notify_arg(msg, "permit");
  agent_permits *held = (*c->srv->rules)->permits;
  char id[AGENT_PERMIT_ID_MAX];
  for (const char *p = ids; held && p && *p;) {
    size_t n = strcspn(p, ",");
    if (n < sizeof id) {
      memcpy(id, p, n);
      id[n] = 0;
      agent_permits_release(held, id);
    }
    p += n + (p[n] == ',');
  }
  uint8_t buf[64];
  spop_out o = {buf, sizeof buf, 0, 0};
  spop_out_begin(&o, SPOP_ACK, f->stream_id, f->frame_id);
  size_t len = spop_out_end(&o);
  if (len) bufferevent_write(c->bev, buf, len);
}

static void notify(spop_conn *c, const spop_frame *f) {
  spop_notify msg;
  if (spop_notify_parse(f->payload, f->payload_len, &msg) != 0) {
    disconnect(c, SPOP_ERR_INVALID, "malformed NOTIFY");
    return;
  }
  if (strcmp(msg.message, "sluice-release") == 0) {
    release(c, f, &msg);
    return;
  }
  spop_pending *p = calloc(1, sizeof *p);
  if (!p) {
    disconnect(c, SPOP_ERR_RES, "out of memory");
    return;
  }
  p->conn = c;
  p->stream_id = f->stream_id;
  p->frame_id = f->frame_id;
  p->next = c->pending;
  if (c->pending) c->pending->prev = p;
  c->pending = p;
  if (++c->inflight == SPOP_INFLIGHT_MAX) bufferevent_disable(c->bev, EV_READ);
  agent_request r = {0};
  r.can_hold = 1;
  r.listener = spop_notify_arg(&msg, "listener");
  r.host = spop_notify_arg(&msg, "host");
  r.path = spop_notify_arg(&msg, "path");
  r.method = spop_notify_arg(&msg, "method");
  r.addr = spop_notify_arg(&msg, "src");
  r.get_header = arg_of;
  r.ctx = &msg;
  if (agent_decide(c->srv->base, *c->srv->rules, &r, on_decision, p) != 0)
    on_decision(NULL, 0, 0, 1000, p); /* no memory for a decision: denied */
}

/* Why a HELLO is refused (its status in *status), or NULL. */
static const char *hello_refusal(const spop_frame *f, spop_hello *h, uint32_t *status) {
  *status = SPOP_ERR_INVALID;
  if (f->type != SPOP_HAPROXY_HELLO) return "HELLO expected";
  if (spop_hello_parse(f->payload, f->payload_len, h) != 0) return "malformed HELLO";
  if ((*status = SPOP_ERR_NO_VSN), !h->has_versions) return "supported-versions missing";
  if ((*status = SPOP_ERR_BAD_VSN), !h->version_2) return "the agent speaks SPOP 2.0";
  if ((*status = SPOP_ERR_NO_FRAME_SIZE), !h->has_frame_size) return "max-frame-size missing";
  if ((*status = SPOP_ERR_NO_CAP), !h->has_caps) return "capabilities missing";
  *status = SPOP_ERR_BAD_FRAME_SIZE;
  if (h->max_frame_size < SPOP_MIN_FRAME) return "max-frame-size below 256";
  return NULL;
}

static void hello(spop_conn *c, const spop_frame *f) {
  spop_hello h;
  uint32_t status;
  const char *why = hello_refusal(f, &h, &status);
  if (why) {
    disconnect(c, status, why);
    return;
  }
  c->frame_max = h.max_frame_size < SPOP_MAX_FRAME ? h.max_frame_size : SPOP_MAX_FRAME;
  uint8_t buf[256];
  size_t n = spop_agent_hello(buf, sizeof buf, c->frame_max, h.pipelining);
  if (h.healthcheck) {
    close_after(c, buf, n);
    return;
  }
  bufferevent_write(c->bev, buf, n);
  bufferevent_setwatermark(c->bev, EV_READ, 0, 4 + (size_t)c->frame_max);
  c->hello_done = 1;
}

/* One whole frame; the connection may be closing (or freed: returns 1). */
static int frame(spop_conn *c, const uint8_t *buf, size_t len) {
  spop_frame f;
  if (spop_frame_parse(buf, len, &f) != 0) {
    disconnect(c, SPOP_ERR_INVALID, "malformed frame");
    return 1;
  }
  if (!c->hello_done) {
    hello(c, &f);
    return c->closing;
  }
  if (!(f.flags & SPOP_FLAG_FIN) || f.type == SPOP_UNSET) {
    disconnect(c, SPOP_ERR_FRAG_NOT_SUPPORTED, "fragmentation is not supported");
    return 1;
  }
  if (f.type == SPOP_HAPROXY_DISCONNECT) {
    disconnect(c, SPOP_ERR_NONE, "bye");
    return 1;
  }
  if (f.type == SPOP_NOTIFY) notify(c, &f);
  return c->closing; /* other frames are skipped, as the protocol allows */
}

static void on_read(struct bufferevent *bev, void *ud) {
  spop_conn *c = ud;
  struct evbuffer *in = bufferevent_get_input(bev);
  while (!c->closing && c->inflight < SPOP_INFLIGHT_MAX) {
    uint8_t head[4];
    if (evbuffer_copyout(in, head, 4) != 4) return;
    uint32_t len = (uint32_t)head[0] << 24 | (uint32_t)head[1] << 16 | (uint32_t)head[2] << 8 |
                   head[3];
    if (len > c->frame_max) {
      disconnect(c, SPOP_ERR_TOO_BIG, "frame too big");
      return;
    }
    if (evbuffer_get_length(in) < 4 + (size_t)len) return;
    const uint8_t *p = evbuffer_pullup(in, 4 + (ev_ssize_t)len);
    if (!p) {
      disconnect(c, SPOP_ERR_RES, "out of memory");
      return;
    }
    /* Drain after handling: the frame's bytes are read in place. */
    if (frame(c, p + 4, len)) return;
    evbuffer_drain(in, 4 + (size_t)len);
  }
}

static void on_event(struct bufferevent *bev, short what, void *ud) {
  (void)bev, (void)what;
  conn_free(ud); /* EOF, an error or the idle timeout */
}

static void on_accept(struct evconnlistener *lis, evutil_socket_t fd, struct sockaddr *sa,
                      int socklen, void *ud) {
  (void)lis, (void)sa, (void)socklen;
  agent_spop *s = ud;
  spop_conn *c = NULL;
  if (s->conns >= s->conns_max || !(c = calloc(1, sizeof *c))) {
    evutil_closesocket(fd);
    return;
  }
  c->bev = bufferevent_socket_new(s->base, fd, BEV_OPT_CLOSE_ON_FREE);
  if (!c->bev) {
    evutil_closesocket(fd);
    free(c);
    return;
  }
  c->srv = s;
  c->frame_max = SPOP_MAX_FRAME; /* until HELLO says HAProxy's */
  c->next = s->all;
  if (s->all) s->all->prev = c;
  s->all = c;
  s->conns++;
  struct timeval idle = {s->idle_timeout_s, 0};
  bufferevent_set_timeouts(c->bev, &idle, NULL);
  bufferevent_setwatermark(c->bev, EV_READ, 0, 4 + SPOP_MAX_FRAME);
  bufferevent_setcb(c->bev, on_read, on_flushed, on_event, c);
  bufferevent_enable(c->bev, EV_READ | EV_WRITE);
}

agent_spop *agent_spop_new(struct event_base *base, const agent_settings *st, agent_rules **rules,
                           char *why, size_t why_size) {
  struct sockaddr_storage ss;
  int sslen = sizeof ss;
  if (evutil_parse_sockaddr_port(st->spop, (struct sockaddr *)&ss, &sslen) != 0) {
    snprintf(why, why_size, "spop = '%s' is not HOST:PORT", st->spop);
    return NULL;
  }
  agent_spop *s = calloc(1, sizeof *s);
  if (!s) {
    snprintf(why, why_size, "out of memory");
    return NULL;
  }
  s->base = base;
  s->rules = rules;
  s->conns_max = st->max_connections;
  s->idle_timeout_s = st->idle_timeout_s;
  s->lis = evconnlistener_new_bind(base, on_accept, s, LEV_OPT_CLOSE_ON_FREE | LEV_OPT_REUSEABLE,
                                   128, (struct sockaddr *)&ss, sslen);
  if (!s->lis) {
    snprintf(why, why_size, "cannot listen on %s", st->spop);
    free(s);
    return NULL;
  }
  return s;
}

void agent_spop_free(agent_spop *s) {
  if (!s) return;
  evconnlistener_free(s->lis);
  while (s->all) conn_free(s->all);
  free(s);
}
