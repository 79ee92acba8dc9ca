/* The per-loop-turn batcher (src/core/batcher.c) without Redis: a fake `send`
 * captures each call (its arguments and reply callback); the test answers
 * it later with a hand-built reply. */
#include <string.h>

#include <event2/event.h>
#include <sluice/sluice.h>

#include "core/batcher.h"
#include "harness.h"

/* ---- the fake send --------------------------------------------------------- */

enum { MAX_CALLS = 16, MAX_ARGS = 32 };

typedef struct call {
  int nkeys, argc;
  char argv[MAX_ARGS][24];
  unsigned timeout_ms;
  sluice__reply_fn *fn;
  void *ud;
} call;

static call calls[MAX_CALLS];
static int ncalls;
static int send_rc; /* what the fake returns (OK: the call is "sent") */

static int fake_send(sluice_client *c, const sluice__script *s, int nkeys, int argc,
                     const char *const *argv, const size_t *lens, unsigned timeout_ms,
                     sluice__reply_fn *fn, void *userdata, sluice__op **op) {
  if (send_rc != SLUICE_OK) return send_rc;
  TH_ASSERT(ncalls < MAX_CALLS && argc <= MAX_ARGS);
  call *k = &calls[ncalls++];
  k->nkeys = nkeys;
  k->argc = argc;
  for (int i = 0; i < argc; i++)
    snprintf(k->argv[i], sizeof k->argv[i], "%.*s", (int)lens[i], argv[i]);
  k->timeout_ms = timeout_ms;
  k->fn = fn;
  k->ud = userdata;
  if (op) *op = NULL; /* sluice__op_detach(NULL) does nothing */
  return SLUICE_OK;
}

/* ---- hand-built replies ------------------------------------------------------ */

/* An array of n integers vals[0..n). */
typedef struct fake_reply {
  redisReply top;
  redisReply elems[MAX_ARGS];
  redisReply *ptrs[MAX_ARGS];
} fake_reply;

static const redisReply *array_reply(fake_reply *r, const long long *vals, size_t n) {
  memset(r, 0, sizeof *r);
  r->top.type = REDIS_REPLY_ARRAY;
  r->top.elements = n;
  r->top.element = r->ptrs;
  for (size_t i = 0; i < n; i++) {
    r->elems[i].type = REDIS_REPLY_INTEGER;
    r->elems[i].integer = vals[i];
    r->ptrs[i] = &r->elems[i];
  }
  return &r->top;
}

/* The reply the kind below expects for call k: a head element, then
 * 10 * id for each request, in the call's order. */
static void answer_call(int k, int status) {
  fake_reply fr;
  long long vals[MAX_ARGS];
  size_t n = 0;
  vals[n++] = -1;
  for (int i = calls[k].nkeys; i < calls[k].argc; i++) vals[n++] = 10 * atoll(calls[k].argv[i]);
  calls[k].fn(calls[k].ud, status, status == SLUICE_OK ? array_reply(&fr, vals, n) : NULL);
}

/* ---- requests, owner, kind -------------------------------------------------- */

typedef struct treq {
  sluice__breq br;
  int id;
  int answers, status;
  long long val;
  int had_reply;
} treq;

static int order[64], norder; /* ids in the order they were answered */

typedef struct owner owner;
static void (*on_answer)(owner *o, treq *r);

struct owner {
  sluice__flusher f;
  sluice__batcher b;
};

static void build(sluice__args *a, void *ow, sluice__breq *const *reqs, size_t n) {
  sluice__args_key(a, "k");
  for (size_t i = 0; i < n; i++) {
    TH_ASSERT(reqs[i] != NULL);
    sluice__args_u64(a, (uint64_t)sluice__container_of(reqs[i], treq, br)->id);
  }
}

static void answer(void *ow, sluice__breq *b, int status, const sluice__batch_reply *br) {
  treq *r = sluice__container_of(b, treq, br);
  TH_ASSERT(!sluice__breq_busy(b)); /* it left the batcher before its answer */
  r->answers++;
  r->status = status;
  r->had_reply = br->reply != NULL;
  if (status == SLUICE_OK) {
    const redisReply *e = sluice__reply_at(br->reply, br->at);
    TH_ASSERT(e && e->type == REDIS_REPLY_INTEGER);
    r->val = e->integer;
  }
  if (norder < 64) order[norder++] = r->id;
  if (on_answer) on_answer(ow, r);
}

