/*
 * Semaphore handles and acquisition: try_acquire (one attempt) and blocking
 * acquire (attempts until granted, woken by releases through the client's
 * shared blocking connection, and by local timers at the earliest lease
 * expiry and at each heartbeat). Permits and renewal live in permit.c.
 *
 * An acquire's outcome reaches the user exactly once. If the outcome is
 * decided while an attempt is still in flight (deadline, cancel), the user is
 * told at once and the acquire lingers, detached from the user, until the
 * attempt's reply shows whether Redis granted a permit that must be released.
 */
#include <stdlib.h>
#include <string.h>

#include <event2/event.h>

#include "sem-internal.h"

#define RETRY_MIN_MS 25
#define RETRY_MAX_MS 1000

struct sluice_acquire {
  sluice_sem *sem;
  sluice_acquire *prev, *next;    /* in sem->acquires */
  sluice_acquire_cb *cb;          /* NULL once the user was told */
  void *ud;
  int blocking;
  char waiter_id[33];
  char member[68];                /* "<handle id>:<waiter id>" in the queue */
  char permit_id[33];             /* id the next attempt asks for */
  sluice__op *op;                 /* attempt in flight */
  struct event *timer;            /* next attempt, or deferred completion */
  struct event *deadline;
  uint64_t sent_ms;               /* when the attempt in flight was sent */
  int wake_pending;               /* woken while an attempt was in flight */
  int last_error;                 /* last transport failure of an attempt */
  int final_status;               /* decided; reported from the timer */
  unsigned retry_ms;              /* backoff after transport failures */
};

void sluice__sem_ignore_reply(void *ud, int status, const redisReply *reply) {}

static void attempt_send(sluice_acquire *a);
static void acquire_free(sluice_acquire *a);

/* ---- options and handles ------------------------------------------------- */

void sluice_sem_options_init(sluice_sem_options *o) {
  if (!o) return;
  memset(o, 0, sizeof *o);
  o->permits = 1;
  o->ttl_ms = 30000;
  o->auto_renew = 1;
  o->heartbeat_ms = 3000;
}

static int check_options(const sluice_sem_options *o) {
  if (o->permits < 1 || o->permits > 1000000) return SLUICE_EINVAL;
  if (o->ttl_ms < 10 || o->ttl_ms > 86400000u) return SLUICE_EINVAL;
  if (o->renew_ms && o->renew_ms >= o->ttl_ms) return SLUICE_EINVAL;
  if (o->heartbeat_ms && (o->heartbeat_ms < 30 || o->heartbeat_ms > 3600000u)) return SLUICE_EINVAL;
  return SLUICE_OK;
}

uint64_t sluice__sem_margin_ms(const sluice_sem *sem) {
  uint64_t m = sem->o.ttl_ms / 20;
  return m ? m : 1;
}

static void sem_on_client_close(sluice__child *child);

static void sem_destroy(sluice_sem *sem) {
  for (int i = 0; i < SEM_NKEYS; i++) free(sem->keys[i]);
  free(sem->wake_base);
  free(sem->wake_key);
  free(sem->name);
  sluice__free(sem);
}

