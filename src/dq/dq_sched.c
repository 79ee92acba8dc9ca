/*
 * Repeating schedules (sluice/dq_schedule.h): what a queue handle declares,
 * and the timer that runs the queue's schedules while it declares any.
 *
 * The scripts decide everything on Redis's clock (lua/_dq_sched.lua): which
 * occurrence is next, when it is queued, that it is queued once. The timer
 * only has to run a fire step some time between an occurrence and the next
 * one, so it is aimed just past the earliest queued occurrence a step
 * reported (its delay counted from that step's "now", so the local clock's
 * offset from Redis's does not matter), and at least every
 * min(retention / 4, 60 s) to renew the declarations.
 */
#include <stdlib.h>
#include <string.h>

#include <event2/event.h>
#include <sluice/dq_schedule.h>

#include "core/client.h"
#include "core/keys.h"
#include "dq/dq_sched.h"
#include "dq/dq_spec.h"

enum { RENEW_MAX_MS = 60000, RETRY_MS = 1000 };

typedef struct decl {
  char *name;
  char *text; /* the spec as given */
  char *canon;
  char *payload;
  size_t len;
} decl;

struct sluice__dq_sched {
  sluice_dq *dq;
  char *keys[2]; /* s and n (lua/_dq_sched.lua) */
  decl decls[SLUICE_DQ_SCHEDULE_MAX];
  size_t n;
  struct event *timer; /* NULL once stopped */
  uint64_t armed_at;   /* sluice__mono_ms when the timer fires; 0: not armed */
  int firing;          /* a fire step in flight */
};

/* One caller's step: set, remove, list or preview. */
typedef struct sched_op {
  union {
    sluice_dq_schedule_cb *set;
    sluice_dq_status_cb *status;
    sluice_dq_schedule_list_cb *list;
    sluice_dq_schedule_preview_cb *preview;
  } cb;
  void *ud;
  char name[SLUICE_DQ_SCHEDULE_NAME_MAX + 1];
} sched_op;

static void decl_clear(decl *d) {
  free(d->name);
  free(d->text);
  free(d->canon);
  free(d->payload);
  memset(d, 0, sizeof *d);
}

void sluice__dq_sched_stop(sluice__dq_sched *s) {
  if (!s || !s->timer) return;
  event_free(s->timer);
  s->timer = NULL;
}

void sluice__dq_sched_free(sluice__dq_sched *s) {
  if (!s) return;
  sluice__dq_sched_stop(s);
  for (size_t i = 0; i < s->n; i++) decl_clear(&s->decls[i]);
  free(s->keys[0]);
  free(s->keys[1]);
  free(s);
}

static void on_timer(evutil_socket_t fd, short what, void *ud);

/* The handle's schedule state, created on first use; NULL: no memory. */
static sluice__dq_sched *sched_of(sluice_dq *dq) {
  sluice__dq_sched **sp = sluice__dq_sched_of(dq);
  if (*sp) return *sp;
  sluice_client *c = sluice__dq_client(dq);
  sluice__dq_sched *s = calloc(1, sizeof *s);
  if (!s) return NULL;
  s->dq = dq;
  s->keys[0] = sluice__key(c, "dq", sluice_dq_name(dq), "s");
  s->keys[1] = sluice__key(c, "dq", sluice_dq_name(dq), "n");
  s->timer = evtimer_new(c->base, on_timer, s);
  if (!s->keys[0] || !s->keys[1] || !s->timer) {
    sluice__dq_sched_free(s);
    return NULL;
  }
  return *sp = s;
}

static decl *decl_find(sluice__dq_sched *s, const char *name) {
  for (size_t i = 0; s && i < s->n; i++)
    if (strcmp(s->decls[i].name, name) == 0) return &s->decls[i];
  return NULL;
}

/* Stop declaring name (if declared). */
static void decl_drop(sluice__dq_sched *s, const char *name) {
  decl *d = decl_find(s, name);
  if (!d) return;
  decl_clear(d);
  *d = s->decls[--s->n];
}

/* Run a fire step within ms (an earlier aim stays). */
static void arm(sluice__dq_sched *s, uint64_t ms) {
  if (!s->timer || !s->n) return;
  uint64_t at = sluice__mono_ms() + ms;
  if (s->armed_at && s->armed_at <= at && evtimer_pending(s->timer, NULL)) return;
  s->armed_at = at;
  sluice__timer_in(s->timer, ms);
}

