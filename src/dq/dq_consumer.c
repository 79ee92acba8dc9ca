/*
 * Delay queue, consumer side.
 *
 * The consumer runs dq_take (a batch of due messages into the in-flight set)
 * whenever something may be takeable: when its timer fires — armed for the
 * next due time or in-flight deadline the take returned, capped by
 * max_poll_ms — when a wake-up on its own wake list says something became
 * takeable sooner, or after the blocking connection came back. Precise
 * times are libevent timers; a wake-up carries the time (ms on Redis's
 * clock) and only moves the timer earlier.
 *
 * Why no consumer's fate can stall another (the argument in full is in
 * src/lua/_dq_common.lua and the docs): an idle consumer is registered in
 * the queue's set c with the time it will look next, and every step that
 * makes something takeable sooner than a registered time (a push, a retry,
 * a requeue, a take's new visibility deadline) writes that time to each
 * such consumer's own wake list in the same script. Nothing is shared, so a
 * consumer that dies, stops or is full spends nobody's wake-up.
 *
 * Settlements (ack, retry, and "release" of messages taken after the
 * consumer was freed) go through the batcher: one dq_ack call per loop turn.
 *
 * Lifetime (guard.h): freeing stops taking; messages already delivered stay
 * valid and are settled as usual, so the memory goes once every delivered
 * message is settled and nothing is in flight.
 */
#include <inttypes.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include <event2/event.h>

#include "dq/dq_consumer.h"

#define DQ_BACKOFF_MIN_MS 50   /* first retry after a failed take */
#define DQ_BACKOFF_MAX_MS 2000 /* an outage is not an idle queue: look often */

typedef struct settle {
  sluice__breq req; /* in con->settles */
  sluice_dq_settle_cb *cb;
  void *ud;
  unsigned attempt;
  char op; /* 'a' ack, 'r' retry, 'x' release */
  int64_t delay_ms;
  uint64_t token;
  char id[];
} settle;

static void take(sluice_dq_consumer *con);

static int taking_allowed(const sluice_dq_consumer *con) { return sluice__guard_live(&con->guard); }

static void on_wake(void *ud, const char *data, size_t len);

/* Listen on the own wake list while taking is allowed (a failed listen is
 * tried again after the next take; the timer still finds due messages). */
static void update_listen(sluice_dq_consumer *con) {
  int want = taking_allowed(con);
  if (want && !con->listener) {
    if (sluice__listen(con->c, con->wake_key, on_wake, con, &con->listener) != 0)
      con->listener = NULL;
  } else if (!want && con->listener) {
    sluice__unlisten(con->listener);
    con->listener = NULL;
  }
}

/* Arm the timer for monotonic time at_us (now or past: take on the next
 * turn), unless it is already armed no later. */
static void arm_at(sluice_dq_consumer *con, uint64_t at_us) {
  uint64_t now = sluice__mono_us();
  if (at_us <= now) {
    evtimer_del(con->timer);
    con->timer_at_us = 0;
    event_active(con->kick, 0, 0);
    return;
  }
  if (con->timer_at_us && con->timer_at_us <= at_us) return;
  uint64_t us = at_us - now;
  struct timeval tv = {(time_t)(us / 1000000), (suseconds_t)(us % 1000000)};
  evtimer_add(con->timer, &tv);
  con->timer_at_us = at_us;
}

/* Our monotonic time when Redis's clock reads ms. The offset comes from a
 * reply's arrival, so the result is never early: a take sent then finds
 * what became due at ms. */
static uint64_t local_us(const sluice_dq_consumer *con, int64_t ms) {
  int64_t us = ms * 1000 - con->offset_us;
  return us > 0 ? (uint64_t)us : 0;
}

/* A wake-up: something becomes takeable at ms (Redis's clock). While a take
 * is out its answer may predate the wake-up, so the time waits for it. */
static void woken_at(sluice_dq_consumer *con, int64_t ms) {
  uint64_t at = con->have_offset ? local_us(con, ms) : 0;
  if (con->taking) {
    if (!con->woken_us || at < con->woken_us) con->woken_us = at ? at : 1;
    return;
  }
  arm_at(con, at);
}

/* An element of the wake list (its time), or NULL after the blocking
 * connection came back: wake-ups may be lost, look now. */
