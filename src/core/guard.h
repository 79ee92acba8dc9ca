/*
 * How every object with callbacks dies: one lifetime guard, embedded in the
 * client's children (semaphore, permit, limiter, delay-queue producer and
 * consumer), and one rule for all of them.
 *
 *   sluice_X_free() never runs a callback inside the call. Operations still
 *   pending complete with SLUICE_ECANCELED from the loop; freeing inside any
 *   of the object's own callbacks is safe. The memory goes at once when no
 *   callback is owed and none of the object's callbacks is running, else
 *   from the loop once the cancellations ran and the outermost callback
 *   returned.
 *
 * This is the model of libuv's uv_close (destruction is asynchronous) with
 * the shortcut hiredis takes for the common case (nothing pending: free at
 * once), so a program may free its objects after its loop has ended.
 *
 * The pieces:
 *  - a home (the client embeds one) keeps its guards in a list and owns the
 *    one event that reaps freed guards from the loop;
 *  - a guard counts the object's callbacks on the stack (enter/leave around
 *    every user callback), so code that regains control after a callback
 *    may keep using the object: its memory cannot go before the reaper runs;
 *  - the object supplies its operations: quiesce (inside _free: detach from
 *    timers and replies, so nothing else can reach the caller), cancel
 *    (from the loop: complete what is pending with SLUICE_ECANCELED and
 *    start nothing new), idle (is any callback still owed?) and destroy
 *    (release the memory).
 *
 * Closing the client cancels every guard's pending operations from the loop
 * (the guard is then `closed`: new calls answer SLUICE_ECLOSED) but frees
 * nothing: each object is still freed by its own _free.
 */
#ifndef SLUICE_GUARD_H
#define SLUICE_GUARD_H

#include "base/list.h"

struct event_base;
struct event;

typedef struct sluice__guard sluice__guard;
typedef struct sluice__guard_home sluice__guard_home;
struct sluice__hist;

/* What kind of object a view shows: each primitive defines its own
 * (sem/sem.h...) and the metrics exposition (inspect/) knows them; core/
 * only carries the pointer, so a new kind changes nothing here. */
typedef struct sluice__obj_kind {
  const char *name; /* the handles gauge's label ("sem", ...) */
} sluice__obj_kind;

/* What a walk over the client's objects (the metrics exposition) sees of
 * one: its public handle, the labels it is known by and its latency
 * histogram. Borrowed from the object; valid until it is freed. */
typedef struct sluice__obj_view {
  const sluice__obj_kind *kind;
  const void *handle; /* sluice_sem *, sluice_limiter *, ... */
  const char *name;
  const char *algo;                /* limiters: the algorithm's name; else NULL */
  const struct sluice__hist *hist; /* NULL if the kind keeps none */
} sluice__obj_view;

typedef struct sluice__guard_ops {
  /* Inside _free, when callbacks are still owed (may be NULL): detach from
   * everything that could call back (timers, replies in flight) without
   * running a callback, so that nothing but the cancellation reaches the
   * caller between _free and the reaper. */
  void (*quiesce)(sluice__guard *g);
  /* Complete every pending operation with SLUICE_ECANCELED and stop timers.
   * Runs from the loop with the guard entered: once when the client closes
   * (g->closed set) and once when the object is freed (g->freeing set). */
  void (*cancel)(sluice__guard *g);
  /* 1 when no callback is owed any more (may be NULL: always idle). */
  int (*idle)(const sluice__guard *g);
  /* Release the object's memory; the guard is already detached. */
  void (*destroy)(sluice__guard *g);
  /* The client's command connection came (back) up (may be NULL): work
   * that waited for it goes now. */
  void (*resume)(sluice__guard *g);
  /* The node behind routes lo..hi (lo -1: every route) is another one than
   * before (may be NULL): what the object holds there is re-asserted, and
   * what waits there looks again. Runs after the client's unreplicated
   * writes of those routes were sent again (core/record.h). */
  void (*node_changed)(sluice__guard *g, int lo, int hi);
} sluice__guard_ops;

struct sluice__guard {
  sluice__guard_home *home;
  const sluice__guard_ops *ops;
  /* What the metrics list of the object (handle NULL: not listed, as
   * permits are, which their semaphore accounts for). */
  sluice__obj_view view;
  sluice__link link;      /* in home->guards */
  sluice__link reap_link; /* in home->reap while queued */
  unsigned depth;         /* the object's callbacks on the stack */
  unsigned freeing : 1;   /* _free was called */
  unsigned closed : 1;    /* the client closed: cancelled, no new work */
  unsigned cancelled : 1; /* cancel ran after freeing */
  unsigned queued : 1;    /* in home->reap */
};

struct sluice__guard_home {
  struct event *reap_ev;
  sluice__list guards;
  sluice__list reap;
  unsigned closed : 1;
  /* The last guard detached (the client may go now). */
  void (*on_empty)(sluice__guard_home *home);
};

int sluice__guard_home_init(sluice__guard_home *h, struct event_base *base,
                            void (*on_empty)(sluice__guard_home *h));
/* Cancel every guard's pending operations (from the loop). Callbacks may
 * free any object, this one included. */
void sluice__guard_home_close(sluice__guard_home *h);
/* The connection is up: every live guard resumes. */
void sluice__guard_home_resume(sluice__guard_home *h);
/* The node behind routes lo..hi changed: every live guard reconciles. */
void sluice__guard_home_node_changed(sluice__guard_home *h, int lo, int hi);
/* Release the home's event; every guard must be gone. */
void sluice__guard_home_clear(sluice__guard_home *h);

/* Attach g to h (a closed home makes g closed too). */
void sluice__guard_attach(sluice__guard *g, sluice__guard_home *h, const sluice__guard_ops *ops);

/* Around every user callback of the object. */
static inline void sluice__guard_enter(sluice__guard *g) { g->depth++; }
void sluice__guard_leave(sluice__guard *g);

/* The object's _free: see the rule above. */
void sluice__guard_free(sluice__guard *g);
/* Something the object owed was settled: if it is freed and now idle, reap
 * it from the loop. */
void sluice__guard_poke(sluice__guard *g);

/* New work may start: neither freed nor closed. */
static inline int sluice__guard_live(const sluice__guard *g) { return !g->freeing && !g->closed; }

#endif
