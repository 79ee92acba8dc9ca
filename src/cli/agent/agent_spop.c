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

#include "agent.h"
#include "agent_conn.h"
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

/* The SPOP state of one connection (its agent_conn's data). */
struct spop_conn {
  agent_conn *conn;
  agent_spop *srv;
  uint32_t frame_max;
  int hello_done, inflight;
  int in_read; /* read_frames is running */
  spop_pending *pending;
};

static void read_frames(spop_conn *c);

struct agent_spop {
  struct event_base *base;
  agent_listener *lis;
  agent_rules **rules;
};

static void close_after(spop_conn *c, const uint8_t *frame, size_t len) {
  agent_conn_close_after(c->conn, frame, len);
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
    if (!c->conn->closing && len) bufferevent_write(c->conn->bev, buf, len);
    if (p->prev) p->prev->next = p->next;
    else c->pending = p->next;
    if (p->next) p->next->prev = p->prev;
    if (c->inflight-- == SPOP_INFLIGHT_MAX && !c->conn->closing) {
      bufferevent_enable(c->conn->bev, EV_READ);
      read_frames(c); /* those already buffered */
    }
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
  if (len) bufferevent_write(c->conn->bev, buf, len);
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
  if (++c->inflight == SPOP_INFLIGHT_MAX) bufferevent_disable(c->conn->bev, EV_READ);
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
  bufferevent_write(c->conn->bev, buf, n);
  bufferevent_setwatermark(c->conn->bev, EV_READ, 0, 4 + (size_t)c->frame_max);
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
    return c->conn->closing;
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
  return c->conn->closing; /* other frames are skipped, as the protocol allows */
}

static void frames(spop_conn *c, struct evbuffer *in) {
  while (!c->conn->closing && c->inflight < SPOP_INFLIGHT_MAX) {
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

/* Handle the whole frames buffered, until SPOP_INFLIGHT_MAX NOTIFYs are
 * being decided (an answer resumes it). Not reentered: an answer given
 * inside a frame's handling leaves the frames after it to this loop. */
static void read_frames(spop_conn *c) {
  struct evbuffer *in = bufferevent_get_input(c->conn->bev);
  if (c->in_read) return;
  c->in_read = 1;
  frames(c, in);
  c->in_read = 0;
}

static void on_read(agent_conn *conn) { read_frames(conn->data); }

static int on_open(agent_conn *conn) {
  spop_conn *c = calloc(1, sizeof *c);
  if (!c) return -1;
  c->conn = conn;
  c->srv = agent_listener_ud(conn->lis);
  c->frame_max = SPOP_MAX_FRAME; /* until HELLO says HAProxy's */
  conn->data = c;
  return 0;
}

/* Decisions still pending answer nobody. */
static void on_close(agent_conn *conn) {
  spop_conn *c = conn->data;
  if (!c) return;
  for (spop_pending *p = c->pending; p; p = p->next) p->conn = NULL;
  free(c);
}

static const agent_proto spop_proto = {on_open, on_read, on_close, 4 + SPOP_MAX_FRAME};

agent_spop *agent_spop_new(struct event_base *base, const agent_settings *st, agent_rules **rules,
                           char *why, size_t why_size) {
  agent_spop *s = calloc(1, sizeof *s);
  if (!s) {
    snprintf(why, why_size, "out of memory");
    return NULL;
  }
  s->base = base;
  s->rules = rules;
  s->lis = agent_listen(base, st->spop, &spop_proto, s, st->max_connections, st->idle_timeout_s,
                        why, why_size);
  if (!s->lis) {
    free(s);
    return NULL;
  }
  return s;
}

void agent_spop_free(agent_spop *s) {
  if (!s) return;
  agent_listener_free(s->lis);
  free(s);
}