int sluice_sem_new(sluice_client *c, const char *name, const sluice_sem_options *opts,
                   sluice_sem **out) {
  static const char *const parts[SEM_NKEYS] = {"holders", "queue", "beats", "meta"};
  sluice_sem_options defaults;
  if (out) *out = NULL;
  if (!c || !out || !sluice__valid_name(name)) return SLUICE_EINVAL;
  if (!opts) {
    sluice_sem_options_init(&defaults);
    opts = &defaults;
  }
  int rc = check_options(opts);
  if (rc) return rc;
  if (sluice__client_closing(c)) return SLUICE_ECLOSED;
  sluice_sem *sem = sluice__calloc(1, sizeof *sem);
  if (!sem) return SLUICE_ENOMEM;
  sem->c = c;
  sem->o = *opts;
  if (!sem->o.renew_ms) sem->o.renew_ms = sem->o.ttl_ms / 3 ? sem->o.ttl_ms / 3 : 1;
  if (!sem->o.heartbeat_ms) sem->o.heartbeat_ms = 3000;
  sluice__random_hex(sem->handle_id);
  sem->name = strdup(name);
  int ok = sem->name != NULL;
  for (int i = 0; i < SEM_NKEYS && ok; i++) ok = (sem->keys[i] = sluice__key(c, "sem", name, parts[i])) != NULL;
  if (ok) ok = (sem->wake_base = sluice__key(c, "sem", name, "wake:")) != NULL;
  if (ok) ok = (sem->wake_key = malloc(strlen(sem->wake_base) + 33)) != NULL;
  if (!ok) {
    sem_destroy(sem);
    return SLUICE_ENOMEM;
  }
  strcpy(sem->wake_key, sem->wake_base);
  strcat(sem->wake_key, sem->handle_id);
  uint64_t longest = sem->o.ttl_ms > sem->o.heartbeat_ms ? sem->o.ttl_ms : sem->o.heartbeat_ms;
  sluice__fmt_u64(sem->permits_s, sem->o.permits);
  sluice__fmt_u64(sem->ttl_s, sem->o.ttl_ms);
  sluice__fmt_u64(sem->hb_s, sem->o.heartbeat_ms);
  sluice__fmt_u64(sem->keep_s, longest * 2 + 60000); /* abandoned keys vanish */
  sem->child.on_close = sem_on_client_close;
  sluice__client_attach(c, &sem->child);
  *out = sem;
  return SLUICE_OK;
}

const char *sluice_sem_name(const sluice_sem *sem) { return sem ? sem->name : NULL; }

/* ---- the wake-up listener ------------------------------------------------ */

static void poke(sluice_acquire *a) {
  if (!a->cb || a->final_status) return;
  if (a->op) {
    a->wake_pending = 1;
    return;
  }
  evtimer_del(a->timer);
  attempt_send(a);
}

static void on_wake(void *ud, const char *data, size_t len) {
  sluice_sem *sem = ud;
  for (sluice_acquire *a = sem->acquires; a; a = a->next) {
    if (!a->blocking) continue;
    /* NULL: the blocking connection came back; wake-ups may be lost. */
    if (!data || (len == 32 && memcmp(a->waiter_id, data, 32) == 0)) {
      poke(a);
      if (data) return;
    }
  }
}

static int blocking_count(const sluice_sem *sem) {
  int n = 0;
  for (const sluice_acquire *a = sem->acquires; a; a = a->next) n += a->blocking && a->cb;
  return n;
}

static void update_listener(sluice_sem *sem) {
  int want = !sem->closed && blocking_count(sem) > 0;
  if (want && !sem->listener) {
    /* On failure waiters still progress on their heartbeat timers. */
    sluice__listen(sem->c, sem->wake_key, on_wake, sem, &sem->listener);
  } else if (!want && sem->listener) {
    sluice__unlisten(sem->listener);
    sem->listener = NULL;
  }
}

/* ---- acquires ------------------------------------------------------------ */

static void unlink_acquire(sluice_acquire *a) {
  sluice_sem *sem = a->sem;
  if (a->prev) a->prev->next = a->next;
  else if (sem->acquires == a) sem->acquires = a->next;
  if (a->next) a->next->prev = a->prev;
  a->prev = a->next = NULL;
}

static void acquire_free(sluice_acquire *a) {
  unlink_acquire(a);
  if (a->timer) event_free(a->timer);
  if (a->deadline) event_free(a->deadline);
  sluice__free(a);
}

static void send_leave(sluice_acquire *a) {
  sluice_sem *sem = a->sem;
  if (!a->blocking || sem->closed) return;
  const char *argv[] = {sem->keys[SEM_KEY_HOLDERS], sem->keys[SEM_KEY_QUEUE],
                        sem->keys[SEM_KEY_BEATS], a->member, sem->permits_s,
                        sem->wake_base, sem->hb_s};
  sluice__eval(sem->c, &sluice__lua_sem_leave, 3, 7, argv, NULL, 0,
               sluice__sem_ignore_reply, NULL, NULL);
}

/* Tell the user (once). The acquire must already be out of the way: the
 * callback may free the semaphore. */
