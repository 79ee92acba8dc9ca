/* The per-loop-turn batcher: see batcher.h. */
#include <stdlib.h>

#include <event2/event.h>

#include "core/batcher.h"
#include "core/rclock.h"

struct sluice__batch {
  sluice__batcher *b;
  sluice__link link; /* in b->inflight */
  sluice__op *op;
  uint64_t sent_ms;
  size_t n, left;        /* slots, slots still occupied */
  unsigned inflight : 1; /* in b->inflight, its op live */
  unsigned spread : 1;   /* its requests' routes differ: sent by sluice__eval_spread */
  unsigned route;        /* the route it was sent to (its first request's) */
  const void *node;      /* grouped by node: the node, which waits for this answer */
  sluice__breq *slots[]; /* NULL once that request left */
};

/* ---- flusher ------------------------------------------------------------- */

static void flush_cb(evutil_socket_t fd, short what, void *arg) { sluice__flusher_run(arg); }

int sluice__flusher_init(sluice__flusher *f, struct event_base *base) {
  f->batchers.head = f->batchers.tail = NULL;
  f->turn_us = 0;
  f->scheduled = 0;
  f->ev = event_new(base, -1, 0, flush_cb, f);
  return f->ev ? SLUICE_OK : SLUICE_ENOMEM;
}

void sluice__flusher_clear(sluice__flusher *f) {
  if (f->ev) event_free(f->ev);
  f->ev = NULL;
}

void sluice__flusher_run(sluice__flusher *f) {
  f->scheduled = 0;
  f->turn_us = 0;
  if (f->ev) event_del(f->ev);
  for (sluice__link *l = f->batchers.head; l; l = l->next)
    sluice__batcher_flush(sluice__container_of(l, sluice__batcher, flink));
}

static void schedule(sluice__flusher *f) {
  if (f->scheduled) return;
  f->scheduled = 1;
  event_active(f->ev, 0, 0);
}

static uint64_t turn_clock(sluice__flusher *f) {
  if (!f->turn_us) f->turn_us = sluice__mono_us();
  return f->turn_us;
}

/* ---- requests ------------------------------------------------------------ */

void sluice__batcher_init(sluice__batcher *b, const sluice__batch_kind *kind, sluice_client *c,
                          void *owner, sluice__guard *guard, sluice__flusher *f,
                          unsigned timeout_ms) {
  b->kind = kind;
  b->c = c;
  b->owner = owner;
  b->guard = guard;
  b->flusher = f;
  b->queue.head = b->queue.tail = NULL;
  b->inflight.head = b->inflight.tail = NULL;
  b->nqueued = b->ninflight = 0;
  b->timeout_ms = timeout_ms;
  b->send = sluice__eval;
  b->leader = b->follower = NULL;
  b->hold = NULL;
  b->sent = b->settled = b->wait_for = 0;
  b->holding = 0;
  b->redis_time = NULL;
  b->probe = NULL;
  b->probe_sent_ms = 0;
  sluice__list_append(&f->batchers, &b->flink);
}

void sluice__batcher_clock(sluice__batcher *b,
                           int (*redis_time)(const redisReply *reply, int64_t *ms)) {
  b->redis_time = redis_time;
}

void sluice__batcher_follow(sluice__batcher *b, sluice__batcher *leader, int (*hold)(void *owner)) {
  b->leader = leader;
  b->hold = hold;
  leader->follower = b;
}

/* Whether b keeps its queue this flush (see sluice__batcher_follow). */
static int held(sluice__batcher *b) {
  const sluice__batcher *l = b->leader;
  if (!l || !b->queue.head) return 0;
  if (!b->holding) {
    if (l->settled == l->sent || !b->hold(b->owner)) return 0;
    b->holding = 1;
    b->wait_for = l->sent;
  }
  if (l->settled < b->wait_for) return 1;
  b->holding = 0;
  return 0;
}

/* Whether batch's node waits for it (see group_by_route). */
static int waited_for(const sluice__batcher *b, const sluice__batch *batch) {
  return batch->node && batch->n < b->kind->max;
}

/* A call of b left b->inflight (answered, failed or dropped). Called before
 * any answer runs: answers may free the owner. */
static void settle(sluice__batcher *b, sluice__batch *batch) {
  sluice__list_remove(&b->inflight, &batch->link);
  batch->inflight = 0;
  b->settled++;
  if (waited_for(b, batch) && b->queue.head) schedule(b->flusher); /* its node's turn */
  const sluice__batcher *f = b->follower;
  if (f && f->holding && b->settled >= f->wait_for) schedule(b->flusher);
}

