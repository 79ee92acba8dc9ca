/*
 * Semaphore handles: options, keys, the wake-up listener, the per-turn flush
 * that sends ready attempts and releases in batches, inspection, and
 * teardown. Acquisition is in sem_acquire.c, releases in sem_release.c,
 * held permits and renewal in permit.c.
 */
#include <stdlib.h>
#include <string.h>

#include <event2/event.h>

#include "sem-internal.h"

void sluice__sem_ignore_reply(void *ud, int status, const redisReply *reply) {}

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
static void flush_cb(evutil_socket_t fd, short what, void *arg);

static void sem_destroy(sluice_sem *sem) {
  if (sem->flush_ev) event_free(sem->flush_ev);
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
  if (ok) ok = (sem->flush_ev = event_new(sluice__client_base(c), -1, 0, flush_cb, sem)) != NULL;
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

/* ---- flushing and wake-ups ---------------------------------------------- */

/* Releases first: they may free permits for the attempts sent after them.
 * Renewals before attempts: a lease about to run out matters more. */
static void flush_cb(evutil_socket_t fd, short what, void *arg) {
  sluice_sem *sem = arg;
  sem->flush_scheduled = 0;
  sluice__release_flush(sem);
  sluice__renew_flush(sem);
  sluice__acquire_flush(sem);
}

void sluice__sem_schedule_flush(sluice_sem *sem) {
  if (sem->flush_scheduled) return;
  sem->flush_scheduled = 1;
  event_active(sem->flush_ev, 0, 0);
}

void sluice__sem_wake(sluice_sem *sem, const char *waiter_id) {
  if (waiter_id) {
    sluice_acquire *a = sluice__acquire_find(sem, waiter_id);
    if (a) sluice__acquire_poke(a);
    return;
  }
  sluice__acquire_poke_all(sem);
}

static void on_wake(void *ud, const char *data, size_t len) {
  /* NULL: the blocking connection came back; wake-ups may have been lost. */
  if (!data || len == 32) sluice__sem_wake(ud, data);
}

void sluice__sem_blocking_changed(sluice_sem *sem, int delta) {
  sem->nblocking = (unsigned)((int)sem->nblocking + delta);
  int want = !sem->closed && !sem->freeing && sem->nblocking > 0;
  if (want && !sem->listener) {
    /* On failure waiters still progress on their heartbeat timers. */
    sluice__listen(sem->c, sem->wake_key, on_wake, sem, &sem->listener);
  } else if (!want && sem->listener) {
    sluice__unlisten(sem->listener);
    sem->listener = NULL;
  }
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

static void cancel_inspects(sluice_sem *sem) {
  while (sem->inspects) {
    sem_inspect_req *r = sem->inspects;
    sem->inspects = r->next;
    sluice__op_detach(r->op);
    sluice_sem_info_cb *cb = r->cb;
    void *ud = r->ud;
    sluice__free(r);
    cb(sem, SLUICE_ECANCELED, NULL, ud);
  }
}

/* Complete every pending user operation with ECANCELED (now: we are in the
 * client's close sequence or in sluice_sem_free). Callbacks may call
 * sluice_sem_free: `dispatching` keeps the memory until we are done. */
static void cancel_pending(sluice_sem *sem) {
  sem->dispatching++;
  sluice__acquire_cancel_all(sem);
  sluice__renew_cancel_all(sem);
  cancel_inspects(sem);
  sluice__release_cancel_all(sem);
  sluice__sem_blocking_changed(sem, 0);
  sem->dispatching--;
}

static void sem_on_client_close(sluice__child *child) {
  sluice_sem *sem = (sluice_sem *)child;
  sem->closed = 1;
  sem->dispatching++;
  cancel_pending(sem);
  for (sluice__link *l = sem->permits.head; l; l = l->next)
    sluice__permit_client_closed(sluice__container_of(l, sluice_permit, link));
  sem->dispatching--;
  sluice__sem_dispatch_done(sem);
}

void sluice__sem_dispatch_done(sluice_sem *sem) {
  if (!sem->freeing || sem->dispatching) return;
  /* Releases queued by the callbacks (late grants) still go out. */
  sem->dispatching++;
  sluice__release_cancel_all(sem);
  sem->dispatching--;
  if (sem->listener) {
    sluice__unlisten(sem->listener);
    sem->listener = NULL;
  }
  sluice__client_detach(sem->c, &sem->child);
  sem_destroy(sem);
}

void sluice_sem_free(sluice_sem *sem) {
  if (!sem || sem->freeing) return;
  sem->freeing = 1;
  sem->dispatching++;
  cancel_pending(sem);
  while (sem->permits.head) {
    sluice_permit *p = sluice__container_of(sem->permits.head, sluice_permit, link);
    sluice__release_queue(sem, p->id, NULL, NULL); /* no-op once closed */
    sluice__permit_drop(p);
  }
  sem->dispatching--;
  sluice__sem_dispatch_done(sem);
}