static sluice__batch_kind kind = {
    .script = NULL, /* the fake send does not look at it */
    .max = 4,
    .args_head = 1,
    .args_per = 1,
    .nums_head = 0,
    .nums_per = 1,
    .reply_head = 1,
    .reply_per = 1,
    .build = build,
    .answer = answer,
    .timeout = NULL,
};

static struct event_base *base;

static void owner_init(owner *o, sluice__guard *g) {
  TH_ASSERT_EQ(sluice__flusher_init(&o->f, base), SLUICE_OK);
  sluice__batcher_init(&o->b, &kind, NULL, o, g, &o->f, 1234);
  o->b.send = fake_send;
}

static void setup(void) {
  base = event_base_new();
  TH_ASSERT(base != NULL);
  ncalls = norder = 0;
  send_rc = SLUICE_OK;
  on_answer = NULL;
}

static void teardown(owner *o) {
  if (o) {
    TH_ASSERT_EQ(sluice__batcher_pending(&o->b), 0);
    TH_ASSERT(o->b.inflight.head == NULL);
    sluice__flusher_clear(&o->f);
  }
  TH_ASSERT(th_loop_drain(base, 1000));
  event_base_free(base);
}

static void init_reqs(treq *r, int n) {
  memset(r, 0, sizeof *r * (size_t)n);
  for (int i = 0; i < n; i++) r[i].id = i + 1;
}

/* A plain owner (no guard) whose calls carry at most max requests. */
static void open_owner(owner *o, unsigned max) {
  setup();
  kind.max = max;
  owner_init(o, NULL);
}

/* Requests with ids 1..n, queued in order on route 0. */
static void queue_new(owner *o, treq *r, int n) {
  init_reqs(r, n);
  for (int i = 0; i < n; i++) sluice__batcher_queue(&o->b, &r[i].br, 0);
}

/* queue_new, then the loop's turn that sends the calls. */
static void queue_sent(owner *o, treq *r, int n) {
  queue_new(o, r, n);
  TH_ASSERT(th_loop_drain(base, 1000));
}

/* Each of r[0..n-1] answered once, with status, and (had_reply >= 0)
 * with or without the reply. */
static void expect_each(const treq *r, int n, int status, int had_reply) {
  for (int i = 0; i < n; i++) {
    TH_ASSERT_EQ(r[i].answers, 1);
    TH_ASSERT_EQ(r[i].status, status);
    if (had_reply >= 0) TH_ASSERT_EQ(r[i].had_reply, had_reply);
  }
}

/* r[0..n-1] each got its own part of the reply (the fake's 10 * id). */
static void expect_own_parts(const treq *r, int n) {
  for (int i = 0; i < n; i++) TH_ASSERT_EQ(r[i].val, 10 * (i + 1));
}

/* Of a call of three, the second left: the first and third answered. */
static void expect_second_skipped(const treq *r) {
  TH_ASSERT_EQ(r[0].answers, 1);
  TH_ASSERT_EQ(r[1].answers, 0);
  TH_ASSERT_EQ(r[2].answers, 1);
  TH_ASSERT_EQ(r[2].val, 30);
}

/* The call k carries these ids, in this order. */
static void expect_call(int k, const int *ids, int n) {
  TH_ASSERT(k < ncalls);
  TH_ASSERT_EQ(calls[k].nkeys, 1);
  TH_ASSERT_STR_EQ(calls[k].argv[0], "k");
  TH_ASSERT_EQ(calls[k].argc, 1 + n);
  for (int i = 0; i < n; i++) TH_ASSERT_EQ(atoll(calls[k].argv[1 + i]), ids[i]);
}

/* A case's plain owner and its requests (ids 1..n), one case at a time. */
static struct {
  owner o;
  treq r[16];
} bc;

enum { INIT, QUEUED, SENT }; /* how far case_open takes the requests */

/* A case's start: open_owner(max), then n requests made (INIT), queued on
 * route 0 (QUEUED), or queued and sent by the loop's turn (SENT). */
