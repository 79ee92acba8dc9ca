/*
 * Semaphore handles: options, keys, inspection and teardown. The parts are
 * called from here and never call back (see sem/sem.h): acquisition
 * in sem_acquire.c, releases in sem_release.c, held permits and their
 * renewal in permit.c.
 */
#include <stdlib.h>
#include <string.h>

#include <event2/event.h>

#include "sem/sem.h"

typedef struct sem_inspect_req {
  sluice_sem *sem;
  sluice__pending pending; /* in sem->inspects */
  sluice_sem_info_cb *cb;
  void *ud;
} sem_inspect_req;

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

/* ---- inspection ---------------------------------------------------------- */

/* Decode the status script's reply into info (arrays malloc'd by us). */
static int decode_info(const redisReply *r, sluice_sem_info *info, sluice_holder_info **holders,
                       const char ***waiters) {
  const redisReply *h = sluice__reply_at(r, 2), *w = sluice__reply_at(r, 3);
  int64_t permits, fence, held, queued;
  memset(info, 0, sizeof *info);
  if (!h || !w || h->type != REDIS_REPLY_ARRAY || w->type != REDIS_REPLY_ARRAY ||
      sluice__reply_i64(sluice__reply_at(r, 0), &permits) ||
      sluice__reply_i64(sluice__reply_at(r, 1), &fence) || h->elements % 2 ||
      sluice__reply_i64(sluice__reply_at(r, 4), &held) ||
      sluice__reply_i64(sluice__reply_at(r, 5), &queued) || held < 0 || queued < 0)
    return SLUICE_EPROTOCOL;
  info->permits = (unsigned)permits;
  info->last_fence = (uint64_t)fence;
  info->holders_total = (size_t)held;
  info->queued_total = (size_t)queued;
  info->nholders = h->elements / 2;
  info->nwaiters = w->elements;
  *holders = calloc(info->nholders + 1, sizeof **holders);
  *waiters = calloc(info->nwaiters + 1, sizeof **waiters);
  if (!*holders || !*waiters) return SLUICE_ENOMEM;
  for (size_t i = 0; i < info->nholders; i++) {
    int64_t left;
    if (h->element[2 * i]->type != REDIS_REPLY_STRING ||
        sluice__reply_i64(h->element[2 * i + 1], &left))
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

static void inspect_finish(sem_inspect_req *r, int status, const sluice_sem_info *info) {
  sluice_sem *sem = r->sem;
  sluice_sem_info_cb *cb = r->cb;
  void *ud = r->ud;
  sluice__list_remove(&sem->inspects, &r->pending.link);
  sluice__free(r);
  sluice__guard_enter(&sem->guard);
  cb(sem, status, info, ud);
  sluice__guard_leave(&sem->guard);
}

static void on_inspect(void *ud, int status, const redisReply *reply) {
  sem_inspect_req *r = ud;
  sluice_sem_info info;
  sluice_holder_info *holders = NULL;
  const char **waiters = NULL;
  if (status == SLUICE_OK) status = decode_info(reply, &info, &holders, &waiters);
  inspect_finish(r, status, status == SLUICE_OK ? &info : NULL);
  free(holders);
  free(waiters);
}

int sluice_sem_inspect(sluice_sem *sem, sluice_sem_info_cb *cb, void *ud) {
  if (!sem || !cb) return SLUICE_EINVAL;
  if (!sluice__guard_live(&sem->guard)) return SLUICE_ECLOSED;
  sem_inspect_req *r = sluice__calloc(1, sizeof *r);
  if (!r) return SLUICE_ENOMEM;
  r->sem = sem;
  r->cb = cb;
  r->ud = ud;
  int rc = sluice__eval(sem->c, &sluice__lua_sem_status, SEM_NKEYS, SEM_NKEYS,
                        (const char *const *)sem->keys, NULL, sem->o.op_timeout_ms, on_inspect, r,
                        &r->pending.op);
  if (rc) {
    sluice__free(r);
    return rc;
  }
  sluice__list_append(&sem->inspects, &r->pending.link);
  return SLUICE_OK;
}

/* ---- lifetime ------------------------------------------------------------ */

static void sem_quiesce(sluice__guard *g) {
  sluice_sem *sem = sluice__container_of(g, sluice_sem, guard);
  sluice__acquire_quiesce(sem);
  sluice__permits_quiesce(sem);
  sluice__pending_detach_all(&sem->inspects);
}

static void sem_cancel(sluice__guard *g) {
  sluice_sem *sem = sluice__container_of(g, sluice_sem, guard);
  sluice__acquire_cancel_all(sem);
  sluice__permits_cancel_all(sem);
  while (sem->inspects.head) {
    sem_inspect_req *r = sluice__container_of(sem->inspects.head, sem_inspect_req, pending.link);
    sluice__op_detach(r->pending.op);
    inspect_finish(r, SLUICE_ECANCELED, NULL);
  }
  /* Last: releases queued by everything above still go out. */
  sluice__release_cancel_all(sem);
}

static int sem_idle(const sluice__guard *g) {
  const sluice_sem *sem = sluice__container_of(g, sluice_sem, guard);
  /* Held permits owe no callback: cancel releases them without one. */
  return sluice__acquire_idle(sem) && !sem->inspects.head && sluice__release_idle(sem);
}

static void sem_destroy(sluice__guard *g) {
  sluice_sem *sem = sluice__container_of(g, sluice_sem, guard);
  sluice__acquire_teardown(sem);
  sluice__release_teardown(sem);
  sluice__permit_teardown(sem);
  sluice__flusher_clear(&sem->flusher);
  for (int i = 0; i < SEM_NKEYS; i++) free(sem->keys[i]);
  free(sem->wake_base);
  free(sem->wake_key);
  free(sem->restored_key);
  free(sem->name);
  sluice__free(sem);
}

/* The connection is back: parked releases go first (the flusher sends
 * releases before attempts), then every waiter tries at once. */
static void sem_resume(sluice__guard *g) {
  sluice_sem *sem = sluice__container_of(g, sluice_sem, guard);
  sluice__release_resume(sem);
  sluice__permits_resume(sem);
  sluice__acquire_resume(sem);
}

/* Another node serves the semaphore (a failover, a restart): the client's
 * unreplicated releases were sent there already; now every permit held
 * is re-asserted, and every blocked waiter tries at once (a release
 * replayed there may have freed a permit). */
static void sem_node_changed(sluice__guard *g, int lo, int hi) {
  sluice_sem *sem = sluice__container_of(g, sluice_sem, guard);
  if (lo >= 0 && (sem->route < (unsigned)lo || sem->route > (unsigned)hi)) return;
  sluice__permits_reassert(sem);
  sluice__acquire_resume(sem);
}

const sluice__obj_kind sluice__sem_obj = {"sem"};

static const sluice__guard_ops sem_guard_ops = {.quiesce = sem_quiesce,
                                                .cancel = sem_cancel,
                                                .idle = sem_idle,
                                                .destroy = sem_destroy,
                                                .resume = sem_resume,
                                                .node_changed = sem_node_changed};

static int sem_init(sluice_sem *sem, sluice_client *c, const char *name) {
  sem->name = strdup(name);
  if (!sem->name) return SLUICE_ENOMEM;
  for (int i = 0; i < SEM_NKEYS; i++)
    if (!(sem->keys[i] = sluice__key(c, "sem", name, sluice__sem_parts[i]))) return SLUICE_ENOMEM;
  sem->wake_base = sluice__key(c, "sem", name, "wake:");
  sem->restored_key = sluice__key(c, "sem", name, "restored");
  if (!sem->restored_key) return SLUICE_ENOMEM;
  sem->wake_key = sem->wake_base ? malloc(strlen(sem->wake_base) + 33) : NULL;
  if (!sem->wake_key) return SLUICE_ENOMEM;
  strcpy(sem->wake_key, sem->wake_base);
  strcat(sem->wake_key, sem->handle_id);
  if (sluice__flusher_init(&sem->flusher, sluice__client_base(c)) != SLUICE_OK)
    return SLUICE_ENOMEM;
  if (sluice__release_setup(sem) != SLUICE_OK) return SLUICE_ENOMEM;
  if (sluice__permit_setup(sem) != SLUICE_OK) return SLUICE_ENOMEM;
  return sluice__acquire_setup(sem);
}

static void set_call(sluice_sem *sem) {
  sluice__sem_call *s = &sem->call;
  uint64_t longest = sem->o.ttl_ms > sem->o.heartbeat_ms ? sem->o.ttl_ms : sem->o.heartbeat_ms;
  for (int i = 0; i < SEM_NKEYS; i++) s->keys[i] = sem->keys[i];
  s->wake_base = sem->wake_base;
  s->restored_key = sem->restored_key;
  s->permits = sem->o.permits;
  s->ttl_ms = sem->o.ttl_ms;
  s->heartbeat_ms = sem->o.heartbeat_ms;
  s->keep_ms = longest * 2 + 60000; /* abandoned keys vanish */
  s->fair = sem->o.fair;
}

int sluice_sem_new(sluice_client *c, const char *name, const sluice_sem_options *opts,
                   sluice_sem **out) {
  sluice_sem_options defaults;
  if (out) *out = NULL;
  if (!c || !out || !sluice__valid_name(name)) return SLUICE_EINVAL;
  if (!opts) {
    sluice_sem_options_init(&defaults);
    opts = &defaults;
  }
  int rc = check_options(opts);
  if (rc) return rc;
  sluice_sem *sem = sluice__handle_alloc(c, sizeof *sem, &rc);
  if (!sem) return rc;
  sem->c = c;
  sem->o = *opts;
  if (!sem->o.renew_ms) sem->o.renew_ms = sem->o.ttl_ms / 3 ? sem->o.ttl_ms / 3 : 1;
  if (!sem->o.heartbeat_ms) sem->o.heartbeat_ms = 3000;
  sluice__random_hex(sem->handle_id);
  if (sem_init(sem, c, name) != SLUICE_OK) {
    sem_destroy(&sem->guard);
    return SLUICE_ENOMEM;
  }
  set_call(sem);
  sem->route = sluice__client_route(c, sem->keys[0]);
  sluice__handle_attach(
      c, &sem->guard, &sem_guard_ops,
      &(sluice__obj_view){&sluice__sem_obj, sem, sem->name, NULL, &sem->wait_hist});
  *out = sem;
  return SLUICE_OK;
}

const char *sluice_sem_name(const sluice_sem *sem) { return sem ? sem->name : NULL; }

void sluice_sem_free(sluice_sem *sem) {
  if (sem) sluice__guard_free(&sem->guard);
}

void sluice_sem_get_metrics(const sluice_sem *sem, sluice_sem_metrics *out) {
  if (!out) return;
  memset(out, 0, sizeof *out);
  if (!sem) return;
  *out = sem->m;
  sluice__latency_of(&sem->wait_hist, &out->wait);
  out->pending = sem->npending;
  out->queued = sem->nwaiting;
}
