/* The soak's semaphore client processes: see soak_sem.h. */
#include "soak_sem.h"

#include <inttypes.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <event2/event.h>
#include <sluice/sluice.h>

#include "harness.h"

#define LP_PROCS 3
#define LP_NAME "soak-live"
#define LP_TTL_MS 1500
#define LP_HB_MS 450        /* a dead or stopped waiter blocks the head no longer */
#define LP_IDLE_MAX_MS 1000 /* the liveness bound checked */
#define LP_KILLED_MAX 64
#define LP_UNKNOWN_MAX 64

enum { LP_IDLE, LP_WAITING, LP_HOLDING };

typedef struct lp_slot {
  _Atomic int pid;
  _Atomic int state;
  _Atomic int stopped; /* SIGSTOPped by the parent */
  _Atomic uint64_t wait_since_ns;
  _Atomic uint32_t held_seq; /* odd while held is written */
  char held[33];             /* the permit held now, "" none */
  _Atomic uint64_t grants, timeouts, errors, late, after_deadline;
} lp_slot;

typedef struct lp_shm {
  _Atomic int stop;
  lp_slot slot[LP_PROCS];
} lp_shm;

static lp_shm *L;
static char lp_url[256], lp_prefix[64];
static uint64_t lp_seed;
static int lp_sabotage;

static uint64_t mono_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static uint64_t lp_rng;
static unsigned between(unsigned lo, unsigned hi) {
  lp_rng ^= lp_rng >> 12;
  lp_rng ^= lp_rng << 25;
  lp_rng ^= lp_rng >> 27;
  return lo + (unsigned)((lp_rng * 2685821657736338717ull) % (uint64_t)(hi - lo + 1));
}

static void in_ms(struct event *ev, unsigned ms) {
  struct timeval tv = {ms / 1000, (ms % 1000) * 1000};
  evtimer_add(ev, &tv);
}

static sluice_client *lp_client(struct event_base *base) {
  sluice_client_options co;
  sluice_client_options_init(&co);
  co.url = lp_url;
  co.key_prefix = lp_prefix;
  co.op_timeout_ms = 1000;
  co.reconnect_max_ms = 300;
  sluice_client *c = NULL;
  return sluice_client_new(base, &co, &c) == SLUICE_OK ? c : NULL;
}

static sluice_sem *lp_sem(sluice_client *c) {
  sluice_sem_options so;
  sluice_sem_options_init(&so);
  so.ttl_ms = LP_TTL_MS;
  so.heartbeat_ms = LP_HB_MS;
  so.fair = 1;
  sluice_sem *s = NULL;
  return sluice_sem_new(c, LP_NAME, &so, &s) == SLUICE_OK ? s : NULL;
}

/* Published under a sequence count, so the monitor never reads half an id. */
static void publish(lp_slot *s, const char *id) {
  atomic_fetch_add(&s->held_seq, 1);
  snprintf(s->held, sizeof s->held, "%s", id ? id : "");
  atomic_fetch_add(&s->held_seq, 1);
}

static void read_held(lp_slot *s, char out[33]) {
  for (;;) {
    uint32_t a = atomic_load(&s->held_seq);
    memcpy(out, s->held, 33);
    out[32] = '\0';
    if (!(a & 1) && atomic_load(&s->held_seq) == a) return;
  }
}

/* ---- one client process -------------------------------------------------- */

typedef struct lp {
  lp_slot *s;
  struct event_base *base;
  sluice_client *c;
  sluice_sem *sem;
  sluice_permit *permit;
  struct event *timer;
  uint64_t deadline_ns;
  uint64_t late_seen;
} lp;

static void lp_lost(sluice_permit *p, int reason, void *ud) {
  lp *x = ud;
  if (x->permit == p) publish(x->s, NULL);
}

