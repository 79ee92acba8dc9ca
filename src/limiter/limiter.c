/*
 * Rate limiters: batch requests into calls of one of the rl_* scripts,
 * decode each request's part of the reply, apply the Redis-down policy, and
 * keep the local wait queues.
 *
 * Every user operation is a request (struct sluice_rl_waiter, also the
 * public wait handle) linked in lim->reqs until its callback has run. A
 * request's one timer does whatever must happen later from the loop: deliver
 * a deferred completion, apply the down policy, retry a wait, or end it at
 * its deadline. Freeing the limiter or closing the client completes every
 * pending request with SLUICE_ECANCELED from the loop (guard.h).
 *
 * Checks, peeks and the attempts of waits that are ready in one loop turn go
 * to Redis together, in order, as one script call (the limiter's batcher,
 * batcher.h): the scripts take a list of requests and decide them in order,
 * so two requests for one key in one call see each other's effect and the
 * decisions are exactly those of one call per request. Redis pays for the
 * script call and TIME once per batch instead of once per decision.
 *
 * Every request carries the moment on Redis's clock after which its caller
 * wants nothing (core/rclock.h): a wait's timeout, or its call's op
 * timeout if that ends first. A script run later (a stall, a slow
 * connection) takes no units for it, so units are never taken for a caller
 * that already got a timeout.
 */
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include <event2/event.h>
#include <event2/event_struct.h>

#include "core/batcher.h"
#include "core/guard.h"
#include "core/keys.h"
#include "core/rclock.h"
#include "base/histogram.h"
#include "limiter/limiter.h"
#include "limiter/rl_args.h"
#include "core/engine.h"

#define WAIT_QUEUE_DEFAULT 128

/* Waits pending over all the client's limiters, reported as the client's
 * limiter_waits; sluice_client_options_init writes its default. */
const sluice__cap_def sluice__rl_waits_cap = {
    .option = offsetof(sluice_client_options, limiter_waits_max),
    .dflt = 100000,
    .preset = 1,
    .metric = offsetof(sluice_client_metrics, limiter_waits),
};

/* Most requests in one script call: one KEY each, and sluice__eval takes at
 * most 255 KEYS. */
#define RL_BATCH_MAX 255
/* Lua numbers are doubles: keep GCRA's bucket span (us) exact. */
#define GCRA_SPAN_MAX (INT64_C(1) << 52)

typedef enum { RQ_CHECK, RQ_PEEK, RQ_WAIT } rq_kind;

/* What a request's timer does when it fires. */
typedef enum {
  RT_NONE,
  RT_DOWN,    /* Redis could not be asked: apply the down policy */
  RT_FINISH,  /* complete with rq->status (and rq->res if have_res) */
  RT_ATTEMPT, /* wait at the head of its queue: ask (again) now */
  RT_DEADLINE /* wait: the timeout passed */
} rq_action;

typedef struct rl_queue {
  sluice__rl_entry e;
  sluice__list waits; /* FIFO of the key's waits */
  unsigned count;
  char key[];
} rl_queue;

struct sluice_rl_waiter {
  sluice_limiter *lim;
  sluice__link link;  /* in lim->reqs */
  sluice__link qlink; /* in queue->waits */
  rl_queue *queue;    /* waits, while queued */
  rq_kind kind;
  unsigned cost;
  sluice_limiter_cb *cb;
  void *ud;
  sluice__breq breq; /* queued or in a call (lim->checks) */
  unsigned route;    /* hash slot of rkey */
  struct event timer;
  rq_action action;
  int status;
  int have_res;
  sluice_rl_result res; /* deferred result / last denial */
  uint64_t deadline_ms; /* waits: monotonic; 0 = none */
  uint64_t started_us;  /* monotonic: the call (metrics) */
  int waited;           /* a wait slept at least once */
  char *rkey;           /* the Redis key, in key[]'s allocation after it */
  char key[];
};
typedef struct sluice_rl_waiter rl_req;

