/*
 * `sluice top --scrape URL`: GET each URL with libevent's HTTP client, all
 * at once, and read from the Prometheus text the few sluice_* families the
 * PROCESSES section shows. Each family's series are summed over their
 * labels (a process may run several clients, semaphores and queues), but
 * the oldest record entry's age, which is the largest. The body is read in
 * place, line by line, with no allocation per line; a reply over
 * TOP_SCRAPE_BODY_MAX bytes is refused by the HTTP client itself. A URL
 * that fails shows why in its row: the rest of the view stands.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <event2/buffer.h>
#include <event2/event.h>
#include <event2/http.h>

#include "cli.h"
#include "cli_top.h"
#include "cli_top_scrape.h"

enum {
  V_ENTRIES,
  V_BYTES,
  V_OLDEST_MS,
  V_DROPPED,
  V_RELEASES,
  V_PUSHES,
  V_SETTLEMENTS,
  V_CANCELS,
  V_RESTORED,
  V_LOST,
  V_ACQUIRING,
  V_LIMITER_WAITS,
  V_PUSHING,
  V_COUNT
};

static const struct family {
  const char *name;
  int index;
  int seconds; /* written in seconds, kept in ms; the largest series */
} families[] = {
    {"sluice_client_record_entries", V_ENTRIES, 0},
    {"sluice_client_record_bytes", V_BYTES, 0},
    {"sluice_client_record_oldest_age_seconds", V_OLDEST_MS, 1},
    {"sluice_client_record_dropped_total", V_DROPPED, 0},
    {"sluice_client_replay_releases_total", V_RELEASES, 0},
    {"sluice_client_replay_pushes_total", V_PUSHES, 0},
    {"sluice_client_replay_settlements_total", V_SETTLEMENTS, 0},
    {"sluice_client_replay_cancels_total", V_CANCELS, 0},
    {"sluice_client_permits_restored_total", V_RESTORED, 0},
    {"sluice_client_permits_lost_total", V_LOST, 0},
    {"sluice_sem_pending", V_ACQUIRING, 0},
    {"sluice_client_limiter_waits", V_LIMITER_WAITS, 0},
    {"sluice_dq_push_in_flight", V_PUSHING, 0},
};
#define NFAMILIES (sizeof families / sizeof families[0])

typedef struct target {
  top_scrape *owner;
  const char *url;
  char *shown; /* the URL without credentials (there are none: checked) */
  struct evhttp_uri *uri;
  struct evhttp_connection *conn;
  const char *failure; /* NULL: values hold the answer */
  char why[48];        /* storage for a failure with detail */
  uint64_t v[V_COUNT];
  int done;
} target;

struct top_scrape {
  struct event_base *base;
  struct event *deadline;
  target *targets;
  size_t n, pending;
  int expired;
};

/* ---- the URL -------------------------------------------------------------- */

int top_scrape_check_url(const char *url) {
  struct evhttp_uri *uri = evhttp_uri_parse_with_flags(url, 0);
  const char *why = NULL;
  if (!uri) why = "is not a URL";
  else if (!evhttp_uri_get_scheme(uri) || strcmp(evhttp_uri_get_scheme(uri), "http") != 0)
    why = "must start with http://";
  else if (!evhttp_uri_get_host(uri) || !*evhttp_uri_get_host(uri)) why = "names no host";
  else if (evhttp_uri_get_userinfo(uri))
    /* argv shows them to every user (ps): an endpoint needing them is for
     * a scraper that reads them from a file. */
    why = "must not carry credentials";
  int secret = uri && evhttp_uri_get_userinfo(uri);
  if (uri) evhttp_uri_free(uri);
  if (!why) return 0;
  /* Not echoed when it holds a secret: the message may go to a log. */
  cli_error("--scrape '%s' %s", secret ? "http://***@..." : cli_echo(url), why);
  return -1;
}

/* ---- reading the body ----------------------------------------------------- */

/* The end of a sample's name and labels ("name{a=\"b\"}"), or NULL when
 * they are malformed (an unclosed brace or quote). */
static const char *skip_name(const char *p, const char *end) {
  while (p < end && *p != '{' && *p != ' ') p++;
  if (p == end || *p == ' ') return p;
  int quoted = 0;
  for (p++; p < end; p++) {
    if (quoted && *p == '\\') p++;
    else if (*p == '"') quoted = !quoted;
    else if (!quoted && *p == '}') return p + 1;
  }
  return NULL;
}

/* A non-negative decimal ("12", "0.250"); scale 1000 reads seconds as ms.
 * 0, or -1 when it is not one or overflows. */
