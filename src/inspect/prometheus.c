/*
 * The Prometheus text exposition of a client (sluice_client_prometheus):
 * the client's own metrics, then those of every live handle created on it,
 * found by walking the objects the client keeps (guard.h; each kind
 * describes itself through its guard's view).
 *
 * Values come from the public metrics getters and are laid out by tables:
 * a new field of a metrics struct is one line in its table. Samples are
 * grouped by family, as the format asks, and handles that would carry the
 * same labels (two handles on one name) are summed into one series, since
 * a scraper rejects duplicates.
 *
 * Latencies are histograms, not summaries: buckets are counters, so rate()
 * yields the quantiles of any recent window, and they add up across the
 * many processes that share a primitive; a summary's quantiles can do
 * neither (ours would cover all time since the handle was created). The
 * bucket bounds are powers of two of microseconds, which the log-linear
 * histogram counts exactly (sluice__hist_below).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <sluice/sluice.h>

#include "base/histogram.h"
#include "base/promtext.h"
#include "core/engine.h"
#include "core/guard.h"
#include "dq/dq.h"
#include "limiter/limiter.h"
#include "sem/sem.h"

#define MAX_FIELDS 32
#define LE_MIN_LOG2 4  /* 16 µs: a round trip on a unix socket */
#define LE_MAX_LOG2 26 /* 67 s; longer waits count only in +Inf */
#define NLE (LE_MAX_LOG2 - LE_MIN_LOG2 + 1)

/* One family per field: prefix + name, read from the struct a group's
 * getter fills (any unsigned integer type). */
typedef struct field {
  const char *name, *type, *help;
  size_t offset, size;
  int ms; /* the member counts milliseconds: written as seconds */
} field;

#define FIELD(st, member, type, name, help, ms) \
  { name, type, help, offsetof(st, member), sizeof((st *)0)->member, ms }
#define COUNTER(st, member, name, help) FIELD(st, member, "counter", name "_total", help, 0)
#define GAUGE(st, member, name, help) FIELD(st, member, "gauge", name, help, 0)
#define GAUGE_MS(st, member, name, help) FIELD(st, member, "gauge", name "_seconds", help, 1)
/* Families whose series are added one by one (add_value). */
#define LABELLED(type, name, help) \
  { name, type, help, 0, 0, 0 }

typedef struct group_desc {
  const char *prefix;
  const field *fields;
  size_t nfields;
  const char *hist, *hist_help; /* histogram family; NULL: none */
} group_desc;

#define GROUP(prefix, fields, hist, hist_help) \
  { prefix, fields, sizeof fields / sizeof fields[0], hist, hist_help }

/* ---- the tables ----------------------------------------------------------- */

typedef struct client_view {
  sluice_client_metrics m;
  sluice_client_stats st;
} client_view;

static const field client_fields[] = {
    COUNTER(client_view, m.evals, "scripts_started", "Script calls started (EVALSHA)."),
    COUNTER(client_view, m.commands, "commands_started", "Plain Redis commands started."),
    COUNTER(client_view, m.reconnects, "reconnects", "Successful connections after the first."),
    COUNTER(client_view, m.connect_failures, "connect_failures",
            "Connection attempts that failed (connect or handshake)."),
    COUNTER(client_view, m.disconnects, "disconnects", "Established connections lost."),
    COUNTER(client_view, m.noscript_reloads, "noscript_reloads",
            "NOSCRIPT answers recovered with EVAL."),
    COUNTER(client_view, m.queued_connecting, "queued_connecting",
            "Operations started before the first connection was up."),
    GAUGE(client_view, m.in_flight, "in_flight", "Operations not yet completed."),
    GAUGE(client_view, m.waiting_connect, "waiting_connect",
          "Operations in flight waiting for the connection now."),
    COUNTER(client_view, m.releases_abandoned, "releases_abandoned",
            "Permit releases that could not reach Redis before the client closed."),
    COUNTER(client_view, st.writes_not_replicated, "writes_not_replicated",
            "Writes that fewer than wait_replicas replicas acknowledged in time."),
    GAUGE(client_view, m.limiter_waits, "limiter_waits",
          "Limiter waits pending now, all limiters (at most limiter_waits_max)."),
    COUNTER(client_view, m.replay_releases, "replay_releases",
            "Permit releases sent again to a new node (failover, restart) and answered."),
    COUNTER(client_view, m.replay_pushes, "replay_pushes",
            "Messages pushed again to a new node and answered."),
    COUNTER(client_view, m.replay_settlements, "replay_settlements",
            "Acks and retries sent again to a new node and answered."),
    COUNTER(client_view, m.replay_cancels, "replay_cancels",
            "Cancels sent again to a new node and answered."),
    COUNTER(client_view, m.replay_restored, "replay_restored",
            "Writes sent again that the new node was missing (it acted on them)."),
    COUNTER(client_view, m.permits_restored, "permits_restored",
            "Held permits missing on a new node, put back there."),
    COUNTER(client_view, m.permits_lost, "permits_lost",
            "Held permits missing on a new node and taken meanwhile: lost at once."),
    COUNTER(client_view, m.record_dropped, "record_dropped",
            "Writes that fell out of the record of unreplicated writes past its bounds."),
    GAUGE(client_view, m.record_entries, "record_entries",
          "Writes kept until a replica has them (the record of unreplicated writes)."),
    GAUGE(client_view, m.record_bytes, "record_bytes", "Bytes the record holds."),
    GAUGE_MS(client_view, m.record_oldest_ms, "record_oldest_age",
             "Age of the record's oldest write (0: empty)."),
};