struct sluice_limiter {
  sluice__guard guard; /* how the limiter dies (guard.h) */
  sluice_client *c;
  struct event_base *base;
  char *name;
  sluice_limiter_options opts;
  sluice__rl_params params;
  const char *suffix;      /* last part of every key */
  sluice__rl_frame frame;  /* every key but the caller's part (keys.h) */
  sluice__rl_call call;    /* ARGV every check call shares */
  sluice__flusher flusher; /* sends lim->checks once per turn */
  sluice__batcher checks;  /* checks, peeks, wait attempts */
  sluice__rl_local *local;
  sluice__rl_map queues;    /* key -> rl_queue */
  sluice__list reqs;        /* every request not yet answered */
  unsigned seen_up : 1;     /* the client was connected once */
  sluice_limiter_metrics m; /* counters; m.wait from wait_hist */
  sluice__hist wait_hist;
};

static void rq_finish(rl_req *rq, int status, const sluice_rl_result *res);
static void rq_attempt(rl_req *rq);

/* ---- names --------------------------------------------------------------- */

static const char *const algo_names[] = {NULL, "fixed", "sliding-log", "sliding-counter", "gcra"};
static const char *const algo_suffix[] = {NULL, "fw", "log", "swc", "gcra"};

const char *sluice_rl_algo_name(sluice_rl_algo algo) {
  return algo >= SLUICE_RL_FIXED && algo <= SLUICE_RL_GCRA ? algo_names[algo] : NULL;
}

int sluice_rl_algo_parse(const char *name, sluice_rl_algo *out) {
  if (!name || !out) return SLUICE_EINVAL;
  for (int a = SLUICE_RL_FIXED; a <= SLUICE_RL_GCRA; a++) {
    if (strcmp(name, algo_names[a]) == 0) {
      *out = (sluice_rl_algo)a;
      return SLUICE_OK;
    }
  }
  return SLUICE_EINVAL;
}

const char *sluice_rl_source_name(sluice_rl_source source) {
  switch (source) {
    case SLUICE_RL_REDIS: return "redis";
    case SLUICE_RL_LOCAL: return "local";
    case SLUICE_RL_UNCHECKED: return "unchecked";
  }
  return NULL;
}

/* ---- request plumbing ---------------------------------------------------- */

static int64_t capacity(const sluice_limiter *lim) { return lim->params.burst; }

static void rq_arm(rl_req *rq, rq_action action, uint64_t ms) {
  rq->action = action;
  evtimer_del(&rq->timer);
  sluice__timer_in(&rq->timer, ms);
}

/* Complete (or act) on the next loop turn, never inside the caller. */
static void rq_defer(rl_req *rq, rq_action action, int status) {
  rq->status = status;
  rq_arm(rq, action, 0);
}

/* Leave the batch queue or the call in flight: that answer is dropped. */
static void rq_leave_call(rl_req *rq) { sluice__batcher_leave(&rq->lim->checks, &rq->breq); }

static void queue_free(sluice_limiter *lim, rl_queue *q) {
  sluice__rl_map_remove(&lim->queues, &q->e);
  sluice__free(q);
}

/* Take rq out of its key's FIFO; a new head starts at once (from the loop). */
static void queue_remove(rl_req *rq) {
  rl_queue *q = rq->queue;
  if (!q) return;
  int was_head = q->waits.head == &rq->qlink;
  sluice__list_remove(&q->waits, &rq->qlink);
  rq->queue = NULL;
  if (--q->count == 0) queue_free(rq->lim, q);
  else if (was_head && sluice__guard_live(&rq->lim->guard))
    rq_defer(sluice__container_of(q->waits.head, rl_req, qlink), RT_ATTEMPT, SLUICE_OK);
}