static void on_wake(void *ud, const char *data, size_t len) {
  sluice_dq_consumer *con = ud;
  char buf[24];
  char *end = NULL;
  long long ms = -1;
  if (!taking_allowed(con)) return;
  if (data && len > 0 && len < sizeof buf) {
    memcpy(buf, data, len);
    buf[len] = '\0';
    ms = strtoll(buf, &end, 10);
  }
  if (!data || !end || *end || ms < 0) take(con);
  else woken_at(con, ms);
}

/* ---- settling -------------------------------------------------------------- */

static void build(sluice__args *a, void *owner, sluice__breq *const *reqs, size_t n) {
  sluice_dq_consumer *con = owner;
  sluice__dq_ack_head(a, con->keys, con->o.retention_ms, con->o.max_attempts);
  for (size_t i = 0; i < n; i++) {
    const settle *s = sluice__container_of(reqs[i], settle, req);
    sluice__dq_ack_item(a, s->id, s->attempt, s->op, s->delay_ms, s->token);
  }
}

static void answer(void *owner, sluice__breq *r, int status, const sluice__batch_reply *br) {
  sluice_dq_consumer *con = owner;
  settle *s = sluice__container_of(r, settle, req);
  int64_t v;
  if (status == SLUICE_OK)
    status = sluice__reply_i64(br->reply->element[br->at], &v) ? SLUICE_EPROTOCOL
             : v > 0                                           ? SLUICE_OK
             : v == -1                                         ? SLUICE_ELATE
                                                               : SLUICE_ENOTFOUND;
  if (status == SLUICE_OK && s->op == 'a') con->m.acked++;
  else if (status == SLUICE_OK && s->op == 'r' && v == 2) con->m.dead_lettered++;
  else if (status == SLUICE_OK && s->op == 'r') con->m.retried++;
  else if (status == SLUICE_ELATE) con->m.late_settles++;
  /* Accepted before the client began closing: cancelled, not refused. */
  if (status == SLUICE_ECLOSED) status = SLUICE_ECANCELED;
  if (s->cb) s->cb(con, status, s->id, s->ud);
  sluice__free(s);
  sluice__guard_poke(&con->guard);
}

/* Kept in the record of unreplicated writes; its replays are the client's
 * replay_settlements. */
static const sluice__write_kind settle_write = {
    .replay_metric = offsetof(sluice_client_metrics, replay_settlements),
};

static const sluice__batch_kind settle_kind = {
    SLUICE__BATCH_SCRIPT(sluice__lua_dq_ack, DQ_SETTLE_MAX, DQ_ACK), .build = build,
    .answer = answer, .record = &settle_write};

static int enqueue(sluice_dq_consumer *con, const sluice_dq_msg *m, char op, int64_t delay,
                   sluice_dq_settle_cb *cb, void *ud) {
  size_t len = strlen(m->id);
  settle *s = sluice__calloc(1, sizeof *s + len + 1);
  if (!s) return SLUICE_ENOMEM;
  memcpy(s->id, m->id, len + 1);
  s->attempt = m->attempt;
  s->token = m->token;
  s->op = op;
  s->delay_ms = delay;
  s->cb = cb;
  s->ud = ud;
  sluice__batcher_queue(&con->settles, &s->req, con->route);
  return SLUICE_OK;
}

/* A delivered message left the consumer's hands: capacity is back. */
static void msg_release(sluice_dq_msg *msg) {
  sluice_dq_consumer *con = msg->con;
  sluice__dq_lease_end(msg);
  sluice__list_remove(&con->held, &msg->link);
  sluice__free(msg);
  con->in_flight--;
  if (con->starved && taking_allowed(con)) {
    con->starved = 0;
    event_active(con->kick, 0, 0);
  }
  sluice__guard_poke(&con->guard);
}

static int settle_msg(sluice_dq_msg *msg, char op, int64_t delay, sluice_dq_settle_cb *cb,
                      void *ud) {
  if (!msg) return SLUICE_EINVAL;
  sluice_dq_consumer *con = msg->con;
  int rc = SLUICE_OK;
  if (delay < 0 || delay > SLUICE_DQ_TIME_MAX) rc = SLUICE_EINVAL;
  else if (con->guard.closed || sluice__client_closing(con->c)) rc = SLUICE_ECLOSED;
  if (rc == SLUICE_OK) rc = enqueue(con, msg, op, delay, cb, ud);
  msg_release(msg);
  return rc;
}