void sluice__batcher_queue(sluice__batcher *b, sluice__breq *r, unsigned route) {
  if (r->queued || r->batch) return;
  r->route = route;
  r->node = NULL;
  r->by_route = 0;
  r->queued = 1;
  r->queued_us = turn_clock(b->flusher);
  sluice__list_append(&b->queue, &r->link);
  b->nqueued++;
  schedule(b->flusher);
}

static void unqueue(sluice__batcher *b, sluice__breq *r) {
  sluice__list_remove(&b->queue, &r->link);
  r->queued = 0;
  b->nqueued--;
}

static void unslot(sluice__batcher *b, sluice__breq *r) {
  sluice__batch *batch = r->batch;
  batch->slots[r->slot] = NULL;
  batch->left--;
  b->ninflight--;
  r->batch = NULL;
}

static void drop_probe(sluice__batcher *b) {
  sluice__op_detach(b->probe);
  b->probe = NULL;
}

void sluice__batcher_leave(sluice__batcher *b, sluice__breq *r) {
  if (r->queued) unqueue(b, r);
  /* The probe answers nobody now, and the owner may go before it does. */
  if (!b->queue.head && b->probe) drop_probe(b);
  if (!r->batch) return;
  sluice__batch *batch = r->batch;
  unslot(b, r);
  /* The last request left a call still in flight: its reply would answer
   * nobody, and the owner counts itself idle (pending() is 0) and may be
   * destroyed before that reply comes, so the call must not outlive this.
   * A call being fanned out is no longer in flight: fan_out frees it. */
  if (!batch->left && batch->inflight) {
    settle(b, batch);
    sluice__op_detach(batch->op);
    sluice__free(batch);
  }
}

/* ---- fan-out ------------------------------------------------------------- */

static int reply_fits(const sluice__batch_kind *k, const redisReply *reply, size_t n) {
  return reply->type == REDIS_REPLY_ARRAY && reply->elements == k->reply_head + k->reply_per * n;
}

/* Hand each request still in the call its part. Answers may make other
 * requests of this call leave (their slots go NULL) or free the owner
 * (destruction waits for the guard). */
static void fan_out(sluice__batch *batch, int status, const redisReply *reply, int replicated) {
  sluice__batcher *b = batch->b;
  const sluice__batch_kind *k = b->kind;
  if (status == SLUICE_OK && !reply_fits(k, reply, batch->n)) status = SLUICE_EPROTOCOL;
  sluice__batch_reply br = {status == SLUICE_OK ? reply : NULL, 0, batch->sent_ms, replicated};
  if (b->guard) sluice__guard_enter(b->guard);
  for (size_t i = 0; i < batch->n; i++) {
    sluice__breq *r = batch->slots[i];
    if (!r) continue;
    unslot(b, r);
    br.at = k->reply_head + k->reply_per * i;
    k->answer(b->owner, r, status, &br);
  }
  sluice__free(batch);
  if (b->guard) sluice__guard_leave(b->guard);
}

/* A reply that reports Redis's time: a sample of its clock. */
static void sample_clock(sluice__batcher *b, uint64_t sent_ms, const redisReply *reply) {
  int64_t ms;
  if (b->redis_time && b->send == sluice__eval && b->redis_time(reply, &ms) == 0)
    sluice__rclock_sample(sluice__client_rclock(b->c), sent_ms, sluice__mono_ms(), ms);
}

/* A call across routes answered {nil, why} (_spread.lua): nothing ran. */
static const char *declined(const sluice__batch *batch, int status, const redisReply *reply) {
  if (!batch->spread || status != SLUICE_OK || reply->type != REDIS_REPLY_ARRAY ||
      reply->elements != 2 || reply->element[0]->type != REDIS_REPLY_NIL ||
      reply->element[1]->type != REDIS_REPLY_STRING)
    return NULL;
  return reply->element[1]->str;
}

/* The requests of a declined call go again, route by route, ahead of what
 * was queued since (in their order): the topology carries out the moves
 * and asks that the node's refusal stood for. */
