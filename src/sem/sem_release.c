/*
 * Releases. Every release ready in one loop turn goes to Redis in one script
 * call (sem_release.lua takes a list of permit ids): under load this is what
 * keeps Redis's cost per release low. Releases are also how the library
 * returns permits it may have been granted after the caller gave up; those
 * have no callback.
 *
 * A release survives a blip: one that could not reach Redis, or whose
 * answer was lost, is parked and sent again when the connection is back
 * (and on a backoff timer), until Redis answers it or the lease it refers
 * to has surely ended. A step Redis could not read before a connection
 * broke runs before anything sent on the next one, so a retried release
 * also removes a permit granted late to an abandoned attempt. Ids are
 * idempotent: releasing twice is harmless.
 *
 * A release Redis answered may still be missing after a failover (the old
 * master answered it after the switch, or died before its replicas had
 * it), leaving the permit taken for the rest of its lease: the client's
 * record of unreplicated writes keeps each answered call and sends it
 * again to a new node (core/record.h; release_kind.record).
 */
#include <stddef.h>
#include <string.h>

#include "sem/sem.h"

#define RETRY_MIN_MS 50
#define RETRY_MAX_MS 1000

typedef struct rel_req {
  sluice__breq req;  /* in sem->releases */
  sluice__link park; /* in sem->parked, while waiting to retry */
  char id[33];
  sluice_release_cb *cb; /* NULL: nobody waits for the answer */
  void *ud;
  uint64_t queued_ms; /* monotonic: first queued */
  int parked_once;    /* counted and logged when first parked */
} rel_req;

static void build(sluice__args *a, void *owner, sluice__breq *const *reqs, size_t n) {
  sluice_sem *sem = owner;
  sluice__sem_release_head(a, &sem->call);
  for (size_t i = 0; i < n; i++)
    sluice__sem_release_item(a, sluice__container_of(reqs[i], rel_req, req)->id);
}

static void reply_to(sluice_sem *sem, rel_req *rel, int status) {
  sluice_release_cb *cb = rel->cb;
  void *ud = rel->ud;
  sluice__free(rel);
  if (cb) cb(sem, status, ud);
}

/* Whether the lease a parked release refers to may still exist: it was
 * granted at the latest when Redis last accepted a connection of ours
 * after the release was queued, so it ends within a lease of that. */
static int lease_may_live(const sluice_sem *sem, const rel_req *rel) {
  uint64_t since = sluice__client_up_since(sem->c);
  if (since < rel->queued_ms) since = rel->queued_ms;
  uint64_t bound = sem->o.ttl_ms + sluice__client_op_timeout(sem->c);
  return sluice__mono_ms() < since + bound;
}

static void park(sluice_sem *sem, rel_req *rel) {
  sluice__list_append(&sem->parked, &rel->park);
  if (!evtimer_pending(sem->release_retry, NULL))
    sluice__timer_in(sem->release_retry, sem->retry_ms);
  sem->retry_ms = sem->retry_ms * 2 > RETRY_MAX_MS ? RETRY_MAX_MS : sem->retry_ms * 2;
}

/* Held (1) or already gone (0). Transport failures park the release; once
 * the handle is freed or the client closed the caller hears
 * SLUICE_ECANCELED (no other answer may reach it then). */
static void answer(void *owner, sluice__breq *r, int status, const sluice__batch_reply *br) {
  sluice_sem *sem = owner;
  rel_req *rel = sluice__container_of(r, rel_req, req);
  int64_t held = 0;
  if (status == SLUICE_OK)
    status = sluice__reply_i64(br->reply->element[br->at], &held) ? SLUICE_EPROTOCOL
             : held                                               ? SLUICE_OK
                                                                  : SLUICE_ENOTFOUND;
  int transport = status == SLUICE_ECONNECTION || status == SLUICE_EINDOUBT ||
                  status == SLUICE_ETIMEDOUT;
  if (transport && !sem->guard.closed && lease_may_live(sem, rel)) {
    if (!rel->parked_once) {
      rel->parked_once = 1;
      sem->m.releases_parked++;
      sluice__log(sem->c, SLUICE_LOG_WARN,
                  "semaphore '%s': release of permit %s parked (%s); sent again when Redis "
                  "answers",
                  sem->name, rel->id, sluice_err_name(status));
    }
    park(sem, rel);
    return;
  }
  if (status == SLUICE_OK || status == SLUICE_ENOTFOUND) sem->retry_ms = RETRY_MIN_MS;
  if (transport) status = SLUICE_ECONNECTION; /* gave up: the lease has ended anyway */
  if (!sluice__guard_live(&sem->guard) || status == SLUICE_ECLOSED) status = SLUICE_ECANCELED;
  reply_to(sem, rel, status);
  sluice__guard_poke(&sem->guard);
}