int sluice_dq_ack(sluice_dq_msg *msg, sluice_dq_settle_cb *cb, void *ud) {
  return settle_msg(msg, 'a', 0, cb, ud);
}

int sluice_dq_retry(sluice_dq_msg *msg, int64_t delay_ms, sluice_dq_settle_cb *cb, void *ud) {
  return settle_msg(msg, 'r', delay_ms, cb, ud);
}

/* ---- taking ---------------------------------------------------------------- */

static void take_failed(sluice_dq_consumer *con, int status) {
  if (!taking_allowed(con) || status == SLUICE_ECANCELED) return;
  con->m.take_errors++;
  unsigned cap = con->o.max_poll_ms < DQ_BACKOFF_MAX_MS ? con->o.max_poll_ms : DQ_BACKOFF_MAX_MS;
  con->backoff_ms = con->backoff_ms ? con->backoff_ms * 2 : DQ_BACKOFF_MIN_MS;
  if (con->backoff_ms > cap) con->backoff_ms = cap;
  con->timer_at_us = 0;
  arm_at(con, sluice__mono_us() + con->backoff_ms * 1000ull);
  if (!con->err_cb) return;
  sluice__guard_enter(&con->guard);
  con->err_cb(con, status, con->err_ud);
  sluice__guard_leave(&con->guard);
}

/* One message of a take reply (elements i..i+DQ_TAKE_PER-1), or NULL on a
 * bad reply (*bad set) or out of memory. */
static sluice_dq_msg *msg_from_reply(sluice_dq_consumer *con, const redisReply *r, size_t i,
                                     uint64_t token, int *bad) {
  const redisReply *id = sluice__reply_at(r, i), *p = sluice__reply_at(r, i + 3);
  int64_t attempt, due;
  if (!id || !p || id->type != REDIS_REPLY_STRING || p->type != REDIS_REPLY_STRING ||
      sluice__reply_i64(sluice__reply_at(r, i + 1), &attempt) ||
      sluice__reply_i64(sluice__reply_at(r, i + 2), &due)) {
    *bad = 1;
    return NULL;
  }
  sluice_dq_msg *m = sluice__calloc(1, sizeof *m + p->len + id->len + 2);
  if (!m) return NULL;
  m->con = con;
  m->attempt = (unsigned)attempt;
  m->token = token;
  m->priority = (unsigned)(due / DQ_PRIORITY_BAND);
  m->due_ms = due % DQ_PRIORITY_BAND;
  m->deadline_ms = con->take_sent_ms + con->o.visibility_ms;
  m->len = p->len;
  memcpy(m->payload, p->str, p->len);
  m->id = m->payload + p->len + 1;
  memcpy(m->id, id->str, id->len);
  return m;
}

/* Hand count messages to the handler; once the consumer is freed (possibly
 * by the handler) the rest go back to the queue at once. */
static void deliver(sluice_dq_consumer *con, const redisReply *reply, size_t count, int64_t now_us,
                    uint64_t first_token) {
  sluice__guard_enter(&con->guard);
  for (size_t k = 0; k < count; k++) {
    int bad = 0;
    sluice_dq_msg *m = msg_from_reply(con, reply, DQ_TAKE_HEAD + DQ_TAKE_PER * k, first_token + k,
                                      &bad);
    if (!m) continue; /* left in flight: redelivered after the deadline */
    sluice__list_append(&con->held, &m->link);
    con->in_flight++;
    con->m.delivered++;
    if (m->attempt > 1) con->m.redelivered++;
    int64_t late_ms = now_us / 1000 - m->due_ms;
    sluice__hist_record(&con->lateness, late_ms > 0 ? (uint64_t)late_ms * 1000 : 0);
    if (taking_allowed(con)) {
      if (con->auto_renew) sluice__dq_lease_start(m); /* without memory: not renewed */
      con->handler(con, m, con->ud);
      continue;
    }
    if (!con->guard.closed && !sluice__client_closing(con->c)) enqueue(con, m, 'x', 0, NULL, NULL);
    msg_release(m);
  }
  sluice__guard_leave(&con->guard);
}

/* After a take: go again at once if more may be due, else sleep until the
 * next due time or deadline, a wake-up heard meanwhile, or max_poll_ms. */
