/*
 * Private interface between the client (connections, scripts, blocking
 * waits) and the primitives built on it. Never installed.
 *
 * Data flows one way: a primitive runs a script through sluice__eval(), the
 * client sends it, and the reply comes back through the primitive's
 * sluice__reply_fn from the loop. Primitives never touch hiredis contexts.
 */
#ifndef SLUICE_ENGINE_H
#define SLUICE_ENGINE_H

#include <stddef.h>
#include <stdint.h>

#include <hiredis/hiredis.h>
#include <sluice/client.h>
#include <sluice/sluice.h>

#include "base/list.h"
#include "base/util.h"
#include "lua_scripts.h"

struct event_base;
struct sluice__conn;

/* ---- operations ---------------------------------------------------------- */

typedef struct sluice__op sluice__op;

/* Completion of one Redis step, called once from the loop.
 *  status == SLUICE_OK:      reply is the (non-error) reply, borrowed.
 *  status == SLUICE_EREDIS:  reply is the error reply (reply->str says why).
 *  otherwise (ETIMEDOUT, ECONNECTION, ECANCELED, ...): reply is NULL. */
typedef void sluice__reply_fn(void *userdata, int status, const redisReply *reply);

/* Run script s with nkeys KEYS followed by ARGV (argc strings in all) by
 * EVALSHA, falling back to EVAL on NOSCRIPT. timeout_ms 0 = client default.
 * Returns 0 (fn will be called exactly once, never before this returns) or
 * SLUICE_EINVAL / SLUICE_ENOMEM / SLUICE_ECLOSED (fn will not be called).
 * *op (optional) lets the caller detach from the operation later. */
int sluice__eval(sluice_client *c, const sluice__script *s, int nkeys, int argc,
                 const char *const *argv, const size_t *lens, unsigned timeout_ms,
                 sluice__reply_fn *fn, void *userdata, sluice__op **op);

/* Send one plain command, same contract as sluice__eval. */
int sluice__command(sluice_client *c, int argc, const char *const *argv, const size_t *lens,
                    unsigned timeout_ms, sluice__reply_fn *fn, void *userdata, sluice__op **op);

/* Forget an operation: its fn will never be called. Safe at any time before
 * fn ran; the late reply, if any, is dropped. */
void sluice__op_detach(sluice__op *op);

/* A request with one operation in flight, listed by the handle that made
 * it so that freeing the handle reaches it. */
typedef struct sluice__pending {
  sluice__link link; /* in the handle's list */
  sluice__op *op;
} sluice__pending;

/* Inside a handle's _free (its quiesce): forget the operation of every
 * request listed in l; the requests stay listed, for cancel. */
void sluice__pending_detach_all(sluice__list *l);

/* ---- blocking waits ------------------------------------------------------ */

typedef struct sluice__listener sluice__listener;

/* An element popped from the listened list (data/len), or data == NULL after
 * the blocking connection was re-established, when wake-ups may have been
 * missed and the listener should re-check its state. */
typedef void sluice__wake_fn(void *userdata, const char *data, size_t len);

/* Wait (BRPOP, on the client's one blocking connection) for elements pushed
 * to the list key. Several listeners may share a key: each element goes to
 * the oldest listener of that key. */
int sluice__listen(sluice_client *c, const char *key, sluice__wake_fn *fn, void *userdata,
                   sluice__listener **out);
void sluice__unlisten(sluice__listener *l);

/* ---- client lifetime ----------------------------------------------------- */

/* Every object with callbacks embeds a guard (guard.h) attached to its
 * client's home: the client outlives them, and closing it cancels their
 * pending operations from the loop. */
struct sluice__guard_home;
struct sluice__guard_home *sluice__client_home(sluice_client *c);
int sluice__client_closing(const sluice_client *c);
/* A new public handle (semaphore, limiter, queue, consumer): size bytes,
 * zeroed; NULL with *rc SLUICE_ECLOSED when c is closing, or SLUICE_ENOMEM. */
