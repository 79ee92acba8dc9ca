/*
 * Delay queue, producer side: push (one or a batch, one script call either
 * way), cancel, inspect, dead letters. The consumer lives in dq_consumer.c.
 *
 * Storage (see src/lua/dq_push.lua): the delayed sorted set's members are a
 * 12-hex-digit per-queue sequence number followed by the id, scored by the
 * due time in whole ms. Scores stay exact integers (due times < 2^42, far
 * inside a double's 53 bits) and equal scores sort by member, i.e. by push
 * order, so no tie-breaker has to be squeezed into the score.
 */
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include <event2/event.h>

#include "dq/dq.h"
#include "dq/dq_sched.h"

/* Messages pushed, not answered, over all the client's queues
 * (sluice_client_options documents the option and its default). */
const sluice__cap_def sluice__dq_pushes_cap = {
    .option = offsetof(sluice_client_options, max_pending_pushes),
    .dflt = 100000,
};

/* The writes kept in the record of unreplicated writes. A push made room
 * for itself there before it was sent (sluice__record_room). */
static const sluice__write_kind push_write = {
    .has_room = 1,
    .replay_metric = offsetof(sluice_client_metrics, replay_pushes),
};
static const sluice__write_kind cancel_write = {
    .replay_metric = offsetof(sluice_client_metrics, replay_cancels),
};

enum req_kind {
  REQ_PUSH,
  REQ_BATCH,
  REQ_CANCEL,
  REQ_INSPECT,
  REQ_INSPECT_EX,
  REQ_DEAD,
  REQ_REQUEUE,
  REQ_EXT
};

/* The user's callback; the request's kind says which member is set. */
typedef union dq_cb {
  sluice_dq_push_cb *push;
  sluice_dq_batch_cb *batch;
  sluice_dq_status_cb *cancel;
  sluice_dq_info_cb *inspect;
  sluice_dq_info_ex_cb *inspect_ex;
  sluice_dq_dead_cb *dead;
  sluice_dq_count_cb *requeue;
  sluice__dq_ext_fn *ext; /* another file's step (dq_sched.c) */
} dq_cb;

typedef struct dq_req dq_req;
struct dq_req {
  sluice_dq *dq;
  sluice__pending pending; /* in dq->reqs */
  enum req_kind kind;
  dq_cb cb;
  void *ud;
  size_t n; /* ids below (push, batch) */
  char **ids;
};

struct sluice_dq {
  sluice__guard guard; /* how the handle dies (guard.h) */
  sluice_client *c;
  char *name;
  char *keys[DQ_NKEYS];
  unsigned op_timeout_ms;
  uint64_t retention_ms;
  sluice__list reqs; /* pending */
  sluice_dq_metrics m;
  sluice__dq_sched *sched; /* the schedules it runs; NULL: none yet */
};

/* ---- shared with dq_consumer.c -------------------------------------------- */

int sluice__dq_keys(const sluice_client *c, const char *name, char *keys[DQ_NKEYS]) {
  for (int i = 0; i < DQ_NKEYS; i++) {
    keys[i] = sluice__key(c, "dq", name, sluice__dq_parts[i]);
    if (!keys[i]) {
      sluice__dq_keys_free(keys);
      return SLUICE_ENOMEM;
    }
  }
  return SLUICE_OK;
}

void sluice__dq_keys_free(char *keys[DQ_NKEYS]) {
  for (int i = 0; i < DQ_NKEYS; i++) {
    free(keys[i]);
    keys[i] = NULL;
  }
}

int sluice__dq_valid_id(const char *id) {
  size_t len = id ? strnlen(id, SLUICE_DQ_ID_MAX + 1) : 0;
  return len >= 1 && len <= SLUICE_DQ_ID_MAX;
}

/* ---- requests -------------------------------------------------------------- */

