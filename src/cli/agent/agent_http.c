/* The auth-request front (nginx auth_request, and the forward-auth contract
 * of Envoy, Traefik and Caddy): 2xx allows, 429 denies.
 *
 * Its own small HTTP/1.1 server (http_parse.c) on agent_conn, rather than
 * evhttp: the connections are capped like SPOP's (max_connections), a
 * request head is at most max_header_bytes, no body is read (a request
 * with one is refused), a connection is kept alive as HTTP/1.1 says, and
 * its requests are answered one at a time, in order. */
#include <arpa/inet.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>

#include "agent.h"
#include "agent_conn.h"
#include "http_parse.h"

struct agent_http {
  agent_listener *lis;
  struct event_base *base;
  agent_rules **rules; /* the current rules (swapped by a reload) */
  sluice_client *client;
  unsigned max_header_bytes;
  agent_proto proto;
};

typedef struct http_conn http_conn;

/* A request being decided; outlives its connection if that closes first. */
typedef struct http_pending {
  http_conn *conn; /* NULL once the connection is gone */
  int keep_alive;
} http_pending;

typedef struct http_conn {
  agent_conn *conn;
  agent_http *h;
  http_pending *pending; /* the request being decided, if any */
  int in_read;
  char peer[INET6_ADDRSTRLEN];
} http_conn;

static void read_requests(http_conn *c);

/* Seconds, rounded up: a client waiting that long finds the units there. */
static long long ceil_s(int64_t ms) { return ms <= 0 ? 0 : (ms + 999) / 1000; }

/* The IETF RateLimit fields, one item per rule Redis answered for. */
static void ratelimit_fields(struct evbuffer *out, const agent_verdict *v, int n) {
  char policy[1024], state[1024];
  size_t pl = 0, sl = 0;
  for (int i = 0; i < n; i++) {
    if (!v[i].checked) continue;
    const agent_rule *r = v[i].rule;
    int a = snprintf(policy + pl, sizeof policy - pl, "%s\"%s\";q=%lld;w=%lld", pl ? ", " : "",
                     r->name, (long long)v[i].res.limit, ceil_s(r->opts.period_ms));
    int b = snprintf(state + sl, sizeof state - sl, "%s\"%s\";r=%lld;t=%lld", sl ? ", " : "",
                     r->name, (long long)(v[i].res.remaining < 0 ? 0 : v[i].res.remaining),
                     ceil_s(v[i].res.reset_after_ms));
    if (a < 0 || b < 0 || (size_t)a >= sizeof policy - pl || (size_t)b >= sizeof state - sl) break;
    pl += (size_t)a;
    sl += (size_t)b;
  }
  if (pl) evbuffer_add_printf(out, "RateLimit-Policy: %s\r\nRateLimit: %s\r\n", policy, state);
}

/* The status line and the fields every answer has; the caller adds its
 * own, then the empty line (end_answer). */
static struct evbuffer *begin_answer(http_conn *c, int status, const char *reason) {
  struct evbuffer *out = bufferevent_get_output(c->conn->bev);
  evbuffer_add_printf(out, "HTTP/1.1 %d %s\r\n", status, reason);
  return out;
}

/* Finish an answer of body_len bytes; a connection not kept alive closes
 * once it is written. */
static void end_answer(http_conn *c, struct evbuffer *out, int keep_alive, const char *body,
                       size_t body_len) {
  evbuffer_add_printf(out, "Content-Length: %zu\r\n%s\r\n", body_len,
                      keep_alive ? "" : "Connection: close\r\n");
  if (body_len) evbuffer_add(out, body, body_len);
  if (!keep_alive) agent_conn_close_after(c->conn, NULL, 0);
}

/* A request refused before any decision; the connection closes. */
static void refuse(http_conn *c, int status, const char *reason) {
  end_answer(c, begin_answer(c, status, reason), 0, NULL, 0);
}

static void on_decision(const agent_verdict *v, int n, int allowed, int64_t retry_after_ms,
                        void *ud) {
  http_pending *p = ud;
  http_conn *c = p->conn;
  if (c) {
    agent_count_answer(*c->h->rules, 0, allowed);
    struct evbuffer *out = allowed ? begin_answer(c, 200, "OK")
                                   : begin_answer(c, 429, "Too Many Requests");
    ratelimit_fields(out, v, n);
    if (!allowed) {
      long long secs = ceil_s(retry_after_ms);
      evbuffer_add_printf(out, "Retry-After: %lld\r\n", secs ? secs : 1);
    }
    end_answer(c, out, p->keep_alive, NULL, 0);
    c->pending = NULL;
    read_requests(c); /* any request that came meanwhile */
  }
  free(p);
}

static void metrics(http_conn *c, int keep_alive) {
  size_t len;
  char *text = agent_metrics_text(*c->h->rules, c->h->client, &len);
  if (!text) {
    refuse(c, 503, "Service Unavailable");
    return;
  }
  struct evbuffer *out = begin_answer(c, 200, "OK");
  evbuffer_add_printf(out, "Content-Type: text/plain; version=0.0.4\r\n");
  end_answer(c, out, keep_alive, text, len);
  free(text);
}