void *sluice__handle_alloc(sluice_client *c, size_t size, int *rc);
/* The handle is ready: its guard joins c's objects, listed in the metrics
 * as *view (which must stay true while the handle lives). */
struct sluice__guard;
struct sluice__guard_ops;
struct sluice__obj_view;
void sluice__handle_attach(sluice_client *c, struct sluice__guard *g,
                           const struct sluice__guard_ops *ops,
                           const struct sluice__obj_view *view);
struct event_base *sluice__client_base(const sluice_client *c);
unsigned sluice__client_op_timeout(const sluice_client *c);
/* What the client knows of Redis's clock (rclock.h). */
struct sluice__rclock;
struct sluice__rclock *sluice__client_rclock(sluice_client *c);
/* What a client caps, so that no caller can grow it without bound: each
 * primitive defines its own (sem/sem.h...), and core/ keeps the counts
 * without knowing what they count. */
typedef struct sluice__cap_def {
  size_t option; /* offsetof an unsigned in sluice_client_options; 0 there: dflt */
  unsigned dflt;
  int preset;    /* 1: sluice_client_options_init writes dflt there (else 0) */
  size_t metric; /* offsetof an unsigned in sluice_client_metrics reporting the
                    count now; 0: none (offset 0, evals, is never one) */
} sluice__cap_def;
/* Every cap, NULL-terminated: the one list of them, outside core/
 * (src/primitives.c), so a new primitive's cap changes nothing here. */
#define SLUICE__CAPS_MAX 8
extern const sluice__cap_def *const sluice__caps[];
/* Reserve n under a cap before starting them (SLUICE_EFULL if that would
 * pass it: nothing reserved); release them when they end. */
int sluice__client_reserve(sluice_client *c, const sluice__cap_def *cap, size_t n);
void sluice__client_release(sluice_client *c, const sluice__cap_def *cap, size_t n);
/* Monotonic ms when the command connection last completed its handshake
 * (0: never). */
uint64_t sluice__client_up_since(const sluice_client *c);
/* A permit release that could not reach Redis before the client closed. */
void sluice__client_note_abandoned(sluice_client *c, const char *permit_id);
/* The route (hash slot) a key's calls go to; one Redis has one route, 0. */
unsigned sluice__client_route(const sluice_client *c, const char *key);

/* Calls that carry requests of several routes of one cluster node
 * (src/lua/_spread.lua). The node a route's calls go to now, as an identity
 * to group requests by, or NULL when they go route by route: one Redis, no
 * map yet, or a node that refused such a call since its last handshake. */
const void *sluice__client_spread_node(sluice_client *c, unsigned route);
/* 0 when calls cannot spread at all (one Redis): no need to ask the above. */
int sluice__client_may_spread(const sluice_client *c);
/* sluice__eval, sent to route's node with the KEYS among ARGV (numkeys 0,
 * ARGV[1] nkeys): the script must begin with _spread.lua. */
int sluice__eval_spread(sluice_client *c, unsigned route, const sluice__script *s, int nkeys,
                        int argc, const char *const *argv, const size_t *lens, unsigned timeout_ms,
                        sluice__reply_fn *fn, void *ud, sluice__op **out);
/* Such a call, sent to route's node, was declined (_spread.lua: nothing
 * ran) for the reason why, Redis's words: a key not served there (a map
 * out of date) changes nothing; any other refusal (the ACL refusing the
 * read) sends calls to that node route by route until it reconnects. */
void sluice__client_spread_declined(sluice_client *c, unsigned route, const char *why);

/* A reply came on conn after a silence in which its socket had to send
 * segments again: the network held traffic back, and a BRPOP's answer may
 * still be waiting on the node's retransmission timer, seconds away. The
 * blocking connections to that node start afresh (core/blocker.h). */
void sluice__client_link_recovered(sluice_client *c, struct sluice__conn *conn);

/* Queue a message for the client's log hook (a no-op while none is set);
 * delivered from the loop. */