static void notify(sluice_sem *sem, sluice_acquire_cb *cb, void *ud, int status,
                   sluice_permit *permit) {
  cb(sem, status, permit, ud);
}

/* The outcome is decided and the user told: clean up now, or once the
 * attempt in flight has answered. */
static void retire(sluice_acquire *a, int granted) {
  sluice_sem *sem = a->sem;
  a->cb = NULL;
  evtimer_del(a->timer);
  evtimer_del(a->deadline);
  if (!a->op) {
    if (!granted) send_leave(a); /* a grant already left the queue */
    acquire_free(a);
  }
  update_listener(sem);
}

/* Report status now (we are in a loop callback) and retire. */
static void finish(sluice_acquire *a, int status, sluice_permit *permit) {
  sluice_sem *sem = a->sem;
  sluice_acquire_cb *cb = a->cb;
  void *ud = a->ud;
  if (!cb) return;
  retire(a, permit != NULL);
  notify(sem, cb, ud, status, permit);
}

/* Decide status now but report it from the loop (never inside the caller). */
static void finish_later(sluice_acquire *a, int status) {
  if (a->final_status) return;
  a->final_status = status;
  evtimer_del(a->timer);
  sluice__timer_in(a->timer, 0);
}

static void schedule_attempt(sluice_acquire *a, uint64_t ms) {
  evtimer_del(a->timer);
  sluice__timer_in(a->timer, ms);
}

static int parse_grant(const redisReply *r, int64_t *granted, int64_t *v1) {
  const redisReply *e0 = sluice__reply_at(r, 0), *e1 = sluice__reply_at(r, 1);
  if (!e0 || !e1 || sluice__reply_i64(e0, granted) || sluice__reply_i64(e1, v1)) return SLUICE_EPROTOCOL;
  return SLUICE_OK;
}

static void on_attempt_failed(sluice_acquire *a, int status) {
  if (status == SLUICE_ETIMEDOUT) {
    /* The attempt may still run in Redis: release that id after it (same
     * connection, so in order) and ask under a fresh id next time. */
    sluice__sem_release_id(a->sem, a->permit_id);
    sluice__random_hex(a->permit_id);
  }
  if (!a->blocking || (status != SLUICE_ETIMEDOUT && status != SLUICE_ECONNECTION)) {
    finish(a, status, NULL);
    return;
  }
  a->last_error = status;
  schedule_attempt(a, a->retry_ms);
  a->retry_ms = a->retry_ms * 2 > RETRY_MAX_MS ? RETRY_MAX_MS : a->retry_ms * 2;
}

static void on_attempt(void *ud, int status, const redisReply *reply) {
  sluice_acquire *a = ud;
  sluice_sem *sem = a->sem;
  int64_t granted = 0, v1 = 0;
  a->op = NULL;
  if (status == SLUICE_OK && parse_grant(reply, &granted, &v1) != 0) status = SLUICE_EPROTOCOL;
  if (!a->cb) { /* the user already has an answer */
    if (status == SLUICE_OK && granted) sluice__sem_release_id(sem, a->permit_id);
    send_leave(a);
    acquire_free(a);
    return;
  }
  if (a->final_status) { /* cancelled meanwhile; the timer reports it */
    if (status == SLUICE_OK && granted) sluice__sem_release_id(sem, a->permit_id);
    return;
  }
  if (status != SLUICE_OK) {
    on_attempt_failed(a, status);
    return;
  }
  a->last_error = 0;
  a->retry_ms = RETRY_MIN_MS;
  if (granted) {
    sluice_permit *p = sluice__permit_new(sem, a->permit_id, (uint64_t)v1, a->sent_ms);
    if (!p) {
      sluice__sem_release_id(sem, a->permit_id);
      finish(a, SLUICE_ENOMEM, NULL);
      return;
    }
    finish(a, SLUICE_OK, p);
    return;
  }
  if (!a->blocking) {
    finish(a, SLUICE_EBUSY, NULL);
    return;
  }
  /* Wait for a wake-up, bounded by the earliest lease expiry (a crashed
   * holder) and by our heartbeat (which keeps our place in the queue). */
  uint64_t next = sem->o.heartbeat_ms / 3;
  if (v1 >= 0 && (uint64_t)v1 + 1 < next) next = (uint64_t)v1 + 1;
  if (a->wake_pending) next = 0;
  a->wake_pending = 0;
  schedule_attempt(a, next);
}

