/*
 * Distributed counting semaphores (a mutex is permits = 1).
 *
 * Each grant is a permit with a lease: a unique id held in Redis with an
 * expiry on Redis's clock. While held, the permit is renewed by a libevent
 * timer, extend-only-if-still-mine: a renewal never re-creates a permit that
 * already expired. If Redis says the permit is gone the lost callback fires
 * with SLUICE_LOST_DEFINITE; if the lease runs out locally without a confirmed
 * renewal (Redis unreachable or slow) it fires with SLUICE_LOST_UNCERTAIN.
 * After either, assume you no longer hold the permit.
 *
 * Blocking acquire waits on BRPOP (the client's one blocking connection, shared
 * by all waiters), woken by releases; every wait is also bounded by the
 * earliest holder's lease expiry, so a crashed holder still lets waiters in.
 * Fair semaphores grant blocking acquirers in FIFO order of arrival across all
 * processes. A handle's waiters are kept in Redis's queue by one heartbeat
 * per handle (one step every heartbeat_ms / 3, however many wait); a handle
 * whose process stops beating loses its waiters' places.
 *
 * Deadlines: every acquire attempt carries the latest moment, on Redis's
 * clock, at which its caller still wants a permit (its timeout, or the
 * step's own deadline if that comes first), and Redis never grants, queues
 * or hands a permit to an attempt past it. So a stall, a paused client or a
 * process that exited can delay a grant but never create an orphan: a
 * permit granted to a caller that gave up. The client learns Redis's clock
 * from the replies it gets anyway (before the first one, one TIME goes
 * first); a Cluster's or Sentinel set's servers are assumed to keep their
 * clocks within a few ms of each other (NTP).
 */
#ifndef SLUICE_SEM_H
#define SLUICE_SEM_H

#include <stddef.h>
#include <stdint.h>
#include <sluice/common.h>
#include <sluice/types.h>