static void lp_acquired(sluice_sem *sem, int status, sluice_permit *p, void *ud) {
  lp *x = ud;
  lp_slot *s = x->s;
  if (status == SLUICE_OK) {
    if (mono_ns() > x->deadline_ns + 5000000u) atomic_fetch_add(&s->after_deadline, 1);
    atomic_fetch_add(&s->grants, 1);
    x->permit = p;
    /* Sabotage: every 20th grant is kept 2 s without a word (the orphan
     * check must fire). */
    int quiet = lp_sabotage && atomic_load(&s->grants) % 20 == 0;
    if (!quiet) publish(s, sluice_permit_id(p));
    atomic_store(&s->state, LP_HOLDING);
    sluice_permit_set_lost_cb(p, lp_lost, x);
    in_ms(x->timer, quiet ? 2000 : between(20, 200));
    return;
  }
  atomic_store(&s->state, LP_IDLE);
  if (status == SLUICE_ETIMEDOUT) atomic_fetch_add(&s->timeouts, 1);
  else atomic_fetch_add(&s->errors, 1);
  in_ms(x->timer, between(0, 100));
}

static void lp_step(evutil_socket_t fd, short what, void *arg) {
  lp *x = arg;
  sluice_sem_metrics m;
  sluice_sem_get_metrics(x->sem, &m);
  atomic_fetch_add(&x->s->late, m.late - x->late_seen);
  x->late_seen = m.late;
  if (x->permit) {
    publish(x->s, NULL);
    atomic_store(&x->s->state, LP_IDLE);
    sluice_permit_release(x->permit, NULL, NULL);
    x->permit = NULL;
  }
  if (atomic_load(&L->stop)) {
    event_base_loopbreak(x->base);
    return;
  }
  unsigned timeout = between(300, 3000);
  x->deadline_ns = mono_ns() + (uint64_t)timeout * 1000000u;
  atomic_store(&x->s->wait_since_ns, mono_ns());
  atomic_store(&x->s->state, LP_WAITING);
  /* Sabotage: in the sixth second of every ten, "waits" 2 s without
   * asking, as every process does then (the idle check must fire). */
  if (lp_sabotage && mono_ns() / 1000000000u % 10 == 5) {
    in_ms(x->timer, 2000);
    return;
  }
  if (sluice_sem_acquire(x->sem, timeout, lp_acquired, x, NULL) != SLUICE_OK) {
    atomic_store(&x->s->state, LP_IDLE);
    atomic_fetch_add(&x->s->errors, 1);
    in_ms(x->timer, 50);
  }
}

static void lp_closed(void *ud) { *(int *)ud = 1; }

static int lp_main(int i) {
  lp x = {&L->slot[i], th_precise_base(), NULL, NULL, NULL, NULL, 0, 0};
  lp_rng = (lp_seed ^ ((uint64_t)getpid() << 16)) | 1;
  if (!x.base || !(x.c = lp_client(x.base)) || !(x.sem = lp_sem(x.c))) return 2;
  x.timer = evtimer_new(x.base, lp_step, &x);
  in_ms(x.timer, 0);
  event_base_dispatch(x.base);
  event_free(x.timer);
  sluice_sem_free(x.sem);
  int closed = 0;
  sluice_client_close(x.c, lp_closed, &closed);
  while (!closed && event_base_loop(x.base, EVLOOP_ONCE) == 0) {}
  event_base_free(x.base);
  return 0;
}

static void lp_spawn(int i) {
  lp_slot *s = &L->slot[i];
  atomic_store(&s->state, LP_IDLE);
  atomic_store(&s->stopped, 0);
  publish(s, NULL);
  pid_t pid = fork();
  if (pid == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL); /* never outlive the soak */
    signal(SIGINT, SIG_DFL);
    signal(SIGTERM, SIG_DFL);
    _exit(lp_main(i));
  }
  atomic_store(&s->pid, pid > 0 ? pid : 0);
}

/* ---- the parent: faults and the monitor ---------------------------------- */

typedef struct seen_id {
  char id[33];
  uint64_t first_ns, until_ns;
  int flagged, excused;
} seen_id;

static struct {
  struct event_base *base;
  sluice_client *c;
  sluice_sem *sem;
  struct event *fault, *inspect, *respawn[LP_PROCS], *resume[LP_PROCS];
  uint64_t (*quiet_since)(void);
  int stopping, inspecting, closed, attached;
  /* Spans in which a holder nobody received is no fault (below). */
  struct {
    uint64_t from_ns, to_ns;
  } excuse[64];
  unsigned nexcuse;
  uint64_t stopped_at[LP_PROCS], resumed_at[LP_PROCS];
  seen_id killed[LP_KILLED_MAX]; /* permits killed holders had, until their lease ends */
  seen_id unknown[LP_UNKNOWN_MAX];
  uint64_t free_since_ns, longest_free_ns;
  int free_flagged;
  uint64_t kills, stops, inspections, orphans, idles, unknown_seen, unknown_excused;
} M;