static treq *case_open(unsigned max, int n, int how) {
  TH_ASSERT(n <= 16);
  open_owner(&bc.o, max);
  if (how == INIT) init_reqs(bc.r, n);
  else if (how == QUEUED) queue_new(&bc.o, bc.r, n);
  else queue_sent(&bc.o, bc.r, n);
  return bc.r;
}

/* A case's end: nothing pending, nothing in flight, the loop drained. */
static void case_close(void) { teardown(&bc.o); }

/* ---- cases ------------------------------------------------------------------ */

static void test_one_turn_one_call(void) {
  treq *r = case_open(8, 5, QUEUED);
  sluice__batcher_queue(&bc.o.b, &r[2].br, 0); /* queued twice: still once */
  TH_ASSERT_EQ(ncalls, 0);                     /* nothing goes out inside queue */
  TH_ASSERT_EQ(sluice__batcher_pending(&bc.o.b), 5);
  TH_ASSERT(th_loop_drain(base, 1000));
  TH_ASSERT_EQ(ncalls, 1);
  expect_call(0, (const int[]){1, 2, 3, 4, 5}, 5);
  TH_ASSERT_EQ(calls[0].timeout_ms, 1234);
  TH_ASSERT_EQ(norder, 0);
  answer_call(0, SLUICE_OK);
  TH_ASSERT_EQ(norder, 5);
  for (int i = 0; i < 5; i++) TH_ASSERT_EQ(order[i], i + 1);
  expect_each(r, 5, SLUICE_OK, -1);
  expect_own_parts(r, 5);
  case_close();
}

static void test_cap_per_call(void) {
  treq *r = case_open(4, 10, SENT);
  TH_ASSERT_EQ(ncalls, 3);
  expect_call(0, (const int[]){1, 2, 3, 4}, 4);
  expect_call(1, (const int[]){5, 6, 7, 8}, 4);
  expect_call(2, (const int[]){9, 10}, 2);
  answer_call(1, SLUICE_OK); /* replies in any order */
  answer_call(2, SLUICE_OK);
  answer_call(0, SLUICE_OK);
  for (int i = 0; i < 10; i++) TH_ASSERT_EQ(r[i].answers, 1);
  expect_own_parts(r, 10);
  case_close();
}

static void test_routes_never_mixed(void) {
  treq *r = case_open(4, 7, INIT);
  static const unsigned route[7] = {1, 2, 1, 2, 3, 1, 1};
  for (int i = 0; i < 7; i++) sluice__batcher_queue(&bc.o.b, &r[i].br, route[i]);
  TH_ASSERT(th_loop_drain(base, 1000));
  TH_ASSERT_EQ(ncalls, 3);
  expect_call(0, (const int[]){1, 3, 6, 7}, 4);
  expect_call(1, (const int[]){2, 4}, 2);
  expect_call(2, (const int[]){5}, 1);
  for (int k = 0; k < 3; k++) answer_call(k, SLUICE_OK);
  expect_own_parts(r, 7);
  case_close();
}

static void test_leave_queue_and_slot(void) {
  treq *r = case_open(8, 4, QUEUED);
  sluice__batcher_leave(&bc.o.b, &r[3].br); /* leaves the queue */
  TH_ASSERT(!sluice__breq_busy(&r[3].br));
  TH_ASSERT(th_loop_drain(base, 1000));
  expect_call(0, (const int[]){1, 2, 3}, 3);
  sluice__batcher_leave(&bc.o.b, &r[1].br); /* leaves its slot in flight */
  TH_ASSERT(!sluice__breq_busy(&r[1].br));
  TH_ASSERT_EQ(sluice__batcher_pending(&bc.o.b), 2);
  answer_call(0, SLUICE_OK);
  expect_second_skipped(r); /* r[1]'s part is dropped */
  TH_ASSERT_EQ(r[0].val, 10);
  TH_ASSERT_EQ(r[3].answers, 0);
  case_close();
}

/* An answer makes a later request of the same call leave: it is skipped. */
static treq *to_leave;
static void leave_other(owner *o, treq *r) {
  if (to_leave) sluice__batcher_leave(&o->b, &to_leave->br);
  to_leave = NULL;
}

static void test_leave_during_fan_out(void) {
  treq *r = case_open(8, 3, SENT);
  to_leave = &r[1];
  on_answer = leave_other;
  answer_call(0, SLUICE_OK);
  expect_second_skipped(r);
  case_close();
}