static int queue_add(sluice_limiter *lim, rl_req *rq, rl_queue **out) {
  size_t klen = strlen(rq->key);
  rl_queue *q = (rl_queue *)sluice__rl_map_find(&lim->queues, rq->key, klen);
  if (!q) {
    q = sluice__calloc(1, sizeof *q + klen + 1);
    if (!q) return SLUICE_ENOMEM;
    memcpy(q->key, rq->key, klen + 1);
    q->e.key = q->key;
    q->e.klen = klen;
    if (sluice__rl_map_insert(&lim->queues, &q->e) != 0) {
      sluice__free(q);
      return SLUICE_ENOMEM;
    }
  }
  *out = q;
  if (q->count >= lim->opts.wait_queue_max) return SLUICE_EFULL;
  sluice__list_append(&q->waits, &rq->qlink);
  q->count++;
  rq->queue = q;
  return SLUICE_OK;
}

static void rq_free(rl_req *rq) {
  if (rq->kind == RQ_WAIT) { /* its slot of the client's limiter_waits_max */
    sluice__client_release(rq->lim->c, &sluice__rl_waits_cap, 1);
    rq->lim->m.waiting--;
  }
  evtimer_del(&rq->timer);
  sluice__free(rq);
}

static void rq_timer_cb(evutil_socket_t fd, short what, void *arg);

static int rq_new(sluice_limiter *lim, rq_kind kind, const char *key, unsigned cost,
                  sluice_limiter_cb *cb, void *ud, rl_req **out) {
  size_t klen = strlen(key);
  if (kind == RQ_WAIT && sluice__client_reserve(lim->c, &sluice__rl_waits_cap, 1) != SLUICE_OK) {
    lim->m.waits_refused++;
    return SLUICE_EFULL;
  }
  rl_req *rq = sluice__calloc(1, sizeof *rq + klen + 1 + sluice__rl_frame_size(&lim->frame, klen));
  if (!rq) {
    if (kind == RQ_WAIT) sluice__client_release(lim->c, &sluice__rl_waits_cap, 1);
    return SLUICE_ENOMEM;
  }
  memcpy(rq->key, key, klen + 1);
  rq->lim = lim;
  rq->kind = kind;
  if (kind == RQ_WAIT) lim->m.waiting++;
  evtimer_assign(&rq->timer, lim->base, rq_timer_cb, rq);
  rq->cost = cost;
  rq->cb = cb;
  rq->ud = ud;
  if (kind == RQ_WAIT) rq->started_us = sluice__mono_us(); /* checks need no clock */
  rq->rkey = rq->key + klen + 1;
  sluice__rl_frame_key(&lim->frame, key, klen, rq->rkey);
  rq->route = sluice__client_route(lim->c, rq->rkey);
  sluice__list_append(&lim->reqs, &rq->link);
  *out = rq;
  return SLUICE_OK;
}

/* Forget rq without calling back (its start failed inside the API call). */
static void rq_drop(rl_req *rq) {
  queue_remove(rq);
  sluice__list_remove(&rq->lim->reqs, &rq->link);
  rq_free(rq);
}

/* Run the user's callback once, then release rq (and maybe the limiter). */
static void rq_finish(rl_req *rq, int status, const sluice_rl_result *res) {
  sluice_limiter *lim = rq->lim;
  sluice_rl_result copy;
  if (res) copy = *res; /* res may live in rq */
  if (status != SLUICE_OK && !(status == SLUICE_ETIMEDOUT && res)) lim->m.errors++;
  else if (res && res->allowed) lim->m.allowed++;
  else lim->m.denied++;
  if (res && res->source == SLUICE_RL_UNCHECKED) lim->m.fail_open++;
  if (res && res->source == SLUICE_RL_LOCAL) lim->m.local++;
  if (rq->waited) lim->m.waited++;
  if (rq->kind == RQ_WAIT && status == SLUICE_OK && res && res->allowed)
    sluice__hist_record(&lim->wait_hist, sluice__mono_us() - rq->started_us);
  rq_leave_call(rq);
  queue_remove(rq);
  sluice__list_remove(&lim->reqs, &rq->link);
  sluice_limiter_cb *cb = rq->cb;
  void *ud = rq->ud;
  rq_free(rq);
  sluice__guard_enter(&lim->guard);
  cb(lim, status, res ? &copy : NULL, ud);
  sluice__guard_leave(&lim->guard);
}