static dq_req *req_new(sluice_dq *dq, enum req_kind kind, dq_cb cb, void *ud, size_t nids) {
  dq_req *r = sluice__calloc(1, sizeof *r + nids * (sizeof(char *) + SLUICE_DQ_ID_MAX + 1));
  if (!r) return NULL;
  r->dq = dq;
  r->kind = kind;
  r->cb = cb;
  r->ud = ud;
  r->n = nids;
  r->ids = (char **)(r + 1);
  char *p = (char *)(r->ids + nids);
  for (size_t i = 0; i < nids; i++) r->ids[i] = p + i * (SLUICE_DQ_ID_MAX + 1);
  return r;
}

static void dq_destroy(sluice__guard *g) {
  sluice_dq *dq = sluice__container_of(g, sluice_dq, guard);
  sluice__dq_sched_free(dq->sched);
  sluice__dq_keys_free(dq->keys);
  free(dq->name);
  sluice__free(dq);
}

/* ---- replies --------------------------------------------------------------- */

static int64_t int_at(const redisReply *r, size_t i, int *err) {
  int64_t v = 0;
  if (sluice__reply_i64(sluice__reply_at(r, i), &v) != 0) *err = 1;
  return v;
}

/* dq_push.lua's answer for a message it did not push. */
static int push_refused(int64_t code) { return code == -2 ? SLUICE_EBUSY : SLUICE_EEXIST; }

static void finish_push(dq_req *r, int status, const redisReply *reply) {
  sluice_dq_push_cb *cb = r->cb.push;
  int64_t due = -1;
  int err = 0;
  if (status == SLUICE_OK) {
    due = int_at(reply, 0, &err);
    if (err) status = SLUICE_EPROTOCOL, due = -1;
    else if (due < 0) status = push_refused(due), due = -1;
  }
  if (status == SLUICE_OK) r->dq->m.pushed++;
  else if (status == SLUICE_EEXIST) r->dq->m.duplicates++;
  else r->dq->m.errors++;
  if (cb) cb(r->dq, status, r->ids[0], due, r->ud);
}

static void finish_batch(dq_req *r, int status, const redisReply *reply) {
  sluice_dq_batch_cb *cb = r->cb.batch;
  sluice_dq_push_result *res = NULL;
  int err = 0;
  if (status == SLUICE_OK && !(res = malloc(r->n * sizeof *res))) status = SLUICE_ENOMEM;
  for (size_t i = 0; res && i < r->n; i++) {
    res[i].id = r->ids[i];
    res[i].due_ms = int_at(reply, i, &err);
    res[i].status = res[i].due_ms < 0 ? push_refused(res[i].due_ms) : SLUICE_OK;
    if (res[i].due_ms < 0) res[i].due_ms = -1;
    if (res[i].status == SLUICE_OK) r->dq->m.pushed++;
    else if (res[i].status == SLUICE_EEXIST) r->dq->m.duplicates++;
    else r->dq->m.errors++;
  }
  if (!res) r->dq->m.errors += r->n;
  if (res && err) {
    free(res);
    res = NULL;
    status = SLUICE_EPROTOCOL;
  }
  if (cb) cb(r->dq, status, res, res ? r->n : 0, r->ud);
  free(res);
}

static void finish_cancel(dq_req *r, int status, const redisReply *reply) {
  sluice_dq_status_cb *cb = r->cb.cancel;
  int64_t v = 0;
  if (status == SLUICE_OK)
    status = sluice__reply_i64(reply, &v) ? SLUICE_EPROTOCOL : v ? SLUICE_OK : SLUICE_ENOTFOUND;
  if (cb) cb(r->dq, status, r->ud);
}