static void test_wrong_reply_shape(void) {
  treq *r = case_open(8, 3, SENT);
  for (int i = 0; i < 2; i++) sluice__batcher_queue(&bc.o.b, &r[i].br, 0); /* busy: ignored */
  TH_ASSERT_EQ(sluice__batcher_pending(&bc.o.b), 3);
  /* One element short. */
  fake_reply fr;
  const long long vals[3] = {-1, 10, 20};
  calls[0].fn(calls[0].ud, SLUICE_OK, array_reply(&fr, vals, 3));
  expect_each(r, 3, SLUICE_EPROTOCOL, 0);
  /* Not an array at all. */
  queue_sent(&bc.o, r, 2);
  TH_ASSERT_EQ(ncalls, 2);
  redisReply scalar;
  memset(&scalar, 0, sizeof scalar);
  scalar.type = REDIS_REPLY_INTEGER;
  calls[1].fn(calls[1].ud, SLUICE_OK, &scalar);
  for (int i = 0; i < 2; i++) TH_ASSERT_EQ(r[i].status, SLUICE_EPROTOCOL);
  /* An error status reaches every request, without the reply. */
  queue_sent(&bc.o, r, 2);
  redisReply err;
  memset(&err, 0, sizeof err);
  err.type = REDIS_REPLY_ERROR;
  err.str = (char *)"ERR boom";
  err.len = 8;
  calls[2].fn(calls[2].ud, SLUICE_EREDIS, &err);
  expect_each(r, 2, SLUICE_EREDIS, 0);
  case_close();
}

static void test_send_failure(void) {
  treq *r = case_open(2, 3, QUEUED);
  send_rc = SLUICE_ECLOSED;
  TH_ASSERT(th_loop_drain(base, 1000));
  TH_ASSERT_EQ(ncalls, 0);
  expect_each(r, 3, SLUICE_ECLOSED, -1);
  for (int i = 0; i < 3; i++) TH_ASSERT_EQ(order[i], i + 1);
  TH_ASSERT_EQ(sluice__batcher_pending(&bc.o.b), 0);
  case_close();
}

static void test_cancel_answers_once(void) {
  treq *r = case_open(8, 4, INIT);
  for (int i = 0; i < 2; i++) sluice__batcher_queue(&bc.o.b, &r[i].br, 0);
  TH_ASSERT(th_loop_drain(base, 1000));
  TH_ASSERT_EQ(ncalls, 1);
  for (int i = 2; i < 4; i++) sluice__batcher_queue(&bc.o.b, &r[i].br, 0);
  TH_ASSERT_EQ(sluice__batcher_pending(&bc.o.b), 4);
  sluice__batcher_cancel(&bc.o.b, SLUICE_ECANCELED);
  TH_ASSERT_EQ(sluice__batcher_pending(&bc.o.b), 0);
  expect_each(r, 4, SLUICE_ECANCELED, -1);
  for (int i = 0; i < 4; i++) TH_ASSERT_EQ(order[i], i + 1); /* in flight first, then queued */
  sluice__batcher_cancel(&bc.o.b, SLUICE_ECANCELED);         /* nothing left: no answer */
  TH_ASSERT(th_loop_drain(base, 1000));
  TH_ASSERT_EQ(ncalls, 1); /* the queued ones never went out */
  for (int i = 0; i < 4; i++) TH_ASSERT_EQ(r[i].answers, 1);
  case_close();
}

/* ---- an owner with a lifetime guard ------------------------------------------ */

typedef struct gowner {
  owner o; /* first: answer() gets the owner */
  sluice__guard g;
  treq r[3];
  int *destroyed;
} gowner;

static int gowner_outstanding(const gowner *x) {
  int n = 0;
  for (int i = 0; i < 3; i++) n += x->r[i].answers == 0;
  return n;
}

/* Like a semaphore's quiesce: its requests leave the batcher. */
static void g_quiesce(sluice__guard *g) {
  gowner *x = sluice__container_of(g, gowner, g);
  for (int i = 0; i < 3; i++) sluice__batcher_leave(&x->o.b, &x->r[i].br);
}

