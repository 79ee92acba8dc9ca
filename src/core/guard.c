/* The lifetime guard: see guard.h for the rule every object follows. */
#include <event2/event.h>

#include "core/guard.h"

static void reap_cb(evutil_socket_t fd, short what, void *arg);

int sluice__guard_home_init(sluice__guard_home *h, struct event_base *base,
                            void (*on_empty)(sluice__guard_home *h)) {
  h->guards.head = h->guards.tail = NULL;
  h->reap.head = h->reap.tail = NULL;
  h->closed = 0;
  h->on_empty = on_empty;
  h->reap_ev = event_new(base, -1, 0, reap_cb, h);
  return h->reap_ev ? 0 : -1;
}

void sluice__guard_home_clear(sluice__guard_home *h) {
  if (h->reap_ev) event_free(h->reap_ev);
  h->reap_ev = NULL;
}

void sluice__guard_attach(sluice__guard *g, sluice__guard_home *h, const sluice__guard_ops *ops) {
  g->home = h;
  g->ops = ops;
  g->depth = 0;
  g->freeing = g->cancelled = g->queued = 0;
  g->closed = h->closed;
  sluice__list_append(&h->guards, &g->link);
}

static int is_idle(const sluice__guard *g) { return !g->ops->idle || g->ops->idle(g); }

static void run_cancel(sluice__guard *g) {
  g->depth++;
  g->ops->cancel(g);
  g->depth--;
}

/* Detach and release; the home may have become empty. */
static void finalize(sluice__guard *g) {
  sluice__guard_home *h = g->home;
  if (g->queued) sluice__list_remove(&h->reap, &g->reap_link);
  sluice__list_remove(&h->guards, &g->link);
  g->ops->destroy(g);
}

static void check_empty(sluice__guard_home *h) {
  if (!h->guards.head && h->on_empty) h->on_empty(h); /* may free h */
}

static void queue_reap(sluice__guard *g) {
  sluice__guard_home *h = g->home;
  if (g->queued) return;
  g->queued = 1;
  sluice__list_append(&h->reap, &g->reap_link);
  event_active(h->reap_ev, 0, 0);
}

static void reap_cb(evutil_socket_t fd, short what, void *arg) {
  sluice__guard_home *h = arg;
  while (h->reap.head) {
    sluice__guard *g = sluice__container_of(h->reap.head, sluice__guard, reap_link);
    sluice__list_remove(&h->reap, &g->reap_link);
    g->queued = 0;
    if (g->depth) continue; /* leave() queues it again */
    if (!g->cancelled) {
      g->cancelled = 1;
      run_cancel(g); /* callbacks may free other objects, never this one */
    }
    if (!g->depth && is_idle(g)) finalize(g);
  }
  check_empty(h);
}

void sluice__guard_home_close(sluice__guard_home *h) {
  h->closed = 1;
  /* A cancellation callback may free any object: start over after each. */
  for (;;) {
    sluice__guard *g = NULL;
    for (sluice__link *l = h->guards.head; l && !g; l = l->next) {
      sluice__guard *x = sluice__container_of(l, sluice__guard, link);
      if (!x->closed) g = x;
    }
    if (!g) break;
    g->closed = 1;
    if (g->cancelled) continue;
    g->cancelled = g->freeing; /* a freed object is not cancelled twice */
    run_cancel(g);
    if (g->freeing) queue_reap(g);
  }
}

void sluice__guard_home_resume(sluice__guard_home *h) {
  for (sluice__link *l = h->guards.head; l; l = l->next) {
    sluice__guard *g = sluice__container_of(l, sluice__guard, link);
    if (g->ops->resume && !g->closed) g->ops->resume(g);
  }
}

void sluice__guard_home_node_changed(sluice__guard_home *h, int lo, int hi) {
  for (sluice__link *l = h->guards.head; l; l = l->next) {
    sluice__guard *g = sluice__container_of(l, sluice__guard, link);
    if (g->ops->node_changed && !g->closed && !g->freeing) g->ops->node_changed(g, lo, hi);
  }
}

void sluice__guard_leave(sluice__guard *g) {
  if (--g->depth == 0 && g->freeing) queue_reap(g);
}

void sluice__guard_free(sluice__guard *g) {
  if (g->freeing) return;
  g->freeing = 1;
  if (g->depth || !is_idle(g)) {
    if (g->ops->quiesce) g->ops->quiesce(g);
    queue_reap(g);
    return;
  }
  /* Nothing owed and nothing on the stack: cancel runs no callback. */
  g->cancelled = 1;
  run_cancel(g);
  /* Cancelling may start work that outlives it (a held permit's release
   * goes out now): the object stays until that is answered, then the
   * answer's poke reaps it. */
  if (!is_idle(g)) return;
  sluice__guard_home *h = g->home;
  finalize(g);
  check_empty(h);
}

void sluice__guard_poke(sluice__guard *g) {
  if (g->freeing && !g->depth && is_idle(g)) queue_reap(g);
}