static void finish_inspect(dq_req *r, int status, const redisReply *reply) {
  sluice_dq_info info = {0};
  int64_t next_priority = 0;
  char next_id[SLUICE_DQ_ID_MAX + 1];
  int err = 0;
  if (status == SLUICE_OK) {
    info.now_ms = int_at(reply, 0, &err);
    info.delayed = (uint64_t)int_at(reply, 1, &err);
    info.ready = (uint64_t)int_at(reply, 2, &err);
    info.in_flight = (uint64_t)int_at(reply, 3, &err);
    info.expired = (uint64_t)int_at(reply, 4, &err);
    info.dead = (uint64_t)int_at(reply, 5, &err);
    info.next_due_ms = int_at(reply, 7, &err);
    next_priority = int_at(reply, 8, &err);
    const redisReply *id = sluice__reply_at(reply, 6);
    if (id && id->type == REDIS_REPLY_STRING && id->len <= SLUICE_DQ_ID_MAX) {
      memcpy(next_id, id->str, id->len);
      next_id[id->len] = '\0';
      info.next_id = next_id;
    }
    if (err) status = SLUICE_EPROTOCOL;
  }
  const sluice_dq_info *in = status == SLUICE_OK ? &info : NULL;
  if (r->kind == REQ_INSPECT_EX)
    r->cb.inspect_ex(r->dq, status, in, (unsigned)next_priority, r->ud);
  else r->cb.inspect(r->dq, status, in, r->ud);
}

/* Dead-letter reply: {total, then id, died, attempts, payload per entry}. */
static int parse_dead(const redisReply *reply, size_t *total, sluice_dq_dead_entry **out,
                      size_t *n) {
  int err = 0;
  *total = (size_t)int_at(reply, 0, &err);
  if (err || (reply->elements - 1) % 4) return SLUICE_EPROTOCOL;
  *n = (reply->elements - 1) / 4;
  *out = calloc(*n ? *n : 1, sizeof **out);
  if (!*out) return SLUICE_ENOMEM;
  for (size_t i = 0; i < *n; i++) {
    const redisReply *id = reply->element[1 + 4 * i], *p = reply->element[4 + 4 * i];
    if (id->type != REDIS_REPLY_STRING || p->type != REDIS_REPLY_STRING) err = 1;
    (*out)[i].id = id->str;
    (*out)[i].died_ms = int_at(reply, 2 + 4 * i, &err);
    (*out)[i].attempts = (unsigned)int_at(reply, 3 + 4 * i, &err);
    (*out)[i].payload = p->str;
    (*out)[i].len = p->len;
  }
  return err ? SLUICE_EPROTOCOL : SLUICE_OK;
}

static void finish_dead(dq_req *r, int status, const redisReply *reply) {
  sluice_dq_dead_cb *cb = r->cb.dead;
  sluice_dq_dead_entry *entries = NULL;
  size_t total = 0, n = 0;
  if (status == SLUICE_OK) status = parse_dead(reply, &total, &entries, &n);
  if (status != SLUICE_OK) total = n = 0;
  cb(r->dq, status, total, status == SLUICE_OK ? entries : NULL, n, r->ud);
  free(entries);
}

static void finish_requeue(dq_req *r, int status, const redisReply *reply) {
  sluice_dq_count_cb *cb = r->cb.requeue;
  int64_t v = 0;
  if (status == SLUICE_OK && sluice__reply_i64(reply, &v) != 0) status = SLUICE_EPROTOCOL;
  if (cb) cb(r->dq, status, status == SLUICE_OK ? (uint64_t)v : 0, r->ud);
}

/* Answer the user, then free r (its ids are borrowed until then). */
static void req_finish(dq_req *r, int status, const redisReply *reply) {
  sluice_dq *dq = r->dq;
  sluice__list_remove(&dq->reqs, &r->pending.link);
  if (r->kind == REQ_PUSH || r->kind == REQ_BATCH) {
    sluice__client_release(dq->c, &sluice__dq_pushes_cap, r->n);
    sluice__record_room_free(dq->c); /* answered: its entry, if any, is kept now */
    dq->m.in_flight -= r->n;
  }
  sluice__guard_enter(&dq->guard);
  switch (r->kind) {
    case REQ_PUSH: finish_push(r, status, reply); break;
    case REQ_BATCH: finish_batch(r, status, reply); break;
    case REQ_CANCEL: finish_cancel(r, status, reply); break;
    case REQ_INSPECT:
    case REQ_INSPECT_EX: finish_inspect(r, status, reply); break;
    case REQ_DEAD: finish_dead(r, status, reply); break;
    case REQ_REQUEUE: finish_requeue(r, status, reply); break;
    case REQ_EXT: r->cb.ext(dq, status, reply, r->ud); break;
  }
  sluice__free(r);
  sluice__guard_leave(&dq->guard);
}