static void schedule(sluice_dq_consumer *con, int64_t next_ms, size_t count) {
  uint64_t at = sluice__mono_us() + (uint64_t)con->o.max_poll_ms * 1000;
  update_listen(con);
  if (next_ms >= 0 && local_us(con, next_ms) < at) at = local_us(con, next_ms);
  if (con->woken_us && con->woken_us < at) at = con->woken_us;
  con->woken_us = 0;
  if (con->again || count >= con->asked) at = 0;
  arm_at(con, at);
}

static void take_done(void *ud, int status, const redisReply *reply) {
  sluice_dq_consumer *con = ud;
  int64_t now_us = 0, next_ms = -1, count = 0, first_token = 0;
  con->taking = 0;
  /* Sent, but no answer came: it may have taken messages, which the same
   * take sent again hands back (dq_take.lua). ECONNECTION (not sent)
   * leaves the doubt as it was. */
  if (status == SLUICE_EINDOUBT || status == SLUICE_ETIMEDOUT) con->take_lost = 1;
  else if (status == SLUICE_OK) con->take_lost = 0;
  if (status == SLUICE_OK && reply && reply->elements == DQ_TAKE_HEAD &&
      sluice__reply_i64(sluice__reply_at(reply, 2), &count) == SLUICE_OK && count == -1) {
    /* Redis had run a take of this number already: send it again. */
    sluice__log(con->c, SLUICE_LOG_DEBUG, "queue '%s': take %" PRIu64 " ran before; sent again",
                con->name, con->take_seq);
    con->take_lost = 1;
    status = SLUICE_EINDOUBT;
  }
  if (status == SLUICE_OK &&
      (sluice__reply_i64(sluice__reply_at(reply, 0), &now_us) ||
       sluice__reply_i64(sluice__reply_at(reply, 1), &next_ms) ||
       sluice__reply_i64(sluice__reply_at(reply, 2), &count) || count < 0 ||
       sluice__reply_i64(sluice__reply_at(reply, 3), &first_token) || first_token < 0 ||
       reply->elements != DQ_TAKE_HEAD + DQ_TAKE_PER * (size_t)count))
    status = SLUICE_EPROTOCOL;
  if (status != SLUICE_OK) {
    take_failed(con, status);
    sluice__guard_poke(&con->guard);
    return;
  }
  con->backoff_ms = 0;
  /* Before the handlers run: their time must not shift Redis's clock. */
  con->offset_us = now_us - (int64_t)sluice__mono_us();
  con->have_offset = 1;
  deliver(con, reply, (size_t)count, now_us, (uint64_t)first_token);
  if (!taking_allowed(con)) {
    sluice__guard_poke(&con->guard);
    return;
  }
  schedule(con, next_ms, (size_t)count);
}

static void take(sluice_dq_consumer *con) {
  sluice__args args;
  if (!taking_allowed(con)) return;
  if (con->taking) {
    con->again = 1;
    return;
  }
  unsigned cap = con->o.max_in_flight > con->in_flight ? con->o.max_in_flight - con->in_flight : 0;
  if (cap == 0) {
    con->starved = 1;
    return;
  }
  con->asked = cap < con->o.batch ? cap : con->o.batch;
  evtimer_del(con->timer);
  con->timer_at_us = 0;
  con->woken_us = 0; /* this take sees every wake-up heard so far */
  con->take_sent_ms = sluice__mono_ms();
  if (!con->take_lost) con->take_seq++;
  int rc = sluice__args_init(&args, DQ_TAKE_ARGS, DQ_TAKE_NUMS);
  if (rc == SLUICE_OK) {
    sluice__dq_take_args(&args, con->keys, con->o.retention_ms, con->asked, con->o.visibility_ms,
                         con->o.max_attempts, con->cid, con->o.max_poll_ms, con->take_seq,
                         con->take_lost);
    rc = sluice__eval(con->c, &sluice__lua_dq_take, args.nkeys, args.argc, args.argv, args.lens,
                      con->o.op_timeout_ms, take_done, con, NULL);
    sluice__args_clear(&args);
  }
  if (rc != SLUICE_OK) {
    if (rc == SLUICE_ECLOSED) return; /* the client's close cancels us next */
    take_failed(con, rc);
    return;
  }
  con->taking = 1;
  con->again = 0;
}

static void take_cb(evutil_socket_t fd, short what, void *arg) { take(arg); }

static void timer_cb(evutil_socket_t fd, short what, void *arg) {
  sluice_dq_consumer *con = arg;
  con->timer_at_us = 0;
  take(con);
}