static const uint64_t MS = 1000000u;

/* A holder nobody received is expected when it was first seen in such a
 * span: a grant in flight to a process killed (its answer never read), a
 * hand-off to it before its heartbeat ran out, anything granted to a
 * stopped one. */
static void excuse(uint64_t from_ns, uint64_t to_ns) {
  M.excuse[M.nexcuse % 64].from_ns = from_ns;
  M.excuse[M.nexcuse % 64].to_ns = to_ns;
  M.nexcuse++;
}

static int excused(uint64_t t) {
  for (unsigned k = 0; k < 64 && k < M.nexcuse; k++)
    if (M.excuse[k].from_ns <= t && t <= M.excuse[k].to_ns) return 1;
  return 0;
}

static void kill_one(int i) {
  lp_slot *s = &L->slot[i];
  char held[33];
  read_held(s, held);
  if (held[0]) { /* its lease goes on until it ends */
    seen_id *k = &M.killed[M.kills % LP_KILLED_MAX];
    memcpy(k->id, held, 33);
    k->until_ns = mono_ns() + (LP_TTL_MS + 300) * MS;
  }
  pid_t pid = atomic_load(&s->pid);
  kill(pid, SIGKILL);
  waitpid(pid, NULL, 0);
  atomic_store(&s->pid, 0);
  M.kills++;
  uint64_t now = mono_ns();
  excuse(now - 200 * MS, now + (LP_HB_MS + 100) * MS);
  in_ms(M.respawn[i], between(100, 600));
}

static void stop_one(int i) {
  lp_slot *s = &L->slot[i];
  kill(atomic_load(&s->pid), SIGSTOP);
  atomic_store(&s->stopped, 1);
  M.stopped_at[i] = mono_ns();
  M.stops++;
  in_ms(M.resume[i], between(200, 2500));
}

static void resume_cb(evutil_socket_t fd, short what, void *arg) {
  int i = (int)(intptr_t)arg;
  lp_slot *s = &L->slot[i];
  kill(atomic_load(&s->pid), SIGCONT);
  atomic_store(&s->stopped, 0);
  M.resumed_at[i] = mono_ns();
  excuse(M.stopped_at[i] - 200 * MS, M.resumed_at[i] + 200 * MS);
}

static void respawn_cb(evutil_socket_t fd, short what, void *arg) {
  int i = (int)(intptr_t)arg;
  if (!M.stopping) lp_spawn(i);
}

static void fault_cb(evutil_socket_t fd, short what, void *arg) {
  if (M.stopping) return;
  int i = (int)between(0, LP_PROCS - 1);
  lp_slot *s = &L->slot[i];
  if (atomic_load(&s->pid) > 0 && !atomic_load(&s->stopped)) {
    if (between(0, 1)) kill_one(i);
    else stop_one(i);
  }
  in_ms(M.fault, between(800, 2500));
}

/* -- the monitor -- */

static int known(const char *id, uint64_t now) {
  char held[33];
  for (int i = 0; i < LP_PROCS; i++) {
    read_held(&L->slot[i], held);
    if (strcmp(held, id) == 0) return 1;
  }
  for (int k = 0; k < LP_KILLED_MAX; k++)
    if (M.killed[k].until_ns > now && strcmp(M.killed[k].id, id) == 0) return 1;
  return 0;
}

static int any_stopped(void) {
  for (int i = 0; i < LP_PROCS; i++)
    if (atomic_load(&L->slot[i].stopped)) return 1;
  return 0;
}

/* A holder no live process received must be gone within a heartbeat,
 * unless it was first seen in a client fault's span, or Redis was hurt
 * around it (a grant whose answer a fault lost is released after the
 * reconnect). */