static void redo_by_route(sluice__batch *batch, const char *why) {
  sluice__batcher *b = batch->b;
  sluice__client_spread_declined(b->c, batch->route, why);
  for (size_t i = batch->n; i-- > 0;) {
    sluice__breq *r = batch->slots[i];
    if (!r) continue;
    unslot(b, r);
    r->by_route = 1;
    r->queued = 1;
    sluice__list_prepend(&b->queue, &r->link);
    b->nqueued++;
  }
  sluice__free(batch);
  schedule(b->flusher);
}

static void on_reply(void *ud, int status, const redisReply *reply) {
  sluice__batch *batch = ud;
  settle(batch->b, batch);
  const char *why = declined(batch, status, reply);
  if (why) {
    redo_by_route(batch, why);
    return;
  }
  if (status == SLUICE_OK && reply_fits(batch->b->kind, reply, batch->n))
    sample_clock(batch->b, batch->sent_ms, reply);
  /* Only the client knows about replication (a fake sender in tests does not). */
  int replicated = batch->b->send == sluice__eval ? sluice__client_replicated(batch->b->c) : -1;
  if (status == SLUICE_OK && batch->b->kind->record && batch->b->send == sluice__eval)
    sluice__record_answered(batch->b->c, batch->b->kind->record, (unsigned)batch->n);
  fan_out(batch, status, reply, replicated);
}

/* ---- clock probe --------------------------------------------------------- */

/* Answer every queued request with status: none of them was sent. */
static void fail_queue(sluice__batcher *b, int status) {
  sluice__batch_reply br = {NULL, 0, 0, -1};
  if (b->guard) sluice__guard_enter(b->guard);
  while (b->queue.head) {
    sluice__breq *r = sluice__container_of(b->queue.head, sluice__breq, link);
    unqueue(b, r);
    b->kind->answer(b->owner, r, status, &br);
  }
  if (b->guard) sluice__guard_leave(b->guard);
}

/* TIME's answer: {seconds, microseconds}, in ms. */
static int time_ms(const redisReply *reply, int64_t *ms) {
  int64_t s, us;
  if (reply->type != REDIS_REPLY_ARRAY || reply->elements != 2 ||
      sluice__reply_i64(reply->element[0], &s) || sluice__reply_i64(reply->element[1], &us))
    return SLUICE_EPROTOCOL;
  *ms = s * 1000 + us / 1000;
  return SLUICE_OK;
}

static void on_probe(void *ud, int status, const redisReply *reply) {
  sluice__batcher *b = ud;
  int64_t ms;
  b->probe = NULL;
  if (status == SLUICE_OK && time_ms(reply, &ms) == 0) {
    sluice__rclock_sample(sluice__client_rclock(b->c), b->probe_sent_ms, sluice__mono_ms(), ms);
    schedule(b->flusher);
    return;
  }
  /* The requests never left: in doubt is not what they are. */
  fail_queue(b, status == SLUICE_OK         ? SLUICE_EPROTOCOL
                : status == SLUICE_EINDOUBT ? SLUICE_ECONNECTION
                                            : status);
}

/* Whether b must wait for Redis's clock before it sends; asks for it. */
static int needs_clock(sluice__batcher *b) {
  if (!b->redis_time || b->send != sluice__eval ||
      sluice__rclock_known(sluice__client_rclock(b->c)))
    return 0;
  if (b->probe) return 1;
  static const char *const time_cmd[1] = {"TIME"};
  b->probe_sent_ms = sluice__mono_ms();
  int rc = sluice__command(b->c, 1, time_cmd, NULL, b->timeout_ms, on_probe, b, &b->probe);
  if (rc != SLUICE_OK) {
    b->probe = NULL;
    fail_queue(b, rc);
  }
  return 1;
}

/* ---- flush --------------------------------------------------------------- */

/* Group the queue by route, keeping arrival order within a route, when it
 * mixes routes (a limiter's keys on a cluster): a call then takes the
 * head's run. Where calls may span routes (kind->spread on a cluster), a
 * group is a node's requests instead, except those a declined call sends
 * by route. One pass with a table of the groups seen, not a sort: a few
 * steps a request where the groups are many. Groups follow in the order of
 * their first request: calls to different groups go to different hash
 * slots or nodes, whose relative order nothing relies on.
 *
 * A node with a partial call of b in flight (fewer than kind->max
 * requests) gets no other until that call is answered (or fails, or times
 * out): its group waits at the end of the queue and goes whole in the call
 * after. The nodes of a cluster answer at different moments, and without
 * the wait each answer would send a small call to every node: a write to
 * each per wake-up. With it each answer sends one call, to its own node,
 * and a call carries what came in while the last was out, so calls grow
 * with the load and a lone request still leaves at once. Full calls never
 * wait (waiting cannot make them larger), nor does anything behind a full
 * call: a node given more than a call's worth per round trip keeps its
 * pipe full. Nodes never wait for each other. The requests' owner counts
 * their time from the turn they were queued in (queued_us, kind->timeout).
 *
 * Out of memory: ungrouped, nothing waits, and calls only get smaller. */