static void attempt_send(sluice_acquire *a) {
  sluice_sem *sem = a->sem;
  const char *argv[] = {sem->keys[SEM_KEY_HOLDERS], sem->keys[SEM_KEY_QUEUE],
                        sem->keys[SEM_KEY_BEATS], sem->keys[SEM_KEY_META],
                        sem->permits_s, sem->ttl_s, a->permit_id,
                        a->blocking ? a->member : "", sem->hb_s, sem->o.fair ? "1" : "0",
                        sem->wake_base, sem->keep_s};
  a->sent_ms = sluice__mono_ms();
  int rc = sluice__eval(sem->c, &sluice__lua_sem_acquire, SEM_NKEYS, 12, argv, NULL,
                        sem->o.op_timeout_ms, on_attempt, a, &a->op);
  if (rc) finish_later(a, rc);
}

static void acquire_timer_cb(evutil_socket_t fd, short what, void *arg) {
  sluice_acquire *a = arg;
  if (a->final_status) {
    if (a->op) {
      sluice__op_detach(a->op);
      a->op = NULL;
      /* Whatever that attempt did, its permit id must not stay granted. */
      sluice__sem_release_id(a->sem, a->permit_id);
    }
    finish(a, a->final_status, NULL);
    return;
  }
  attempt_send(a);
}

static void acquire_deadline_cb(evutil_socket_t fd, short what, void *arg) {
  sluice_acquire *a = arg;
  if (a->final_status) return;
  finish(a, a->last_error ? a->last_error : SLUICE_ETIMEDOUT, NULL);
}

static int start_acquire(sluice_sem *sem, int blocking, unsigned timeout_ms,
                         sluice_acquire_cb *cb, void *ud, sluice_acquire **handle) {
  if (!sem || !cb) return SLUICE_EINVAL;
  if (sem->closed || sem->freeing) return SLUICE_ECLOSED;
  struct event_base *base = sluice__client_base(sem->c);
  sluice_acquire *a = sluice__calloc(1, sizeof *a);
  if (!a) return SLUICE_ENOMEM;
  a->sem = sem;
  a->cb = cb;
  a->ud = ud;
  a->blocking = blocking;
  a->retry_ms = RETRY_MIN_MS;
  a->timer = evtimer_new(base, acquire_timer_cb, a);
  a->deadline = evtimer_new(base, acquire_deadline_cb, a);
  if (!a->timer || !a->deadline) {
    if (a->timer) event_free(a->timer);
    if (a->deadline) event_free(a->deadline);
    sluice__free(a);
    return SLUICE_ENOMEM;
  }
  sluice__random_hex(a->waiter_id);
  sluice__random_hex(a->permit_id);
  memcpy(a->member, sem->handle_id, 32);
  a->member[32] = ':';
  memcpy(a->member + 33, a->waiter_id, 33);
  a->next = sem->acquires;
  if (sem->acquires) sem->acquires->prev = a;
  sem->acquires = a;
  if (blocking) {
    update_listener(sem);
    if (timeout_ms) sluice__timer_in(a->deadline, timeout_ms);
  }
  if (handle) *handle = a;
  attempt_send(a);
  return SLUICE_OK;
}

int sluice_sem_try_acquire(sluice_sem *sem, sluice_acquire_cb *cb, void *ud) {
  return start_acquire(sem, 0, 0, cb, ud, NULL);
}

int sluice_sem_acquire(sluice_sem *sem, unsigned timeout_ms, sluice_acquire_cb *cb, void *ud,
                       sluice_acquire **handle) {
  return start_acquire(sem, 1, timeout_ms, cb, ud, handle);
}

int sluice_acquire_cancel(sluice_acquire *a) {
  if (!a || !a->cb) return SLUICE_EINVAL;
  finish_later(a, SLUICE_ECANCELED);
  return SLUICE_OK;
}

/* ---- release requests and inspection ------------------------------------- */

