/* The lifetime guard (src/core/guard.c) without Redis: a fake object with
 * operations that complete from timers, on a guard home with a real
 * event_base. Checks the rule in guard.h: no callback inside _free,
 * cancellations from the loop, freeing from any callback is safe, memory
 * goes once nothing is owed and no callback is on the stack. */
#include <string.h>

#include <event2/event.h>
#include <sluice/sluice.h>

#include "core/guard.h"
#include "harness.h"
#include "core/engine.h"

typedef struct fobj fobj;
typedef void fobj_cb(fobj *o, int status, void *ud);

/* What a test can see after the object's memory is gone. */
typedef struct fstate {
  int quiesced, cancels, destroyed;
  int ok, canceled; /* callbacks by status */
} fstate;

struct fobj {
  sluice__guard g;
  fstate *st;
  int pending;        /* operations owed a callback */
  int owed;           /* something else owed (not settled by cancel) */
  int cancel_starts;  /* cancel starts this much owed work (a release) */
  struct event *done; /* completes one pending operation (a "reply") */
  fobj_cb *cb;
  void *ud;
};

static sluice__guard_home home;
static struct event_base *base;
static int in_free; /* inside fobj_free: no callback may run */
static int empties; /* on_empty calls */

static void on_empty(sluice__guard_home *h) {
  TH_ASSERT(h == &home);
  empties++;
}

static void call_user(fobj *o, int status) {
  TH_ASSERT(!in_free);
  TH_ASSERT(o->g.depth > 0); /* every callback runs with the guard entered */
  if (status == SLUICE_OK) o->st->ok++;
  else if (status == SLUICE_ECANCELED) o->st->canceled++;
  if (o->cb) o->cb(o, status, o->ud);
}

static void quiesce(sluice__guard *g) {
  fobj *o = sluice__container_of(g, fobj, g);
  TH_ASSERT(in_free);
  o->st->quiesced++;
  event_del(o->done); /* no reply reaches the caller any more */
}

static void cancel(sluice__guard *g) {
  fobj *o = sluice__container_of(g, fobj, g);
  o->st->cancels++;
  o->owed += o->cancel_starts;
  o->cancel_starts = 0;
  event_del(o->done);
  while (o->pending > 0) {
    o->pending--;
    call_user(o, SLUICE_ECANCELED);
  }
}

static int idle(const sluice__guard *g) {
  const fobj *o = sluice__container_of(g, fobj, g);
  return o->pending == 0 && o->owed == 0;
}

static void destroy(sluice__guard *g) {
  fobj *o = sluice__container_of(g, fobj, g);
  TH_ASSERT_EQ(o->g.depth, 0);
  o->st->destroyed++;
  event_free(o->done);
  sluice__free(o);
}

static const sluice__guard_ops fobj_ops = {
    .quiesce = quiesce, .cancel = cancel, .idle = idle, .destroy = destroy};

/* One pending operation completes ("its reply arrived"). */
static void done_cb(evutil_socket_t fd, short what, void *arg) {
  fobj *o = arg;
  TH_ASSERT(o->pending > 0);
  o->pending--;
  sluice__guard_enter(&o->g);
  call_user(o, SLUICE_OK);
  sluice__guard_leave(&o->g); /* o may be reaped from now on */
}

static fobj *fobj_new(fstate *st, int pending, fobj_cb *cb, void *ud) {
  fobj *o = sluice__calloc(1, sizeof *o);
  TH_ASSERT(o != NULL);
  memset(st, 0, sizeof *st);
  o->st = st;
  o->pending = pending;
  o->cb = cb;
  o->ud = ud;
  o->done = event_new(base, -1, 0, done_cb, o);
  TH_ASSERT(o->done != NULL);
  sluice__guard_attach(&o->g, &home, &fobj_ops);
  return o;
}

static void fobj_free(fobj *o) {
  in_free = 1;
  sluice__guard_free(&o->g);
  in_free = 0;
}

/* Complete one pending operation on the next loop turn. */
static void fobj_reply_soon(fobj *o) { event_active(o->done, 0, 0); }

/* One reply to o, and the loop run until it has nothing left to do. */
static void reply_and_drain(fobj *o) {
  fobj_reply_soon(o);
  TH_ASSERT(th_loop_drain(base, 1000));
}

static void setup(void) {
  base = event_base_new();
  TH_ASSERT(base != NULL);
  empties = 0;
  TH_ASSERT_EQ(sluice__guard_home_init(&home, base, on_empty), 0);
}

static void teardown(void) {
  TH_ASSERT(home.guards.head == NULL);
  sluice__guard_home_clear(&home);
  TH_ASSERT(th_loop_drain(base, 1000));
  event_base_free(base);
}

static void test_free_idle_at_once(void) {
  setup();
  fstate st;
  fobj *o = fobj_new(&st, 0, NULL, NULL);
  fobj_free(o);
  TH_ASSERT_EQ(st.destroyed, 1); /* inside the call: usable after the loop ended */
  TH_ASSERT_EQ(st.quiesced, 0);
  TH_ASSERT_EQ(st.ok + st.canceled, 0);
  TH_ASSERT_EQ(empties, 1);
  teardown();
}