static const char *field(const void *ctx, const char *name) { return http_field_get(ctx, name); }

/* Decide one parsed request (r points into a head freed after this). */
static void dispatch(http_conn *c, const http_request *r) {
  /* The agent's own page; a proxy's auth request carries the client's URI
   * in X-Original-URI, never as its own. */
  if (strcmp(r->target, "/metrics") == 0 && strcmp(r->method, "GET") == 0 &&
      !http_field_get(r, "X-Original-URI")) {
    metrics(c, r->keep_alive);
    return;
  }
  agent_request q = {0};
  q.listener = http_field_get(r, "X-Sluice-Listener");
  q.host = http_field_get(r, "X-Original-Host");
  if (!q.host) q.host = http_field_get(r, "Host");
  q.path = http_field_get(r, "X-Original-URI");
  if (!q.path) q.path = r->target;
  q.method = http_field_get(r, "X-Original-Method");
  if (!q.method) q.method = r->method;
  q.addr = http_field_get(r, "X-Real-IP");
  if (!q.addr && c->peer[0]) q.addr = c->peer;
  q.get_header = field;
  q.ctx = r;
  http_pending *p = malloc(sizeof *p);
  if (!p) {
    refuse(c, 503, "Service Unavailable");
    return;
  }
  *p = (http_pending){c, r->keep_alive};
  c->pending = p;
  if (agent_decide(c->h->base, *c->h->rules, &q, on_decision, p) != 0) {
    c->pending = NULL;
    free(p);
    refuse(c, 503, "Service Unavailable");
  }
}

/* One request head from in, if a whole one is there: 1 handled, 0 not yet. */
static int one_request(http_conn *c, struct evbuffer *in) {
  struct evbuffer_ptr end = evbuffer_search(in, "\r\n\r\n", 4, NULL);
  size_t max = c->h->max_header_bytes;
  if (end.pos < 0) {
    if (evbuffer_get_length(in) >= max) refuse(c, 431, "Request Header Fields Too Large");
    return 0;
  }
  size_t len = (size_t)end.pos + 4;
  if (len > max) {
    refuse(c, 431, "Request Header Fields Too Large");
    return 0;
  }
  char *head = malloc(len + 1);
  http_request r;
  if (!head) {
    refuse(c, 503, "Service Unavailable");
    return 0;
  }
  evbuffer_remove(in, head, len);
  head[len] = 0;
  if (http_parse(head, len, &r) != 0) refuse(c, 400, "Bad Request");
  else if (r.has_body) refuse(c, 413, "Content Too Large"); /* bodies are not read */
  else dispatch(c, &r);
  free(head);
  return 1;
}

/* Answer the requests buffered, one at a time and in order. Not
 * reentered: an answer given inside a request's handling leaves the
 * requests after it to the loop that is running. */
static void read_requests(http_conn *c) {
  if (c->in_read) return;
  c->in_read = 1;
  struct evbuffer *in = bufferevent_get_input(c->conn->bev);
  while (!c->conn->closing && !c->pending && one_request(c, in)) {}
  c->in_read = 0;
}

static void on_read(agent_conn *conn) { read_requests(conn->data); }

static int on_open(agent_conn *conn) {
  http_conn *c = calloc(1, sizeof *c);
  if (!c) return -1;
  c->conn = conn;
  c->h = agent_listener_ud(conn->lis);
  conn->data = c;
  /* The client's address, for rules keyed by addr without X-Real-IP. */
  struct sockaddr_storage ss;
  socklen_t sl = sizeof ss;
  evutil_socket_t fd = bufferevent_getfd(conn->bev);
  if (getpeername(fd, (struct sockaddr *)&ss, &sl) == 0) {
    const void *a = ss.ss_family == AF_INET6
                        ? (const void *)&((struct sockaddr_in6 *)&ss)->sin6_addr
                        : (const void *)&((struct sockaddr_in *)&ss)->sin_addr;
    if (!inet_ntop(ss.ss_family, a, c->peer, sizeof c->peer)) c->peer[0] = 0;
  }
  return 0;
}

static void on_close(agent_conn *conn) {
  http_conn *c = conn->data;
  if (!c) return;
  if (c->pending) c->pending->conn = NULL;
  free(c);
}

agent_http *agent_http_new(struct event_base *base, const agent_settings *s, agent_rules **rules,
                           sluice_client *client, char *why, size_t why_size) {
  agent_http *h = calloc(1, sizeof *h);
  if (!h) {
    snprintf(why, why_size, "out of memory");
    return NULL;
  }
  /* Input is buffered up to one head; more waits in the socket. */
  *h = (agent_http){NULL,
                    base,
                    rules,
                    client,
                    s->max_header_bytes,
                    {on_open, on_read, on_close, s->max_header_bytes}};
  h->lis = agent_listen(base, s->http, &h->proto, h, s->max_connections, s->idle_timeout_s, why,
                        why_size);
  if (!h->lis) {
    free(h);
    return NULL;
  }
  return h;
}

void agent_http_free(agent_http *h) {
  if (!h) return;
  agent_listener_free(h->lis);
  free(h);
}