/* ---- the record of unreplicated writes (core/record.h) ------------------- */

/* A push Redis answered, kept as the messages it queued (not those it
 * refused as duplicates), each due at the time Redis gave it: sent again
 * as a delay it would count again from the replay. ARGV as dq_push.lua's:
 * retention, then per message id, mode, ms, payload. A replacing push is
 * kept with the version Redis gave the message (the reply's second half),
 * so its replay changes only a message no newer write replaced since.
 * Each mode ends in '~' and the sequence number the message got (from the
 * reply's last element), so a node that kept the push and has since seen
 * the message settled does not queue it again. */
static void record_push(sluice_client *c, const redisReply *reply) {
  int argc;
  const char *const *argv;
  const size_t *lens;
  if (!sluice__record_on(c) || sluice__answered_args(c, &argc, &argv, &lens) != SLUICE_OK) return;
  size_t n = (size_t)(argc - DQ_NKEYS - 1) / 4, kept = 0;
  sluice__args a;
  if (reply->type != REDIS_REPLY_ARRAY ||
      (reply->elements != n + 1 && reply->elements != 2 * n + 1))
    return;
  const redisReply *seq0 = reply->element[reply->elements - 1];
  if (seq0->type != REDIS_REPLY_INTEGER || seq0->integer < 0) return;
  int versions = reply->elements == 2 * n + 1;
  /* The modes, rewritten: the arguments borrow them until they are kept. */
  char(*modes)[64] = malloc(n * sizeof *modes);
  if (!modes || sluice__args_init(&a, argc, (int)n) != SLUICE_OK) {
    free(modes);
    return;
  }
  for (int i = 0; i < DQ_NKEYS; i++) sluice__args_key(&a, argv[i]);
  sluice__args_bin(&a, argv[DQ_NKEYS], lens[DQ_NKEYS]);
  for (size_t i = 0; i < n; i++) {
    const redisReply *due = reply->element[i];
    int at = DQ_NKEYS + 1 + 4 * (int)i;
    if (due->type != REDIS_REPLY_INTEGER || due->integer < 0) continue;
    sluice__args_bin(&a, argv[at], lens[at]);
    char *mode = modes[i];
    size_t ml = lens[at + 1] < 8 ? lens[at + 1] : 0, vl = 0;
    if (ml) memcpy(mode, argv[at + 1], ml);
    if (!ml) ml = 1;
    mode[0] = 'a';
    if (versions && mode[ml - 1] == 'r') {
      const redisReply *ver = reply->element[n + i];
      if (ver->type == REDIS_REPLY_INTEGER && ver->integer > 0) {
        mode[ml] = '@';
        vl = 1 + sluice__fmt_i64(mode + ml + 1, ver->integer);
      }
    }
    mode[ml + vl] = '~';
    vl += 1 + sluice__fmt_i64(mode + ml + vl + 1, seq0->integer + (int64_t)i + 1);
    sluice__args_bin(&a, mode, ml + vl);
    sluice__args_i64(&a, due->integer);
    sluice__args_bin(&a, argv[at + 3], lens[at + 3]);
    kept++;
  }
  if (kept) sluice__record_answered_as(c, &push_write, (unsigned)kept, &a);
  sluice__args_clear(&a);
  free(modes);
}

/* Writes a failover could undo are kept for replay: pushes, and cancels
 * that removed something. */
static void record_write(const dq_req *r, const redisReply *reply) {
  sluice_client *c = r->dq->c;
  if (r->kind == REQ_PUSH || r->kind == REQ_BATCH) record_push(c, reply);
  else if (r->kind == REQ_CANCEL && reply->type == REDIS_REPLY_INTEGER && reply->integer == 1)
    sluice__record_answered(c, &cancel_write, 1);
}