static void check_unknown(const char *id, uint64_t now) {
  seen_id *u = NULL, *oldest = &M.unknown[0];
  for (int k = 0; k < LP_UNKNOWN_MAX && !u; k++) {
    if (strcmp(M.unknown[k].id, id) == 0) u = &M.unknown[k];
    else if (M.unknown[k].until_ns < oldest->until_ns) oldest = &M.unknown[k];
  }
  if (!u) {
    u = oldest;
    memcpy(u->id, id, 33);
    u->first_ns = now;
    u->flagged = 0;
    u->excused = any_stopped() || excused(now);
    M.unknown_seen++;
  }
  u->until_ns = now;
  if (u->flagged || now - u->first_ns <= (LP_HB_MS + 400) * MS) return;
  u->flagged = 1;
  uint64_t quiet = M.quiet_since();
  if (u->excused || !quiet || quiet + 300 * MS > u->first_ns) {
    M.unknown_excused++;
    return;
  }
  M.orphans++;
  fprintf(stderr, "VIOLATION (semaphore liveness): permit %s held %.0f ms by no live process\n", id,
          (double)(now - u->first_ns) / 1e6);
}

/* Since when a live process (running, not stopped) has waited: the
 * earliest of them, or 0. */
static uint64_t live_waiting_since(void) {
  uint64_t oldest = 0;
  for (int i = 0; i < LP_PROCS; i++) {
    lp_slot *s = &L->slot[i];
    if (atomic_load(&s->pid) <= 0 || atomic_load(&s->stopped) ||
        atomic_load(&s->state) != LP_WAITING)
      continue;
    uint64_t t = atomic_load(&s->wait_since_ns);
    if (M.resumed_at[i] > t) t = M.resumed_at[i];
    if (!oldest || t < oldest) oldest = t;
  }
  return oldest;
}

/* The permit free while a live process waits: the span counts from the
 * latest of when it was first seen free, when the waiter started (or was
 * resumed) and when Redis was last hurt. */
static void check_free(size_t live_holders, uint64_t now) {
  uint64_t waiting = live_waiting_since(), quiet = M.quiet_since();
  if (!live_holders && waiting && quiet) {
    if (!M.free_since_ns) M.free_since_ns = now;
    uint64_t start = M.free_since_ns;
    if (waiting > start) start = waiting;
    if (quiet > start) start = quiet;
    uint64_t d = now > start ? now - start : 0;
    if (d > M.longest_free_ns) M.longest_free_ns = d;
    if (d > LP_IDLE_MAX_MS * MS && !M.free_flagged) {
      M.free_flagged = 1;
      M.idles++;
      fprintf(stderr,
              "VIOLATION (semaphore liveness): the permit free %.0f ms while a live "
              "process waited\n",
              (double)d / 1e6);
    }
    return;
  }
  M.free_since_ns = 0;
  M.free_flagged = 0;
}

static void on_info(sluice_sem *sem, int status, const sluice_sem_info *info, void *ud) {
  M.inspecting = 0;
  if (status != SLUICE_OK) return;
  M.inspections++;
  uint64_t now = mono_ns();
  size_t live = 0;
  for (size_t i = 0; i < info->nholders; i++) {
    if (info->holders[i].remaining_ms <= 0) continue;
    live++;
    if (!known(info->holders[i].id, now)) check_unknown(info->holders[i].id, now);
  }
  check_free(live, now);
}

static void inspect_cb(evutil_socket_t fd, short what, void *arg) {
  if (M.stopping) return;
  if (!M.inspecting && sluice_sem_inspect(M.sem, on_info, NULL) == SLUICE_OK) M.inspecting = 1;
  in_ms(M.inspect, 100);
}

/* ---- the interface ------------------------------------------------------- */

