/*
 * Delay queue, message leases: extending a taken message's visibility (by
 * hand or automatically while the handler works) and telling the consumer
 * when a delivery was lost.
 *
 * Every extension is a request of the consumer's extend batcher: the ones
 * made in one loop turn go in one dq_extend call. Automatic renewals are
 * due a third of visibility_ms after the take or the last confirmed
 * extension, rounded down to a grid of a twelfth of it, so the messages of
 * one take (and of takes close together) renew in the same turn, hence the
 * same call.
 *
 * The local deadline is conservative, as a permit's (sem/permit.c): an
 * extension sent at S (monotonic) holds in Redis at least until S plus the
 * time left it reported, less a twentieth for clock-rate drift. With
 * auto-renewal, a deadline that passes without a confirmed renewal is a
 * loss (SLUICE_ETIMEDOUT): Redis may still hold the message, but another
 * consumer may as well have it by now.
 *
 * An extension is not kept in the record of unreplicated writes (core/
 * record.c), as a permit's renewal is not: when another node starts
 * serving the queue, every held message is renewed at once instead
 * (sluice__dq_lease_renew_all); one whose deadline passed there is lost.
 *
 * Freeing the consumer stops its takes, not its leases: a message already
 * delivered is still being worked on, so it is renewed (and its loss
 * reported) until it is settled, as its settle callbacks still run.
 * Closing the client stops both.
 */
#include <stdlib.h>
#include <string.h>

#include <event2/event.h>

#include "dq/dq_consumer.h"

#define LEASE_RETRY_MIN_MS 10
#define LEASE_TIMEOUT_MIN_MS 10

typedef struct ext {
  sluice__breq req;   /* in con->extends */
  sluice__link link;  /* in msg->exts while msg is held */
  sluice_dq_msg *msg; /* NULL once settled */
  sluice_dq_settle_cb *cb;
  void *ud;
  unsigned attempt;
  uint64_t token, ms;
  int automatic;
  char id[];
} ext;

static uint64_t ms_left(const sluice_dq_msg *m) {
  uint64_t now = sluice__mono_ms();
  return m->deadline_ms > now ? m->deadline_ms - now : 0;
}

/* Auto-renewal's next step: the renewal when it is due and none is out,
 * else the deadline (a loss if nothing confirms a renewal by then). */
static void arm(sluice_dq_msg *m) {
  if (!m->timer || m->lost) return;
  uint64_t at = m->deadline_ms, now = sluice__mono_ms();
  if (!m->renewing && m->renew_at_ms < at) at = m->renew_at_ms;
  evtimer_del(m->timer);
  sluice__timer_in(m->timer, at > now ? at - now : 0);
}

/* Due a third of the visibility after base_ms, on the consumer's grid. */
static void renew_from(sluice_dq_msg *m, uint64_t base_ms) {
  uint64_t vis = m->con->o.visibility_ms, grid = vis / 12 ? vis / 12 : 1;
  m->renew_at_ms = (base_ms + vis / 3) / grid * grid;
  arm(m);
}

/* Try again soon, well before the deadline (a failed renewal). */
static void renew_soon(sluice_dq_msg *m) {
  uint64_t again = ms_left(m) / 4;
  if (again < LEASE_RETRY_MIN_MS) again = LEASE_RETRY_MIN_MS;
  m->renew_at_ms = sluice__mono_ms() + again;
  arm(m);
}

/* Tell the consumer once, from the loop (the callback may settle m). */
static void fire_lost(sluice_dq_msg *m, int reason) {
  sluice_dq_consumer *con = m->con;
  if (m->lost) return;
  m->lost = reason;
  if (m->timer) evtimer_del(m->timer);
  sluice__log(con->c, SLUICE_LOG_WARN, "delay queue '%s': message %s (delivery %llu) lost (%s)",
              con->name, m->id, (unsigned long long)m->token,
              reason == SLUICE_ETIMEDOUT ? "deadline passed without a confirmed renewal"
                                         : "Redis says it is no longer ours");
  if (!con->lost_cb || con->guard.closed) return;
  sluice__guard_enter(&con->guard);
  con->lost_cb(con, m, reason, con->lost_ud);
  sluice__guard_leave(&con->guard);
}

static int queue_ext(sluice_dq_msg *m, uint64_t ms, int automatic, sluice_dq_settle_cb *cb,
                     void *ud) {
  size_t len = strlen(m->id);
  ext *e = sluice__calloc(1, sizeof *e + len + 1);
  if (!e) return SLUICE_ENOMEM;
  memcpy(e->id, m->id, len + 1);
  e->msg = m;
  e->cb = cb;
  e->ud = ud;
  e->attempt = m->attempt;
  e->token = m->token;
  e->ms = ms;
  e->automatic = automatic;
  sluice__list_append(&m->exts, &e->link);
  sluice__batcher_queue(&m->con->extends, &e->req, m->con->route);
  return SLUICE_OK;
}

static void renew(sluice_dq_msg *m) {
  if (m->renewing || m->lost || m->con->guard.closed) return;
  if (queue_ext(m, m->con->o.visibility_ms, 1, NULL, NULL) == SLUICE_OK) m->renewing = 1;
  else renew_soon(m); /* out of memory */
}

static void timer_cb(evutil_socket_t fd, short what, void *arg) {
  sluice_dq_msg *m = arg;
  if (sluice__mono_ms() >= m->deadline_ms) fire_lost(m, SLUICE_ETIMEDOUT);
  else if (!m->renewing) renew(m);
  else arm(m);
}

/* ---- the extend batcher ---------------------------------------------------- */

