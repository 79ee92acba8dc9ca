/*
 * sluice demo: workers contending for a distributed semaphore, in one
 * libevent loop.
 *
 * Three "processes" (three sluice clients, A, B and C, each with its own
 * connections to Redis) run two workers each. Every worker loops: wait for one
 * of the 2 permits of the semaphore "db-writers" (lease 1.5 s, renewed every
 * 0.5 s), hold it for a random time (some holds outlast the lease, so the
 * renewals matter), release it, pause, again. Part way through, process C
 * "crashes": its client is closed without releasing, and the others get its
 * permit only when the lease runs out. Then three short scenes: a lease lost
 * by a stalled holder and its fencing token, a fair (FIFO) lock, and an
 * epilogue with a rate limiter and a delay queue.
 *
 * The demo checks, from its own bookkeeping of grants and releases, that
 * there are never more holders than permits (the crashed worker's permit
 * counts until its lease expires), that fencing tokens increase, and that the
 * fair lock serves waiters in arrival order. It exits 1 if any check failed.
 *
 *   demo [--redis URL] [--seconds N] [--seed N]
 */
#include <errno.h>
#include <inttypes.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <event2/event.h>
#include <sluice/sluice.h>

#define NPROCS 3
#define NWORKERS 6
#define PERMITS 2
#define TTL_MS 1500
#define RENEW_MS 500
#define ACQUIRE_TIMEOUT_MS 2500
#define MAX_SAMPLES 4096

#if defined(__GNUC__)
#define PRINTF_LIKE(a, b) __attribute__((format(printf, a, b)))
#else
#define PRINTF_LIKE(a, b)
#endif

/* ---- time, output, randomness ------------------------------------------- */

static struct timespec t0;

static double now_ms(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)(t.tv_sec - t0.tv_sec) * 1e3 + (double)(t.tv_nsec - t0.tv_nsec) / 1e6;
}

static void say(const char *fmt, ...) PRINTF_LIKE(1, 2);
static void say(const char *fmt, ...) {
  va_list ap;
  printf("[%7.3f] ", now_ms() / 1e3);
  va_start(ap, fmt);
  vprintf(fmt, ap);
  va_end(ap);
  putchar('\n');
}

static uint64_t rng_state;

static uint64_t rng(void) { /* xorshift64* */
  rng_state ^= rng_state >> 12;
  rng_state ^= rng_state << 25;
  rng_state ^= rng_state >> 27;
  return rng_state * 2685821657736338717ull;
}

static unsigned rand_between(unsigned lo, unsigned hi) {
  return lo + (unsigned)(rng() % (uint64_t)(hi - lo + 1));
}

static struct timeval tv_ms(double ms) {
  struct timeval tv;
  if (ms < 0) ms = 0;
  tv.tv_sec = (time_t)(ms / 1000);
  tv.tv_usec = (suseconds_t)((ms - (double)tv.tv_sec * 1000) * 1000);
  return tv;
}

static void timer_in(struct event *ev, double ms) {
  struct timeval tv = tv_ms(ms);
  evtimer_add(ev, &tv);
}

/* ---- state --------------------------------------------------------------- */

typedef struct proc proc;
typedef struct worker worker;

struct proc {
  char name;             /* 'A', 'B', 'C' */
  sluice_client *client; /* NULL while crashed */
  sluice_sem *sem;       /* "db-writers" */
  sluice_sem *fair;      /* "deploy-lock" (fair mutex) */
  sluice_sem *ledger;    /* "ledger-lock" */
  int generation;        /* restarts so far */
  int connected;
  int ever_connected; /* this client came up at least once */
  int closing;        /* closed, close_cb not yet run */
  int restart_when_closed;
};

enum wstate { W_IDLE, W_WAITING, W_HOLDING, W_STOPPED, W_DEAD };

struct worker {
  char name[4];
  proc *p;
  enum wstate state;
  struct event *timer; /* pause or hold */
  sluice_acquire *acq;
  sluice_permit *permit;
  uint64_t fence;
  char permit_id[33];
  double wait_start, granted_at, hold_ms;
  uint64_t max_fence_at_start; /* highest fence known when the wait began */
  int64_t last_local_left;     /* last sluice_permit_remaining_ms sample */
  int64_t last_redis_left;     /* last remaining_ms seen by inspect */
  unsigned renewals;           /* confirmed renewals of the current permit */
  int lost;                    /* current permit reported lost */
  /* fair scene */
  int fair_arrival; /* 1-based order of arrival, 0 if not queued */
};

enum phase {
  PH_CONNECT,
  PH_CONTEND,
  PH_STOPPING,
  PH_LEDGER,
  PH_FAIR,
  PH_LIMITER,
  PH_DQ,
  PH_SHUTDOWN
};

static struct {
  const char *url;
  char prefix[64];
  unsigned seconds;
  struct event_base *base;
  proc procs[NPROCS];
  worker workers[NWORKERS];
  enum phase phase;
  int interrupted;
  int exit_code; /* 0, or 1 once something went wrong */

  struct event *phase_timer, *tick_timer, *poll_timer, *crash_timer, *restart_timer, *connect_timer,
      *sigint_ev, *scene_timer;

  /* contention counters */
  int live_holders; /* granted, release not yet called, not lost */
  int max_live_seen;
  unsigned grants, immediate, waited, timeouts, errors, lost, renewals, releases, releases_pending,
      enotfound;
  double wait_samples[MAX_SAMPLES];
  unsigned nwait_samples;
  double handoff_samples[MAX_SAMPLES];
  unsigned nhandoff_samples;
  double last_release_at;
  uint64_t max_fence;
  uint64_t first_fence;
  unsigned violations;
  int inspect_pending;

  /* crash: the permits process C held when it died */
  int crash_armed, crash_done;
  worker *crash_victim;
  double crash_at;
  double contend_end_at; /* when phase 1 is due to end, then when it ended */
  struct crashed {
    worker *w;
    uint64_t fence;
    char id[33];
    double expire_est; /* local, conservative: Redis frees it no earlier */
    int reclaimed;
  } crashed[PERMITS];
  int ncrashed;
  double crash_reclaimed_after;

  /* ledger scene */
  sluice_permit *ledger_w1, *ledger_w3;
  uint64_t ledger_f1, ledger_f3;
  int ledger_step, ledger_released;

  /* fair scene */
  worker *fair_holder;
  worker *fair_order[NWORKERS]; /* arrival order of the queued workers */
  int fair_nqueued, fair_narrived, fair_ngranted, fair_in_order;
  int fair_holders;
  sluice_permit *fair_permit;
  worker *fair_permit_owner;

  /* epilogue */
  sluice_limiter *lim;
  int lim_allowed, lim_denied, lim_waits_done;
  double lim_started;
  sluice_dq *dq;
  sluice_dq_consumer *consumer;
  double dq_pushed_at;
  int dq_acked;
} g;

static void enter_phase(enum phase ph);
static void worker_pause(worker *w);
static void worker_acquire(worker *w);
static void maybe_stopped(void);
static void shutdown_all(void);