/* ---- Redis --------------------------------------------------------------- */

/* The request's four numbers, at `at` of a batch reply the batcher checked
 * to be an array of four per request. SLUICE_ELATE: Redis read the request
 * past its deadline and did nothing. */
static int parse_reply(const sluice_limiter *lim, const redisReply *r, size_t at,
                       sluice_rl_result *res) {
  int64_t v[4];
  for (size_t i = 0; i < 4; i++)
    if (sluice__reply_i64(r->element[at + i], &v[i]) != 0) return SLUICE_EPROTOCOL;
  if (v[0] == -1) return SLUICE_ELATE;
  res->allowed = v[0] != 0;
  res->source = SLUICE_RL_REDIS;
  res->limit = capacity(lim);
  res->remaining = v[1];
  res->retry_after_ms = v[0] ? 0 : v[2];
  res->reset_after_ms = v[3];
  return SLUICE_OK;
}

/* A decision was made (by Redis or locally): done, unless a wait was denied. */
static void rq_decided(rl_req *rq, const sluice_rl_result *res) {
  if (rq->kind != RQ_WAIT || res->allowed) {
    rq_finish(rq, SLUICE_OK, res);
    return;
  }
  uint64_t now = sluice__mono_ms();
  uint64_t retry = res->retry_after_ms > 0 ? (uint64_t)res->retry_after_ms : 1;
  rq->res = *res;
  rq->have_res = 1;
  /* Capacity only comes back with time: past the deadline it cannot pass. */
  if (res->retry_after_ms < 0 || (rq->deadline_ms && now + retry > rq->deadline_ms)) {
    rq_finish(rq, SLUICE_ETIMEDOUT, res);
    return;
  }
  rq->waited = 1;
  rq_arm(rq, RT_ATTEMPT, retry);
}

/* Redis could not be asked (ECONNECTION), or its answer did not come
 * (ETIMEDOUT, EINDOUBT: the units may have been taken). */
static void rq_down(rl_req *rq, int status) {
  sluice_limiter *lim = rq->lim;
  sluice_rl_result res = {1, SLUICE_RL_UNCHECKED, capacity(lim), -1, 0, 0};
  switch (lim->opts.on_redis_down) {
    case SLUICE_RL_FAIL_OPEN: rq_finish(rq, SLUICE_OK, &res); return;
    case SLUICE_RL_FAIL_LOCAL:
      status = sluice__rl_local_check(lim->local, rq->key, rq->cost, rq->kind == RQ_PEEK,
                                      sluice__mono_us(), &res);
      if (status == SLUICE_OK) {
        rq_decided(rq, &res);
        return;
      }
      break;
    default: break;
  }
  /* A wait's ETIMEDOUT means "not allowed in time"; a step timing out is
   * Redis being unreachable. */
  if (rq->kind == RQ_WAIT && status != SLUICE_ECONNECTION) status = SLUICE_ECONNECTION;
  rq_finish(rq, status, NULL);
}

/* ---- batches ------------------------------------------------------------ */

static rl_req *breq_rq(sluice__breq *r) { return sluice__container_of(r, rl_req, breq); }

static unsigned op_timeout(const sluice_limiter *lim) {
  return lim->opts.op_timeout_ms ? lim->opts.op_timeout_ms : sluice__client_op_timeout(lim->c);
}

/* A request is decided only until its op timeout, counted from the loop
 * turn it was queued in (it may wait for its node's call in flight:
 * batcher.c), or a wait's own deadline if that comes first. The clock is
 * known here: the batcher probes it before the first call. */