static void build(sluice__args *a, void *owner, sluice__breq *const *reqs, size_t n) {
  sluice_dq_consumer *con = owner;
  sluice__dq_extend_head(a, con->keys, con->o.retention_ms);
  for (size_t i = 0; i < n; i++) {
    const ext *e = sluice__container_of(reqs[i], ext, req);
    sluice__dq_extend_item(a, e->id, e->attempt, e->token, e->ms);
  }
}

/* Waiting for an answer past a held message's deadline is pointless,
 * unless that deadline has passed already: then Redis's answer (refused,
 * most likely, or still its) is all the caller can learn, and a timeout of
 * a few ms would answer SLUICE_ETIMEDOUT on any link slower than that. */
static unsigned timeout(void *owner, sluice__breq *const *reqs, size_t n) {
  sluice_dq_consumer *con = owner;
  uint64_t t = con->o.op_timeout_ms ? con->o.op_timeout_ms : sluice__client_op_timeout(con->c);
  for (size_t i = 0; i < n; i++) {
    const ext *e = sluice__container_of(reqs[i], ext, req);
    uint64_t left = e->msg && !e->msg->lost ? ms_left(e->msg) : 0;
    if (left > 0 && left < t) t = left;
  }
  return t < LEASE_TIMEOUT_MIN_MS ? LEASE_TIMEOUT_MIN_MS : (unsigned)t;
}

/* What Redis said to one extension: the new deadline (status OK), lost or
 * gone. */
static int decide(int status, const sluice__batch_reply *br, int64_t *left_ms) {
  int64_t now, v;
  if (status != SLUICE_OK) return status;
  if (sluice__reply_i64(br->reply->element[0], &now) ||
      sluice__reply_i64(br->reply->element[br->at], &v))
    return SLUICE_EPROTOCOL;
  if (v == -1) return SLUICE_ELATE;
  if (v < 0) return SLUICE_ENOTFOUND;
  *left_ms = v > now ? v - now : 0;
  return SLUICE_OK;
}

static void confirmed(sluice_dq_msg *m, const sluice__batch_reply *br, uint64_t left) {
  uint64_t margin = left / 20 ? left / 20 : 1;
  uint64_t dl = br->sent_ms + (left > margin ? left - margin : 0);
  if (dl > m->deadline_ms) m->deadline_ms = dl;
  if (m->timer) renew_from(m, br->sent_ms);
}

static void answer(void *owner, sluice__breq *r, int status, const sluice__batch_reply *br) {
  sluice_dq_consumer *con = owner;
  ext *e = sluice__container_of(r, ext, req);
  sluice_dq_msg *m = e->msg;
  int64_t left = 0;
  status = decide(status, br, &left);
  if (m) {
    sluice__list_remove(&m->exts, &e->link);
    if (e->automatic) m->renewing = 0;
  }
  if (m && !m->lost && status == SLUICE_OK) confirmed(m, br, (uint64_t)left);
  else if (m && !m->lost && (status == SLUICE_ELATE || status == SLUICE_ENOTFOUND))
    fire_lost(m, status); /* may settle m: not used below */
  else if (m && !m->lost && e->automatic && status != SLUICE_ECANCELED)
    renew_soon(m); /* a transport error */
  if (status == SLUICE_ECLOSED) status = SLUICE_ECANCELED;
  if (e->cb) e->cb(con, status, e->id, e->ud);
  sluice__free(e);
  sluice__guard_poke(&con->guard);
}

/* Not in the record of unreplicated writes (.record 0), like a permit's
 * renewal: see the top of this file. */
static const sluice__batch_kind extend_kind = {
    SLUICE__BATCH_SCRIPT(sluice__lua_dq_extend, DQ_SETTLE_MAX, DQ_EXTEND), .build = build,
    .answer = answer, .timeout = timeout};

/* ---- shared with dq_consumer.c --------------------------------------------- */

void sluice__dq_lease_init(sluice_dq_consumer *con) {
  sluice__batcher_init(&con->extends, &extend_kind, con->c, con, &con->guard, &con->flusher,
                       con->o.op_timeout_ms);
}

int sluice__dq_lease_start(sluice_dq_msg *m) {
  sluice_dq_consumer *con = m->con;
  uint64_t vis = con->o.visibility_ms, margin = vis / 20 ? vis / 20 : 1;
  m->timer = evtimer_new(sluice__client_base(con->c), timer_cb, m);
  if (!m->timer) return SLUICE_ENOMEM;
  m->deadline_ms = con->take_sent_ms + vis - margin;
  renew_from(m, con->take_sent_ms);
  return SLUICE_OK;
}

void sluice__dq_lease_stop(sluice_dq_msg *m) {
  if (m->timer) evtimer_del(m->timer);
}

void sluice__dq_lease_end(sluice_dq_msg *m) {
  if (m->timer) event_free(m->timer);
  m->timer = NULL;
  while (m->exts.head) {
    ext *e = sluice__container_of(m->exts.head, ext, link);
    sluice__list_remove(&m->exts, &e->link);
    e->msg = NULL;
  }
}

void sluice__dq_lease_renew_all(sluice_dq_consumer *con) {
  for (sluice__link *l = con->held.head; l; l = l->next) {
    sluice_dq_msg *m = sluice__container_of(l, sluice_dq_msg, link);
    if (m->timer) renew(m);
  }
}

/* ---- public API ------------------------------------------------------------ */

int sluice_dq_msg_extend(sluice_dq_msg *m, int64_t ms, sluice_dq_settle_cb *cb, void *ud) {
  if (!m || ms < 1 || ms > SLUICE_DQ_TIME_MAX) return SLUICE_EINVAL;
  sluice_dq_consumer *con = m->con;
  if (con->guard.closed || sluice__client_closing(con->c)) return SLUICE_ECLOSED;
  return queue_ext(m, (uint64_t)ms, 0, cb, ud);
}
