/*
 * One way to batch: what is ready in one loop turn goes to Redis as one
 * script call per kind of step. Semaphore attempts, releases and renewals,
 * limiter checks and delay-queue settlements all go through it.
 *
 * A primitive embeds a sluice__breq in each request and describes each
 * script once (a sluice__batch_kind): how many requests a call may carry,
 * how to build KEYS/ARGV from the requests (one function per script, in
 * the primitive's *_args.h, next to a comment that matches the Lua file) and what to
 * do with each request's part of the reply. The batcher does the rest:
 *  - queue: requests wait for the owner's flush event (one per object and
 *    loop turn; batchers of one owner flush in the order they were set up);
 *  - flush: send in order, at most kind->max requests per call, and never
 *    two hash slots (routes) in one call, so a call has one home node --
 *    except for a kind whose script takes a call across routes
 *    (kind->spread, src/lua/_spread.lua) on a cluster: its calls carry the
 *    requests of one node, whatever their slots; a call the node declines
 *    (a key not served there: nothing ran) is sent again route by route;
 *    and a node with such a partial call (fewer than kind->max) in flight
 *    gets no other until it is answered: what is queued for it waits,
 *    then goes whole, but for full calls, which go at once;
 *  - leave: a request decided meanwhile (deadline, cancel) leaves its queue
 *    or its slot in the call in flight; its part of the reply is dropped;
 *  - fan-out: each request gets its part of the reply, or the call's error,
 *    with the owner's guard entered (callbacks may free the owner);
 *  - cancel: every request, queued or in flight, is answered with a status;
 *  - follow: a batcher may wait for another (its leader): while the owner
 *    says so, what it has queued is sent only once every call the leader
 *    had sent by then is answered, so Redis runs those calls, and answers
 *    what they woke, before it reads these requests;
 *  - clock: requests that carry deadlines on Redis's clock (rclock.h) feed
 *    the client's estimate from every reply, and while the client has none
 *    yet a probe of Redis's time goes first (one round trip, once per
 *    client): a deadline is never sent without a clock to map it.
 */
#ifndef SLUICE_BATCHER_H
#define SLUICE_BATCHER_H

#include <stddef.h>
#include <stdint.h>

#include "core/args.h"
#include "core/guard.h"
#include "base/list.h"
#include "core/engine.h"

typedef struct sluice__batch sluice__batch;

typedef struct sluice__breq {
  sluice__link link;    /* in the batcher's queue */
  sluice__batch *batch; /* the call in flight carrying it, or NULL */
  size_t slot;          /* its index in that call */
  unsigned route;       /* hash slot (0 on a single Redis) */
  const void *node;     /* at a flush: its route's node when calls may span routes */
  uint64_t queued_us;   /* monotonic: the loop turn it was last queued in */
  unsigned queued : 1;
  unsigned by_route : 1; /* a call across routes declined it: by route now */
} sluice__breq;

/* A request's part of a reply. */
typedef struct sluice__batch_reply {
  const redisReply *reply; /* the whole reply; NULL unless status is OK */
  size_t at;               /* index of the request's first element */
  uint64_t sent_ms;        /* monotonic: when the call was sent */
  int replicated;          /* 1/0: wait_replicas acknowledged it; -1 not asked */
} sluice__batch_reply;

typedef struct sluice__batch_kind {
  const sluice__script *script;
  unsigned max; /* requests per call */
  /* Sizing of one call: KEYS+ARGV entries and how many are numbers. */
  unsigned args_head, args_per, nums_head, nums_per;
  /* Reply shape: an array of reply_head + reply_per * n elements. */
  unsigned reply_head, reply_per;
  void (*build)(sluice__args *a, void *owner, sluice__breq *const *reqs, size_t n);
  /* status OK: br->reply holds the request's part; otherwise the error. */
  void (*answer)(void *owner, sluice__breq *r, int status, const sluice__batch_reply *br);
  /* Deadline of a call in ms (NULL or 0: the batcher's timeout_ms). */
  unsigned (*timeout)(void *owner, sluice__breq *const *reqs, size_t n);
  /* A call Redis answered is kept in the client's record of unreplicated
   * writes as this kind (engine.h); NULL: not kept. */
  const sluice__write_kind *record;
  /* 1: the script begins with _spread.lua, so on a cluster a call may
   * carry requests of several routes of one node (never with record). */
  int spread;
} sluice__batch_kind;