static void build(sluice__args *a, void *owner, sluice__breq *const *reqs, size_t n) {
  sluice_limiter *lim = owner;
  const sluice__rclock *k = sluice__client_rclock(lim->c);
  unsigned t = op_timeout(lim);
  uint64_t now = sluice__mono_ms();
  for (size_t i = 0; i < n; i++) sluice__rl_check_key(a, breq_rq(reqs[i])->rkey);
  sluice__rl_check_head(a, &lim->call);
  for (size_t i = 0; i < n; i++) {
    const rl_req *rq = breq_rq(reqs[i]);
    uint64_t end = rq->breq.queued_us / 1000 + t;
    if (rq->deadline_ms && rq->deadline_ms < end) end = rq->deadline_ms;
    sluice__rl_check_item(a, rq->cost, rq->kind == RQ_PEEK, sluice__rclock_deadline(k, end, now));
  }
}

/* A call ends at its oldest request's op timeout: waiting to be sent
 * counts, in whole milliseconds (a call sent in the turn its requests were
 * made gets the whole op timeout). A request out of time already gets a
 * call of 1 ms, and Redis, past its deadline, decides nothing for it. */
static unsigned call_timeout(void *owner, sluice__breq *const *reqs, size_t n) {
  sluice_limiter *lim = owner;
  uint64_t oldest = UINT64_MAX, now = sluice__mono_us();
  for (size_t i = 0; i < n; i++)
    if (reqs[i]->queued_us < oldest) oldest = reqs[i]->queued_us;
  uint64_t waited = now > oldest ? (now - oldest) / 1000 : 0, t = op_timeout(lim);
  return waited + 1 < t ? (unsigned)(t - waited) : 1;
}

/* Redis's clock in a check call's reply (the batcher checked its shape). */
static int reply_time(const redisReply *reply, int64_t *ms) {
  return sluice__reply_i64(reply->element[0], ms);
}

/* Redis read the request too late to act on it: a wait asks again (or
 * ends, its own deadline passed); a check or peek met its call's timeout. */
static void rq_late(rl_req *rq) {
  rq->lim->m.late++;
  if (rq->kind == RQ_WAIT) rq_attempt(rq);
  else rq_down(rq, SLUICE_ETIMEDOUT);
}

/* One request's part of a call's reply (or the call's failure). */
static void answer(void *owner, sluice__breq *r, int status, const sluice__batch_reply *br) {
  rl_req *rq = breq_rq(r);
  sluice_rl_result res;
  if (status == SLUICE_OK || status == SLUICE_EREDIS) rq->lim->seen_up = 1;
  if (status == SLUICE_OK) status = parse_reply(rq->lim, br->reply, br->at, &res);
  if (status == SLUICE_OK) rq_decided(rq, &res);
  else if (status == SLUICE_ELATE) rq_late(rq);
  else if (status == SLUICE_ECONNECTION || status == SLUICE_ETIMEDOUT || status == SLUICE_EINDOUBT)
    rq_down(rq, status);
  else rq_finish(rq, status, NULL);
}

#define RL_KIND(lua)                                                                        \
  {                                                                                         \
    SLUICE__BATCH_SCRIPT(lua, RL_BATCH_MAX, RL_CHECK), .build = build, .answer = answer,    \
                                                       .timeout = call_timeout, .spread = 1 \
  }

/* One kind per algorithm (indexed by sluice_rl_algo): only the script differs. */
static const sluice__batch_kind check_kinds[] = {
    RL_KIND(sluice__lua_rl_fixed), RL_KIND(sluice__lua_rl_fixed),
    RL_KIND(sluice__lua_rl_sliding_log), RL_KIND(sluice__lua_rl_sliding_counter),
    RL_KIND(sluice__lua_rl_gcra)};

/* Ask Redis with this loop turn's batch; once the connection was lost,
 * answer from the down policy at once (next loop turn) instead of sending a
 * call that fails anyway. */