static void test_free_pending_cancels_from_loop(void) {
  setup();
  fstate st;
  fobj *o = fobj_new(&st, 2, NULL, NULL);
  fobj_reply_soon(o); /* a reply already on its way is dropped */
  fobj_free(o);
  TH_ASSERT_EQ(st.destroyed, 0);
  TH_ASSERT_EQ(st.quiesced, 1);
  TH_ASSERT_EQ(st.ok + st.canceled, 0);
  TH_ASSERT_EQ(empties, 0);
  TH_ASSERT(th_loop_drain(base, 1000));
  TH_ASSERT_EQ(st.canceled, 2);
  TH_ASSERT_EQ(st.ok, 0);
  TH_ASSERT_EQ(st.cancels, 1);
  TH_ASSERT_EQ(st.destroyed, 1);
  TH_ASSERT_EQ(empties, 1);
  teardown();
}

/* The callback frees its object, then still uses it. */
static void free_then_touch(fobj *o, int status, void *ud) {
  fstate *st = o->st;
  fobj_free(o);
  TH_ASSERT_EQ(st->destroyed, 0); /* deferred: the callback is on the stack */
  TH_ASSERT(o->g.freeing);        /* o is still valid memory */
  fobj_free(o);                   /* a second free is harmless */
  *(int *)ud += 1;
}

static void test_free_inside_own_callback(void) {
  setup();
  fstate st;
  int calls = 0;
  reply_and_drain(fobj_new(&st, 2, free_then_touch, &calls));
  /* The first callback freed it: the other operation was cancelled. */
  TH_ASSERT_EQ(st.ok, 1);
  TH_ASSERT_EQ(st.canceled, 1);
  TH_ASSERT_EQ(calls, 2);
  TH_ASSERT_EQ(st.destroyed, 1);
  TH_ASSERT_EQ(empties, 1);
  teardown();
}

/* Callbacks nested on the stack: destruction waits for the outermost. */
static void nested_cb(fobj *o, int status, void *ud) {
  int *depth_seen = ud;
  if (o->g.depth == 1) {
    sluice__guard_enter(&o->g); /* e.g. a callback run from inside another */
    o->pending++;
    o->pending--;
    call_user(o, SLUICE_OK);
    sluice__guard_leave(&o->g);
    TH_ASSERT_EQ(o->st->destroyed, 0);
    TH_ASSERT_EQ(o->g.depth, 1); /* the outer callback is still running */
    *depth_seen = 1;
    return;
  }
  fobj_free(o); /* in the inner one */
}

static void test_free_inside_nested_callback(void) {
  setup();
  fstate st;
  int outer_done = 0;
  reply_and_drain(fobj_new(&st, 1, nested_cb, &outer_done));
  TH_ASSERT_EQ(outer_done, 1);
  TH_ASSERT_EQ(st.ok, 2);
  TH_ASSERT_EQ(st.destroyed, 1);
  teardown();
}

/* A cancellation callback frees its object again and frees another one. */
typedef struct pair {
  fobj *other;
  int calls;
} pair;
static void cancel_frees(fobj *o, int status, void *ud) {
  pair *p = ud;
  p->calls++;
  TH_ASSERT_EQ(status, SLUICE_ECANCELED);
  fobj_free(o);
  if (p->other) {
    fobj *x = p->other;
    p->other = NULL;
    fobj_free(x);
  }
}

static void test_free_inside_cancel_callback(void) {
  setup();
  fstate a, b, c;
  pair p = {NULL, 0};
  fobj *oa = fobj_new(&a, 2, cancel_frees, &p);
  fobj *ob = fobj_new(&b, 1, NULL, NULL);
  fobj *oc = fobj_new(&c, 0, NULL, NULL);
  p.other = ob;
  fobj_free(oa);
  TH_ASSERT(th_loop_drain(base, 1000));
  TH_ASSERT_EQ(p.calls, 2);
  TH_ASSERT_EQ(a.canceled, 2);
  TH_ASSERT_EQ(a.destroyed, 1);
  TH_ASSERT_EQ(b.canceled, 1); /* freed from a's callback: cancelled from the loop */
  TH_ASSERT_EQ(b.cancels, 1);
  TH_ASSERT_EQ(b.destroyed, 1);
  TH_ASSERT_EQ(empties, 0); /* oc is still there */
  fobj_free(oc);
  TH_ASSERT_EQ(c.destroyed, 1);
  TH_ASSERT_EQ(empties, 1);
  teardown();
}