static const field connection_fields[] = {
    LABELLED("gauge", "connection_up",
             "1 when the connection is up; blocking: the one waiters and consumers are woken on, "
             "listed only while something listens.")};
static const field status_fields[] = {LABELLED(
    "counter", "completions_total", "Redis steps completed, by status (sluice_err_name).")};
static const field handle_fields[] = {
    LABELLED("gauge", "handles", "Handles alive on the client, by kind.")};

static const field step_fields[] = {
    COUNTER(sluice_op_metrics, ops, "completed", "Redis steps completed, by script."),
    COUNTER(sluice_op_metrics, errors, "errors", "Redis steps completed with an error status."),
};

static const field sem_fields[] = {
    COUNTER(sluice_sem_metrics, grants, "grants", "Acquires (try or blocking) that got a permit."),
    COUNTER(sluice_sem_metrics, busy, "busy", "Try-acquires refused: no permit free."),
    COUNTER(sluice_sem_metrics, waits, "waits", "Blocking acquires that had to queue."),
    COUNTER(sluice_sem_metrics, timeouts, "timeouts", "Blocking acquires that ran out of time."),
    COUNTER(sluice_sem_metrics, failures, "failures",
            "Acquires ended by another status (cancel, transport)."),
    COUNTER(sluice_sem_metrics, renewals, "renewals", "Leases extended."),
    COUNTER(sluice_sem_metrics, renew_errors, "renew_errors",
            "Renewal steps without an answer (retried)."),
    COUNTER(sluice_sem_metrics, lost_definite, "lost_definite", "Permits lost for certain."),
    COUNTER(sluice_sem_metrics, lost_uncertain, "lost_uncertain", "Permits possibly lost."),
    COUNTER(sluice_sem_metrics, releases_parked, "releases_parked",
            "Releases that could not reach Redis and waited to retry."),
    COUNTER(sluice_sem_metrics, local_handoffs, "local_handoffs",
            "Permits handed to a waiter of the same handle."),
    COUNTER(sluice_sem_metrics, late, "late",
            "Attempts Redis read after their deadline and did nothing for."),
    GAUGE(sluice_sem_metrics, pending, "pending", "Acquires not yet answered."),
    GAUGE(sluice_sem_metrics, queued, "queued", "Of them, waiting in Redis's queue."),
};

static const field limiter_fields[] = {
    COUNTER(sluice_limiter_metrics, allowed, "allowed", "Checks and waits answered allowed."),
    COUNTER(sluice_limiter_metrics, denied, "denied", "Checks and waits answered not allowed."),
    COUNTER(sluice_limiter_metrics, waited, "waited", "Waits denied at least once that slept."),
    COUNTER(sluice_limiter_metrics, fail_open, "fail_open",
            "Allowed unchecked while Redis was down."),
    COUNTER(sluice_limiter_metrics, local, "local", "Decided in process while Redis was down."),
    COUNTER(sluice_limiter_metrics, errors, "errors", "Answered with an error status."),
    COUNTER(sluice_limiter_metrics, late, "late",
            "Requests Redis read after their deadline and took nothing for."),
    GAUGE(sluice_limiter_metrics, waiting, "waiting", "Waits pending now."),
    COUNTER(sluice_limiter_metrics, waits_refused, "waits_refused",
            "Waits refused at the call: the client's limiter_waits_max were pending."),
};