static void rq_send(rl_req *rq) {
  sluice_limiter *lim = rq->lim;
  if (sluice_client_is_connected(lim->c)) {
    lim->seen_up = 1;
  } else if (lim->seen_up) {
    rq_defer(rq, RT_DOWN, SLUICE_ECONNECTION);
    return;
  }
  sluice__batcher_queue(&lim->checks, &rq->breq, rq->route);
}

/* A wait at the head of its queue asks again (or gives up at its deadline). */
static void rq_attempt(rl_req *rq) {
  uint64_t now = sluice__mono_ms();
  if (rq->deadline_ms && now >= rq->deadline_ms) {
    rq_finish(rq, SLUICE_ETIMEDOUT, rq->have_res ? &rq->res : NULL);
    return;
  }
  rq_send(rq);
  if (sluice__breq_busy(&rq->breq) && rq->deadline_ms)
    rq_arm(rq, RT_DEADLINE, rq->deadline_ms - now);
}

static void rq_timer_cb(evutil_socket_t fd, short what, void *arg) {
  rl_req *rq = arg;
  switch (rq->action) {
    case RT_DOWN: rq_down(rq, rq->status); break;
    case RT_FINISH: rq_finish(rq, rq->status, rq->have_res ? &rq->res : NULL); break;
    case RT_ATTEMPT: rq_attempt(rq); break;
    case RT_DEADLINE: rq_finish(rq, SLUICE_ETIMEDOUT, rq->have_res ? &rq->res : NULL); break;
    case RT_NONE: break;
  }
}

/* Client closed or limiter freed (from the loop): every pending request
 * completes with SLUICE_ECANCELED, even a pending SLUICE_EFULL. */
static void lim_cancel(sluice__guard *g) {
  sluice_limiter *lim = sluice__container_of(g, sluice_limiter, guard);
  while (lim->reqs.head)
    rq_finish(sluice__container_of(lim->reqs.head, rl_req, link), SLUICE_ECANCELED, NULL);
  /* Every request left its call: forget the calls still in flight. */
  sluice__batcher_cancel(&lim->checks, SLUICE_ECANCELED);
}

/* Freed with requests pending: no timer or reply reaches them any more. */
static void lim_quiesce(sluice__guard *g) {
  sluice_limiter *lim = sluice__container_of(g, sluice_limiter, guard);
  for (sluice__link *l = lim->reqs.head; l; l = l->next) {
    rl_req *rq = sluice__container_of(l, rl_req, link);
    rq_leave_call(rq);
    queue_remove(rq);
    evtimer_del(&rq->timer);
  }
}

static int lim_idle(const sluice__guard *g) {
  return !sluice__container_of(g, sluice_limiter, guard)->reqs.head;
}

static void lim_destroy(sluice__guard *g) {
  sluice_limiter *lim = sluice__container_of(g, sluice_limiter, guard);
  sluice__flusher_clear(&lim->flusher);
  sluice__rl_map_clear(&lim->queues);
  sluice__rl_local_free(lim->local);
  sluice__rl_frame_clear(&lim->frame);
  free(lim->name);
  sluice__free(lim);
}

const sluice__obj_kind sluice__limiter_obj = {"limiter"};

static const sluice__guard_ops lim_guard_ops = {
    .quiesce = lim_quiesce, .cancel = lim_cancel, .idle = lim_idle, .destroy = lim_destroy};

/* ---- public API ---------------------------------------------------------- */

void sluice_limiter_options_init(sluice_limiter_options *o) {
  if (!o) return;
  memset(o, 0, sizeof *o);
  o->algo = SLUICE_RL_FIXED;
  o->on_redis_down = SLUICE_RL_FAIL_CLOSED;
  o->wait_queue_max = WAIT_QUEUE_DEFAULT;
}