static void on_reply(void *ud, int status, const redisReply *reply) {
  dq_req *r = ud;
  if (status == SLUICE_EREDIS) reply = NULL;
  if (status == SLUICE_OK && (!reply || reply->type == REDIS_REPLY_NIL)) status = SLUICE_EPROTOCOL;
  if (status == SLUICE_OK) record_write(r, reply);
  req_finish(r, status, reply);
}

/* Send script s for r with the queue's keys followed by args, of which the
 * first `extra` are keys too; on error r is freed and the error returned
 * (its callback never runs). */
static int req_send_keys(dq_req *r, const sluice__script *s, int extra, int nargs,
                         const char *const *args, const size_t *lens) {
  sluice_dq *dq = r->dq;
  const char **argv = malloc((size_t)(DQ_NKEYS + nargs) * sizeof *argv);
  size_t *alens = malloc((size_t)(DQ_NKEYS + nargs) * sizeof *alens);
  int rc = SLUICE_ENOMEM;
  if (argv && alens) {
    for (int i = 0; i < DQ_NKEYS; i++) argv[i] = dq->keys[i], alens[i] = strlen(dq->keys[i]);
    for (int i = 0; i < nargs; i++)
      argv[DQ_NKEYS + i] = args[i], alens[DQ_NKEYS + i] = lens ? lens[i] : strlen(args[i]);
    rc = sluice__eval(dq->c, s, DQ_NKEYS + extra, DQ_NKEYS + nargs, argv, alens, dq->op_timeout_ms,
                      on_reply, r, &r->pending.op);
  }
  free(argv);
  free(alens);
  if (rc != SLUICE_OK) {
    sluice__free(r);
    return rc;
  }
  sluice__list_append(&dq->reqs, &r->pending.link);
  return SLUICE_OK;
}

static int req_send(dq_req *r, const sluice__script *s, int nargs, const char *const *args,
                    const size_t *lens) {
  return req_send_keys(r, s, 0, nargs, args, lens);
}

/* ---- steps of other files (dq_sched.c) ------------------------------------ */

static int usable(const sluice_dq *dq);

int sluice__dq_ext_send(sluice_dq *dq, const sluice__script *s, int extra, int nargs,
                        const char *const *args, const size_t *lens, sluice__dq_ext_fn *fn,
                        void *ud) {
  int rc = usable(dq);
  if (rc != SLUICE_OK) return rc;
  dq_req *r = req_new(dq, REQ_EXT, (dq_cb){.ext = fn}, ud, 0);
  if (!r) return SLUICE_ENOMEM;
  return req_send_keys(r, s, extra, nargs, args, lens);
}

sluice_client *sluice__dq_client(const sluice_dq *dq) { return dq->c; }
uint64_t sluice__dq_retention(const sluice_dq *dq) { return dq->retention_ms; }
sluice__dq_sched **sluice__dq_sched_of(sluice_dq *dq) { return &dq->sched; }

/* ---- lifetime -------------------------------------------------------------- */

void sluice_dq_options_init(sluice_dq_options *o) {
  if (!o) return;
  memset(o, 0, sizeof *o);
  o->retention_ms = DQ_DEFAULT_RETENTION_MS;
}

/* Client closed or handle freed: everything pending is cancelled. */
/* Freed with requests pending: their replies are dropped from now on. */
static void dq_quiesce(sluice__guard *g) {
  sluice_dq *dq = sluice__container_of(g, sluice_dq, guard);
  sluice__pending_detach_all(&dq->reqs);
  sluice__dq_sched_stop(dq->sched);
}

static void dq_cancel(sluice__guard *g) {
  sluice_dq *dq = sluice__container_of(g, sluice_dq, guard);
  sluice__dq_sched_stop(dq->sched);
  while (dq->reqs.head) {
    dq_req *r = sluice__container_of(dq->reqs.head, dq_req, pending.link);
    sluice__op_detach(r->pending.op);
    req_finish(r, SLUICE_ECANCELED, NULL);
  }
}