/* Aim at the occurrence `next` (-1: none) reported at Redis's `now`. */
static void arm_for(sluice__dq_sched *s, int64_t now, int64_t next) {
  uint64_t renew = sluice__dq_retention(s->dq) / 4;
  if (renew > RENEW_MAX_MS) renew = RENEW_MAX_MS;
  if (next >= 0) {
    int64_t in = next < now ? 0 : next - now + 1;
    if ((uint64_t)in < renew) renew = (uint64_t)in;
  }
  arm(s, renew);
}

static int64_t reply_int(const redisReply *r, size_t i, int *err) {
  int64_t v = 0;
  if (sluice__reply_i64(sluice__reply_at(r, i), &v) != 0) *err = 1;
  return v;
}

/* ---- set --------------------------------------------------------------- */

static void set_done(sluice_dq *dq, int status, const redisReply *reply, void *ud) {
  sched_op *o = ud;
  int64_t now = 0, next = -1;
  int err = 0;
  if (status == SLUICE_OK) {
    now = reply_int(reply, 0, &err);
    next = reply_int(reply, 1, &err);
    if (err) status = SLUICE_EPROTOCOL, next = -1;
  }
  sluice__dq_sched *s = *sluice__dq_sched_of(dq);
  if (status == SLUICE_OK) arm_for(s, now, next);
  else if (status == SLUICE_EREDIS) decl_drop(s, o->name); /* refused: not declared */
  /* Still declared: a fire step finds it missing and sets it again. */
  else if (status != SLUICE_ECANCELED) arm(s, RETRY_MS);
  if (o->cb.set) o->cb.set(dq, status, o->name, next, o->ud);
  free(o);
}

static int send_set(sluice_dq *dq, const decl *d, sluice_dq_schedule_cb *cb, void *ud) {
  sluice__dq_sched *s = *sluice__dq_sched_of(dq);
  char ret[24];
  sched_op *o = calloc(1, sizeof *o);
  if (!o) return SLUICE_ENOMEM;
  o->cb.set = cb;
  o->ud = ud;
  strcpy(o->name, d->name);
  size_t lens[7] = {
      strlen(s->keys[0]), strlen(s->keys[1]), sluice__fmt_u64(ret, sluice__dq_retention(dq)),
      strlen(d->name),    strlen(d->canon),   d->len,
      strlen(d->text)};
  const char *args[7] = {s->keys[0], s->keys[1], ret, d->name, d->canon, d->len ? d->payload : "",
                         d->text};
  int rc = sluice__dq_ext_send(dq, &sluice__lua_dq_sched_set, 2, 7, args, lens, set_done, o);
  if (rc != SLUICE_OK) free(o);
  return rc;
}

static int valid_sched_name(const char *name) {
  size_t len = name ? strnlen(name, SLUICE_DQ_SCHEDULE_NAME_MAX + 1) : 0;
  return len >= 1 && len <= SLUICE_DQ_SCHEDULE_NAME_MAX;
}

int sluice_dq_schedule_set(sluice_dq *dq, const char *name, const char *spec, const void *payload,
                           size_t len, sluice_dq_schedule_cb *cb, void *ud) {
  char canon[SLUICE__DQ_CANON_MAX];
  if (!dq || !valid_sched_name(name) || (len && !payload)) return SLUICE_EINVAL;
  if (len > SLUICE_DQ_PAYLOAD_MAX) return SLUICE_ETOOBIG;
  int rc = sluice__dq_spec_parse(spec, canon);
  if (rc != SLUICE_OK) return rc;
  sluice__dq_sched *s = sched_of(dq);
  if (!s) return SLUICE_ENOMEM;
  decl *old = decl_find(s, name);
  if (!old && s->n == SLUICE_DQ_SCHEDULE_MAX) return SLUICE_EFULL;
  decl d = {strdup(name), strdup(spec), strdup(canon), malloc(len ? len : 1), len};
  if (!d.name || !d.text || !d.canon || !d.payload) rc = SLUICE_ENOMEM;
  if (rc == SLUICE_OK) {
    if (len) memcpy(d.payload, payload, len);
    rc = send_set(dq, &d, cb, ud);
  }
  if (rc != SLUICE_OK) {
    decl_clear(&d);
    return rc;
  }
  if (old) decl_clear(old);
  else old = &s->decls[s->n++];
  *old = d;
  return SLUICE_OK;
}