static int check_options(const sluice_limiter_options *o) {
  if (!sluice_rl_algo_name(o->algo)) return SLUICE_EINVAL;
  if (o->limit < 1 || o->limit > SLUICE_RL_LIMIT_MAX) return SLUICE_EINVAL;
  if (o->period_ms < 1 || o->period_ms > SLUICE_RL_PERIOD_MAX) return SLUICE_EINVAL;
  if (o->burst > SLUICE_RL_LIMIT_MAX) return SLUICE_EINVAL;
  if (o->on_redis_down != SLUICE_RL_FAIL_CLOSED && o->on_redis_down != SLUICE_RL_FAIL_OPEN &&
      o->on_redis_down != SLUICE_RL_FAIL_LOCAL)
    return SLUICE_EINVAL;
  if (o->algo == SLUICE_RL_GCRA) {
    int64_t t = ((int64_t)o->period_ms * 1000 + o->limit - 1) / o->limit;
    int64_t burst = o->burst ? o->burst : o->limit;
    if (burst > GCRA_SPAN_MAX / t) return SLUICE_EINVAL;
  }
  return SLUICE_OK;
}

static void set_params(sluice_limiter *lim) {
  const sluice_limiter_options *o = &lim->opts;
  lim->params.algo = o->algo;
  lim->params.limit = o->limit;
  lim->params.period_ms = o->period_ms;
  lim->params.burst = o->algo == SLUICE_RL_GCRA && o->burst ? o->burst : o->limit;
  lim->suffix = algo_suffix[o->algo];
  lim->call.limit = o->limit;
  lim->call.period_ms = o->period_ms;
  lim->call.burst = (uint64_t)lim->params.burst;
}

int sluice_limiter_new(sluice_client *c, const char *name, const sluice_limiter_options *opts,
                       sluice_limiter **out) {
  if (out) *out = NULL;
  if (!c || !opts || !out || !sluice__valid_name(name)) return SLUICE_EINVAL;
  int rc = check_options(opts);
  if (rc) return rc;
  sluice_limiter *lim = sluice__handle_alloc(c, sizeof *lim, &rc);
  if (!lim) return rc;
  lim->c = c;
  lim->base = sluice__client_base(c);
  lim->opts = *opts;
  if (!lim->opts.wait_queue_max) lim->opts.wait_queue_max = WAIT_QUEUE_DEFAULT;
  set_params(lim);
  lim->name = strdup(name);
  if (opts->on_redis_down == SLUICE_RL_FAIL_LOCAL) lim->local = sluice__rl_local_new(&lim->params);
  if (!lim->name || (opts->on_redis_down == SLUICE_RL_FAIL_LOCAL && !lim->local) ||
      sluice__rl_frame_init(&lim->frame, c, name, lim->suffix) != SLUICE_OK ||
      sluice__flusher_init(&lim->flusher, lim->base) != SLUICE_OK) {
    sluice__flusher_clear(&lim->flusher);
    sluice__rl_frame_clear(&lim->frame);
    sluice__rl_local_free(lim->local);
    free(lim->name);
    sluice__free(lim);
    return SLUICE_ENOMEM;
  }
  sluice__batcher_init(&lim->checks, &check_kinds[opts->algo], c, lim, &lim->guard, &lim->flusher,
                       lim->opts.op_timeout_ms);
  sluice__batcher_clock(&lim->checks, reply_time);
  sluice__handle_attach(c, &lim->guard, &lim_guard_ops,
                        &(sluice__obj_view){&sluice__limiter_obj, lim, lim->name,
                                            sluice_rl_algo_name(opts->algo), &lim->wait_hist});
  *out = lim;
  return SLUICE_OK;
}

void sluice_limiter_free(sluice_limiter *lim) {
  if (lim) sluice__guard_free(&lim->guard);
}

const char *sluice_limiter_name(const sluice_limiter *lim) { return lim ? lim->name : NULL; }

/* The sliding log's state is bounded by entries, one per request: a cost
 * this small could need more than SLUICE_RL_LOG_ENTRIES_MAX of them. */