static int dq_idle(const sluice__guard *g) {
  return !sluice__container_of(g, sluice_dq, guard)->reqs.head;
}

/* A failover may have undone the schedules' last steps: run them again. */
static void dq_node_changed(sluice__guard *g, int lo, int hi) {
  (void)lo, (void)hi;
  sluice__dq_sched_poke(sluice__container_of(g, sluice_dq, guard)->sched);
}

const sluice__obj_kind sluice__dq_obj = {"dq"};

static const sluice__guard_ops dq_guard_ops = {.quiesce = dq_quiesce,
                                               .cancel = dq_cancel,
                                               .idle = dq_idle,
                                               .destroy = dq_destroy,
                                               .node_changed = dq_node_changed};

int sluice_dq_new(sluice_client *c, const char *name, const sluice_dq_options *opts,
                  sluice_dq **out) {
  sluice_dq_options defaults;
  if (out) *out = NULL;
  if (!c || !out || !sluice__valid_name(name)) return SLUICE_EINVAL;
  if (sluice__client_closing(c)) return SLUICE_ECLOSED; /* says more than an option error */
  if (!opts) sluice_dq_options_init(&defaults), opts = &defaults;
  if (opts->retention_ms < 1 || opts->retention_ms > (uint64_t)SLUICE_DQ_TIME_MAX)
    return SLUICE_EINVAL;
  int rc;
  sluice_dq *dq = sluice__handle_alloc(c, sizeof *dq, &rc);
  if (!dq) return rc;
  dq->c = c;
  dq->op_timeout_ms = opts->op_timeout_ms;
  dq->retention_ms = opts->retention_ms;
  dq->name = strdup(name);
  if (!dq->name || sluice__dq_keys(c, name, dq->keys) != 0) {
    dq_destroy(&dq->guard);
    return SLUICE_ENOMEM;
  }
  sluice__handle_attach(c, &dq->guard, &dq_guard_ops,
                        &(sluice__obj_view){&sluice__dq_obj, dq, dq->name, NULL, NULL});
  *out = dq;
  return SLUICE_OK;
}

void sluice_dq_free(sluice_dq *dq) {
  if (dq) sluice__guard_free(&dq->guard);
}

const char *sluice_dq_name(const sluice_dq *dq) { return dq ? dq->name : NULL; }

/* ---- push ------------------------------------------------------------------ */

static int check_item(const sluice_dq_item *it) {
  if (!it || (it->len && !it->payload)) return SLUICE_EINVAL;
  if (it->len > SLUICE_DQ_PAYLOAD_MAX) return SLUICE_ETOOBIG;
  if (it->at_ms < 0 || it->at_ms > SLUICE_DQ_TIME_MAX) return SLUICE_EINVAL;
  if (!it->at_ms && (it->delay_ms < 0 || it->delay_ms > SLUICE_DQ_TIME_MAX)) return SLUICE_EINVAL;
  if (it->id && !sluice__dq_valid_id(it->id)) return SLUICE_EINVAL;
  return SLUICE_OK;
}

static int usable(const sluice_dq *dq) {
  if (!dq || dq->guard.freeing) return SLUICE_EINVAL;
  return sluice__guard_live(&dq->guard) && !sluice__client_closing(dq->c) ? SLUICE_OK
                                                                          : SLUICE_ECLOSED;
}

/* dq_push.lua's mode of a message: 'a' (at) or 'd' (delay), then the
 * priority if not 0, then 'r' or 'l' for what to do with an existing id;
 * its length. */
static size_t push_mode(char *mode, const sluice_dq_item *it, unsigned priority, int if_exists) {
  size_t n = 0;
  mode[n++] = it->at_ms ? 'a' : 'd';
  if (priority) mode[n++] = (char)('0' + priority);
  if (if_exists == SLUICE_DQ_REPLACE) mode[n++] = 'r';
  else if (if_exists == SLUICE_DQ_POSTPONE) mode[n++] = 'l';
  return n;
}