static const field dq_fields[] = {
    COUNTER(sluice_dq_metrics, pushed, "pushed", "Messages accepted."),
    COUNTER(sluice_dq_metrics, duplicates, "duplicates", "Pushes refused: the id exists."),
    COUNTER(sluice_dq_metrics, errors, "push_errors", "Pushes answered with another status."),
    GAUGE(sluice_dq_metrics, in_flight, "push_in_flight", "Messages pushed, not yet answered."),
    COUNTER(sluice_dq_metrics, full, "push_full",
            "Messages refused at once: the client's max_pending_pushes was reached."),
};

typedef struct consumer_view {
  sluice_dq_consumer_metrics m;
  unsigned in_flight;
} consumer_view;

static const field consumer_fields[] = {
    COUNTER(consumer_view, m.delivered, "delivered", "Messages handed to the handler."),
    COUNTER(consumer_view, m.redelivered, "redelivered", "Deliveries with attempt > 1."),
    COUNTER(consumer_view, m.acked, "acked", "Acknowledgements Redis confirmed."),
    COUNTER(consumer_view, m.retried, "retried", "Retries Redis scheduled."),
    COUNTER(consumer_view, m.dead_lettered, "dead_lettered",
            "Retries past max_attempts: dead letters."),
    COUNTER(consumer_view, m.late_settles, "late_settles",
            "Acks or retries answered SLUICE_ELATE."),
    COUNTER(consumer_view, m.take_errors, "take_errors", "Take steps that failed."),
    GAUGE(consumer_view, in_flight, "in_flight", "Messages delivered, not yet settled."),
};

static const group_desc client_group = GROUP("sluice_client_", client_fields, NULL, NULL);
static const group_desc connection_group = GROUP("sluice_client_", connection_fields, NULL, NULL);
static const group_desc status_group = GROUP("sluice_client_", status_fields, NULL, NULL);
static const group_desc handle_group = GROUP("sluice_client_", handle_fields, NULL, NULL);
static const group_desc step_group = GROUP(
    "sluice_step_", step_fields, "duration_seconds",
    "Redis steps from the call to their completion (every status).");

typedef struct obj_desc {
  const sluice__obj_kind *kind; /* its name labels the handles gauge */
  group_desc group;
  void (*get)(const void *handle, void *out);
} obj_desc;

static void get_sem(const void *h, void *out) { sluice_sem_get_metrics(h, out); }
static void get_limiter(const void *h, void *out) { sluice_limiter_get_metrics(h, out); }
static void get_dq(const void *h, void *out) { sluice_dq_get_metrics(h, out); }
static void get_consumer(const void *h, void *out) {
  consumer_view *v = out;
  sluice_dq_consumer_get_metrics(h, &v->m);
  v->in_flight = sluice_dq_consumer_in_flight(h);
}

static const obj_desc objs[] = {
    {&sluice__sem_obj,
     GROUP("sluice_sem_", sem_fields, "wait_seconds",
           "Blocking acquires that were granted, from the call to the grant."),
     get_sem},
    {&sluice__limiter_obj,
     GROUP("sluice_limiter_", limiter_fields, "wait_seconds",
           "Waits that were allowed, from the call to the answer."),
     get_limiter},
    {&sluice__dq_obj, GROUP("sluice_dq_", dq_fields, NULL, NULL), get_dq},
    {&sluice__dq_consumer_obj,
     GROUP("sluice_dq_consumer_", consumer_fields, "lateness_seconds",
           "From a message's due time to its delivery (Redis clock, ms resolution)."),
     get_consumer},
};
#define NOBJS (sizeof objs / sizeof objs[0])

/* A view's place in objs; NOBJS for a kind this exposition does not know. */
static size_t obj_index(const sluice__obj_kind *kind) {
  size_t i = 0;
  while (i < NOBJS && objs[i].kind != kind) i++;
  return i;
}