/* ---- public API ------------------------------------------------------------ */

void sluice_dq_consumer_options_init(sluice_dq_consumer_options *o) {
  if (!o) return;
  memset(o, 0, sizeof *o);
  o->batch = 16;
  o->visibility_ms = 30000;
  o->max_in_flight = 256;
  o->max_attempts = 5;
  o->max_poll_ms = 60000;
  o->retention_ms = DQ_DEFAULT_RETENTION_MS;
}

/* Client closed or consumer freed: stop taking. On close, settlements and
 * extensions still queued or in flight are cancelled and renewal stops;
 * after a free they go on. */
static void consumer_cancel(sluice__guard *g) {
  sluice_dq_consumer *con = sluice__container_of(g, sluice_dq_consumer, guard);
  evtimer_del(con->timer);
  event_del(con->kick);
  update_listen(con);
  if (!g->closed) return; /* freed: settlements go on, delivered messages keep their leases */
  sluice__batcher_cancel(&con->settles, SLUICE_ECANCELED);
  sluice__batcher_cancel(&con->extends, SLUICE_ECANCELED);
  for (sluice__link *l = con->held.head; l; l = l->next)
    sluice__dq_lease_stop(sluice__container_of(l, sluice_dq_msg, link));
}

static int consumer_idle(const sluice__guard *g) {
  const sluice_dq_consumer *con = sluice__container_of(g, sluice_dq_consumer, guard);
  return !con->in_flight && !con->taking && !sluice__batcher_pending(&con->settles) &&
         !sluice__batcher_pending(&con->extends);
}

static void consumer_destroy(sluice__guard *g) {
  sluice_dq_consumer *con = sluice__container_of(g, sluice_dq_consumer, guard);
  sluice__unlisten(con->listener);
  if (con->timer) event_free(con->timer);
  if (con->kick) event_free(con->kick);
  sluice__flusher_clear(&con->flusher);
  sluice__dq_keys_free(con->keys);
  free(con->wake_key);
  free(con->name);
  sluice__free(con);
}

/* The connection is back: due messages are taken at once, not after the
 * backoff of the takes that failed meanwhile. */
static void consumer_resume(sluice__guard *g) {
  sluice_dq_consumer *con = sluice__container_of(g, sluice_dq_consumer, guard);
  if (!taking_allowed(con)) return;
  con->backoff_ms = 0;
  evtimer_del(con->timer);
  event_active(con->kick, 0, 0);
}

/* Another node serves the queue (a failover, a restart): the client's
 * unreplicated pushes and settlements were sent there already; look again
 * at once, as after a reconnect. */
static void consumer_node_changed(sluice__guard *g, int lo, int hi) {
  sluice_dq_consumer *con = sluice__container_of(g, sluice_dq_consumer, guard);
  unsigned route = sluice__client_route(con->c, con->keys[0]);
  if (lo >= 0 && (route < (unsigned)lo || route > (unsigned)hi)) return;
  sluice__dq_lease_renew_all(con);
  consumer_resume(g);
}

const sluice__obj_kind sluice__dq_consumer_obj = {"dq_consumer"};

/* Inside free, stopping the takes is all (nothing of that calls back). */
static const sluice__guard_ops consumer_guard_ops = {.quiesce = consumer_cancel,
                                                     .cancel = consumer_cancel,
                                                     .idle = consumer_idle,
                                                     .destroy = consumer_destroy,
                                                     .resume = consumer_resume,
                                                     .node_changed = consumer_node_changed};

static int check_options(const sluice_dq_consumer_options *o) {
  if (o->batch < 1 || o->batch > 1000 || o->visibility_ms < 10 || o->max_in_flight < 1 ||
      o->max_poll_ms < 10 || o->retention_ms < 1 || o->retention_ms > (uint64_t)SLUICE_DQ_TIME_MAX)
    return SLUICE_EINVAL;
  return SLUICE_OK;
}