/* Validate items, then send them as one dq_push call for r. */
static int push_items(dq_req *r, const sluice_dq_item *items, size_t n, unsigned priority,
                      int if_exists) {
  int nargs = 1 + 4 * (int)n, rc = SLUICE_ENOMEM;
  const char **args = malloc((size_t)nargs * sizeof *args);
  size_t *lens = malloc((size_t)nargs * sizeof *lens);
  char *nums = malloc(n * 24 + 24), *modes = malloc(n * 4);
  if (args && lens && nums && modes) {
    lens[0] = sluice__fmt_u64(nums, r->dq->retention_ms);
    args[0] = nums;
    for (size_t i = 0; i < n; i++) {
      const sluice_dq_item *it = &items[i];
      char *num = nums + 24 * (i + 1);
      if (it->id) strcpy(r->ids[i], it->id);
      else sluice__random_hex(r->ids[i]);
      args[1 + 4 * i] = r->ids[i], lens[1 + 4 * i] = strlen(r->ids[i]);
      lens[2 + 4 * i] = push_mode(modes + 4 * i, it, priority, if_exists);
      args[2 + 4 * i] = modes + 4 * i;
      lens[3 + 4 * i] = sluice__fmt_i64(num, it->at_ms ? it->at_ms : it->delay_ms);
      args[3 + 4 * i] = num;
      args[4 + 4 * i] = it->len ? (const char *)it->payload : "", lens[4 + 4 * i] = it->len;
    }
    rc = req_send(r, &sluice__lua_dq_push, nargs, args, lens);
    r = NULL;
  }
  if (r) sluice__free(r);
  free(args);
  free(lens);
  free(nums);
  free(modes);
  return rc;
}

/* Send n valid items as one request, within the client's cap on messages
 * in flight. */
static int push_request(sluice_dq *dq, enum req_kind kind, dq_cb cb, void *ud,
                        const sluice_dq_item *items, size_t n, unsigned priority, int if_exists) {
  int rc = sluice__record_room(dq->c);
  if (rc == SLUICE_OK) {
    rc = sluice__client_reserve(dq->c, &sluice__dq_pushes_cap, n);
    if (rc != SLUICE_OK) sluice__record_room_free(dq->c);
  }
  if (rc != SLUICE_OK) {
    dq->m.full += n;
    return rc;
  }
  dq_req *r = req_new(dq, kind, cb, ud, n);
  rc = r ? push_items(r, items, n, priority, if_exists) : SLUICE_ENOMEM;
  if (rc != SLUICE_OK) {
    sluice__client_release(dq->c, &sluice__dq_pushes_cap, n);
    sluice__record_room_free(dq->c);
  } else {
    dq->m.in_flight += n;
  }
  return rc;
}

int sluice_dq_push(sluice_dq *dq, const sluice_dq_item *item, sluice_dq_push_cb *cb, void *ud) {
  int rc = usable(dq);
  if (rc == SLUICE_OK) rc = check_item(item);
  if (rc != SLUICE_OK) return rc;
  return push_request(dq, REQ_PUSH, (dq_cb){.push = cb}, ud, item, 1, 0, SLUICE_DQ_REFUSE);
}

int sluice_dq_push_ex(sluice_dq *dq, const sluice_dq_item *item, unsigned priority, int if_exists,
                      sluice_dq_push_cb *cb, void *ud) {
  int rc = usable(dq);
  if (rc == SLUICE_OK) rc = check_item(item);
  if (rc != SLUICE_OK) return rc;
  if (priority > SLUICE_DQ_PRIORITY_MAX || if_exists < SLUICE_DQ_REFUSE ||
      if_exists > SLUICE_DQ_POSTPONE)
    return SLUICE_EINVAL;
  return push_request(dq, REQ_PUSH, (dq_cb){.push = cb}, ud, item, 1, priority, if_exists);
}