static unsigned min_cost(const sluice_limiter *lim) {
  if (lim->opts.algo != SLUICE_RL_SLIDING_LOG) return 1;
  return (lim->opts.limit + SLUICE_RL_LOG_ENTRIES_MAX - 1) / SLUICE_RL_LOG_ENTRIES_MAX;
}

static int check_call(const sluice_limiter *lim, const char *key, unsigned cost,
                      sluice_limiter_cb *cb) {
  if (!lim || !cb || lim->guard.freeing || !sluice__valid_name(key)) return SLUICE_EINVAL;
  if (cost < 1 || cost > capacity(lim) || cost < min_cost(lim)) return SLUICE_EINVAL;
  if (lim->guard.closed || sluice__client_closing(lim->c)) return SLUICE_ECLOSED;
  return SLUICE_OK;
}

static int start_now(sluice_limiter *lim, rq_kind kind, const char *key, unsigned cost,
                     sluice_limiter_cb *cb, void *ud) {
  rl_req *rq;
  int rc = check_call(lim, key, cost, cb);
  if (rc == SLUICE_OK) rc = rq_new(lim, kind, key, cost, cb, ud, &rq);
  if (rc == SLUICE_OK) rq_send(rq);
  return rc;
}

int sluice_limiter_check(sluice_limiter *lim, const char *key, unsigned cost, sluice_limiter_cb *cb,
                         void *ud) {
  return start_now(lim, RQ_CHECK, key, cost, cb, ud);
}

int sluice_limiter_peek(sluice_limiter *lim, const char *key, unsigned cost, sluice_limiter_cb *cb,
                        void *ud) {
  return start_now(lim, RQ_PEEK, key, cost, cb, ud);
}

int sluice_limiter_wait(sluice_limiter *lim, const char *key, unsigned cost, unsigned timeout_ms,
                        sluice_limiter_cb *cb, void *ud, sluice_rl_waiter **handle) {
  rl_req *rq;
  rl_queue *q = NULL;
  int rc = check_call(lim, key, cost, cb);
  if (rc == SLUICE_OK) rc = rq_new(lim, RQ_WAIT, key, cost, cb, ud, &rq);
  if (rc != SLUICE_OK) return rc;
  if (timeout_ms) rq->deadline_ms = sluice__mono_ms() + timeout_ms;
  rc = queue_add(lim, rq, &q);
  if (rc == SLUICE_ENOMEM) {
    rq_drop(rq);
    return rc;
  }
  if (rc == SLUICE_EFULL) rq_defer(rq, RT_FINISH, SLUICE_EFULL);
  else if (q->waits.head == &rq->qlink) rq_defer(rq, RT_ATTEMPT, SLUICE_OK);
  else if (timeout_ms) rq_arm(rq, RT_DEADLINE, timeout_ms);
  if (handle) *handle = rq;
  return SLUICE_OK;
}

int sluice_limiter_wait_cancel(sluice_rl_waiter *rq) {
  if (!rq) return SLUICE_EINVAL;
  if (rq->action == RT_FINISH) return SLUICE_OK; /* already completing */
  rq_leave_call(rq);
  queue_remove(rq);
  rq->have_res = 0;
  rq_defer(rq, RT_FINISH, SLUICE_ECANCELED);
  return SLUICE_OK;
}

char *sluice__rl_redis_key(const sluice_limiter *lim, const char *key) {
  size_t klen = strlen(key);
  char *k = malloc(sluice__rl_frame_size(&lim->frame, klen));
  if (k) sluice__rl_frame_key(&lim->frame, key, klen, k);
  return k;
}

void sluice_limiter_get_metrics(const sluice_limiter *lim, sluice_limiter_metrics *out) {
  if (!out) return;
  memset(out, 0, sizeof *out);
  if (!lim) return;
  *out = lim->m;
  sluice__latency_of(&lim->wait_hist, &out->wait);
}