typedef union obj_metrics {
  sluice_sem_metrics sem;
  sluice_limiter_metrics limiter;
  sluice_dq_metrics dq;
  consumer_view consumer;
} obj_metrics;

_Static_assert(sizeof client_fields / sizeof client_fields[0] <= MAX_FIELDS, "MAX_FIELDS");
_Static_assert(sizeof sem_fields / sizeof sem_fields[0] <= MAX_FIELDS, "MAX_FIELDS");
_Static_assert(sizeof limiter_fields / sizeof limiter_fields[0] <= MAX_FIELDS, "MAX_FIELDS");
_Static_assert(sizeof consumer_fields / sizeof consumer_fields[0] <= MAX_FIELDS, "MAX_FIELDS");

/* ---- series --------------------------------------------------------------- */

typedef struct series {
  char *labels; /* `name="db",algorithm="gcra"`, escaped; "" for none */
  uint64_t v[MAX_FIELDS];
  uint64_t below[NLE]; /* histogram: values under 2^(LE_MIN_LOG2 + i) µs */
  uint64_t count, sum_us;
} series;

typedef struct group {
  const group_desc *d;
  series *s;
  size_t n, cap;
} group;

static uint64_t sat_add(uint64_t a, uint64_t b) { return b > UINT64_MAX - a ? UINT64_MAX : a + b; }

static uint64_t field_value(const field *f, const void *st) {
  const char *p = (const char *)st + f->offset;
  uint64_t v64;
  uint32_t v32;
  uint16_t v16;
  uint8_t v8;
  switch (f->size) {
    case 8: return memcpy(&v64, p, 8), v64;
    case 4: return memcpy(&v32, p, 4), v32;
    case 2: return memcpy(&v16, p, 2), v16;
    default: return memcpy(&v8, p, 1), v8;
  }
}

/* labels: `k="v"` pairs for each (key, value) with a value; NULL on OOM. */
static char *make_labels(const char *k1, const char *v1, const char *k2, const char *v2) {
  sluice__text t = {0};
  const char *keys[2] = {k1, k2}, *values[2] = {v1, v2};
  for (int i = 0; i < 2; i++) {
    if (!keys[i] || !values[i]) continue;
    sluice__text_printf(&t, "%s%s=\"", t.len ? "," : "", keys[i]);
    sluice__prom_label_value(&t, values[i]);
    sluice__text_puts(&t, "\"");
  }
  if (!t.oom && !t.s) return strdup("");
  if (t.oom) sluice__text_reset(&t);
  return t.s;
}

/* A new series under labels (taken over, even on failure); NULL on OOM. */
static series *group_add(group *g, char *labels) {
  if (!labels) return NULL;
  if (g->n == g->cap) {
    size_t cap = g->cap ? g->cap * 2 : 8;
    series *s = realloc(g->s, cap * sizeof *s);
    if (!s) return free(labels), NULL;
    g->s = s;
    g->cap = cap;
  }
  series *s = &g->s[g->n++];
  memset(s, 0, sizeof *s);
  s->labels = labels;
  return s;
}

static void add_hist(series *s, const sluice__hist *h) {
  for (unsigned i = 0; i < NLE; i++)
    s->below[i] += sluice__hist_below(h, UINT64_C(1) << (LE_MIN_LOG2 + i));
  s->count += h->count;
  s->sum_us = sat_add(s->sum_us, h->sum);
}

/* A series of the group's fields read from st (and of h); 0 or ENOMEM. */
static int add_struct(group *g, char *labels, const void *st, const sluice__hist *h) {
  series *s = group_add(g, labels);
  if (!s) return SLUICE_ENOMEM;
  for (size_t i = 0; i < g->d->nfields; i++) s->v[i] = field_value(&g->d->fields[i], st);
  if (h) add_hist(s, h);
  return SLUICE_OK;
}

/* A series of a one-family group whose labels say what it counts. */
static int add_value(group *g, const char *key, const char *value, uint64_t v) {
  series *s = group_add(g, make_labels(key, value, NULL, NULL));
  if (!s) return SLUICE_ENOMEM;
  s->v[0] = v;
  return SLUICE_OK;
}

static void merge_into(series *to, const series *from) {
  for (size_t i = 0; i < MAX_FIELDS; i++) to->v[i] = sat_add(to->v[i], from->v[i]);
  for (size_t i = 0; i < NLE; i++) to->below[i] += from->below[i];
  to->count += from->count;
  to->sum_us = sat_add(to->sum_us, from->sum_us);
}