typedef struct route_run {
  const void *node; /* NULL: a route's run */
  unsigned route;
  unsigned used : 1, waits : 1;
  size_t n; /* requests in reqs */
  sluice__list reqs;
} route_run;

static int same_group(const sluice__breq *a, const sluice__breq *b) {
  return a->node ? a->node == b->node : !b->node && a->route == b->route;
}

static route_run *run_of(route_run *runs, size_t cap, const void *node, unsigned route,
                         unsigned *order, size_t *nruns) {
  if (node) route = 0;
  size_t h = node ? (size_t)((uintptr_t)node >> 4) : route;
  size_t i = (h * 2654435761u) & (cap - 1);
  while (runs[i].used && (runs[i].node != node || runs[i].route != route)) i = (i + 1) & (cap - 1);
  if (!runs[i].used) {
    runs[i].used = 1;
    runs[i].node = node;
    runs[i].route = route;
    order[(*nruns)++] = (unsigned)i;
  }
  return &runs[i];
}

/* Each request's node, where calls may span routes; whether the queue
 * holds more than one group. */
static int find_groups(sluice__batcher *b, size_t *n) {
  int spread = b->kind->spread && b->send == sluice__eval && sluice__client_may_spread(b->c);
  const sluice__breq *first = sluice__container_of(b->queue.head, sluice__breq, link);
  int mixed = 0;
  *n = 0;
  for (sluice__link *l = b->queue.head; l; l = l->next, ++*n) {
    sluice__breq *r = sluice__container_of(l, sluice__breq, link);
    r->node = spread && !r->by_route ? sluice__client_spread_node(b->c, r->route) : NULL;
    mixed |= !same_group(first, r);
  }
  return mixed;
}

static size_t nodes_waited_for(const sluice__batcher *b) {
  size_t n = 0;
  for (const sluice__link *l = b->inflight.head; l; l = l->next)
    n += waited_for(b, sluice__container_of(l, sluice__batch, link));
  return n;
}

/* Lay the runs out as the queue: what goes now, then what waits for its
 * node; returns the first request that waits (NULL: none). A waiting
 * node's full calls go now all the same: waiting cannot make them larger. */
static sluice__link *lay_out(sluice__batcher *b, route_run *runs, const unsigned *order,
                             size_t nruns) {
  sluice__list later = {NULL, NULL};
  b->queue.head = b->queue.tail = NULL;
  for (size_t k = 0; k < nruns; k++) {
    route_run *run = &runs[order[k]];
    if (!run->reqs.head) continue;
    size_t now = run->waits ? run->n / b->kind->max * b->kind->max : run->n;
    sluice__link *cut = now < run->n ? run->reqs.head : NULL;
    for (size_t i = 0; cut && i < now; i++) cut = cut->next;
    if (cut != run->reqs.head)
      sluice__list_splice(&b->queue, run->reqs.head, cut ? cut->prev : run->reqs.tail);
    if (cut) sluice__list_splice(&later, cut, run->reqs.tail);
  }
  if (later.head) sluice__list_splice(&b->queue, later.head, later.tail);
  return later.head;
}

/* Groups the queue; returns its first request that waits for its node. */
static sluice__link *group_by_route(sluice__batcher *b) {
  size_t n, cap = 2, nruns = 0;
  int mixed = find_groups(b, &n);
  size_t busy = nodes_waited_for(b);
  if (!mixed && !busy) return NULL;
  while (cap < 2 * (n + busy)) cap *= 2; /* half full at most: short probes */
  route_run *runs = calloc(cap, sizeof *runs);
  unsigned *order = malloc((n + busy) * sizeof *order);
  if (!runs || !order) {
    free(runs);
    free(order);
    return NULL;
  }
  for (const sluice__link *l = b->inflight.head; l; l = l->next) {
    const sluice__batch *batch = sluice__container_of(l, sluice__batch, link);
    if (waited_for(b, batch)) run_of(runs, cap, batch->node, 0, order, &nruns)->waits = 1;
  }
  for (sluice__link *l = b->queue.head, *next; l; l = next) {
    next = l->next;
    const sluice__breq *r = sluice__container_of(l, sluice__breq, link);
    route_run *run = run_of(runs, cap, r->node, r->route, order, &nruns);
    sluice__list_append(&run->reqs, l);
    run->n++;
  }
  sluice__link *waiting = lay_out(b, runs, order, nruns);
  free(runs);
  free(order);
  return waiting;
}