/* How a call goes out: sluice__eval, or a fake in Redis-free tests. */
typedef int sluice__send_fn(sluice_client *c, const sluice__script *s, int nkeys, int argc,
                            const char *const *argv, const size_t *lens, unsigned timeout_ms,
                            sluice__reply_fn *fn, void *userdata, sluice__op **op);

/* One event per owner that flushes its batchers, in order, once per turn.
 * The turn's clock is read once, at its first queued request, and stamps
 * every request queued before the flush: a clock read per request was a
 * measurable part of a check's CPU. A stamp is early by at most the rest
 * of the turn, so deadlines counted from it only end sooner. */
typedef struct sluice__flusher {
  struct event *ev;
  sluice__list batchers;
  uint64_t turn_us; /* the clock this turn; 0: not read yet */
  unsigned scheduled : 1;
} sluice__flusher;

typedef struct sluice__batcher {
  const sluice__batch_kind *kind;
  sluice_client *c;
  void *owner;
  sluice__guard *guard; /* entered during fan-out; may be NULL */
  sluice__flusher *flusher;
  sluice__link flink;        /* in flusher->batchers */
  sluice__list queue;        /* requests ready to send, in order */
  sluice__list inflight;     /* calls sent, not answered */
  size_t nqueued, ninflight; /* requests in each */
  unsigned timeout_ms;       /* 0: the client's default */
  sluice__send_fn *send;
  /* follow (sluice__batcher_follow) */
  struct sluice__batcher *leader, *follower;
  int (*hold)(void *owner); /* whether to wait for the leader now */
  uint64_t sent, settled;   /* calls sent; of them, answered or dropped */
  uint64_t wait_for;        /* holding: the leader's `sent` to wait for */
  unsigned holding : 1;
  /* clock (sluice__batcher_clock) */
  int (*redis_time)(const redisReply *reply, int64_t *ms);
  sluice__op *probe; /* in flight while the clock is unknown */
  uint64_t probe_sent_ms;
} sluice__batcher;

int sluice__flusher_init(sluice__flusher *f, struct event_base *base);
void sluice__flusher_clear(sluice__flusher *f);
/* Flush every batcher of f now (also what the event does). */
void sluice__flusher_run(sluice__flusher *f);

void sluice__batcher_init(sluice__batcher *b, const sluice__batch_kind *kind, sluice_client *c,
                          void *owner, sluice__guard *guard, sluice__flusher *f,
                          unsigned timeout_ms);
/* b follows leader (same flusher, flushed before it): when hold(owner)
 * says so at a flush, b keeps what it has queued until every call leader
 * had sent by then is answered; the requests then go at once, even if the
 * leader sent more meanwhile (b never waits twice for the same requests). */
void sluice__batcher_follow(sluice__batcher *b, sluice__batcher *leader, int (*hold)(void *owner));
/* b's requests carry deadlines on Redis's clock, and redis_time finds
 * that clock (ms) in a reply of b's script (0, or non-zero if absent). */
void sluice__batcher_clock(sluice__batcher *b,
                           int (*redis_time)(const redisReply *reply, int64_t *ms));
/* Queue r for this loop turn's flush. */
void sluice__batcher_queue(sluice__batcher *b, sluice__breq *r, unsigned route);
/* r leaves its queue or its call in flight, unanswered. */
void sluice__batcher_leave(sluice__batcher *b, sluice__breq *r);
static inline int sluice__breq_busy(const sluice__breq *r) { return r->queued || r->batch; }
/* Send what is queued now. */
void sluice__batcher_flush(sluice__batcher *b);
/* Answer every request, queued or in flight, with status (replies of the
 * calls in flight are dropped). */
void sluice__batcher_cancel(sluice__batcher *b, int status);
/* Requests queued or in flight. */
static inline size_t sluice__batcher_pending(const sluice__batcher *b) {
  return b->nqueued + b->ninflight;
}

#endif