static int by_labels(const void *a, const void *b) {
  return strcmp(((const series *)a)->labels, ((const series *)b)->labels);
}

/* Sort by labels and sum the series that carry the same ones. */
static void group_merge(group *g) {
  size_t out = 0;
  if (g->n) qsort(g->s, g->n, sizeof *g->s, by_labels);
  for (size_t i = 0; i < g->n; i++) {
    if (out && strcmp(g->s[out - 1].labels, g->s[i].labels) == 0) {
      merge_into(&g->s[out - 1], &g->s[i]);
      free(g->s[i].labels);
    } else {
      g->s[out++] = g->s[i];
    }
  }
  g->n = out;
}

static void group_clear(group *g) {
  for (size_t i = 0; i < g->n; i++) free(g->s[i].labels);
  free(g->s);
  g->s = NULL;
  g->n = g->cap = 0;
}

/* ---- writing -------------------------------------------------------------- */

static void put_header(sluice__text *t, const char *prefix, const char *name, const char *type,
                       const char *help) {
  sluice__text_printf(t, "# HELP %s%s %s\n# TYPE %s%s %s\n", prefix, name, help, prefix, name,
                      type);
}

/* The sample's name and labels (le: one more, or NULL), then " value". */
static void put_sample_text(sluice__text *t, const char *prefix, const char *name,
                            const char *suffix, const char *labels, const char *le,
                            const char *value) {
  sluice__text_printf(t, "%s%s%s", prefix, name, suffix);
  if (*labels || le)
    sluice__text_printf(t, "{%s%s%s%s%s}", labels, *labels && le ? "," : "", le ? "le=\"" : "",
                        le ? le : "", le ? "\"" : "");
  sluice__text_printf(t, " %s\n", value);
}

static void put_sample(sluice__text *t, const char *prefix, const char *name, const char *suffix,
                       const char *labels, const char *le, uint64_t v) {
  char value[24];
  snprintf(value, sizeof value, "%llu", (unsigned long long)v);
  put_sample_text(t, prefix, name, suffix, labels, le, value);
}

/* A field's sample: its count, or milliseconds as seconds. */
static void put_field(sluice__text *t, const group_desc *d, const field *f, const series *s,
                      uint64_t v) {
  char seconds[SLUICE__PROM_SECONDS_MAX];
  if (!f->ms) {
    put_sample(t, d->prefix, f->name, "", s->labels, NULL, v);
    return;
  }
  sluice__prom_seconds(seconds, v > UINT64_MAX / 1000 ? UINT64_MAX : v * 1000);
  put_sample_text(t, d->prefix, f->name, "", s->labels, NULL, seconds);
}

static void put_hist_series(sluice__text *t, const group_desc *d, const series *s) {
  char le[SLUICE__PROM_SECONDS_MAX], sum[SLUICE__PROM_SECONDS_MAX];
  for (unsigned i = 0; i < NLE; i++) {
    sluice__prom_seconds(le, UINT64_C(1) << (LE_MIN_LOG2 + i));
    put_sample(t, d->prefix, d->hist, "_bucket", s->labels, le, s->below[i]);
  }
  put_sample(t, d->prefix, d->hist, "_bucket", s->labels, "+Inf", s->count);
  sluice__prom_seconds(sum, s->sum_us);
  sluice__text_printf(t, "%s%s_sum%s%s%s %s\n", d->prefix, d->hist, *s->labels ? "{" : "",
                      s->labels, *s->labels ? "}" : "", sum);
  put_sample(t, d->prefix, d->hist, "_count", s->labels, NULL, s->count);
}

/* Every family of the group, each with all its series; nothing when the
 * group has no series. */
static void put_group(sluice__text *t, const group *g) {
  const group_desc *d = g->d;
  if (!g->n) return;
  for (size_t f = 0; f < d->nfields; f++) {
    put_header(t, d->prefix, d->fields[f].name, d->fields[f].type, d->fields[f].help);
    for (size_t i = 0; i < g->n; i++) put_field(t, d, &d->fields[f], &g->s[i], g->s[i].v[f]);
  }
  if (!d->hist) return;
  put_header(t, d->prefix, d->hist, "histogram", d->hist_help);
  for (size_t i = 0; i < g->n; i++) put_hist_series(t, d, &g->s[i]);
}

