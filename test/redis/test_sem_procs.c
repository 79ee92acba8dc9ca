/* Semaphore invariants across processes: many contending processes checking
 * the holder count from inside their critical sections, holders killed with
 * SIGKILL, connections killed with CLIENT KILL while leases race expiry, and
 * FIFO order of a fair semaphore across processes. */
#include <signal.h>
#include <stdatomic.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "sem_util.h"

/* Shared between the processes of one case. */
typedef struct shared {
  atomic_int holders; /* inside a critical section right now */
  atomic_int max_holders;
  atomic_int violations;
  atomic_int grants;
  atomic_int losses;
  atomic_int order[16];
  atomic_int norder;
  atomic_uint_fast64_t fences[4096];
  atomic_int nfences;
} shared;

static shared *sh;

static void shared_init(void) {
  sh = mmap(NULL, sizeof *sh, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  TH_ASSERT(sh != MAP_FAILED);
  memset(sh, 0, sizeof *sh);
}

static void shared_done(void) { munmap(sh, sizeof *sh); }

static void enter_critical(unsigned permits) {
  int n = atomic_fetch_add(&sh->holders, 1) + 1;
  if (n > (int)permits) atomic_fetch_add(&sh->violations, 1);
  int m = atomic_load(&sh->max_holders);
  while (n > m && !atomic_compare_exchange_weak(&sh->max_holders, &m, n)) {}
  atomic_fetch_add(&sh->grants, 1);
}

static void leave_critical(void) { atomic_fetch_sub(&sh->holders, 1); }

/* ---- one contending worker process --------------------------------------- */

typedef struct worker worker;
typedef struct slot {
  worker *w;
  sluice_permit *permit;
  struct event *timer;
  int lost;
} slot;

struct worker {
  struct event_base *base;
  sluice_sem *sem;
  unsigned permits;
  int remaining; /* grants still to obtain */
  int active;    /* slots still looping */
  unsigned max_hold_ms;
  int errors;
};

static void slot_next(slot *s);

static void on_lost(sluice_permit *p, int reason, void *ud) {
  slot *s = ud;
  /* From now on we must assume someone else may hold it. */
  s->lost = 1;
  leave_critical();
  atomic_fetch_add(&sh->losses, 1);
}

static void hold_done(evutil_socket_t fd, short what, void *ud) {
  slot *s = ud;
  if (!s->lost) leave_critical();
  sluice_permit_release(s->permit, NULL, NULL);
  s->permit = NULL;
  slot_next(s);
}

static void on_acquired(sluice_sem *sem, int status, sluice_permit *p, void *ud) {
  slot *s = ud;
  worker *w = s->w;
  if (status != SLUICE_OK) {
    /* Timeouts and connection errors are legitimate under chaos: retry. */
    if (status != SLUICE_ETIMEDOUT && status != SLUICE_ECONNECTION) w->errors++;
    slot_next(s);
    return;
  }
  w->remaining--;
  enter_critical(w->permits);
  int i = atomic_fetch_add(&sh->nfences, 1);
  if (i < 4096) sh->fences[i] = sluice_permit_fence(p);
  s->permit = p;
  s->lost = 0;
  sluice_permit_set_lost_cb(p, on_lost, s);
  unsigned hold = w->max_hold_ms ? (unsigned)rand() % w->max_hold_ms : 0;
  struct timeval tv = {hold / 1000, (hold % 1000) * 1000};
  evtimer_add(s->timer, &tv);
}

static void slot_next(slot *s) {
  worker *w = s->w;
  if (w->remaining <= 0) {
    w->active--;
    return;
  }
  if (sluice_sem_acquire(w->sem, 3000, on_acquired, s, NULL) != 0) {
    w->errors++;
    w->active--;
  }
}

/* Runs in a child: `concurrency` loops acquiring `total` permits in all. */
static int run_worker(unsigned permits, unsigned ttl, int concurrency, int total,
                      unsigned max_hold_ms) {
  worker w = {0};
  srand((unsigned)getpid());
  w.base = event_base_new();
  sluice_client *c = sem_test_client(w.base);
  w.sem = sem_test_new(c, "stress", permits, ttl, 0);
  w.permits = permits;
  w.remaining = total;
  w.max_hold_ms = max_hold_ms;
  slot *slots = calloc((size_t)concurrency, sizeof *slots);
  w.active = concurrency;
  for (int i = 0; i < concurrency; i++) {
    slots[i].w = &w;
    slots[i].timer = evtimer_new(w.base, hold_done, &slots[i]);
    slot_next(&slots[i]);
  }
  uint64_t end = th_now_ms() + 90000;
  while (w.active > 0 && th_now_ms() < end) event_base_loop(w.base, EVLOOP_ONCE);
  int ok = w.active == 0 && w.errors == 0;
  if (!ok) fprintf(stderr, "# worker %d: active %d errors %d\n", getpid(), w.active, w.errors);
  for (int i = 0; i < concurrency; i++) event_free(slots[i].timer);
  free(slots);
  sluice_sem_free(w.sem);
  th_free_client_and_loop(w.base, c, 5000);
  return ok ? 0 : 1;
}

static pid_t spawn_worker(unsigned permits, unsigned ttl, int concurrency, int total,
                          unsigned max_hold_ms) {
  pid_t pid = fork();
  TH_ASSERT(pid >= 0);
  if (pid == 0) _exit(run_worker(permits, ttl, concurrency, total, max_hold_ms));
  return pid;
}

static int wait_all(pid_t *pids, int n) {
  int bad = 0;
  for (int i = 0; i < n; i++) {
    int st;
    waitpid(pids[i], &st, 0);
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) bad++;
  }
  return bad;
}