/* ---- firing -------------------------------------------------------------- */

/* Declared names the step found missing (their keys expired, a failover
 * undid them, or someone removed them): set them again. */
static void set_missing(sluice__dq_sched *s, const redisReply *reply) {
  for (size_t i = 2; i < reply->elements; i++) {
    const redisReply *r = reply->element[i];
    if (r->type != REDIS_REPLY_STRING) continue;
    const decl *d = decl_find(s, r->str);
    if (d) send_set(s->dq, d, NULL, NULL);
  }
}

static void fire_done(sluice_dq *dq, int status, const redisReply *reply, void *ud) {
  (void)ud;
  sluice__dq_sched *s = *sluice__dq_sched_of(dq);
  int err = 0;
  s->firing = 0;
  if (status == SLUICE_ECANCELED) return;
  if (status == SLUICE_OK && (reply->type != REDIS_REPLY_ARRAY || reply->elements < 2))
    status = SLUICE_EPROTOCOL;
  int64_t now = status == SLUICE_OK ? reply_int(reply, 0, &err) : 0;
  int64_t next = status == SLUICE_OK ? reply_int(reply, 1, &err) : 0;
  if (status != SLUICE_OK || err) {
    arm(s, RETRY_MS);
    return;
  }
  set_missing(s, reply);
  arm_for(s, now, next);
}

static void fire(sluice__dq_sched *s) {
  if (s->firing || !s->timer || !s->n) return;
  char ret[24];
  const char *args[3 + SLUICE_DQ_SCHEDULE_MAX];
  size_t lens[3 + SLUICE_DQ_SCHEDULE_MAX];
  args[0] = s->keys[0], lens[0] = strlen(s->keys[0]);
  args[1] = s->keys[1], lens[1] = strlen(s->keys[1]);
  args[2] = ret, lens[2] = sluice__fmt_u64(ret, sluice__dq_retention(s->dq));
  for (size_t i = 0; i < s->n; i++)
    args[3 + i] = s->decls[i].name, lens[3 + i] = strlen(s->decls[i].name);
  s->armed_at = 0;
  if (sluice__dq_ext_send(s->dq, &sluice__lua_dq_sched_fire, 2, 3 + (int)s->n, args, lens,
                          fire_done, NULL) == SLUICE_OK)
    s->firing = 1;
  else arm(s, RETRY_MS);
}

static void on_timer(evutil_socket_t fd, short what, void *ud) {
  (void)fd, (void)what;
  sluice__dq_sched *s = ud;
  s->armed_at = 0;
  fire(s);
}

void sluice__dq_sched_poke(sluice__dq_sched *s) {
  if (s) fire(s);
}

/* ---- remove, list, preview ------------------------------------------------ */

static void remove_done(sluice_dq *dq, int status, const redisReply *reply, void *ud) {
  sched_op *o = ud;
  int64_t v = 0;
  if (status == SLUICE_OK)
    status = sluice__reply_i64(reply, &v) ? SLUICE_EPROTOCOL : v ? SLUICE_OK : SLUICE_ENOTFOUND;
  if (o->cb.status) o->cb.status(dq, status, o->ud);
  free(o);
}

int sluice_dq_schedule_remove(sluice_dq *dq, const char *name, sluice_dq_status_cb *cb, void *ud) {
  if (!dq || !valid_sched_name(name)) return SLUICE_EINVAL;
  sluice__dq_sched *s = sched_of(dq);
  sched_op *o = s ? calloc(1, sizeof *o) : NULL;
  if (!o) return SLUICE_ENOMEM;
  o->cb.status = cb;
  o->ud = ud;
  const char *args[3] = {s->keys[0], s->keys[1], name};
  int rc = sluice__dq_ext_send(dq, &sluice__lua_dq_sched_del, 2, 3, args, NULL, remove_done, o);
  if (rc != SLUICE_OK) {
    free(o);
    return rc;
  }
  decl_drop(s, name);
  return SLUICE_OK;
}