static int consumer_init(sluice_dq_consumer *con, sluice_client *c, const char *name) {
  struct event_base *base = sluice__client_base(c);
  con->timer = evtimer_new(base, timer_cb, con);
  con->kick = event_new(base, -1, 0, take_cb, con);
  con->name = strdup(name);
  if (!con->timer || !con->kick || !con->name ||
      sluice__flusher_init(&con->flusher, base) != SLUICE_OK ||
      sluice__dq_keys(c, name, con->keys) != 0)
    return SLUICE_ENOMEM;
  sluice__random_hex(con->cid);
  size_t klen = strlen(con->keys[DQ_KEY_CONSUMERS]);
  if (!(con->wake_key = malloc(klen + sizeof con->cid + 1))) return SLUICE_ENOMEM;
  memcpy(con->wake_key, con->keys[DQ_KEY_CONSUMERS], klen);
  con->wake_key[klen] = ':';
  memcpy(con->wake_key + klen + 1, con->cid, sizeof con->cid);
  sluice__batcher_init(&con->settles, &settle_kind, c, con, &con->guard, &con->flusher,
                       con->o.op_timeout_ms);
  sluice__dq_lease_init(con); /* after the settles: flushed after them */
  con->route = sluice__client_route(c, con->keys[0]);
  return SLUICE_OK;
}

int sluice_dq_consumer_new(sluice_client *c, const char *name,
                           const sluice_dq_consumer_options *opts, sluice_dq_handler *handler,
                           void *ud, sluice_dq_consumer **out) {
  sluice_dq_consumer_options o;
  if (out) *out = NULL;
  if (!c || !out || !handler || !sluice__valid_name(name)) return SLUICE_EINVAL;
  if (opts) o = *opts;
  else sluice_dq_consumer_options_init(&o);
  if (check_options(&o) != 0) return SLUICE_EINVAL;
  int rc;
  sluice_dq_consumer *con = sluice__handle_alloc(c, sizeof *con, &rc);
  if (!con) return rc;
  con->c = c;
  con->o = o;
  con->handler = handler;
  con->ud = ud;
  if (consumer_init(con, c, name) != 0) {
    consumer_destroy(&con->guard);
    return SLUICE_ENOMEM;
  }
  sluice__handle_attach(
      c, &con->guard, &consumer_guard_ops,
      &(sluice__obj_view){&sluice__dq_consumer_obj, con, con->name, NULL, &con->lateness});
  update_listen(con);
  event_active(con->kick, 0, 0); /* first take from the loop */
  *out = con;
  return SLUICE_OK;
}

void sluice_dq_consumer_free(sluice_dq_consumer *con) {
  if (con) sluice__guard_free(&con->guard);
}

void sluice_dq_consumer_set_error_cb(sluice_dq_consumer *con, sluice_dq_error_cb *cb, void *ud) {
  if (!con) return;
  con->err_cb = cb;
  con->err_ud = ud;
}

void sluice_dq_consumer_set_lost_cb(sluice_dq_consumer *con, sluice_dq_lost_cb *cb, void *ud) {
  if (!con) return;
  con->lost_cb = cb;
  con->lost_ud = ud;
}

int sluice_dq_consumer_set_auto_renew(sluice_dq_consumer *con, int on) {
  if (!con || (on != 0 && on != 1)) return SLUICE_EINVAL;
  con->auto_renew = on;
  return SLUICE_OK;
}

unsigned sluice_dq_consumer_in_flight(const sluice_dq_consumer *con) {
  return con ? con->in_flight : 0;
}

const char *sluice_dq_msg_id(const sluice_dq_msg *m) { return m ? m->id : NULL; }

const void *sluice_dq_msg_payload(const sluice_dq_msg *m, size_t *len) {
  if (len) *len = m ? m->len : 0;
  return m ? m->payload : NULL;
}

unsigned sluice_dq_msg_attempt(const sluice_dq_msg *m) { return m ? m->attempt : 0; }
uint64_t sluice_dq_msg_delivery(const sluice_dq_msg *m) { return m ? m->token : 0; }
int64_t sluice_dq_msg_due_ms(const sluice_dq_msg *m) { return m ? m->due_ms : -1; }

unsigned sluice_dq_msg_priority(const sluice_dq_msg *m) { return m ? m->priority : 0; }

int64_t sluice_dq_msg_remaining_ms(const sluice_dq_msg *m) {
  uint64_t now = sluice__mono_ms();
  return m && !m->lost && m->deadline_ms > now ? (int64_t)(m->deadline_ms - now) : 0;
}

void sluice_dq_consumer_get_metrics(const sluice_dq_consumer *con,
                                    sluice_dq_consumer_metrics *out) {
  if (!out) return;
  memset(out, 0, sizeof *out);
  if (!con) return;
  *out = con->m;
  sluice__latency_of(&con->lateness, &out->lateness);
}