void sluice__log(sluice_client *c, int level, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
int sluice__log_enabled(const sluice_client *c);

/* A histogram's summary for the metrics accessors (histogram.h). */
struct sluice__hist;
void sluice__latency_of(const struct sluice__hist *h, sluice_latency *out);
/* For the metrics exposition: the latency histogram behind the entry of
 * sluice_client_metrics.kinds[] named step (NULL if none), and the
 * client's objects (read only). */
const struct sluice__hist *sluice__client_step_hist(const sluice_client *c, const char *step);
const struct sluice__guard_home *sluice__client_objects(const sluice_client *c);

/* During a script's completion callback: 1 when wait_replicas acknowledged
 * its writes, 0 when fewer did in wait_timeout_ms, -1 when not asked. */
int sluice__client_replicated(const sluice_client *c);
/* Replicas a WAIT asks for: wait_replicas, or 1 to confirm a grant. */
unsigned sluice__client_wait_count(const sluice_client *c);
/* 1 when a --@confirm step on route would now wait for a replica (the
 * node was seen with one, and sluice_client_set_replica_ack did not turn
 * it off). */
int sluice__client_confirms(sluice_client *c, int route);
/* 1 when a --@confirm step on route answered with this `replicated` (the
 * batch reply's) must not be trusted: its node has replicas and none had
 * it. (A short count where no replica was ever seen is wait_replicas's
 * report, not a refusal.) */
int sluice__client_unconfirmed(sluice_client *c, int route, int replicated);

/* ---- the record of unreplicated writes (core/record.h) -------------------- */

/* What a kept write is: each primitive defines its own kinds
 * (sem/sem_release.c...), and the record keeps them without knowing them. */
typedef struct sluice__write_kind {
  /* 1: room was made for each before it was sent (sluice__record_room), so
   * it is kept past the record's bounds; the others stop at twice them. */
  int has_room;
  /* offsetof the uint64_t in sluice_client_metrics counting the writes of
   * this kind sent again and answered; 0: none (offset 0, evals, is never
   * one). */
  size_t replay_metric;
} sluice__write_kind;

/* In the completion callback of a script answered SLUICE_OK: keep the step
 * as it was sent (it carries `items` writes of `kind`) until a replica has
 * it, to send again if the node behind its route changes before. Steps
 * that must be idempotent by id: sending one twice changes nothing. */
void sluice__record_answered(sluice_client *c, const sluice__write_kind *kind, unsigned items);
/* The same for another form of the step, built by the caller from its
 * arguments (sluice__answered_args): a push with its due times made
 * absolute. Same script, same route. */
struct sluice__args;
void sluice__record_answered_as(sluice_client *c, const sluice__write_kind *kind, unsigned items,
                                const struct sluice__args *a);
/* The answered step's KEYS then ARGV; SLUICE_EINVAL outside a completion. */
int sluice__answered_args(const sluice_client *c, int *argc, const char *const **argv,
                          const size_t **lens);
/* 1 unless replay_off. */
int sluice__record_on(const sluice_client *c);
/* Room in the record for one more push request (kept as one entry,
 * however many messages it carries; requests in flight count): SLUICE_OK,
 * the room now taken until sluice__record_room_free, or SLUICE_EFULL
 * (logged) while it is full. */
int sluice__record_room(sluice_client *c);
/* A request sluice__record_room let through finished (answered or not). */
void sluice__record_room_free(sluice_client *c);
/* Held permits re-asserted on a new node: put back, or found taken. */
void sluice__record_permits(sluice_client *c, unsigned restored, unsigned lost);

/* Set what sluice_client_last_error() answers (text is copied). */
void sluice__client_set_error(sluice_client *c, const char *text);

/* A reply nobody waits for. */
void sluice__ignore_reply(void *userdata, int status, const redisReply *reply);

/* Key names (sluice__key...) are keys.h's. */
#include "core/keys.h"

#endif /* SLUICE_ENGINE_H */