static int fences_unique(void) {
  int n = atomic_load(&sh->nfences);
  if (n > 4096) n = 4096;
  for (int i = 0; i < n; i++)
    for (int j = i + 1; j < n; j++)
      if (sh->fences[i] == sh->fences[j]) return 0;
  return 1;
}

/* 8 processes x 32 concurrent acquirers, 3 permits, 2400 acquisitions. */
static void test_stress_many_processes(void) {
  enum { PROCS = 8, CONC = 32, EACH = 300, PERMITS = 3 };
  shared_init();
  pid_t pids[PROCS];
  for (int i = 0; i < PROCS; i++) pids[i] = spawn_worker(PERMITS, 5000, CONC, EACH, 2);
  TH_ASSERT_EQ(wait_all(pids, PROCS), 0);
  th_note("grants %d, max concurrent holders %d\n", atomic_load(&sh->grants),
          atomic_load(&sh->max_holders));
  TH_ASSERT_EQ(atomic_load(&sh->violations), 0);
  /* Loops stop once their process has its share; acquires already under
   * way may still be granted. */
  TH_ASSERT_CMP(atomic_load(&sh->grants), >=, PROCS * EACH);
  TH_ASSERT_EQ(atomic_load(&sh->max_holders), PERMITS); /* it was contended */
  TH_ASSERT_EQ(atomic_load(&sh->losses), 0);
  TH_ASSERT(fences_unique());
  TH_ASSERT_EQ(th_redis_int(&th_server, "ZCARD sluice:sem:{stress}:holders"), 0);
  TH_ASSERT_EQ(th_redis_int(&th_server, "ZCARD sluice:sem:{stress}:queue"), 0);
  shared_done();
}

/* Leases shorter than the holds (renewals must carry them) while the parent
 * keeps killing every client connection: renewals fail and race expiry,
 * holders that cannot confirm their lease give it up (UNCERTAIN), and the
 * count never exceeds the permits. */
static void test_client_kill_chaos(void) {
  enum { PROCS = 4, CONC = 8, EACH = 10, PERMITS = 2 };
  shared_init();
  pid_t pids[PROCS];
  for (int i = 0; i < PROCS; i++) pids[i] = spawn_worker(PERMITS, 400, CONC, EACH, 700);
  int kills = 0;
  for (;;) {
    int running = 0;
    for (int i = 0; i < PROCS; i++)
      if (pids[i] && waitpid(pids[i], NULL, WNOHANG) == 0) running++;
    if (!running) break;
    struct timespec ts = {0, 250 * 1000 * 1000};
    nanosleep(&ts, NULL);
    th_redis_kill_clients();
    kills++;
  }
  th_note("grants %d, losses %d, CLIENT KILLs %d, max holders %d\n", atomic_load(&sh->grants),
          atomic_load(&sh->losses), kills, atomic_load(&sh->max_holders));
  TH_ASSERT_EQ(atomic_load(&sh->violations), 0);
  TH_ASSERT_CMP(atomic_load(&sh->grants), >=, PROCS * EACH);
  TH_ASSERT(fences_unique());
  shared_done();
}