static void g_cancel(sluice__guard *g) {
  gowner *x = sluice__container_of(g, gowner, g);
  sluice__batcher_cancel(&x->o.b, SLUICE_ECANCELED);
  for (int i = 0; i < 3; i++) {
    if (x->r[i].answers) continue;
    sluice__batch_reply br = {NULL, 0, 0, -1};
    answer(x, &x->r[i].br, SLUICE_ECANCELED, &br);
  }
}

static int g_idle(const sluice__guard *g) {
  return gowner_outstanding(sluice__container_of(g, gowner, g)) == 0;
}

static void g_destroy(sluice__guard *g) {
  gowner *x = sluice__container_of(g, gowner, g);
  TH_ASSERT_EQ(sluice__batcher_pending(&x->o.b), 0);
  (*x->destroyed)++;
  sluice__flusher_clear(&x->o.f);
  sluice__free(x);
}

static const sluice__guard_ops gowner_ops = {
    .quiesce = g_quiesce, .cancel = g_cancel, .idle = g_idle, .destroy = g_destroy};

static int answers_ok, answers_canceled;
static void free_owner(owner *o, treq *r) {
  gowner *x = (gowner *)o;
  if (r->status == SLUICE_OK) answers_ok++;
  if (r->status == SLUICE_ECANCELED) answers_canceled++;
  if (r->id != 1) return;
  sluice__guard_free(&x->g);
  TH_ASSERT_EQ(*x->destroyed, 0); /* the fan-out holds the guard */
  TH_ASSERT(x->g.freeing);        /* and x is still valid */
}

static void on_empty(sluice__guard_home *h) {}

static void test_answer_frees_owner(void) {
  setup();
  sluice__guard_home home;
  TH_ASSERT_EQ(sluice__guard_home_init(&home, base, on_empty), 0);
  int destroyed = 0;
  gowner *x = sluice__calloc(1, sizeof *x);
  TH_ASSERT(x != NULL);
  x->destroyed = &destroyed;
  sluice__guard_attach(&x->g, &home, &gowner_ops);
  owner_init(&x->o, &x->g);
  kind.max = 8;
  for (int i = 0; i < 3; i++) {
    x->r[i].id = i + 1;
    sluice__batcher_queue(&x->o.b, &x->r[i].br, 0);
  }
  TH_ASSERT(th_loop_drain(base, 1000));
  TH_ASSERT_EQ(ncalls, 1);
  on_answer = free_owner;
  answer_call(0, SLUICE_OK); /* the first answer frees the owner */
  TH_ASSERT_EQ(answers_ok, 1);
  TH_ASSERT_EQ(answers_canceled, 0); /* the others wait for the loop */
  TH_ASSERT_EQ(destroyed, 0);
  TH_ASSERT(th_loop_drain(base, 1000));
  TH_ASSERT_EQ(answers_ok, 1);
  TH_ASSERT_EQ(answers_canceled, 2);
  TH_ASSERT_EQ(norder, 3);
  TH_ASSERT_EQ(destroyed, 1);
  sluice__guard_home_clear(&home);
  teardown(NULL);
}

/* Every request of a call in flight left: the call is forgotten with them,
 * so the owner may go before its reply would have come. */
static void test_call_forgotten_when_empty(void) {
  setup();
  owner *o = sluice__calloc(1, sizeof *o);
  TH_ASSERT(o != NULL);
  owner_init(o, NULL);
  kind.max = 8;
  treq r[2];
  init_reqs(r, 2);
  for (int i = 0; i < 2; i++) sluice__batcher_queue(&o->b, &r[i].br, 0);
  TH_ASSERT(th_loop_drain(base, 1000));
  TH_ASSERT_EQ(ncalls, 1);
  sluice__batcher_leave(&o->b, &r[0].br);
  TH_ASSERT(o->b.inflight.head != NULL); /* r[1] still waits for it */
  sluice__batcher_leave(&o->b, &r[1].br);
  TH_ASSERT_EQ(sluice__batcher_pending(&o->b), 0);
  TH_ASSERT(o->b.inflight.head == NULL);
  sluice__flusher_clear(&o->f);
  sluice__free(o);
  TH_ASSERT_EQ(r[0].answers + r[1].answers, 0);
  teardown(NULL);
}

/* A follower keeps its queue while the owner says so, until every call its
 * leader had sent by then is answered (or dropped); never twice for the
 * same requests. */
static int hold_now;
static int hold_pred(void *ow) { return hold_now; }