int soak_sem_start(const char *url, const char *prefix, uint64_t seed, int sabotage) {
  L = mmap(NULL, sizeof *L, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (L == MAP_FAILED) return -1;
  memset(L, 0, sizeof *L);
  snprintf(lp_url, sizeof lp_url, "%s", url);
  snprintf(lp_prefix, sizeof lp_prefix, "%s", prefix);
  lp_seed = seed;
  lp_rng = seed | 1;
  lp_sabotage = sabotage;
  for (int i = 0; i < LP_PROCS; i++) lp_spawn(i);
  return 0;
}

int soak_sem_attach(struct event_base *base, uint64_t (*redis_quiet_since)(void)) {
  M.base = base;
  M.quiet_since = redis_quiet_since;
  if (!(M.c = lp_client(base)) || !(M.sem = lp_sem(M.c))) return -1;
  M.fault = evtimer_new(base, fault_cb, NULL);
  M.inspect = evtimer_new(base, inspect_cb, NULL);
  for (int i = 0; i < LP_PROCS; i++) {
    M.respawn[i] = evtimer_new(base, respawn_cb, (void *)(intptr_t)i);
    M.resume[i] = evtimer_new(base, resume_cb, (void *)(intptr_t)i);
  }
  M.attached = 1;
  in_ms(M.fault, between(1000, 2000));
  in_ms(M.inspect, 100);
  return 0;
}

static void monitor_closed(void *ud) { M.closed = 1; }

void soak_sem_stop(void) {
  if (M.stopping) return;
  M.stopping = 1;
  atomic_store(&L->stop, 1);
  if (!M.attached) return;
  evtimer_del(M.fault);
  for (int i = 0; i < LP_PROCS; i++) {
    evtimer_del(M.respawn[i]);
    if (evtimer_pending(M.resume[i], NULL)) {
      evtimer_del(M.resume[i]);
      resume_cb(-1, 0, (void *)(intptr_t)i);
    }
  }
  sluice_sem_free(M.sem);
  sluice_client_close(M.c, monitor_closed, NULL);
}

int soak_sem_done(void) {
  int running = 0;
  for (int i = 0; i < LP_PROCS; i++) {
    pid_t pid = atomic_load(&L->slot[i].pid);
    if (pid > 0 && waitpid(pid, NULL, WNOHANG) == pid) atomic_store(&L->slot[i].pid, 0);
    else if (pid > 0) running++;
  }
  return !running && (M.closed || !M.attached);
}

static void free_events(void) {
  if (!M.attached) return;
  event_free(M.fault);
  event_free(M.inspect);
  for (int i = 0; i < LP_PROCS; i++) {
    event_free(M.respawn[i]);
    event_free(M.resume[i]);
  }
  M.attached = 0;
}

uint64_t soak_sem_report(void) {
  uint64_t grants = 0, timeouts = 0, errors = 0, late = 0, after = 0, hung = 0;
  for (int i = 0; i < LP_PROCS; i++) {
    lp_slot *s = &L->slot[i];
    pid_t pid = atomic_load(&s->pid);
    if (pid > 0 && waitpid(pid, NULL, WNOHANG) != pid) { /* a backstop: it should be gone */
      hung++;
      kill(pid, SIGKILL);
      waitpid(pid, NULL, 0);
    }
    grants += s->grants;
    timeouts += s->timeouts;
    errors += s->errors;
    late += s->late;
    after += s->after_deadline;
  }
  printf("  sem clients: %d processes on a fair semaphore (TTL %d ms, heartbeat %d ms): %" PRIu64
         " killed, %" PRIu64 " stopped; %" PRIu64 " grants, %" PRIu64 " timeouts, %" PRIu64
         " other; attempts read past their deadline (not granted) %" PRIu64 "\n",
         LP_PROCS, LP_TTL_MS, LP_HB_MS, M.kills, M.stops, grants, timeouts, errors, late);
  printf("  sem clients: %" PRIu64
         " inspections; longest free while a live process waited: %.0f"
         " ms (bound %d, %" PRIu64 " over it); holders no live process received: %" PRIu64
         " seen, of those outliving a heartbeat %" PRIu64 " in a fault's span, %" PRIu64
         " not;"
         " grants after the caller's deadline: %" PRIu64 "\n",
         M.inspections, (double)M.longest_free_ns / 1e6, LP_IDLE_MAX_MS, M.idles, M.unknown_seen,
         M.unknown_excused, M.orphans, after);
  if (hung) printf("  VIOLATION: %" PRIu64 " sem client processes did not exit\n", hung);
  free_events();
  munmap(L, sizeof *L);
  return M.orphans + M.idles + after + hung;
}