#ifdef __cplusplus
extern "C" {
#endif

/* See local_handoff below. */
#define SLUICE_LOCAL_HANDOFFS_MAX 16

typedef struct sluice_sem_options {
  unsigned permits;  /* >= 1; default 1 */
  unsigned ttl_ms;   /* lease length, >= 10; default 30000 */
  unsigned renew_ms; /* renewal period, < ttl_ms; 0 = ttl_ms / 3 */
  int fair;          /* 1: FIFO-fair blocking acquire; default 0 */
  int auto_renew;    /* 1: renew while held (default); 0: lease just expires */
  /* Waiters whose process stops beating this long lose their places (a
   * killed process's waiters hold their places, or a permit handed to
   * them, no longer than this); default 3000. */
  unsigned heartbeat_ms;
  unsigned op_timeout_ms; /* deadline of each Redis step; 0 = client default */
  /* 1: a blocking acquire gives up at once with SLUICE_ECONNECTION when Redis
   * cannot be reached, instead of retrying until its timeout (the choice for
   * a request path that should answer "unavailable" quickly); default 0. */
  int fail_fast;
  /* 1: a permit released through this handle while one of its own blocking
   * acquires waits in the queue goes straight to the oldest such waiter,
   * with no Redis step between (non-fair semaphores with auto_renew only).
   * It is the same lease: id, fencing token and expiry carry over (a token
   * guards against a paused process, and both sides share one loop). A
   * lease is handed on at most SLUICE_LOCAL_HANDOFFS_MAX times in a row; its
   * next release goes through Redis, whose queue serves the oldest waiter of
   * any process. The choice for one process serving many requests (a
   * gateway), where the round trip would idle the permit; default 0. */
  int local_handoff;
  /* Acquires (try and blocking) pending at once on this handle; past it
   * they fail at once with SLUICE_EFULL. 0: 100000. The client caps all
   * its handles together too (sluice_client_options.sem_pending_max). */
  unsigned max_pending;
} sluice_sem_options;

SLUICE_EXPORT void sluice_sem_options_init(sluice_sem_options *opts);

/* Create a handle on the semaphore NAME (1..SLUICE_NAME_MAX bytes). Several
 * handles, in one process or many, may name the same semaphore; they should
 * agree on permits. SLUICE_EINVAL for bad options (zero permits or TTL,
 * renew_ms >= ttl_ms), SLUICE_ECLOSED when the client is closed. */
SLUICE_EXPORT int sluice_sem_new(sluice_client *client, const char *name,
                                 const sluice_sem_options *opts, sluice_sem **out);

/* Free the handle. As for every sluice object (see sluice.h):
 * operations still pending complete with SLUICE_ECANCELED from the loop,
 * never inside this call; no other callback of it runs afterwards; freeing
 * inside any of its own callbacks is safe; NULL is a no-op.
 * Permits still held through it are released in Redis and their handles
 * become invalid now. */
SLUICE_EXPORT void sluice_sem_free(sluice_sem *sem);

SLUICE_EXPORT const char *sluice_sem_name(const sluice_sem *sem);

/* status: SLUICE_OK with a permit you now own (release it with
 * sluice_permit_release), SLUICE_EBUSY (try_acquire: none free),
 * SLUICE_ETIMEDOUT (acquire: its timeout passed), SLUICE_ENOREPLICA (the
 * master has replicas and none had the grant in time: a master cut off
 * from them, or a slow link; see sluice_client_set_replica_ack), SLUICE_ECANCELED, or a
 * transport status: SLUICE_ECONNECTION (Redis unreachable), SLUICE_EINDOUBT or
 * SLUICE_ETIMEDOUT (try_acquire: the answer was lost or late). You hold no
 * permit in any of these cases: one Redis may have granted to an attempt
 * whose answer was lost is released by the library (retried across
 * reconnects until Redis confirms it). permit is NULL unless status is
 * SLUICE_OK. */
typedef void sluice_acquire_cb(sluice_sem *sem, int status, sluice_permit *permit, void *userdata);

/* Take a permit if one is free now; never waits for one. On a fair semaphore
 * it is refused (SLUICE_EBUSY) while blocking acquirers wait. An answer that
 * would come after the step's deadline is not given: Redis grants nothing
 * it reads that late (SLUICE_ETIMEDOUT). SLUICE_EFULL as for acquire. */
SLUICE_EXPORT int sluice_sem_try_acquire(sluice_sem *sem, sluice_acquire_cb *cb, void *userdata);

/* Wait up to timeout_ms for a permit (0 = no limit). Redis grants none
 * later than (about 20 ms before) the timeout, so the grant has time to
 * arrive (see "Deadlines" above). *handle (if non-NULL) receives a handle
 * for sluice_acquire_cancel, valid until cb runs. SLUICE_EFULL when the
 * handle or the client has its most acquires pending (max_pending). */
SLUICE_EXPORT int sluice_sem_acquire(sluice_sem *sem, unsigned timeout_ms, sluice_acquire_cb *cb,
                                     void *userdata, sluice_acquire **handle);

/* Cancel a pending acquire: its callback runs with SLUICE_ECANCELED from the
 * loop (a permit granted in the meantime is released). SLUICE_EINVAL if NULL. */
SLUICE_EXPORT int sluice_acquire_cancel(sluice_acquire *acquire);

enum sluice_lost_reason {
  SLUICE_LOST_DEFINITE = 1, /* Redis says the permit is no longer ours */
  SLUICE_LOST_UNCERTAIN = 2 /* lease ran out locally without confirmation */
};
typedef void sluice_lost_cb(sluice_permit *permit, int reason, void *userdata);

/* Called at most once per permit. Set it from the acquire callback. */
SLUICE_EXPORT void sluice_permit_set_lost_cb(sluice_permit *permit, sluice_lost_cb *cb,
                                             void *userdata);

SLUICE_EXPORT sluice_sem *sluice_permit_sem(const sluice_permit *permit);
/* Unique id of this grant (32 hex characters). */
SLUICE_EXPORT const char *sluice_permit_id(const sluice_permit *permit);
/* Fencing token: strictly increases with every grant of the semaphore,
 * and every token of a newer master (a promoted replica) is higher than
 * every token of the one it replaced (a local_handoff passes the holder's
 * lease on, token included). See docs/failures.md. */
SLUICE_EXPORT uint64_t sluice_permit_fence(const sluice_permit *permit);
/* Local estimate of the lease time left (conservative); 0 once lost. */
SLUICE_EXPORT int64_t sluice_permit_remaining_ms(const sluice_permit *permit);
/* 0 while held, else the sluice_lost_reason. */
SLUICE_EXPORT int sluice_permit_lost(const sluice_permit *permit);
/* 1 when its grant (or last renewal) was acknowledged by a replica (by
 * wait_replicas of them, when set) in time; 0 when fewer did (only with
 * the replica ack off and wait_replicas: the permit is still held, but a
 * failover now could lose it); -1 when not asked (a master never seen with
 * a replica, or the replica ack off without wait_replicas). */
SLUICE_EXPORT int sluice_permit_replicated(const sluice_permit *permit);

/* status: SLUICE_OK released; SLUICE_ENOTFOUND it had already expired or been
 * taken away; SLUICE_ECANCELED when the handle was freed or the client closed
 * first. A release that cannot reach Redis is not answered with an error: it
 * is sent again after the reconnect, until Redis answers it or its lease has
 * surely ended (then SLUICE_ECONNECTION, and the lease has expired). */
typedef void sluice_release_cb(sluice_sem *sem, int status, void *userdata);

/* Release the permit and free its handle (invalid after this call, even when
 * an error is returned). cb may be NULL. With local_handoff the lease may go
 * to a waiter of the same handle instead, answered SLUICE_OK before that
 * waiter's grant. Releasing frees only this permit, never another holder's;
 * releasing a lost permit is harmless. After the
 * client was closed it returns SLUICE_ECLOSED and the lease simply expires. */
SLUICE_EXPORT int sluice_permit_release(sluice_permit *permit, sluice_release_cb *cb,
                                        void *userdata);

/* Release a permit by its id (sluice_permit_id(), e.g. one a program stored
 * before it restarted): for a holder that lost its handle. Like a release
 * through the handle it frees only that permit, is harmless to repeat, and
 * survives connection blips. permit_id is 32 hex characters (SLUICE_EINVAL
 * otherwise); cb may be NULL. */
SLUICE_EXPORT int sluice_sem_release_id(sluice_sem *sem, const char *permit_id,
                                        sluice_release_cb *cb, void *userdata);

typedef struct sluice_holder_info {
  const char *id;
  int64_t remaining_ms; /* lease left on Redis's clock */
} sluice_holder_info;

/* Most holders and waiters sluice_sem_inspect lists. */
#define SLUICE_SEM_INSPECT_MAX 1000

typedef struct sluice_sem_info {
  unsigned permits; /* as last declared by an acquirer; 0 if unknown */
  size_t nholders;  /* listed: the SLUICE_SEM_INSPECT_MAX soonest to expire */
  const sluice_holder_info *holders;
  size_t nwaiters; /* listed: the live blocking acquirers among the first
                              SLUICE_SEM_INSPECT_MAX queued, in arrival order */
  const char *const *waiters;
  uint64_t last_fence;
  size_t holders_total; /* live holders in all */
  size_t queued_total;  /* queued acquirers in all (some may be dead, not
                              evicted yet) */
} sluice_sem_info;

typedef void sluice_sem_info_cb(sluice_sem *sem, int status, const sluice_sem_info *info,
                                void *userdata);

/* Read holders (with remaining lease), waiters and permits: one script whose
 * work and reply are bounded by SLUICE_SEM_INSPECT_MAX, however many
 * permits are held and acquirers wait. */
SLUICE_EXPORT int sluice_sem_inspect(sluice_sem *sem, sluice_sem_info_cb *cb, void *userdata);

/* Counters of this handle since it was created (see "metrics" in
 * sluice/client.h). wait: blocking acquires that were granted, from the call
 * to the grant. */
typedef struct sluice_sem_metrics {
  uint64_t grants;          /* acquires (try or blocking) that got a permit */
  uint64_t busy;            /* try_acquire refused: none free */
  uint64_t waits;           /* blocking acquires that had to queue */
  uint64_t timeouts;        /* blocking acquires that ran out of time */
  uint64_t failures;        /* acquires ended by another status (cancel, transport) */
  uint64_t renewals;        /* leases extended */
  uint64_t renew_errors;    /* renewal steps without an answer (retried) */
  uint64_t lost_definite;   /* SLUICE_LOST_DEFINITE */
  uint64_t lost_uncertain;  /* SLUICE_LOST_UNCERTAIN */
  uint64_t releases_parked; /* releases that could not reach Redis and wait to retry */
  sluice_latency wait;
  uint64_t local_handoffs; /* permits handed to a waiter of this handle (local_handoff) */
  /* Attempts Redis read after their deadline and did nothing for (a stall,
   * or a slow connection): never a grant to a caller that gave up. */
  uint64_t late;
  uint64_t pending; /* now: acquires not yet answered (see max_pending) */
  uint64_t queued;  /* now: of them, waiting in Redis's queue */
} sluice_sem_metrics;
SLUICE_EXPORT void sluice_sem_get_metrics(const sluice_sem *sem, sluice_sem_metrics *out);

#ifdef __cplusplus
}
#endif

#endif /* SLUICE_SEM_H */
