/*
 * Releases. Every release ready in one loop turn goes to Redis in one script
 * call (sem_release.lua takes a list of permit ids): under load this is what
 * keeps Redis's cost per release low. Releases are also how the library
 * returns permits it was granted after the caller gave up; those have no
 * callback.
 */
#include <string.h>

#include "sem-internal.h"

typedef struct rel_req {
  sluice__breq req;               /* in sem->releases */
  char id[33];
  sluice_release_cb *cb;          /* NULL: nobody waits for the answer */
  void *ud;
} rel_req;

static void build(sluice__args *a, void *owner, sluice__breq *const *reqs, size_t n) {
  sluice_sem *sem = owner;
  sluice__sem_release_head(a, &sem->call);
  for (size_t i = 0; i < n; i++)
    sluice__sem_release_item(a, sluice__container_of(reqs[i], rel_req, req)->id);
}

/* Held (1) or already gone (0); ECANCELED once the handle is being freed or
 * the client closed: no other answer may reach the caller then. */
static void answer(void *owner, sluice__breq *r, int status, const sluice__batch_reply *br) {
  sluice_sem *sem = owner;
  rel_req *rel = sluice__container_of(r, rel_req, req);
  int64_t held = 0;
  if (status == SLUICE_OK)
    status = sluice__reply_i64(br->reply->element[br->at], &held) ? SLUICE_EPROTOCOL
             : held                                             ? SLUICE_OK
                                                                : SLUICE_ENOTFOUND;
  if (!sluice__guard_live(&sem->guard) || status == SLUICE_ECLOSED) status = SLUICE_ECANCELED;
  sluice_release_cb *cb = rel->cb;
  void *ud = rel->ud;
  sluice__free(rel);
  if (cb) cb(sem, status, ud);
}

static const sluice__batch_kind release_kind = {
    &sluice__lua_sem_release, SEM_BATCH_MAX,
    SEM_RELEASE_ARGS_HEAD, SEM_RELEASE_ARGS_PER, SEM_RELEASE_NUMS_HEAD, SEM_RELEASE_NUMS_PER,
    0, 1, build, answer, NULL};

void sluice__release_setup(sluice_sem *sem) {
  sluice__batcher_init(&sem->releases, &release_kind, sem->c, sem, &sem->guard, &sem->flusher,
                       sem->o.op_timeout_ms);
}

int sluice__release_queue(sluice_sem *sem, const char *id, sluice_release_cb *cb, void *ud) {
  if (sem->guard.closed) return SLUICE_ECLOSED;
  rel_req *rel = sluice__calloc(1, sizeof *rel);
  if (!rel) return SLUICE_ENOMEM;
  memcpy(rel->id, id, 32);
  rel->cb = cb;
  rel->ud = ud;
  sluice__batcher_queue(&sem->releases, &rel->req, sem->route);
  return SLUICE_OK;
}

void sluice__release_cancel_all(sluice_sem *sem) {
  sluice__batcher_flush(&sem->releases); /* what is queued still goes out */
  sluice__batcher_cancel(&sem->releases, SLUICE_ECANCELED);
}

int sluice__release_idle(const sluice_sem *sem) {
  return sluice__batcher_pending(&sem->releases) == 0;
}