/* Kept in the record of unreplicated writes; its replays are the client's
 * replay_releases. */
static const sluice__write_kind release_write = {
    .replay_metric = offsetof(sluice_client_metrics, replay_releases),
};

static const sluice__batch_kind release_kind = {
    SLUICE__BATCH_SCRIPT(sluice__lua_sem_release, SEM_BATCH_MAX, SEM_RELEASE), .build = build,
    .answer = answer, .record = &release_write};

/* Send every parked release again, in the order they were parked. */
static void unpark_all(sluice_sem *sem) {
  while (sem->parked.head) {
    rel_req *rel = sluice__container_of(sem->parked.head, rel_req, park);
    sluice__list_remove(&sem->parked, &rel->park);
    sluice__batcher_queue(&sem->releases, &rel->req, sem->route);
  }
}

static void retry_cb(evutil_socket_t fd, short what, void *arg) { unpark_all(arg); }

int sluice__release_setup(sluice_sem *sem) {
  sluice__batcher_init(&sem->releases, &release_kind, sem->c, sem, &sem->guard, &sem->flusher,
                       sem->o.op_timeout_ms);
  sem->retry_ms = RETRY_MIN_MS;
  sem->release_retry = evtimer_new(sluice__client_base(sem->c), retry_cb, sem);
  return sem->release_retry ? SLUICE_OK : SLUICE_ENOMEM;
}

void sluice__release_teardown(sluice_sem *sem) {
  if (sem->release_retry) event_free(sem->release_retry);
  sem->release_retry = NULL;
}

int sluice__release_queue(sluice_sem *sem, const char *id, sluice_release_cb *cb, void *ud) {
  if (sem->guard.closed) return SLUICE_ECLOSED;
  rel_req *rel = sluice__calloc(1, sizeof *rel);
  if (!rel) return SLUICE_ENOMEM;
  memcpy(rel->id, id, 32);
  rel->cb = cb;
  rel->ud = ud;
  rel->queued_ms = sluice__mono_ms();
  sluice__batcher_queue(&sem->releases, &rel->req, sem->route);
  return SLUICE_OK;
}

void sluice__release_resume(sluice_sem *sem) {
  sem->retry_ms = RETRY_MIN_MS;
  evtimer_del(sem->release_retry);
  unpark_all(sem);
}

/* Freed: parked releases keep trying (the handle's memory waits for them).
 * Client closed: one last try goes out with what is queued; what cannot be
 * sent any more is counted as abandoned. */
void sluice__release_cancel_all(sluice_sem *sem) {
  if (!sem->guard.closed) {
    sluice__batcher_flush(&sem->releases);
    return;
  }
  evtimer_del(sem->release_retry);
  if (sluice_client_is_connected(sem->c)) unpark_all(sem);
  sluice__batcher_flush(&sem->releases);
  sluice__batcher_cancel(&sem->releases, SLUICE_ECANCELED);
  while (sem->parked.head) {
    rel_req *rel = sluice__container_of(sem->parked.head, rel_req, park);
    sluice__list_remove(&sem->parked, &rel->park);
    sluice__client_note_abandoned(sem->c, rel->id);
    reply_to(sem, rel, SLUICE_ECANCELED);
  }
}

static int valid_permit_id(const char *id) {
  for (int i = 0; i < 32; i++)
    if (!id[i] || !strchr("0123456789abcdef", id[i])) return 0;
  return id[32] == '\0';
}

int sluice_sem_release_id(sluice_sem *sem, const char *permit_id, sluice_release_cb *cb, void *ud) {
  if (!sem || !permit_id || !valid_permit_id(permit_id)) return SLUICE_EINVAL;
  if (!sluice__guard_live(&sem->guard)) return SLUICE_ECLOSED;
  return sluice__release_queue(sem, permit_id, cb, ud);
}

int sluice__release_idle(const sluice_sem *sem) {
  return sluice__batcher_pending(&sem->releases) == 0 && !sem->parked.head;
}