static int parse_value(const char *p, const char *end, uint64_t scale, uint64_t *out) {
  uint64_t whole = 0, frac = 0, unit = scale;
  const char *start = p;
  for (; p < end && *p >= '0' && *p <= '9'; p++) {
    if (whole > (UINT64_MAX - 9) / 10) return -1;
    whole = whole * 10 + (uint64_t)(*p - '0');
  }
  if (p == start) return -1;
  if (p < end && *p == '.') {
    for (p++; p < end && *p >= '0' && *p <= '9'; p++)
      if (unit >= 10) frac += (uint64_t)(*p - '0') * (unit /= 10);
  }
  if (p != end || whole > UINT64_MAX / scale) return -1;
  *out = whole * scale + frac;
  return 0;
}

static const struct family *wanted(const char *name, size_t len) {
  for (size_t i = 0; i < NFAMILIES; i++)
    if (strlen(families[i].name) == len && memcmp(families[i].name, name, len) == 0)
      return &families[i];
  return NULL;
}

/* One line of the exposition into t's values; 1 when it was a sample of
 * a client (sluice_client_*), 0 for others, -1 when malformed. */
static int read_line(target *t, const char *p, const char *end) {
  if (p == end || *p == '#') return 0;
  const char *labels = p;
  while (labels < end && *labels != '{' && *labels != ' ') labels++;
  const char *value = skip_name(p, end);
  if (!value || value == p || value == end || *value != ' ') return -1;
  value++;
  const char *stamp = memchr(value, ' ', (size_t)(end - value));
  const struct family *f = wanted(p, (size_t)(labels - p));
  uint64_t v;
  if (f) {
    if (parse_value(value, stamp ? stamp : end, f->seconds ? 1000 : 1, &v)) return -1;
    uint64_t *sum = &t->v[f->index];
    if (f->seconds) *sum = v > *sum ? v : *sum;
    else *sum = v > UINT64_MAX - *sum ? UINT64_MAX : *sum + v;
  }
  return labels - p > 14 && memcmp(p, "sluice_client_", 14) == 0;
}

/* The whole body; a failure, or NULL. */
static const char *read_body(target *t, struct evbuffer *body) {
  size_t len = evbuffer_get_length(body);
  const char *p = (const char *)evbuffer_pullup(body, -1), *end = p + len;
  int clients = 0;
  if (len && !p) return "out of memory";
  if (len && memchr(p, '\0', len)) return "bad reply";
  while (p < end) {
    const char *nl = memchr(p, '\n', (size_t)(end - p));
    const char *eol = nl ? nl : end;
    int rc = read_line(t, p, eol > p && eol[-1] == '\r' ? eol - 1 : eol);
    if (rc < 0) return "bad reply";
    clients += rc;
    p = nl ? nl + 1 : end;
  }
  /* Every exposition of a client has its sluice_client_* families. */
  return clients ? NULL : "bad reply (no sluice metrics)";
}

/* ---- fetching ------------------------------------------------------------- */

static void finish(target *t, const char *failure) {
  if (t->done) return;
  t->done = 1;
  t->failure = failure;
  t->owner->pending--;
}

static void on_error(enum evhttp_request_error error, void *ud) {
  target *t = ud;
  if (error == EVREQ_HTTP_TIMEOUT) finish(t, "timeout");
  else if (error == EVREQ_HTTP_DATA_TOO_LONG) finish(t, "refused: reply over 1 MiB");
  else if (error == EVREQ_HTTP_INVALID_HEADER) finish(t, "bad reply");
  else finish(t, "unreachable");
}

static void on_reply(struct evhttp_request *req, void *ud) {
  target *t = ud;
  if (t->done) return;
  if (!req || !evhttp_request_get_response_code(req)) {
    finish(t, "unreachable");
    return;
  }
  int code = evhttp_request_get_response_code(req);
  if (code != 200) {
    snprintf(t->why, sizeof t->why, "bad reply (HTTP %d)", code);
    finish(t, t->why);
    return;
  }
  finish(t, read_body(t, evhttp_request_get_input_buffer(req)));
}

static void on_deadline(evutil_socket_t fd, short what, void *ud) {
  ((top_scrape *)ud)->expired = 1;
}

/* The request path: the URL's path (or "/") and query. */
static void request_path(const struct evhttp_uri *uri, char *buf, size_t size) {
  const char *path = evhttp_uri_get_path(uri), *query = evhttp_uri_get_query(uri);
  snprintf(buf, size, "%s%s%s", path && *path ? path : "/", query ? "?" : "", query ? query : "");
}