static void test_home_close(void) {
  setup();
  fstate a, b, c;
  pair p = {NULL, 0};
  fobj_new(&a, 1, cancel_frees, &p);
  fobj *ob = fobj_new(&b, 1, NULL, NULL);
  fobj *oc = fobj_new(&c, 0, NULL, NULL);
  p.other = ob;
  /* a's cancellation frees a and b: a's memory waits for its callback to
   * return, b (still owed one) is cancelled once, not twice. */
  sluice__guard_home_close(&home);
  TH_ASSERT_EQ(p.calls, 1);
  TH_ASSERT_EQ(a.canceled, 1);
  TH_ASSERT_EQ(b.canceled, 1);
  TH_ASSERT_EQ(c.cancels, 1);
  TH_ASSERT(!sluice__guard_live(&oc->g));
  TH_ASSERT(oc->g.closed);
  TH_ASSERT_EQ(a.destroyed + b.destroyed + c.destroyed, 0);
  TH_ASSERT(th_loop_drain(base, 1000));
  TH_ASSERT_EQ(a.destroyed, 1);
  TH_ASSERT_EQ(b.destroyed, 1);
  /* cancel runs once for the close and once for the free (guard.h); it
   * found nothing the second time: a's callback ran once. */
  TH_ASSERT_EQ(a.cancels, 2);
  TH_ASSERT_EQ(a.canceled, 1);
  TH_ASSERT_EQ(b.cancels, 1);   /* freed before its close-cancel: once */
  TH_ASSERT_EQ(c.destroyed, 0); /* closing frees nothing */
  TH_ASSERT_EQ(empties, 0);
  /* Attached after the close: closed from the start. */
  fstate d;
  fobj *od = fobj_new(&d, 0, NULL, NULL);
  TH_ASSERT(od->g.closed);
  fobj_free(oc);
  TH_ASSERT_EQ(empties, 0);
  fobj_free(od);
  TH_ASSERT_EQ(c.destroyed + d.destroyed, 2);
  TH_ASSERT_EQ(empties, 1);
  teardown();
}

static void test_on_empty_last_guard(void) {
  setup();
  fstate a, b;
  fobj *oa = fobj_new(&a, 1, NULL, NULL);
  fobj *ob = fobj_new(&b, 0, NULL, NULL);
  fobj_free(oa);
  fobj_free(ob);
  TH_ASSERT_EQ(b.destroyed, 1);
  TH_ASSERT_EQ(empties, 0); /* oa is still owed its cancellation */
  TH_ASSERT(th_loop_drain(base, 1000));
  TH_ASSERT_EQ(a.destroyed, 1);
  TH_ASSERT_EQ(empties, 1);
  teardown();
}

/* Settles the object's last debt from the loop, then pokes it. */
static void settle_cb(evutil_socket_t fd, short what, void *arg) {
  fobj *o = arg;
  o->owed--;
  sluice__guard_poke(&o->g);
}

/* An object with pending operations that owes more (o->owed), each
 * settled by *settle, an event the case activates and frees. */
static fobj *fobj_owing(fstate *st, int pending, int owed, struct event **settle) {
  fobj *o = fobj_new(st, pending, NULL, NULL);
  o->owed = owed;
  *settle = event_new(base, -1, 0, settle_cb, o);
  return o;
}

/* One debt settled from the loop, and the loop run dry. */
static void settle_one(struct event *settle) {
  event_active(settle, 0, 0);
  TH_ASSERT(th_loop_drain(base, 1000));
}

static void test_poke_after_last_owed(void) {
  setup();
  fstate st;
  struct event *settle;
  fobj *o = fobj_owing(&st, 1, 2, &settle);
  sluice__guard_poke(&o->g); /* not freed: nothing happens */
  fobj_free(o);
  TH_ASSERT(th_loop_drain(base, 1000));
  TH_ASSERT_EQ(st.canceled, 1);
  TH_ASSERT_EQ(st.destroyed, 0); /* still owed */
  settle_one(settle);
  TH_ASSERT_EQ(st.destroyed, 0); /* one left */
  settle_one(settle);
  TH_ASSERT_EQ(st.destroyed, 1);
  TH_ASSERT_EQ(st.cancels, 1); /* cancel ran once */
  TH_ASSERT_EQ(empties, 1);
  event_free(settle);
  teardown();
}

/* Freed while idle, but cancelling starts work (a held permit's release
 * goes out): the object lives until that work settles. */
static void test_cancel_starts_work(void) {
  setup();
  fstate st;
  struct event *settle;
  fobj *o = fobj_owing(&st, 0, 0, &settle);
  o->cancel_starts = 1;
  fobj_free(o);
  TH_ASSERT_EQ(st.cancels, 1);
  TH_ASSERT_EQ(st.destroyed, 0); /* its work is in flight */
  TH_ASSERT(th_loop_drain(base, 1000));
  TH_ASSERT_EQ(st.destroyed, 0);
  settle_one(settle);
  TH_ASSERT_EQ(st.destroyed, 1);
  TH_ASSERT_EQ(st.cancels, 1);
  event_free(settle);
  teardown();
}

static const th_case cases[] = {
    TH_CASE(free_idle_at_once, 10),           TH_CASE(free_pending_cancels_from_loop, 10),
    TH_CASE(free_inside_own_callback, 10),    TH_CASE(free_inside_nested_callback, 10),
    TH_CASE(free_inside_cancel_callback, 10), TH_CASE(home_close, 10),
    TH_CASE(on_empty_last_guard, 10),         TH_CASE(poke_after_last_owed, 10),
    TH_CASE(cancel_starts_work, 10),
};
TH_MAIN_LOCAL(cases)