/* A holder process killed with SIGKILL: the waiter gets in at lease expiry. */
static void test_sigkill_holder(void) {
  int ready[2];
  TH_ASSERT_EQ(pipe(ready), 0);
  pid_t pid = fork();
  TH_ASSERT(pid >= 0);
  if (pid == 0) {
    struct event_base *base = event_base_new();
    sluice_client *c = sem_test_client(base);
    sluice_sem *s = sem_test_new(c, "k", 1, 700, 0);
    acq_result a = sem_try(base, s);
    if (a.status != SLUICE_OK) _exit(1);
    if (write(ready[1], "x", 1) != 1) _exit(1);
    for (;;) event_base_loop(base, EVLOOP_ONCE); /* renewing until killed */
  }
  char x;
  TH_ASSERT_EQ(read(ready[0], &x, 1), 1);
  struct event_base *base = event_base_new();
  sluice_client *c = sem_test_client(base);
  sluice_sem *s = sem_test_new(c, "k", 1, 700, 0);
  acq_result w = {0};
  TH_ASSERT_EQ(sluice_sem_acquire(s, 10000, acq_cb, &w, NULL), 0);
  th_loop_for(base, 1000); /* renewals keep the holder alive past its TTL */
  TH_ASSERT_EQ(w.done, 0);
  uint64_t t0 = th_now_ms();
  kill(pid, SIGKILL);
  waitpid(pid, NULL, 0);
  TH_ASSERT(th_loop_until(base, &w.done, 5000));
  TH_ASSERT_EQ(w.status, SLUICE_OK);
  TH_ASSERT_CMP(w.at_ms - t0, <, 1200); /* at most one TTL (+ slack) */
  sluice_permit_release(w.permit, NULL, NULL);
  sluice_sem_free(s);
  th_free_client_and_loop(base, c, 5000);
  close(ready[0]);
  close(ready[1]);
}

/* Fair mode: waiters in four processes are granted in arrival order. */
static void test_fair_fifo_across_processes(void) {
  enum { N = 4 };
  shared_init();
  struct event_base *base = event_base_new();
  sluice_client *c = sem_test_client(base);
  sluice_sem *s = sem_test_new(c, "f", 1, 5000, 1);
  acq_result holder = sem_hold(base, s);
  pid_t pids[N];
  for (int i = 0; i < N; i++) {
    pids[i] = fork();
    TH_ASSERT(pids[i] >= 0);
    if (pids[i] == 0) {
      struct event_base *b = event_base_new();
      sluice_client *cc = sem_test_client(b);
      sluice_sem *ss = sem_test_new(cc, "f", 1, 5000, 1);
      acq_result r = {0};
      if (sluice_sem_acquire(ss, 20000, acq_cb, &r, NULL) != 0) _exit(1);
      if (!th_loop_until(b, &r.done, 20000) || r.status != SLUICE_OK) _exit(2);
      sh->order[atomic_fetch_add(&sh->norder, 1)] = i;
      th_loop_for(b, 20);
      sluice_permit_release(r.permit, NULL, NULL);
      sluice_sem_free(ss);
      th_free_client_and_loop(b, cc, 5000);
      _exit(0);
    }
    /* Wait until this waiter is queued before starting the next. */
    uint64_t end = th_now_ms() + 5000;
    while (th_redis_int(&th_server, "ZCARD sluice:sem:{f}:queue") < i + 1 && th_now_ms() < end)
      th_loop_for(base, 5);
    TH_ASSERT_EQ(th_redis_int(&th_server, "ZCARD sluice:sem:{f}:queue"), i + 1);
  }
  sluice_permit_release(holder.permit, NULL, NULL);
  th_loop_for(base, 10);
  TH_ASSERT_EQ(wait_all(pids, N), 0);
  TH_ASSERT_EQ(atomic_load(&sh->norder), N);
  for (int i = 0; i < N; i++) TH_ASSERT_EQ(sh->order[i], i);
  sluice_sem_free(s);
  th_free_client_and_loop(base, c, 5000);
  shared_done();
}

static const th_case cases[] = {
    TH_CASE(stress_many_processes, 120),
    TH_CASE(client_kill_chaos, 120),
    TH_CASE(sigkill_holder, 60),
    TH_CASE(fair_fifo_across_processes, 60),
};
TH_MAIN(cases)