struct sem_release_req {
  sluice_sem *sem;
  sem_release_req *next;
  sluice_release_cb *cb;
  void *ud;
  sluice__op *op;
};

static void unlink_release(sem_release_req *r) {
  for (sem_release_req **pp = &r->sem->releases; *pp; pp = &(*pp)->next)
    if (*pp == r) {
      *pp = r->next;
      return;
    }
}

static void on_release(void *ud, int status, const redisReply *reply) {
  sem_release_req *r = ud;
  sluice_sem *sem = r->sem;
  int64_t held = 0;
  if (status == SLUICE_OK)
    status = sluice__reply_i64(reply, &held) ? SLUICE_EPROTOCOL : held ? SLUICE_OK : SLUICE_ENOTFOUND;
  unlink_release(r);
  sluice_release_cb *cb = r->cb;
  void *cbud = r->ud;
  sluice__free(r);
  cb(sem, status, cbud);
}

/* Send the release script; with cb, report through a tracked request. */
static int send_release(sluice_sem *sem, const char *id, sluice_release_cb *cb, void *ud) {
  const char *argv[] = {sem->keys[SEM_KEY_HOLDERS], sem->keys[SEM_KEY_QUEUE],
                        sem->keys[SEM_KEY_BEATS], id, sem->permits_s, sem->wake_base, sem->hb_s};
  if (!cb)
    return sluice__eval(sem->c, &sluice__lua_sem_release, 3, 7, argv, NULL, 0,
                        sluice__sem_ignore_reply, NULL, NULL);
  sem_release_req *r = sluice__calloc(1, sizeof *r);
  if (!r) return SLUICE_ENOMEM;
  r->sem = sem;
  r->cb = cb;
  r->ud = ud;
  int rc = sluice__eval(sem->c, &sluice__lua_sem_release, 3, 7, argv, NULL, 0, on_release, r, &r->op);
  if (rc) {
    sluice__free(r);
    return rc;
  }
  r->next = sem->releases;
  sem->releases = r;
  return SLUICE_OK;
}

void sluice__sem_release_id(sluice_sem *sem, const char *id) {
  if (!sem->closed) send_release(sem, id, NULL, NULL);
}

int sluice__sem_release_tracked(sluice_sem *sem, const char *id, sluice_release_cb *cb, void *ud) {
  if (sem->closed || sem->freeing) return SLUICE_ECLOSED;
  return send_release(sem, id, cb, ud);
}

struct sem_inspect_req {
  sluice_sem *sem;
  sem_inspect_req *next;
  sluice_sem_info_cb *cb;
  void *ud;
  sluice__op *op;
};

static void unlink_inspect(sem_inspect_req *r) {
  for (sem_inspect_req **pp = &r->sem->inspects; *pp; pp = &(*pp)->next)
    if (*pp == r) {
      *pp = r->next;
      return;
    }
}

/* Decode the status script's reply into info (arrays malloc'd by us). */
static int decode_info(const redisReply *r, sluice_sem_info *info, sluice_holder_info **holders,
                       const char ***waiters) {
  const redisReply *h = sluice__reply_at(r, 2), *w = sluice__reply_at(r, 3);
  int64_t permits, fence;
  memset(info, 0, sizeof *info);
  if (!h || !w || h->type != REDIS_REPLY_ARRAY || w->type != REDIS_REPLY_ARRAY ||
      sluice__reply_i64(sluice__reply_at(r, 0), &permits) ||
      sluice__reply_i64(sluice__reply_at(r, 1), &fence) || h->elements % 2)
    return SLUICE_EPROTOCOL;
  info->permits = (unsigned)permits;
  info->last_fence = (uint64_t)fence;
  info->nholders = h->elements / 2;
  info->nwaiters = w->elements;
  *holders = calloc(info->nholders + 1, sizeof **holders);
  *waiters = calloc(info->nwaiters + 1, sizeof **waiters);
  if (!*holders || !*waiters) return SLUICE_ENOMEM;
  for (size_t i = 0; i < info->nholders; i++) {
    int64_t left;
    if (h->element[2 * i]->type != REDIS_REPLY_STRING || sluice__reply_i64(h->element[2 * i + 1], &left))
      return SLUICE_EPROTOCOL;
    (*holders)[i].id = h->element[2 * i]->str;
    (*holders)[i].remaining_ms = left;
  }
  for (size_t i = 0; i < info->nwaiters; i++) {
    if (w->element[i]->type != REDIS_REPLY_STRING) return SLUICE_EPROTOCOL;
    (*waiters)[i] = w->element[i]->str;
  }
  info->holders = *holders;
  info->waiters = *waiters;
  return SLUICE_OK;
}