/* ---- reading the client --------------------------------------------------- */

enum {
  G_CLIENT,
  G_CONNECTION,
  G_STATUS,
  G_STEP,
  G_OBJ, /* one per objs[] entry from here */
  G_HANDLES = G_OBJ + NOBJS,
  G_COUNT
};

static int collect_client(group *gs, const sluice_client *c) {
  client_view v;
  sluice_client_health health;
  sluice_client_get_metrics(c, &v.m);
  sluice_client_get_stats(c, &v.st);
  sluice_client_get_health(c, &health);
  int rc = add_struct(&gs[G_CLIENT], strdup(""), &v, NULL);
  if (!rc) rc = add_value(&gs[G_CONNECTION], "connection", "command", health.command_up == 1);
  if (!rc && health.blocking_up >= 0)
    rc = add_value(&gs[G_CONNECTION], "connection", "blocking", health.blocking_up == 1);
  for (unsigned i = 0; !rc && i < SLUICE_METRICS_STATUSES; i++) {
    if (!v.m.by_status[i]) continue;
    const char *name = i == SLUICE_METRICS_STATUSES - 1 ? "other" : sluice_err_name(-(int)i);
    rc = add_value(&gs[G_STATUS], "status", name, v.m.by_status[i]);
  }
  for (size_t i = 0; !rc && i < v.m.nkinds; i++) {
    const sluice_op_metrics *k = &v.m.kinds[i];
    rc = add_struct(&gs[G_STEP], make_labels("step", k->name, NULL, NULL), k,
                    sluice__client_step_hist(c, k->name));
  }
  return rc;
}

static int collect_objects(group *gs, const sluice_client *c) {
  uint64_t handles[NOBJS] = {0};
  int rc = SLUICE_OK;
  const sluice__link *l = sluice__client_objects(c)->guards.head;
  for (; !rc && l; l = l->next) {
    const sluice__guard *g = sluice__container_of(l, sluice__guard, link);
    const sluice__obj_view view = g->view;
    size_t k = obj_index(view.kind);
    obj_metrics m;
    if (!view.handle || g->freeing || k == NOBJS) continue;
    objs[k].get(view.handle, &m);
    rc = add_struct(&gs[G_OBJ + k], make_labels("name", view.name, "algorithm", view.algo), &m,
                    view.hist);
    handles[k]++;
  }
  for (size_t k = 0; !rc && k < NOBJS; k++)
    rc = add_value(&gs[G_HANDLES], "kind", objs[k].kind->name, handles[k]);
  return rc;
}

static void groups_init(group *gs) {
  memset(gs, 0, G_COUNT * sizeof *gs);
  gs[G_CLIENT].d = &client_group;
  gs[G_CONNECTION].d = &connection_group;
  gs[G_STATUS].d = &status_group;
  gs[G_STEP].d = &step_group;
  for (size_t k = 0; k < NOBJS; k++) gs[G_OBJ + k].d = &objs[k].group;
  gs[G_HANDLES].d = &handle_group;
}

int sluice_client_prometheus(const sluice_client *c, char **text, size_t *len) {
  group gs[G_COUNT];
  sluice__text t = {0};
  if (text) *text = NULL;
  if (len) *len = 0;
  if (!c || !text) return SLUICE_EINVAL;
  groups_init(gs);
  int rc = collect_client(gs, c);
  if (!rc) rc = collect_objects(gs, c);
  for (int i = 0; i < G_COUNT; i++) {
    group_merge(&gs[i]);
    if (!rc) put_group(&t, &gs[i]);
    group_clear(&gs[i]);
  }
  if (!rc && (t.oom || !t.s)) rc = SLUICE_ENOMEM;
  if (rc) {
    sluice__text_reset(&t);
    return rc;
  }
  *text = t.s;
  if (len) *len = t.len;
  return SLUICE_OK;
}

void sluice_prometheus_free(char *text) { free(text); }

size_t sluice_prometheus_escape(const char *value, char *buf, size_t size) {
  if (!buf) size = 0;
  if (value) return sluice__prom_escape(value, buf, size);
  if (size) buf[0] = '\0';
  return 0;
}