/* List reply: {now, total, then name, spec, next, until, payload each}. */
static int parse_list(const redisReply *reply, int64_t *now, size_t *total,
                      sluice_dq_schedule_entry **out, size_t *n) {
  int err = 0;
  if (reply->type != REDIS_REPLY_ARRAY || reply->elements < 2 || (reply->elements - 2) % 5)
    return SLUICE_EPROTOCOL;
  *now = reply_int(reply, 0, &err);
  *total = (size_t)reply_int(reply, 1, &err);
  *n = (reply->elements - 2) / 5;
  *out = calloc(*n ? *n : 1, sizeof **out);
  if (!*out) return SLUICE_ENOMEM;
  for (size_t i = 0; i < *n; i++) {
    redisReply *const *f = reply->element + 2 + 5 * i;
    if (f[0]->type != REDIS_REPLY_STRING || f[1]->type != REDIS_REPLY_STRING ||
        f[4]->type != REDIS_REPLY_STRING)
      err = 1;
    (*out)[i].name = f[0]->str;
    (*out)[i].spec = f[1]->str;
    (*out)[i].next_ms = reply_int(reply, 4 + 5 * i, &err);
    (*out)[i].until_ms = reply_int(reply, 5 + 5 * i, &err);
    (*out)[i].payload = f[4]->str;
    (*out)[i].len = f[4]->len;
  }
  return err ? SLUICE_EPROTOCOL : SLUICE_OK;
}

static void list_done(sluice_dq *dq, int status, const redisReply *reply, void *ud) {
  sched_op *o = ud;
  sluice_dq_schedule_entry *e = NULL;
  int64_t now = 0;
  size_t total = 0, n = 0;
  if (status == SLUICE_OK) status = parse_list(reply, &now, &total, &e, &n);
  if (status != SLUICE_OK) total = n = 0;
  o->cb.list(dq, status, now, total, status == SLUICE_OK ? e : NULL, n, o->ud);
  free(e);
  free(o);
}

int sluice_dq_schedule_list(sluice_dq *dq, size_t offset, size_t limit,
                            sluice_dq_schedule_list_cb *cb, void *ud) {
  char off[24], lim[24];
  if (!dq || !cb || limit < 1 || limit > 100 || offset > (size_t)1 << 40) return SLUICE_EINVAL;
  sluice__dq_sched *s = sched_of(dq);
  sched_op *o = s ? calloc(1, sizeof *o) : NULL;
  if (!o) return SLUICE_ENOMEM;
  o->cb.list = cb;
  o->ud = ud;
  sluice__fmt_u64(off, offset);
  sluice__fmt_u64(lim, limit);
  const char *args[4] = {s->keys[0], s->keys[1], off, lim};
  int rc = sluice__dq_ext_send(dq, &sluice__lua_dq_sched_list, 2, 4, args, NULL, list_done, o);
  if (rc != SLUICE_OK) free(o);
  return rc;
}

static void preview_done(sluice_dq *dq, int status, const redisReply *reply, void *ud) {
  sched_op *o = ud;
  int64_t *at = NULL;
  size_t n = 0;
  int err = 0;
  if (status == SLUICE_OK && reply->type != REDIS_REPLY_ARRAY) status = SLUICE_EPROTOCOL;
  if (status == SLUICE_OK) {
    n = reply->elements;
    if (!(at = calloc(n ? n : 1, sizeof *at))) status = SLUICE_ENOMEM;
    for (size_t i = 0; at && i < n; i++) at[i] = reply_int(reply, i, &err);
    if (err) status = SLUICE_EPROTOCOL;
  }
  if (status != SLUICE_OK) n = 0;
  o->cb.preview(dq, status, status == SLUICE_OK ? at : NULL, n, o->ud);
  free(at);
  free(o);
}

int sluice_dq_schedule_preview(sluice_dq *dq, const char *spec, int64_t after_ms, size_t count,
                               sluice_dq_schedule_preview_cb *cb, void *ud) {
  char canon[SLUICE__DQ_CANON_MAX], after[24], cnt[24];
  if (!dq || !cb || count < 1 || count > 20 || after_ms < 0 || after_ms > SLUICE_DQ_TIME_MAX)
    return SLUICE_EINVAL;
  int rc = sluice__dq_spec_parse(spec, canon);
  if (rc != SLUICE_OK) return rc;
  sched_op *o = calloc(1, sizeof *o);
  if (!o) return SLUICE_ENOMEM;
  o->cb.preview = cb;
  o->ud = ud;
  sluice__fmt_i64(after, after_ms);
  sluice__fmt_u64(cnt, count);
  const char *args[3] = {canon, after, cnt};
  rc = sluice__dq_ext_send(dq, &sluice__lua_dq_sched_next, 0, 3, args, NULL, preview_done, o);
  if (rc != SLUICE_OK) free(o);
  return rc;
}