static void fetch(target *t, unsigned timeout_ms) {
  char path[2048];
  int port = evhttp_uri_get_port(t->uri);
  struct timeval tv = {timeout_ms / 1000, (timeout_ms % 1000) * 1000};
  memset(t->v, 0, sizeof t->v);
  t->done = 0;
  t->owner->pending++;
  /* No DNS base: a host name is resolved by getaddrinfo, blocking the
   * loop once per fetch; a view names a few hosts, often by address. */
  t->conn = evhttp_connection_base_new(t->owner->base, NULL, evhttp_uri_get_host(t->uri),
                                       (unsigned short)(port > 0 ? port : 80));
  struct evhttp_request *req = t->conn ? evhttp_request_new(on_reply, t) : NULL;
  if (!req) {
    finish(t, "out of memory");
    return;
  }
  evhttp_connection_set_timeout_tv(t->conn, &tv);
  evhttp_connection_set_max_body_size(t->conn, TOP_SCRAPE_BODY_MAX);
  evhttp_connection_set_max_headers_size(t->conn, 65536);
  evhttp_request_set_error_cb(req, on_error);
  char host[300];
  snprintf(host, sizeof host, port > 0 ? "%s:%d" : "%s", evhttp_uri_get_host(t->uri), port);
  evhttp_add_header(evhttp_request_get_output_headers(req), "Host", host);
  evhttp_add_header(evhttp_request_get_output_headers(req), "Accept", "text/plain");
  request_path(t->uri, path, sizeof path);
  if (evhttp_make_request(t->conn, req, EVHTTP_REQ_GET, path) != 0) finish(t, "unreachable");
}

void top_scrape_start(top_scrape *s, unsigned timeout_ms) {
  /* The per-fetch timeout ends a silent peer; this deadline also ends
   * one that trickles its reply a byte at a time. */
  struct timeval tv = {timeout_ms / 1000 + 1, (timeout_ms % 1000) * 1000};
  s->expired = 0;
  evtimer_add(s->deadline, &tv);
  for (size_t i = 0; i < s->n; i++) fetch(&s->targets[i], timeout_ms);
}

/* ---- the section ---------------------------------------------------------- */

static void print_row(const target *t, FILE *out) {
  const uint64_t *v = t->v;
  char oldest[24], replayed[96];
  if (t->failure) {
    fprintf(out, "  %-110s  %s\n", t->failure, t->shown);
    return;
  }
  top_fmt_ms(oldest, sizeof oldest, v[V_ENTRIES] ? (int64_t)v[V_OLDEST_MS] : -1);
  snprintf(replayed, sizeof replayed, "%llu/%llu/%llu/%llu", (unsigned long long)v[V_RELEASES],
           (unsigned long long)v[V_PUSHES], (unsigned long long)v[V_SETTLEMENTS],
           (unsigned long long)v[V_CANCELS]);
  fprintf(out, "  %16llu%10llu%8s%9llu  %16s%10llu%6llu%11llu%15llu%9llu  %s\n",
          (unsigned long long)v[V_ENTRIES], (unsigned long long)v[V_BYTES], oldest,
          (unsigned long long)v[V_DROPPED], replayed, (unsigned long long)v[V_RESTORED],
          (unsigned long long)v[V_LOST], (unsigned long long)v[V_ACQUIRING],
          (unsigned long long)v[V_LIMITER_WAITS], (unsigned long long)v[V_PUSHING], t->shown);
}

void top_scrape_finish(top_scrape *s, FILE *out) {
  while (s->pending && !s->expired) event_base_loop(s->base, EVLOOP_ONCE);
  evtimer_del(s->deadline);
  fprintf(out,
          "\nPROCESSES   record     bytes  oldest  dropped  replayed r/p/s/c  restored  lost"
          "  acquiring  limiter waits  pushing  URL\n");
  for (size_t i = 0; i < s->n; i++) {
    target *t = &s->targets[i];
    finish(t, "timeout"); /* no-op when it answered */
    /* Frees a request still in progress without calling it back. */
    if (t->conn) evhttp_connection_free(t->conn);
    t->conn = NULL;
    print_row(t, out);
  }
}

/* ---- life ----------------------------------------------------------------- */

top_scrape *top_scrape_new(struct event_base *base, const char *const *urls, size_t n) {
  top_scrape *s = calloc(1, sizeof *s);
  if (!s) return NULL;
  s->base = base;
  s->n = n;
  s->targets = calloc(n ? n : 1, sizeof *s->targets);
  s->deadline = evtimer_new(base, on_deadline, s);
  int ok = s->targets && s->deadline;
  for (size_t i = 0; ok && i < n; i++) {
    target *t = &s->targets[i];
    t->owner = s;
    t->url = urls[i];
    t->uri = evhttp_uri_parse_with_flags(urls[i], 0);
    t->shown = strdup(cli_clean(urls[i]));
    ok = t->uri && t->shown;
  }
  if (ok) return s;
  top_scrape_free(s);
  return NULL;
}

void top_scrape_free(top_scrape *s) {
  if (!s) return;
  for (size_t i = 0; s->targets && i < s->n; i++) {
    if (s->targets[i].conn) evhttp_connection_free(s->targets[i].conn);
    if (s->targets[i].uri) evhttp_uri_free(s->targets[i].uri);
    free(s->targets[i].shown);
  }
  free(s->targets);
  if (s->deadline) event_free(s->deadline);
  free(s);
}