static void on_inspect(void *ud, int status, const redisReply *reply) {
  sem_inspect_req *r = ud;
  sluice_sem *sem = r->sem;
  sluice_sem_info info;
  sluice_holder_info *holders = NULL;
  const char **waiters = NULL;
  if (status == SLUICE_OK) status = decode_info(reply, &info, &holders, &waiters);
  unlink_inspect(r);
  sluice_sem_info_cb *cb = r->cb;
  void *cbud = r->ud;
  sluice__free(r);
  cb(sem, status, status == SLUICE_OK ? &info : NULL, cbud);
  free(holders);
  free(waiters);
}

int sluice_sem_inspect(sluice_sem *sem, sluice_sem_info_cb *cb, void *ud) {
  if (!sem || !cb) return SLUICE_EINVAL;
  if (sem->closed || sem->freeing) return SLUICE_ECLOSED;
  sem_inspect_req *r = sluice__calloc(1, sizeof *r);
  if (!r) return SLUICE_ENOMEM;
  r->sem = sem;
  r->cb = cb;
  r->ud = ud;
  int rc = sluice__eval(sem->c, &sluice__lua_sem_status, SEM_NKEYS, SEM_NKEYS,
                        (const char *const *)sem->keys, NULL, sem->o.op_timeout_ms, on_inspect, r,
                        &r->op);
  if (rc) {
    sluice__free(r);
    return rc;
  }
  r->next = sem->inspects;
  sem->inspects = r;
  return SLUICE_OK;
}

/* ---- teardown ------------------------------------------------------------ */

/* Complete every pending user operation with ECANCELED (now: we are either
 * in the client's close sequence or in sluice_sem_free). */
static void cancel_pending(sluice_sem *sem) {
  while (sem->acquires) {
    sluice_acquire *a = sem->acquires;
    sluice_acquire_cb *cb = a->cb;
    void *ud = a->ud;
    if (a->op) {
      sluice__op_detach(a->op);
      if (!sem->closed) sluice__sem_release_id(sem, a->permit_id);
      a->op = NULL;
    }
    a->cb = NULL;
    send_leave(a);
    acquire_free(a);
    if (cb) notify(sem, cb, ud, SLUICE_ECANCELED, NULL);
  }
  while (sem->releases) {
    sem_release_req *r = sem->releases;
    sem->releases = r->next;
    sluice__op_detach(r->op);
    sluice_release_cb *cb = r->cb;
    void *ud = r->ud;
    sluice__free(r);
    cb(sem, SLUICE_ECANCELED, ud);
  }
  while (sem->inspects) {
    sem_inspect_req *r = sem->inspects;
    sem->inspects = r->next;
    sluice__op_detach(r->op);
    sluice_sem_info_cb *cb = r->cb;
    void *ud = r->ud;
    sluice__free(r);
    cb(sem, SLUICE_ECANCELED, NULL, ud);
  }
  update_listener(sem);
}

static void sem_on_client_close(sluice__child *child) {
  sluice_sem *sem = (sluice_sem *)child;
  sem->closed = 1;
  cancel_pending(sem);
  for (sluice_permit *p = sem->permits; p; p = p->next) sluice__permit_client_closed(p);
}

void sluice_sem_free(sluice_sem *sem) {
  if (!sem || sem->freeing) return;
  sem->freeing = 1;
  cancel_pending(sem);
  while (sem->permits) {
    if (sem->closed) sluice__permit_drop(sem->permits);
    else sluice__permit_release_quiet(sem->permits);
  }
  if (sem->listener) {
    sluice__unlisten(sem->listener);
    sem->listener = NULL;
  }
  sluice__client_detach(sem->c, &sem->child);
  sem_destroy(sem);
}