/* Take up to kind->max requests from the head of the queue while they
 * share its group, in order. */
static sluice__batch *take(sluice__batcher *b) {
  const sluice__batch_kind *k = b->kind;
  const sluice__breq *head = sluice__container_of(b->queue.head, sluice__breq, link);
  size_t n = 0;
  int spread = 0;
  for (sluice__link *l = b->queue.head; l && n < k->max; l = l->next, n++) {
    const sluice__breq *r = sluice__container_of(l, sluice__breq, link);
    if (!same_group(head, r)) break;
    spread |= r->route != head->route;
  }
  sluice__batch *batch = sluice__calloc(1, sizeof *batch + n * sizeof batch->slots[0]);
  if (!batch) return NULL;
  batch->b = b;
  batch->n = batch->left = n;
  batch->spread = spread;
  batch->route = head->route;
  batch->node = head->node;
  for (size_t i = 0; i < n; i++) {
    sluice__breq *r = sluice__container_of(b->queue.head, sluice__breq, link);
    unqueue(b, r);
    r->batch = batch;
    r->slot = i;
    batch->slots[i] = r;
    b->ninflight++;
  }
  return batch;
}

static int send_batch(sluice__batcher *b, sluice__batch *batch) {
  const sluice__batch_kind *k = b->kind;
  sluice__args a;
  int n = (int)batch->n;
  int rc = sluice__args_init(&a, (int)k->args_head + (int)k->args_per * n,
                             (int)k->nums_head + (int)k->nums_per * n);
  if (rc != SLUICE_OK) return rc;
  k->build(&a, b->owner, batch->slots, batch->n);
  unsigned timeout = k->timeout ? k->timeout(b->owner, batch->slots, batch->n) : 0;
  if (!timeout) timeout = b->timeout_ms;
  batch->sent_ms = sluice__mono_ms();
  if (a.failed) rc = SLUICE_EINVAL;
  else if (batch->spread)
    rc = sluice__eval_spread(b->c, batch->route, k->script, a.nkeys, a.argc, a.argv, a.lens,
                             timeout, on_reply, batch, &batch->op);
  else
    rc = b->send(b->c, k->script, a.nkeys, a.argc, a.argv, a.lens, timeout, on_reply, batch,
                 &batch->op);
  sluice__args_clear(&a);
  return rc;
}

void sluice__batcher_flush(sluice__batcher *b) {
  if (held(b) || (b->queue.head && needs_clock(b))) return;
  const sluice__link *waiting = b->queue.head ? group_by_route(b) : NULL;
  while (b->queue.head && b->queue.head != waiting) {
    sluice__batch *batch = take(b);
    if (!batch) { /* out of memory: try again next turn */
      schedule(b->flusher);
      return;
    }
    int rc = send_batch(b, batch);
    if (rc != SLUICE_OK) {
      fan_out(batch, rc, NULL, -1);
      continue;
    }
    sluice__list_append(&b->inflight, &batch->link);
    batch->inflight = 1;
    b->sent++;
  }
}

void sluice__batcher_cancel(sluice__batcher *b, int status) {
  if (b->probe) drop_probe(b);
  if (b->guard) sluice__guard_enter(b->guard);
  while (b->inflight.head) {
    sluice__batch *batch = sluice__container_of(b->inflight.head, sluice__batch, link);
    settle(b, batch);
    sluice__op_detach(batch->op);
    fan_out(batch, status, NULL, -1);
  }
  while (b->queue.head) {
    sluice__breq *r = sluice__container_of(b->queue.head, sluice__breq, link);
    unqueue(b, r);
    sluice__batch_reply br = {NULL, 0, 0, -1};
    b->kind->answer(b->owner, r, status, &br);
  }
  if (b->guard) sluice__guard_leave(b->guard);
}