static void violation(const char *fmt, ...) PRINTF_LIKE(1, 2);
static void violation(const char *fmt, ...) {
  va_list ap;
  printf("[%7.3f] VIOLATION: ", now_ms() / 1e3);
  va_start(ap, fmt);
  vprintf(fmt, ap);
  va_end(ap);
  putchar('\n');
  g.violations++;
  g.exit_code = 1;
}

static void failure(const char *what, int status) {
  say("error: %s: %s (%s)", what, sluice_strerror(status), sluice_err_name(status));
  g.errors++;
  g.exit_code = 1;
}

static worker *worker_by_permit_id(const char *id) {
  for (int i = 0; i < NWORKERS; i++)
    if (g.workers[i].state == W_HOLDING && strcmp(g.workers[i].permit_id, id) == 0)
      return &g.workers[i];
  return NULL;
}

static void add_sample(double *arr, unsigned *n, double v) {
  if (*n < MAX_SAMPLES) arr[(*n)++] = v;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

/* p in [0,1]; arr is sorted in place. */
static double percentile(double *arr, unsigned n, double p) {
  if (!n) return 0;
  qsort(arr, n, sizeof *arr, cmp_double);
  unsigned i = (unsigned)(p * (n - 1) + 0.5);
  return arr[i];
}

/* ---- processes ----------------------------------------------------------- */

static void on_client_state(sluice_client *c, int connected, int status, void *ud) {
  proc *p = ud;
  int first = connected && !p->ever_connected;
  p->connected = connected;
  if (connected) p->ever_connected = 1;
  if (g.phase == PH_CONNECT) {
    if (!connected) return; /* the connect deadline reports it */
    for (int i = 0; i < NPROCS; i++)
      if (!g.procs[i].connected) return;
    enter_phase(PH_CONTEND);
    return;
  }
  if (connected)
    say("process %c: %s", p->name, first ? "connected to Redis" : "connected to Redis again");
  else say("process %c: lost its Redis connection: %s", p->name, sluice_strerror(status));
}

static int proc_start(proc *p) {
  sluice_client_options co;
  sluice_client_options_init(&co);
  co.url = g.url;
  co.key_prefix = g.prefix;
  int rc = sluice_client_new(g.base, &co, &p->client);
  if (rc == SLUICE_EINVAL) {
    say("not a valid Redis URL: %s", g.url);
    g.exit_code = 2;
    return rc;
  }
  if (rc) {
    failure("sluice_client_new", rc);
    return rc;
  }
  sluice_client_set_state_cb(p->client, on_client_state, p);

  sluice_sem_options so;
  sluice_sem_options_init(&so);
  so.permits = PERMITS;
  so.ttl_ms = TTL_MS;
  so.renew_ms = RENEW_MS;
  rc = sluice_sem_new(p->client, "db-writers", &so, &p->sem);

  sluice_sem_options fo;
  sluice_sem_options_init(&fo);
  fo.permits = 1;
  fo.ttl_ms = TTL_MS;
  fo.fair = 1;
  if (!rc) rc = sluice_sem_new(p->client, "deploy-lock", &fo, &p->fair);

  /* Process A takes the ledger lock without renewal, to show a lost lease. */
  sluice_sem_options lo;
  sluice_sem_options_init(&lo);
  lo.ttl_ms = 600;
  lo.auto_renew = p->name != 'A';
  if (!rc) rc = sluice_sem_new(p->client, "ledger-lock", &lo, &p->ledger);
  if (rc) failure("sluice_sem_new", rc);
  return rc;
}

static void proc_free_handles(proc *p) {
  sluice_sem_free(p->sem);
  sluice_sem_free(p->fair);
  sluice_sem_free(p->ledger);
  p->sem = p->fair = p->ledger = NULL;
}

static void proc_restart(proc *p);

static void on_crashed_client_closed(void *ud) {
  proc *p = ud;
  /* The client is closed, so freeing the handles releases nothing in Redis:
   * the crashed permit stays until its lease runs out. */
  proc_free_handles(p);
  p->client = NULL;
  p->closing = 0;
  if (p->restart_when_closed && g.phase != PH_SHUTDOWN) proc_restart(p);
}

static void proc_restart(proc *p) {
  if (p->client) {
    if (p->closing) p->restart_when_closed = 1;
    return;
  }
  p->restart_when_closed = 0;
  p->generation++;
  p->ever_connected = 0;
  if (proc_start(p)) return;
  int running = g.phase == PH_CONTEND;
  say("process %c restarts (new client); its workers %s", p->name, running ? "rejoin" : "stand by");
  for (int i = 0; i < NWORKERS; i++) {
    worker *w = &g.workers[i];
    if (w->p != p) continue;
    if (running) worker_pause(w);
    else w->state = W_STOPPED;
  }
  if (!running) maybe_stopped();
}

/* ---- the contending workers ---------------------------------------------- */

static void on_released(sluice_sem *sem, int status, void *ud) {
  worker *w = ud;
  g.releases_pending--;
  if (status == SLUICE_ENOTFOUND) {
    g.enotfound++;
    say("%s: release found no permit (its lease had already run out)", w->name);
  } else if (status != SLUICE_OK && status != SLUICE_ECANCELED) {
    failure("release", status);
  }
  maybe_stopped();
}

static void on_lost(sluice_permit *permit, int reason, void *ud) {
  worker *w = ud;
  g.lost++;
  w->lost = 1;
  g.live_holders--;
  say("%s: LOST its permit (fence %" PRIu64 "): %s", w->name, sluice_permit_fence(permit),
      reason == SLUICE_LOST_DEFINITE ? "Redis says it is no longer ours"
                                     : "lease ran out without a confirmed renewal");
}

static void worker_release(worker *w) {
  double held = now_ms() - w->granted_at;
  if (!w->lost) g.live_holders--;
  g.last_release_at = now_ms();
  g.releases++;
  w->state = W_IDLE;
  sluice_permit *permit = w->permit;
  w->permit = NULL;
  char renewed[48] = "";
  if (w->renewals)
    snprintf(renewed, sizeof renewed, ", lease renewed %u time%s", w->renewals,
             w->renewals == 1 ? "" : "s");
  say("%s releases fence %" PRIu64 " after %.2f s%s", w->name, w->fence, held / 1e3, renewed);
  int rc = sluice_permit_release(permit, on_released, w);
  if (rc == SLUICE_OK) g.releases_pending++;
  else failure("sluice_permit_release", rc);
}

static void worker_timer_cb(evutil_socket_t fd, short what, void *arg) {
  worker *w = arg;
  if (w->state == W_HOLDING) {
    worker_release(w);
    if (g.phase == PH_CONTEND) worker_pause(w);
    else {
      w->state = W_STOPPED;
      maybe_stopped();
    }
  } else if (w->state == W_IDLE) {
    if (g.phase == PH_CONTEND) worker_acquire(w);
    else {
      w->state = W_STOPPED;
      maybe_stopped();
    }
  }
}

static void worker_pause(worker *w) {
  w->state = W_IDLE;
  timer_in(w->timer, rand_between(100, 600));
}

static void on_acquired(sluice_sem *sem, int status, sluice_permit *permit, void *ud) {
  worker *w = ud;
  double t = now_ms(), waited = t - w->wait_start;
  w->acq = NULL;
  if (w->state == W_DEAD) return; /* cancelled by its process's crash */
  if (status == SLUICE_ETIMEDOUT) {
    g.timeouts++;
    say("%s gave up after waiting %.2f s (timeout); will try again", w->name, waited / 1e3);
    worker_pause(w);
    return;
  }
  if (status == SLUICE_ECANCELED) {
    w->state = W_STOPPED;
    maybe_stopped();
    return;
  }
  if (status != SLUICE_OK) {
    failure("acquire", status);
    if (g.phase == PH_CONTEND) worker_pause(w);
    else {
      w->state = W_STOPPED;
      maybe_stopped();
    }
    return;
  }

  uint64_t fence = sluice_permit_fence(permit);
  int live_before = g.live_holders;
  /* Crashed permits count until their (conservative) expiry. */
  int crashed_live = 0, crashed_unclaimed = 0;
  for (int i = 0; i < g.ncrashed; i++) {
    crashed_live += !g.crashed[i].reclaimed && t < g.crashed[i].expire_est;
    crashed_unclaimed += !g.crashed[i].reclaimed;
  }
  if (live_before + crashed_live + 1 > PERMITS)
    violation(
        "%s granted while %d permit%s already held (%d live, %d crashed and unexpired), "
        "permits %d",
        w->name, live_before + crashed_live, live_before + crashed_live == 1 ? " was" : "s were",
        live_before, crashed_live, PERMITS);
  /* With the live holders and the crashed leases filling every permit, this
   * grant can only have come from a crashed lease that expired. */
  struct crashed *freed = NULL;
  if (crashed_unclaimed && live_before + crashed_unclaimed >= PERMITS) {
    for (int i = 0; i < g.ncrashed; i++)
      if (!g.crashed[i].reclaimed && (!freed || g.crashed[i].expire_est < freed->expire_est))
        freed = &g.crashed[i];
    freed->reclaimed = 1;
  }
  if (fence <= w->max_fence_at_start)
    violation("%s got fence %" PRIu64 ", not above %" PRIu64 " granted before it asked", w->name,
              fence, w->max_fence_at_start);
  if (fence > g.max_fence) g.max_fence = fence;
  if (!g.first_fence) g.first_fence = fence;

  w->state = W_HOLDING;
  w->permit = permit;
  w->fence = fence;
  snprintf(w->permit_id, sizeof w->permit_id, "%s", sluice_permit_id(permit));
  w->granted_at = t;
  w->renewals = 0;
  w->lost = 0;
  w->last_local_left = sluice_permit_remaining_ms(permit);
  w->last_redis_left = -1;
  sluice_permit_set_lost_cb(permit, on_lost, w);
  g.live_holders++;
  if (g.live_holders > g.max_live_seen) g.max_live_seen = g.live_holders;
  g.grants++;

  /* Most holds are short; about a third outlast the lease (renewals). */
  w->hold_ms = rng() % 100 < 65 ? rand_between(150, 900) : rand_between(1700, 3200);
  int victim = 0;
  if (g.crash_armed && w->p->name == 'C') {
    g.crash_armed = 0;
    g.crash_victim = w;
    victim = 1;
    if (w->hold_ms < 2500) w->hold_ms = 2500;
    timer_in(g.crash_timer, 400);
  }

  char how[96];
  if (waited < 30) {
    g.immediate++;
    snprintf(how, sizeof how, "at once");
  } else {
    g.waited++;
    add_sample(g.wait_samples, &g.nwait_samples, waited);
    snprintf(how, sizeof how, "after waiting %.2f s", waited / 1e3);
    if (g.last_release_at > w->wait_start && !freed)
      add_sample(g.handoff_samples, &g.nhandoff_samples, t - g.last_release_at);
  }
  say("%s (process %c) granted fence %" PRIu64 " %s; holds %.2f s%s", w->name, w->p->name, fence,
      how, w->hold_ms / 1e3,
      victim                ? " -- but process C is about to crash"
      : w->hold_ms > TTL_MS ? " (> lease: needs renewals)"
                            : "");

  if (freed) {
    if (!g.crash_reclaimed_after) g.crash_reclaimed_after = t - g.crash_at;
    say("    ^ %s got the slot of crashed %s (fence %" PRIu64
        "), whose lease expired "
        "%.2f s after the crash: never released",
        w->name, freed->w->name, freed->fence, (t - g.crash_at) / 1e3);
  }
  timer_in(w->timer, w->hold_ms);
}

static void worker_acquire(worker *w) {
  w->state = W_WAITING;
  w->wait_start = now_ms();
  w->max_fence_at_start = g.max_fence;
  int rc = sluice_sem_acquire(w->p->sem, ACQUIRE_TIMEOUT_MS, on_acquired, w, &w->acq);
  if (rc) {
    failure("sluice_sem_acquire", rc);
    worker_pause(w);
  }
}

/* Renewals are invisible to the holder except as a jump in its lease. */
static void poll_cb(evutil_socket_t fd, short what, void *arg) {
  for (int i = 0; i < NWORKERS; i++) {
    worker *w = &g.workers[i];
    if (w->state != W_HOLDING || w->lost) continue;
    int64_t left = sluice_permit_remaining_ms(w->permit);
    if (left > w->last_local_left + 20) {
      w->renewals++;
      g.renewals++;
    }
    w->last_local_left = left;
  }
}

/* ---- the crash ----------------------------------------------------------- */

static void crash_cb(evutil_socket_t fd, short what, void *arg) {
  worker *v = g.crash_victim;
  proc *p = v->p;
  if (v->state != W_HOLDING || v->lost) { /* cannot happen with the forced hold */
    g.crash_armed = 1;
    return;
  }
  g.crash_done = 1;
  g.crash_at = now_ms();
  say("*** process C crashes: its client is closed, nothing is released");
  for (int i = 0; i < NWORKERS; i++) {
    worker *w = &g.workers[i];
    if (w->p != p) continue;
    evtimer_del(w->timer);
    if (w->state == W_HOLDING && !w->lost) {
      int64_t left = sluice_permit_remaining_ms(w->permit);
      struct crashed *c = &g.crashed[g.ncrashed++];
      c->w = w;
      c->fence = w->fence;
      snprintf(c->id, sizeof c->id, "%s", w->permit_id);
      c->expire_est = g.crash_at + (double)left;
      g.live_holders--;
      say("    %s held fence %" PRIu64
          ": nobody renews it now; its lease runs out in about "
          "%.2f s",
          w->name, w->fence, (double)left / 1e3);
    } else if (w->state == W_WAITING) {
      say("    %s was waiting; its acquire dies with the process", w->name);
    }
    w->permit = NULL; /* dropped, unreleased, with the handle */
    w->state = W_DEAD;
  }
  p->closing = 1;
  p->connected = 0;
  sluice_client_close(p->client, on_crashed_client_closed, p);
  if (g.phase == PH_CONTEND) timer_in(g.restart_timer, 3500);
}

static void restart_cb(evutil_socket_t fd, short what, void *arg) { proc_restart(&g.procs[2]); }

/* ---- the live summary ---------------------------------------------------- */

static void on_inspect(sluice_sem *sem, int status, const sluice_sem_info *info, void *ud) {
  g.inspect_pending = 0;
  if (g.phase != PH_CONTEND) { /* answered after the phase ended: stale */
    maybe_stopped();
    return;
  }
  if (status != SLUICE_OK) {
    failure("sluice_sem_inspect", status);
    return;
  }
  char line[512];
  size_t off = 0;
  off += (size_t)snprintf(line + off, sizeof line - off, "-- holders %zu/%u:", info->nholders,
                          info->permits ? info->permits : PERMITS);
  for (size_t i = 0; i < info->nholders && off < sizeof line - 80; i++) {
    const sluice_holder_info *h = &info->holders[i];
    worker *w = worker_by_permit_id(h->id);
    const char *note = "";
    if (w) {
      if (w->last_redis_left >= 0 && h->remaining_ms > w->last_redis_left) note = " renewed";
      w->last_redis_left = h->remaining_ms;
    }
    char who[16];
    if (w) {
      snprintf(who, sizeof who, "%s", w->name);
    } else {
      snprintf(who, sizeof who, "%.6s..", h->id); /* not ours: another run's */
      for (int k = 0; k < g.ncrashed; k++)
        if (strcmp(h->id, g.crashed[k].id) == 0) {
          snprintf(who, sizeof who, "%s", g.crashed[k].w->name);
          note = " CRASHED";
        }
    }
    off += (size_t)snprintf(line + off, sizeof line - off, " %s %.2fs%s%s", who,
                            (double)h->remaining_ms / 1e3, note, i + 1 < info->nholders ? "," : "");
  }
  if (!info->nholders) off += (size_t)snprintf(line + off, sizeof line - off, " none");
  double ws[MAX_SAMPLES];
  memcpy(ws, g.wait_samples, g.nwait_samples * sizeof *ws);
  double p50 = percentile(ws, g.nwait_samples, 0.5);
  double mx = g.nwait_samples ? ws[g.nwait_samples - 1] : 0;
  snprintf(line + off, sizeof line - off,
           " | %zu waiting | grants %u, wait p50 %.2fs max %.2fs, renewals %u, timeouts %u",
           info->nwaiters, g.grants, p50 / 1e3, mx / 1e3, g.renewals, g.timeouts);
  say("%s", line);
  if (info->nholders > PERMITS)
    violation("Redis lists %zu holders for %d permits", info->nholders, PERMITS);
}

static void tick_cb(evutil_socket_t fd, short what, void *arg) {
  if (g.phase != PH_CONTEND || g.inspect_pending) return;
  /* Process A never crashes; any handle on the semaphore can inspect it. */
  int rc = sluice_sem_inspect(g.procs[0].sem, on_inspect, NULL);
  if (rc) failure("sluice_sem_inspect", rc);
  else g.inspect_pending = 1;
}

/* ---- contention phase: start and stop ------------------------------------ */

static void contend_start(void) {
  say("phase 1: %d workers in 3 processes contend for the %d permits of \"db-writers\" for %u s",
      NWORKERS, PERMITS, g.seconds);
  say("lease %.1f s, renewed every %.1f s; acquire timeout %.1f s; fencing tokens rise with "
      "every grant and with every new master",
      TTL_MS / 1e3, RENEW_MS / 1e3, ACQUIRE_TIMEOUT_MS / 1e3);
  for (int i = 0; i < NWORKERS; i++) {
    worker *w = &g.workers[i];
    w->state = W_IDLE;
    timer_in(w->timer, 20.0 * i);
  }
  struct timeval one = tv_ms(1000), fifty = tv_ms(50);
  event_add(g.tick_timer, &one);
  event_add(g.poll_timer, &fifty);
  timer_in(g.phase_timer, g.seconds * 1000.0);
  g.contend_end_at = now_ms() + g.seconds * 1000.0;
  /* Crash process C a third of the way in, or earlier in a short run. */
  double crash_in = g.seconds * 1000.0 * 0.35, latest = g.seconds * 1000.0 - TTL_MS - 1500;
  if (crash_in > latest) crash_in = latest > 500 ? latest : 500;
  timer_in(g.scene_timer, crash_in);
}

static void contend_stop(void) {
  say("phase 1 ends: waiters cancel their acquires, holders release");
  g.contend_end_at = now_ms();
  evtimer_del(g.phase_timer);
  evtimer_del(g.scene_timer);
  g.crash_armed = 0;
  event_del(g.tick_timer);
  if (evtimer_pending(g.crash_timer, NULL)) evtimer_del(g.crash_timer);
  g.phase = PH_STOPPING;
  for (int i = 0; i < NWORKERS; i++) {
    worker *w = &g.workers[i];
    switch (w->state) {
      case W_IDLE:
        evtimer_del(w->timer);
        w->state = W_STOPPED;
        break;
      case W_HOLDING:
        evtimer_del(w->timer);
        worker_release(w);
        w->state = W_STOPPED;
        break;
      case W_WAITING:
        sluice_acquire_cancel(w->acq); /* its callback gets SLUICE_ECANCELED */
        break;
      default: break;
    }
  }
  if (evtimer_pending(g.restart_timer, NULL) || g.procs[2].closing || !g.procs[2].client) {
    evtimer_del(g.restart_timer);
    proc_restart(&g.procs[2]);
  }
  timer_in(g.phase_timer, 10000); /* a watchdog: draining takes well under 1 s */
  maybe_stopped();
}

static void maybe_stopped(void) {
  if (g.phase != PH_STOPPING) return;
  for (int i = 0; i < NWORKERS; i++)
    if (g.workers[i].state != W_STOPPED) return;
  if (g.releases_pending || g.inspect_pending || !g.procs[2].client || g.procs[2].closing) return;
  event_del(g.poll_timer);
  if (g.violations == 0)
    say("phase 1 checks passed: at most %d live holders at any time%s, fences increasing",
        g.max_live_seen, g.crash_done ? " (plus the crashed lease until it expired)" : "");
  enter_phase(g.interrupted ? PH_SHUTDOWN : PH_LEDGER);
}

/* ---- scene: a lost lease and fencing ------------------------------------- */

static void ledger_lost(sluice_permit *permit, int reason, void *ud) {
  say("w1: lost callback fired (%s): %s",
      reason == SLUICE_LOST_UNCERTAIN ? "SLUICE_LOST_UNCERTAIN" : "SLUICE_LOST_DEFINITE",
      reason == SLUICE_LOST_UNCERTAIN ? "its lease ran out with no renewal; it must stop writing"
                                      : "Redis says the permit is gone");
}

static void ledger_released(sluice_sem *sem, int status, void *ud) {
  const worker *w = ud;
  if (status == SLUICE_ECANCELED && g.phase == PH_SHUTDOWN) return;
  if (w == &g.workers[0]) {
    if (status == SLUICE_ENOTFOUND)
      say("w1: its late release answers %s: it cannot free w3's permit", sluice_err_name(status));
    else
      violation("w1's late release answered %s, expected SLUICE_ENOTFOUND",
                sluice_err_name(status));
  } else if (status != SLUICE_OK) {
    failure("ledger release", status);
  }
  if (++g.ledger_released == 2) enter_phase(g.interrupted ? PH_SHUTDOWN : PH_FAIR);
}

static void ledger_w3_acquired(sluice_sem *sem, int status, sluice_permit *permit, void *ud) {
  if (status == SLUICE_ECANCELED && g.phase == PH_SHUTDOWN) return;
  if (status != SLUICE_OK) {
    failure("w3 acquire ledger-lock", status);
    enter_phase(PH_SHUTDOWN);
    return;
  }
  g.ledger_w3 = permit;
  g.ledger_f3 = sluice_permit_fence(permit);
  say("w3 gets ledger-lock, fence %" PRIu64 ", as soon as w1's lease expires", g.ledger_f3);
  if (g.ledger_f3 <= g.ledger_f1)
    violation("fence %" PRIu64 " is not above the stale %" PRIu64, g.ledger_f3, g.ledger_f1);
  else
    say("    a store that keeps the highest fence it has seen (%" PRIu64
        ") now refuses "
        "writes still carrying w1's %" PRIu64,
        g.ledger_f3, g.ledger_f1);
}

static void ledger_w1_acquired(sluice_sem *sem, int status, sluice_permit *permit, void *ud) {
  if (status == SLUICE_ECANCELED && g.phase == PH_SHUTDOWN) return;
  if (status != SLUICE_OK) {
    failure("w1 acquire ledger-lock", status);
    enter_phase(PH_SHUTDOWN);
    return;
  }
  g.ledger_w1 = permit;
  g.ledger_f1 = sluice_permit_fence(permit);
  sluice_permit_set_lost_cb(permit, ledger_lost, NULL);
  say("w1 (process A) takes ledger-lock, fence %" PRIu64
      ", lease 0.6 s with renewal off, "
      "then stalls for 1.0 s",
      g.ledger_f1);
  g.ledger_step = 0;
  timer_in(g.scene_timer, 200);
}

static void ledger_scene_cb(void) {
  int rc;
  switch (g.ledger_step++) {
    case 0:
      rc = sluice_sem_acquire(g.procs[1].ledger, 3000, ledger_w3_acquired, NULL, NULL);
      if (rc) {
        failure("sluice_sem_acquire", rc);
        enter_phase(PH_SHUTDOWN);
        return;
      }
      say("w3 (process B) asks for ledger-lock and waits");
      timer_in(g.scene_timer, 800);
      break;
    case 1:
      if (!g.ledger_w3) {
        violation("w3 still waits for ledger-lock 0.4 s after w1's lease ran out");
        enter_phase(PH_SHUTDOWN);
        return;
      }
      say("w1 wakes up from its stall and releases, unaware that its lease is long gone");
      rc = sluice_permit_release(g.ledger_w1, ledger_released, &g.workers[0]);
      g.ledger_w1 = NULL;
      if (rc) {
        failure("sluice_permit_release", rc);
        g.ledger_released++;
      }
      rc = sluice_permit_release(g.ledger_w3, ledger_released, &g.workers[2]);
      g.ledger_w3 = NULL;
      if (rc) {
        failure("sluice_permit_release", rc);
        if (++g.ledger_released == 2) enter_phase(PH_SHUTDOWN);
      }
      break;
    default: break;
  }
}

/* ---- scene: a fair lock -------------------------------------------------- */

static void fair_acquired(sluice_sem *sem, int status, sluice_permit *permit, void *ud);

static const char *ordinal(int n) { return n == 1 ? "st" : n == 2 ? "nd" : n == 3 ? "rd" : "th"; }

static void fair_check_done(void) {
  char arr[64] = "", got[64] = "";
  for (int i = 0; i < g.fair_nqueued; i++) {
    strcat(arr, " ");
    strcat(arr, g.fair_order[i]->name);
  }
  for (int k = 1; k <= g.fair_nqueued; k++)
    for (int i = 0; i < NWORKERS; i++)
      if (g.workers[i].fair_arrival == -k) {
        strcat(got, " ");
        strcat(got, g.workers[i].name);
      }
  if (g.fair_in_order) say("FIFO kept: arrival order%s = grant order%s", arr, got);
  else violation("fair lock: arrival order%s, grant order%s", arr, got);
  enter_phase(g.interrupted ? PH_SHUTDOWN : PH_LIMITER);
}

/* Release the fair lock; the next in line gets it. */
static void fair_release(void) {
  worker *w = g.fair_permit_owner;
  sluice_permit *p = g.fair_permit;
  g.fair_holders--;
  g.fair_permit = NULL;
  g.fair_permit_owner = NULL;
  if (w == g.fair_holder) say("%s releases deploy-lock", w->name);
  int rc = sluice_permit_release(p, NULL, NULL);
  if (rc) failure("sluice_permit_release", rc);
  if (w != g.fair_holder && g.fair_ngranted == g.fair_nqueued) fair_check_done();
}

static void fair_scene_timer(void) {
  if (g.fair_narrived < g.fair_nqueued) {
    worker *w = g.fair_order[g.fair_narrived++];
    w->fair_arrival = g.fair_narrived;
    w->wait_start = now_ms();
    int rc = sluice_sem_acquire(w->p->fair, 8000, fair_acquired, w, &w->acq);
    if (rc) {
      failure("sluice_sem_acquire", rc);
      enter_phase(PH_SHUTDOWN);
      return;
    }
    say("%s (process %c) queues for deploy-lock, %d%s in line", w->name, w->p->name,
        g.fair_narrived, ordinal(g.fair_narrived));
    timer_in(g.scene_timer, g.fair_narrived < g.fair_nqueued ? 120 : 400);
  } else if (g.fair_permit) {
    fair_release();
  }
}

static void fair_acquired(sluice_sem *sem, int status, sluice_permit *permit, void *ud) {
  worker *w = ud;
  w->acq = NULL;
  if (status == SLUICE_ECANCELED && g.phase == PH_SHUTDOWN) return;
  if (status != SLUICE_OK) {
    failure("fair acquire", status);
    enter_phase(PH_SHUTDOWN);
    return;
  }
  g.fair_holders++;
  if (g.fair_holders > 1) violation("deploy-lock has %d holders", g.fair_holders);
  g.fair_permit = permit;
  g.fair_permit_owner = w;
  if (w == g.fair_holder) {
    say("%s (process %c) holds deploy-lock (fence %" PRIu64 "); five workers line up behind it",
        w->name, w->p->name, sluice_permit_fence(permit));
    timer_in(g.scene_timer, 100);
    return;
  }
  g.fair_ngranted++;
  if (w->fair_arrival != g.fair_ngranted) g.fair_in_order = 0;
  say("%s gets deploy-lock (fence %" PRIu64 ") after %.2f s: arrived %d%s, served %d%s", w->name,
      sluice_permit_fence(permit), (now_ms() - w->wait_start) / 1e3, w->fair_arrival,
      ordinal(w->fair_arrival), g.fair_ngranted, ordinal(g.fair_ngranted));
  w->fair_arrival = -g.fair_ngranted;
  timer_in(g.scene_timer, 150); /* hold briefly, then release */
}

static void fair_start(void) {
  say("phase 3: a fair lock (\"deploy-lock\", fair mode): waiters are served in arrival "
      "order, across processes");
  g.fair_holder = &g.workers[1]; /* w2 */
  /* The others arrive in a random order. */
  int idx[NWORKERS - 1], n = 0;
  for (int i = 0; i < NWORKERS; i++)
    if (&g.workers[i] != g.fair_holder) idx[n++] = i;
  for (int i = n - 1; i > 0; i--) {
    int j = (int)(rng() % (uint64_t)(i + 1)), tmp = idx[i];
    idx[i] = idx[j];
    idx[j] = tmp;
  }
  for (int i = 0; i < n; i++) g.fair_order[i] = &g.workers[idx[i]];
  g.fair_nqueued = n;
  g.fair_in_order = 1;
  int rc = sluice_sem_acquire(g.fair_holder->p->fair, 5000, fair_acquired, g.fair_holder, NULL);
  if (rc) {
    failure("sluice_sem_acquire", rc);
    enter_phase(PH_SHUTDOWN);
  }
}

/* ---- epilogue: a rate limiter -------------------------------------------- */

static void lim_wait_done(sluice_limiter *lim, int status, const sluice_rl_result *res, void *ud) {
  intptr_t i = (intptr_t)ud;
  if (status == SLUICE_ECANCELED && g.phase == PH_SHUTDOWN) return;
  if (status != SLUICE_OK) failure("sluice_limiter_wait", status);
  else say("    wait #%d for user:42 allowed after %.0f ms", (int)i, now_ms() - g.lim_started);
  if (++g.lim_waits_done == 2) enter_phase(g.interrupted ? PH_SHUTDOWN : PH_DQ);
}

static void lim_checked(sluice_limiter *lim, int status, const sluice_rl_result *res, void *ud) {
  intptr_t i = (intptr_t)ud;
  if (status == SLUICE_ECANCELED && g.phase == PH_SHUTDOWN) return;
  if (status != SLUICE_OK) {
    failure("sluice_limiter_check", status);
  } else if (res->allowed) {
    g.lim_allowed++;
    say("    check #%d for user:42: allowed, %" PRId64 " left", (int)i, res->remaining);
  } else {
    g.lim_denied++;
    say("    check #%d for user:42: denied, retry after %" PRId64 " ms", (int)i,
        res->retry_after_ms);
  }
  if (i != 5) return; /* one connection: the answers come in order */
  if (g.lim_allowed != 3 || g.lim_denied != 2)
    violation("limiter: %d allowed and %d denied, expected 3 and 2", g.lim_allowed, g.lim_denied);
  say("  two waits queue in this process and pass as the bucket refills:");
  g.lim_started = now_ms();
  for (intptr_t k = 1; k <= 2; k++) {
    int rc = sluice_limiter_wait(g.lim, "user:42", 1, 2000, lim_wait_done, (void *)k, NULL);
    if (rc) {
      failure("sluice_limiter_wait", rc);
      enter_phase(PH_SHUTDOWN);
      return;
    }
  }
}

static void limiter_start(void) {
  say("epilogue: a rate limiter (GCRA, 10 per second, burst 3) and a delay queue");
  sluice_limiter_options lo;
  sluice_limiter_options_init(&lo);
  lo.algo = SLUICE_RL_GCRA;
  lo.limit = 10;
  lo.period_ms = 1000;
  lo.burst = 3;
  int rc = sluice_limiter_new(g.procs[0].client, "api", &lo, &g.lim);
  for (intptr_t i = 1; i <= 5 && rc == SLUICE_OK; i++)
    rc = sluice_limiter_check(g.lim, "user:42", 1, lim_checked, (void *)i);
  if (rc) {
    failure("limiter", rc);
    enter_phase(PH_SHUTDOWN);
    return;
  }
  say("  five requests from user:42 at once:");
}

/* ---- epilogue: a delay queue --------------------------------------------- */

static const struct {
  const char *id, *payload;
  int64_t delay_ms;
} dq_jobs[3] = {
    {"job-c", "send the weekly report", 600},
    {"job-a", "send the welcome mail", 200},
    {"job-b", "retry the failed charge", 400},
};

static void dq_settled(sluice_dq_consumer *con, int status, const char *id, void *ud) {
  if (status == SLUICE_ECANCELED && g.phase == PH_SHUTDOWN) return;
  if (status != SLUICE_OK) failure("delay queue settle", status);
  if (ud && ++g.dq_acked == 3) enter_phase(PH_SHUTDOWN);
}

static void dq_handler(sluice_dq_consumer *con, sluice_dq_msg *msg, void *ud) {
  size_t len;
  const char *payload = sluice_dq_msg_payload(msg, &len);
  const char *id = sluice_dq_msg_id(msg);
  unsigned attempt = sluice_dq_msg_attempt(msg);
  int64_t due = -1;
  for (int i = 0; i < 3; i++)
    if (strcmp(dq_jobs[i].id, id) == 0) due = dq_jobs[i].delay_ms;
  double at = now_ms() - g.dq_pushed_at;
  if (strcmp(id, "job-b") == 0 && attempt == 1) {
    say("    %s delivered at +%.0f ms (due +%" PRId64
        "), attempt 1: \"%.*s\" fails; retry in "
        "150 ms",
        id, at, due, (int)len, payload);
    int rc = sluice_dq_retry(msg, 150, dq_settled, NULL);
    if (rc) failure("sluice_dq_retry", rc);
    return;
  }
  say("    %s delivered at +%.0f ms (due +%" PRId64 "), attempt %u: \"%.*s\", acknowledged", id, at,
      due, attempt, (int)len, payload);
  int rc = sluice_dq_ack(msg, dq_settled, &g.dq_acked /* non-NULL: an ack */);
  if (rc) failure("sluice_dq_ack", rc);
}

static void dq_pushed(sluice_dq *dq, int status, const char *id, int64_t due_ms, void *ud) {
  if (status == SLUICE_ECANCELED && g.phase == PH_SHUTDOWN) return;
  if (status != SLUICE_OK) {
    failure("sluice_dq_push", status);
    enter_phase(PH_SHUTDOWN);
  }
}

static void dq_start(void) {
  say("  three jobs pushed to the delay queue \"emails\" with delays 600, 200 and 400 ms; "
      "process B consumes:");
  sluice_dq_options qo;
  sluice_dq_options_init(&qo);
  qo.retention_ms = 60000;
  sluice_dq_consumer_options co;
  sluice_dq_consumer_options_init(&co);
  co.retention_ms = 60000;
  co.visibility_ms = 5000;
  co.max_poll_ms = 1000;
  int rc = sluice_dq_new(g.procs[0].client, "emails", &qo, &g.dq);
  if (!rc)
    rc = sluice_dq_consumer_new(g.procs[1].client, "emails", &co, dq_handler, NULL, &g.consumer);
  g.dq_pushed_at = now_ms();
  for (int i = 0; i < 3 && !rc; i++) {
    sluice_dq_item it;
    memset(&it, 0, sizeof it);
    it.id = dq_jobs[i].id;
    it.payload = dq_jobs[i].payload;
    it.len = strlen(dq_jobs[i].payload);
    it.delay_ms = dq_jobs[i].delay_ms;
    rc = sluice_dq_push(g.dq, &it, dq_pushed, NULL);
  }
  if (rc) {
    failure("delay queue", rc);
    enter_phase(PH_SHUTDOWN);
  }
}

/* ---- phases -------------------------------------------------------------- */

static void scene_timer_cb(evutil_socket_t fd, short what, void *arg) {
  switch (g.phase) {
    case PH_CONTEND:
      if (!g.crash_done && !g.crash_armed && !evtimer_pending(g.crash_timer, NULL)) {
        for (int i = 0; i < NWORKERS; i++) {
          worker *w = &g.workers[i];
          if (w->p->name == 'C' && w->state == W_HOLDING && !w->lost) {
            say("*** process C is about to crash while %s holds a permit", w->name);
            g.crash_victim = w;
            timer_in(g.crash_timer, 0);
            return;
          }
        }
        say("*** arming the crash: the next worker of process C to get a permit will die "
            "holding it");
        g.crash_armed = 1;
      }
      break;
    case PH_LEDGER: ledger_scene_cb(); break;
    case PH_FAIR: fair_scene_timer(); break;
    default: break;
  }
}

static void phase_timer_cb(evutil_socket_t fd, short what, void *arg) {
  int crash_unfinished = 0;
  for (int i = 0; i < g.ncrashed; i++) crash_unfinished |= !g.crashed[i].reclaimed;
  switch (g.phase) {
    case PH_CONTEND:
      /* In a short run, give the crash time to play out (up to 5 s more). */
      if ((g.crash_armed || evtimer_pending(g.crash_timer, NULL) ||
           (crash_unfinished && now_ms() < g.crash_at + TTL_MS + 1500)) &&
          now_ms() < g.contend_end_at + 5000) {
        timer_in(g.phase_timer, 50);
        return;
      }
      contend_stop();
      break;
    case PH_STOPPING:
    default: /* a scene overran its time */
      failure("scene did not finish in time", SLUICE_ETIMEDOUT);
      enter_phase(PH_SHUTDOWN);
      break;
  }
}

static void connect_deadline_cb(evutil_socket_t fd, short what, void *arg) {
  if (g.phase != PH_CONNECT) return;
  const char *err = "";
  for (int i = 0; i < NPROCS; i++)
    if (g.procs[i].client && *sluice_client_last_error(g.procs[i].client))
      err = sluice_client_last_error(g.procs[i].client);
  say("cannot reach Redis at %s within 5 s%s%s", g.url, *err ? ": " : "", err);
  g.exit_code = 2;
  enter_phase(PH_SHUTDOWN);
}

static void enter_phase(enum phase ph) {
  if (g.phase == PH_SHUTDOWN) return;
  evtimer_del(g.scene_timer);
  evtimer_del(g.phase_timer);
  g.phase = ph;
  switch (ph) {
    case PH_CONTEND:
      evtimer_del(g.connect_timer);
      say("all three processes connected (key prefix \"%s\")", g.prefix);
      contend_start();
      break;
    case PH_LEDGER: {
      say("phase 2: a holder that stalls past its lease loses it, and fencing tokens show it");
      int rc = sluice_sem_try_acquire(g.procs[0].ledger, ledger_w1_acquired, NULL);
      if (rc) {
        failure("sluice_sem_try_acquire", rc);
        enter_phase(PH_SHUTDOWN);
        return;
      }
      timer_in(g.phase_timer, 10000);
      break;
    }
    case PH_FAIR:
      fair_start();
      timer_in(g.phase_timer, 10000);
      break;
    case PH_LIMITER:
      limiter_start();
      timer_in(g.phase_timer, 10000);
      break;
    case PH_DQ:
      dq_start();
      timer_in(g.phase_timer, 10000);
      break;
    case PH_SHUTDOWN: shutdown_all(); break;
    default: break;
  }
}

static void on_sigint(evutil_socket_t fd, short what, void *arg) {
  if (g.interrupted) {
    printf("interrupted twice: exiting at once\n");
    fflush(stdout);
    _exit(130);
  }
  g.interrupted = 1;
  say("interrupted: winding down (Ctrl-C again to quit at once)");
  if (g.phase == PH_CONTEND) contend_stop();
  else if (g.phase == PH_CONNECT) enter_phase(PH_SHUTDOWN);
}

/* Free everything; the loop then ends by itself once the clients closed. */
static void shutdown_all(void) {
  event_del(g.tick_timer);
  event_del(g.poll_timer);
  evtimer_del(g.crash_timer);
  evtimer_del(g.restart_timer);
  evtimer_del(g.connect_timer);
  evtimer_del(g.scene_timer);
  evtimer_del(g.phase_timer);
  if (g.sigint_ev) event_del(g.sigint_ev);
  for (int i = 0; i < NWORKERS; i++) evtimer_del(g.workers[i].timer);
  sluice_limiter_free(g.lim);
  g.lim = NULL;
  sluice_dq_consumer_free(g.consumer);
  g.consumer = NULL;
  sluice_dq_free(g.dq);
  g.dq = NULL;
  for (int i = 0; i < NPROCS; i++) {
    proc *p = &g.procs[i];
    if (!p->client || p->closing) continue;
    /* Freeing a handle releases the permits still held through it. */
    proc_free_handles(p);
    sluice_client_close(p->client, NULL, NULL);
    p->client = NULL;
  }
}

/* ---- main ---------------------------------------------------------------- */

static void usage(FILE *f) {
  fprintf(f,
          "usage: demo [--redis URL] [--seconds N] [--seed N]\n"
          "\n"
          "Workers in three simulated processes contend for a 2-permit sluice semaphore\n"
          "in one libevent loop: grants, waits, wake-ups, lease renewals, a crashed\n"
          "holder whose lease expires, a lost lease with fencing tokens, a fair lock,\n"
          "then a rate limiter and a delay queue.\n"
          "\n"
          "  --redis URL    redis://[user:password@]host:port[/db] or unix:///path\n"
          "                 (default redis://127.0.0.1:6379)\n"
          "  --seconds N    length of the contention phase, 3..3600 (default 14; a\n"
          "                 short one runs on until the crash has played out; the\n"
          "                 later scenes add about 4 s)\n"
          "  --seed N       seed for the random hold and pause times\n"
          "  -h, --help     this text\n"
          "\n"
          "Exits 0 when every check held, 1 if one failed or an operation erred,\n"
          "2 on bad arguments or when Redis cannot be reached.\n");
}

static int parse_uint(const char *s, unsigned long long max, unsigned long long *out) {
  char *end;
  errno = 0;
  if (!s || !*s || *s == '-') return -1;
  unsigned long long v = strtoull(s, &end, 10);
  if (errno || *end || v > max) return -1;
  *out = v;
  return 0;
}

int main(int argc, char **argv) {
  unsigned long long seconds = 14, seed = 0;
  int have_seed = 0;
  g.url = "redis://127.0.0.1:6379";
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    const char *val = i + 1 < argc ? argv[i + 1] : NULL;
    if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
      usage(stdout);
      return 0;
    } else if (!strcmp(a, "--redis") && val) {
      g.url = val;
      i++;
    } else if (!strcmp(a, "--seconds") && val && !parse_uint(val, 3600, &seconds) && seconds >= 3) {
      i++;
    } else if (!strcmp(a, "--seed") && val && !parse_uint(val, UINT64_MAX, &seed)) {
      have_seed = 1;
      i++;
    } else {
      if (!strcmp(a, "--seconds") && val)
        fprintf(stderr, "demo: --seconds needs a whole number from 3 to 3600\n");
      else fprintf(stderr, "demo: bad argument: %s\n", a);
      usage(stderr);
      return 2;
    }
  }
  g.seconds = (unsigned)seconds;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  if (!have_seed) seed = (uint64_t)time(NULL) ^ ((uint64_t)getpid() << 32) ^ (uint64_t)t0.tv_nsec;
  rng_state = seed ? seed : 1;
  setvbuf(stdout, NULL, _IOLBF, 0);
  /* Fresh keys per run: fences, queues and limits start from scratch. */
  snprintf(g.prefix, sizeof g.prefix, "sluice:demo-%llx:", (unsigned long long)(rng() >> 24));

  printf("sluice %s demo against %s (seed %llu)\n", sluice_version(), g.url,
         (unsigned long long)seed);
  /* Wake-ups and lease timers are measured here in fractions of a
   * millisecond: libevent's default clock on Linux moves in ~4 ms steps. */
  struct event_config *cfg = event_config_new();
  if (cfg) {
    event_config_set_flag(cfg, EVENT_BASE_FLAG_PRECISE_TIMER);
    g.base = event_base_new_with_config(cfg);
    event_config_free(cfg);
  }
  if (!g.base) {
    fprintf(stderr, "demo: cannot create the event loop\n");
    return 1;
  }
  g.phase_timer = evtimer_new(g.base, phase_timer_cb, NULL);
  g.scene_timer = evtimer_new(g.base, scene_timer_cb, NULL);
  g.tick_timer = event_new(g.base, -1, EV_PERSIST, tick_cb, NULL);
  g.poll_timer = event_new(g.base, -1, EV_PERSIST, poll_cb, NULL);
  g.crash_timer = evtimer_new(g.base, crash_cb, NULL);
  g.restart_timer = evtimer_new(g.base, restart_cb, NULL);
  g.connect_timer = evtimer_new(g.base, connect_deadline_cb, NULL);
  g.sigint_ev = evsignal_new(g.base, SIGINT, on_sigint, NULL);
  int ok = g.phase_timer && g.scene_timer && g.tick_timer && g.poll_timer && g.crash_timer &&
           g.restart_timer && g.connect_timer && g.sigint_ev;
  for (int i = 0; i < NPROCS; i++) g.procs[i].name = (char)('A' + i);
  for (int i = 0; i < NWORKERS && ok; i++) {
    worker *w = &g.workers[i];
    snprintf(w->name, sizeof w->name, "w%d", i + 1);
    w->p = &g.procs[i / 2];
    w->state = W_STOPPED;
    ok = (w->timer = evtimer_new(g.base, worker_timer_cb, w)) != NULL;
  }
  if (!ok) {
    fprintf(stderr, "demo: out of memory\n");
    return 1;
  }
  event_add(g.sigint_ev, NULL);

  g.phase = PH_CONNECT;
  int rc = 0;
  for (int i = 0; i < NPROCS && !rc; i++) rc = proc_start(&g.procs[i]);
  if (rc) {
    if (!g.exit_code) g.exit_code = 1;
    enter_phase(PH_SHUTDOWN);
  } else {
    timer_in(g.connect_timer, 5000);
  }

  event_base_dispatch(g.base);

  /* The loop ran dry: every client has closed and every handle is freed. */
  for (int i = 0; i < NWORKERS; i++) event_free(g.workers[i].timer);
  event_free(g.phase_timer);
  event_free(g.scene_timer);
  event_free(g.tick_timer);
  event_free(g.poll_timer);
  event_free(g.crash_timer);
  event_free(g.restart_timer);
  event_free(g.connect_timer);
  event_free(g.sigint_ev);
  event_base_free(g.base);

  if (g.exit_code == 2) return 2;
  double p50 = percentile(g.wait_samples, g.nwait_samples, 0.5);
  double p90 = percentile(g.wait_samples, g.nwait_samples, 0.9);
  double wmax = g.nwait_samples ? g.wait_samples[g.nwait_samples - 1] : 0;
  double h50 = percentile(g.handoff_samples, g.nhandoff_samples, 0.5);
  double hmax = g.nhandoff_samples ? g.handoff_samples[g.nhandoff_samples - 1] : 0;
  printf("\nsummary after %.1f s\n", now_ms() / 1e3);
  printf(
      "  semaphore db-writers: %u grants (%u at once, %u after waiting), %u releases,\n"
      "    %d abandoned by the crash, %u acquire timeouts, %u renewals observed,\n"
      "    %u permits lost, %u errors\n",
      g.grants, g.immediate, g.waited, g.releases, g.ncrashed, g.timeouts, g.renewals, g.lost,
      g.errors);
  printf("  wait for a permit: p50 %.2f s, p90 %.2f s, max %.2f s\n", p50 / 1e3, p90 / 1e3,
         wmax / 1e3);
  printf("  wake-up after a release: p50 %.1f ms, max %.1f ms (%u samples)\n", h50, hmax,
         g.nhandoff_samples);
  if (g.crash_done && g.crash_reclaimed_after)
    printf("  crash of process C: %s it held came free by lease expiry, %.2f s later\n",
           g.ncrashed == 1 ? "the permit" : "the first of the permits",
           g.crash_reclaimed_after / 1e3);
  printf("  most live holders at once: %d of %d permits\n", g.max_live_seen, PERMITS);
  /* Liveness: waiters must get the crashed permit once its lease is over. */
  if (g.crash_done && !g.crash_reclaimed_after && !g.interrupted &&
      g.contend_end_at - g.crash_at > TTL_MS + 1000)
    violation("the crashed permit was never taken over in the %.1f s after the crash",
              (g.contend_end_at - g.crash_at) / 1e3);
  printf("  checks: %s\n", g.violations ? "FAILED" : "all passed");
  if (g.interrupted && !g.exit_code) return 130;
  return g.exit_code;
}