typedef struct pair_owner {
  sluice__flusher f;
  sluice__batcher lead, follow;
} pair_owner;

/* The loop's turn: calls made by then number n, the last one carrying
 * the request id alone. */
static void turn_sends(int n, int id) {
  TH_ASSERT(th_loop_drain(base, 1000));
  TH_ASSERT_EQ(ncalls, n);
  expect_call(n - 1, (const int[]){id}, 1);
}

static void test_follower_waits_for_leader(void) {
  setup();
  kind.max = 8;
  pair_owner o;
  TH_ASSERT_EQ(sluice__flusher_init(&o.f, base), SLUICE_OK);
  sluice__batcher_init(&o.lead, &kind, NULL, &o, NULL, &o.f, 0);
  sluice__batcher_init(&o.follow, &kind, NULL, &o, NULL, &o.f, 0);
  o.lead.send = o.follow.send = fake_send;
  sluice__batcher_follow(&o.follow, &o.lead, hold_pred);
  treq r[8];
  init_reqs(r, 8);
  hold_now = 1;
  /* Nothing of the leader in flight: nothing to wait for. */
  sluice__batcher_queue(&o.follow, &r[0].br, 0);
  turn_sends(1, 1);
  answer_call(0, SLUICE_OK);
  /* Same turn: the leader's call goes, the follower's waits for its answer. */
  sluice__batcher_queue(&o.lead, &r[1].br, 0);
  sluice__batcher_queue(&o.follow, &r[2].br, 0);
  turn_sends(2, 2);
  /* A later leader call is not waited for... */
  sluice__batcher_queue(&o.lead, &r[3].br, 0);
  turn_sends(3, 4);
  TH_ASSERT_EQ(r[2].answers, 0);
  TH_ASSERT(sluice__breq_busy(&r[2].br));
  /* ...once the one it waited for is answered, it goes. */
  answer_call(1, SLUICE_OK);
  TH_ASSERT_EQ(ncalls, 3); /* from the loop, not inside the answer */
  turn_sends(4, 3);
  answer_call(3, SLUICE_OK);
  TH_ASSERT_EQ(r[2].val, 30);
  /* The owner says no: the follower goes beside the leader's call in flight. */
  hold_now = 0;
  sluice__batcher_queue(&o.follow, &r[4].br, 0);
  turn_sends(5, 5);
  answer_call(4, SLUICE_OK);
  /* A leader call that fails, or that every request left, ends the wait too. */
  hold_now = 1;
  sluice__batcher_queue(&o.follow, &r[5].br, 0);
  TH_ASSERT(th_loop_drain(base, 1000));
  TH_ASSERT_EQ(ncalls, 5); /* waits for call 2 */
  answer_call(2, SLUICE_ECONNECTION);
  TH_ASSERT_EQ(r[3].status, SLUICE_ECONNECTION);
  turn_sends(6, 6);
  answer_call(5, SLUICE_OK);
  sluice__batcher_queue(&o.lead, &r[6].br, 0);
  sluice__batcher_queue(&o.follow, &r[7].br, 0);
  TH_ASSERT(th_loop_drain(base, 1000));
  TH_ASSERT_EQ(ncalls, 7);
  sluice__batcher_leave(&o.lead, &r[6].br); /* its call is forgotten */
  turn_sends(8, 8);
  answer_call(7, SLUICE_OK);
  TH_ASSERT_EQ(r[7].val, 80);
  TH_ASSERT_EQ(sluice__batcher_pending(&o.lead) + sluice__batcher_pending(&o.follow), 0);
  sluice__flusher_clear(&o.f);
  teardown(NULL);
}

static const th_case cases[] = {
    TH_CASE(one_turn_one_call, 10),
    TH_CASE(cap_per_call, 10),
    TH_CASE(routes_never_mixed, 10),
    TH_CASE(leave_queue_and_slot, 10),
    TH_CASE(leave_during_fan_out, 10),
    TH_CASE(wrong_reply_shape, 10),
    TH_CASE(send_failure, 10),
    TH_CASE(cancel_answers_once, 10),
    TH_CASE(answer_frees_owner, 10),
    TH_CASE(call_forgotten_when_empty, 10),
    TH_CASE(follower_waits_for_leader, 10),
};
TH_MAIN_LOCAL(cases)