int sluice_dq_push_batch(sluice_dq *dq, const sluice_dq_item *items, size_t n,
                         sluice_dq_batch_cb *cb, void *ud) {
  int rc = usable(dq);
  if (rc != SLUICE_OK) return rc;
  if (!items || n < 1 || n > SLUICE_DQ_BATCH_MAX) return SLUICE_EINVAL;
  for (size_t i = 0; i < n; i++)
    if ((rc = check_item(&items[i])) != SLUICE_OK) return rc;
  return push_request(dq, REQ_BATCH, (dq_cb){.batch = cb}, ud, items, n, 0, SLUICE_DQ_REFUSE);
}

/* ---- cancel, inspection, dead letters -------------------------------------- */

int sluice_dq_cancel(sluice_dq *dq, const char *id, sluice_dq_status_cb *cb, void *ud) {
  int rc = usable(dq);
  if (rc != SLUICE_OK) return rc;
  if (!sluice__dq_valid_id(id)) return SLUICE_EINVAL;
  dq_req *r = req_new(dq, REQ_CANCEL, (dq_cb){.cancel = cb}, ud, 0);
  if (!r) return SLUICE_ENOMEM;
  return req_send(r, &sluice__lua_dq_cancel, 1, &id, NULL);
}

static int inspect(sluice_dq *dq, enum req_kind kind, dq_cb cb, void *ud) {
  int rc = usable(dq);
  if (rc != SLUICE_OK) return rc;
  if (!cb.inspect && !cb.inspect_ex) return SLUICE_EINVAL;
  dq_req *r = req_new(dq, kind, cb, ud, 0);
  if (!r) return SLUICE_ENOMEM;
  return req_send(r, &sluice__lua_dq_status, 0, NULL, NULL);
}

int sluice_dq_inspect(sluice_dq *dq, sluice_dq_info_cb *cb, void *ud) {
  return inspect(dq, REQ_INSPECT, (dq_cb){.inspect = cb}, ud);
}

int sluice_dq_inspect_ex(sluice_dq *dq, sluice_dq_info_ex_cb *cb, void *ud) {
  return inspect(dq, REQ_INSPECT_EX, (dq_cb){.inspect_ex = cb}, ud);
}

int sluice_dq_dead_list(sluice_dq *dq, size_t offset, size_t limit, sluice_dq_dead_cb *cb,
                        void *ud) {
  char off[24], lim[24];
  int rc = usable(dq);
  if (rc != SLUICE_OK) return rc;
  if (!cb || limit < 1 || limit > 1000 || offset > (size_t)1 << 40) return SLUICE_EINVAL;
  sluice__fmt_u64(off, offset);
  sluice__fmt_u64(lim, limit);
  const char *args[2] = {off, lim};
  dq_req *r = req_new(dq, REQ_DEAD, (dq_cb){.dead = cb}, ud, 0);
  if (!r) return SLUICE_ENOMEM;
  return req_send(r, &sluice__lua_dq_dead, 2, args, NULL);
}

int sluice_dq_dead_requeue(sluice_dq *dq, const char *id, sluice_dq_count_cb *cb, void *ud) {
  char ret[24];
  int rc = usable(dq);
  if (rc != SLUICE_OK) return rc;
  if (id && !sluice__dq_valid_id(id)) return SLUICE_EINVAL;
  sluice__fmt_u64(ret, dq->retention_ms);
  const char *args[3] = {ret, id ? id : "", "1000"};
  dq_req *r = req_new(dq, REQ_REQUEUE, (dq_cb){.requeue = cb}, ud, 0);
  if (!r) return SLUICE_ENOMEM;
  return req_send(r, &sluice__lua_dq_requeue, 3, args, NULL);
}

void sluice_dq_get_metrics(const sluice_dq *dq, sluice_dq_metrics *out) {
  if (!out) return;
  memset(out, 0, sizeof *out);
  if (dq) *out = dq->m;
}
