/* The auth-request front (nginx auth_request, and the forward-auth contract
 * of Envoy, Traefik and Caddy): 2xx allows, 429 denies.
 *
 * It is libevent's evhttp, already linked for `sluice top --scrape`: it caps
 * the request's header block (max_header_bytes) and body (none is read),
 * keeps HTTP/1.1 connections alive, times out idle ones, and stops reading
 * a connection while its request is decided, so a request stays valid until
 * it is answered. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <event2/buffer.h>
#include <event2/event.h>
#include <event2/http.h>
#include <event2/keyvalq_struct.h>

#include "agent.h"
#include "../cli.h"

struct agent_http {
  struct event_base *base;
  struct evhttp *http;
  agent_rules **rules; /* the current rules (swapped by a reload) */
  sluice_client *client;
};

static const char *header(const void *ctx, const char *name) {
  return evhttp_find_header(evhttp_request_get_input_headers((struct evhttp_request *)ctx), name);
}

static const char *method_name(enum evhttp_cmd_type t) {
  switch (t) {
    case EVHTTP_REQ_GET: return "GET";
    case EVHTTP_REQ_POST: return "POST";
    case EVHTTP_REQ_HEAD: return "HEAD";
    case EVHTTP_REQ_PUT: return "PUT";
    case EVHTTP_REQ_DELETE: return "DELETE";
    case EVHTTP_REQ_OPTIONS: return "OPTIONS";
    case EVHTTP_REQ_TRACE: return "TRACE";
    case EVHTTP_REQ_CONNECT: return "CONNECT";
    case EVHTTP_REQ_PATCH: return "PATCH";
  }
  return NULL;
}

/* Seconds, rounded up: a client waiting that long finds the units there. */
static long long ceil_s(int64_t ms) { return ms <= 0 ? 0 : (ms + 999) / 1000; }

/* The IETF RateLimit fields, one item per rule Redis answered for. */
static void ratelimit_fields(struct evkeyvalq *out, const agent_verdict *v, int n) {
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
  if (pl) {
    evhttp_add_header(out, "RateLimit-Policy", policy);
    evhttp_add_header(out, "RateLimit", state);
  }
}

typedef struct http_pending {
  struct evhttp_request *req;
  agent_http *h;
} http_pending;

static void on_decision(const agent_verdict *v, int n, int allowed, int64_t retry_after_ms,
                        void *ud) {
  http_pending *p = ud;
  struct evhttp_request *req = p->req;
  agent_count_answer(*p->h->rules, 0, allowed);
  free(p);
  struct evkeyvalq *out = evhttp_request_get_output_headers(req);
  ratelimit_fields(out, v, n);
  evhttp_add_header(out, "Content-Length", "0");
  if (allowed) {
    evhttp_send_reply(req, 200, "OK", NULL);
    return;
  }
  char s[24];
  long long secs = ceil_s(retry_after_ms);
  snprintf(s, sizeof s, "%lld", secs ? secs : 1);
  evhttp_add_header(out, "Retry-After", s);
  evhttp_send_reply(req, 429, "Too Many Requests", NULL);
}

static void metrics(agent_http *h, struct evhttp_request *req) {
  size_t len;
  char *text = agent_metrics_text(*h->rules, h->client, &len);
  struct evbuffer *body = evbuffer_new();
  if (!text || !body || evbuffer_add(body, text, len) != 0) {
    evhttp_send_error(req, 503, "out of memory");
  } else {
    evhttp_add_header(evhttp_request_get_output_headers(req), "Content-Type",
                      "text/plain; version=0.0.4");
    evhttp_send_reply(req, 200, "OK", body);
  }
  if (body) evbuffer_free(body);
  free(text);
}

static void on_request(struct evhttp_request *req, void *ud) {
  agent_http *h = ud;
  agent_request r = {0};
  /* The agent's own page; a proxy's auth request carries the client's URI
   * in X-Original-URI, never as its own. */
  if (strcmp(evhttp_request_get_uri(req), "/metrics") == 0 &&
      evhttp_request_get_command(req) == EVHTTP_REQ_GET && !header(req, "X-Original-URI")) {
    metrics(h, req);
    return;
  }
  char *peer = NULL;
  ev_uint16_t port;
  evhttp_connection_get_peer(evhttp_request_get_connection(req), &peer, &port);
  r.listener = header(req, "X-Sluice-Listener");
  r.host = header(req, "X-Original-Host");
  if (!r.host) r.host = evhttp_request_get_host(req);
  r.path = header(req, "X-Original-URI");
  if (!r.path) r.path = evhttp_request_get_uri(req);
  r.method = header(req, "X-Original-Method");
  if (!r.method) r.method = method_name(evhttp_request_get_command(req));
  r.addr = header(req, "X-Real-IP");
  if (!r.addr) r.addr = peer;
  r.get_header = header;
  r.ctx = req;
  http_pending *p = malloc(sizeof *p);
  if (p) *p = (http_pending){req, h};
  if (!p || agent_decide(h->base, *h->rules, &r, on_decision, p) != 0) {
    free(p);
    evhttp_send_error(req, 503, "out of memory");
  }
}

agent_http *agent_http_new(struct event_base *base, const agent_settings *s, agent_rules **rules,
                           sluice_client *client, char *why, size_t why_size) {
  agent_http *h = calloc(1, sizeof *h);
  char host[AGENT_TEXT_MAX];
  const char *colon = strrchr(s->http, ':');
  unsigned port = 0;
  if (!h) {
    snprintf(why, why_size, "out of memory");
    return NULL;
  }
  h->base = base;
  h->rules = rules;
  h->client = client;
  if (!colon || colon == s->http || cli_number_u("http's port", colon + 1, 1, 65535, "", &port)) {
    snprintf(why, why_size, "http = '%s' is not HOST:PORT", s->http);
    free(h);
    return NULL;
  }
  snprintf(host, sizeof host, "%.*s", (int)(colon - s->http), s->http);
  if (host[0] == '[' && host[strlen(host) - 1] == ']') { /* [::1]:PORT */
    memmove(host, host + 1, strlen(host));
    host[strlen(host) - 1] = 0;
  }
  if (!(h->http = evhttp_new(base)) || evhttp_bind_socket(h->http, host, (ev_uint16_t)port) != 0) {
    snprintf(why, why_size, "cannot listen on %s", s->http);
    agent_http_free(h);
    return NULL;
  }
  evhttp_set_max_headers_size(h->http, s->max_header_bytes);
  evhttp_set_max_body_size(h->http, 0);
  evhttp_set_timeout(h->http, (int)s->idle_timeout_s);
  /* nginx asks with the original request's method. */
  evhttp_set_allowed_methods(h->http, EVHTTP_REQ_GET | EVHTTP_REQ_HEAD | EVHTTP_REQ_POST |
                                          EVHTTP_REQ_PUT | EVHTTP_REQ_DELETE | EVHTTP_REQ_OPTIONS |
                                          EVHTTP_REQ_PATCH);
  evhttp_set_gencb(h->http, on_request, h);
  return h;
}

void agent_http_free(agent_http *h) {
  if (!h) return;
  if (h->http) evhttp_free(h->http);
  free(h);
}
