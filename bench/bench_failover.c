/*
 * Failover recovery and what a failover costs (not part of bench/run.sh's
 * default set: `bench/run.sh bench_failover`, or `bench_failover [ROUNDS]`
 * alone).
 *
 * On a private Redis Cluster (3 masters + 1 replica each, node timeout
 * 1000 ms), a private Sentinel set (master, replica, 3 sentinels,
 * down-after 1000 ms), a single Redis with appendfsync everysec and one
 * without persistence (it restarts empty: the record alone restores), all
 * from bench/topology.sh and pinned to the server CPU, two workloads run on
 * this process's event loop, with the clients' default options:
 *  - the 2-permit semaphore "fo": a keeper (its own client) holds one
 *    permit all along (renewed; asked again if it is lost), so that every
 *    failover has a permit held across it that the new node must keep or
 *    the record restore; two holders (each its own client) share the other:
 *    each blocks in sluice_sem_acquire, holds a permit HOLD_MS, releases it
 *    and asks again, so the permit goes back and forth. A success is a
 *    grant to the second ("the waiter"). A hold lasts from the grant to the
 *    release, or to the permit's lost callback; the two holders' holds
 *    overlapping while the keeper holds too (three holds of two permits)
 *    broke the semaphore's promise, and are counted with how long;
 *  - a producer pushes one message of delay 0 every PUSH_MS to queue "fo"
 *    under ids of its own ("p<n>"), and a consumer takes and acks them. An
 *    acknowledged push never delivered by the end is lost; a message
 *    delivered more than once is a duplicate.
 * On the cluster both names carry the hash tag {fo}, so one master holds
 * both, and that master is the one failed over (failover_driver.c: a
 * child process acts ROUNDS times per kind while the loop goes on).
 *
 * Recovery of a round = the longest stretch without a success from the last
 * success before the driver acted to the first success after the new master
 * answered ROLE master (the single Redis: PING after its restart);
 * detection = from the driver's act to that answer. Each round also counts
 * what the clients' record of unreplicated writes did (sluice_client_metrics:
 * writes sent again, permits restored or lost), from one round's start to
 * the next.
 *
 * SLUICE_BENCH_LOG=1 prints every client's log on stderr, and every overlap;
 * SLUICE_BENCH_WAIT_REPLICAS=N runs every client with wait_replicas = N;
 * SLUICE_BENCH_REPLAY_OFF=1 with replay_off (to see the difference);
 * SLUICE_BENCH_ONLY=cluster|sentinel|single|bare runs that topology alone,
 * SLUICE_BENCH_KIND=TEXT only the kind whose name contains TEXT (SIGKILL).
 */
#include "bench.h"

#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <event2/event.h>
#include <sluice/sluice.h>

#include "failover_driver.h"

#define DEFAULT_ROUNDS 3
#define HOLD_MS 50
#define PUSH_MS 20
#define RETRY_MS 10
#define TAIL_MS 15000     /* after the last round: more than an acquire's timeout */
#define ATTRIBUTE_MS 2000 /* what happened this long before a round is the round's */
#define MAX_ROUNDS 64
#define RECORD_WINDOW_MS 3000 /* replay_window_ms's default: the record without replicas */
#define NAME FO_SLOT_NAME
#define NCLIENTS 5 /* holder, waiter, keeper, producer, consumer */

static int env_on(const char *name) {
  const char *v = getenv(name);
  return v && *v == '1';
}

/* ---- what a phase records --------------------------------------------------- */

typedef struct times {
  uint64_t *v;
  size_t n, cap;
} times;

static void times_add(times *t, uint64_t us) {
  if (t->n == t->cap) {
    t->cap = t->cap ? t->cap * 2 : 4096;
    t->v = realloc(t->v, t->cap * sizeof *t->v);
    if (!t->v) exit(1);
  }
  t->v[t->n++] = us;
}

/* The clients' record counters, summed. */
typedef struct kept {
  uint64_t releases, pushes, restored, permits_restored, permits_lost;
} kept;

typedef struct round {
  int kind;
  uint64_t trigger, done; /* done 0: no end line (yet) */
  kept at_start;
} round;

/* One message pushed: when it was sent, acknowledged (0: not OK) and first
 * delivered (0: never), how often it was delivered. */
typedef struct pushed {
  uint64_t sent, acked, delivered_at;
  unsigned delivered;
  int status;
} pushed;

typedef struct holder {
  struct run *r;
  sluice_sem *sem;
  sluice_permit *held;
  uint64_t since; /* the hold's start; 0 when none is open */
  times spans;    /* closed holds: start, end pairs */
  struct event *release_ev, *retry_ev;
  int waiter; /* the one whose grants are the successes */
  int keeper; /* holds until its permit is lost */
} holder;

typedef struct run {
  struct event_base *base;
  sluice_client *clients[NCLIENTS];
  holder h[3]; /* holder, waiter, keeper */
  sluice_dq *dq;
  struct event *push_ev, *pipe_ev;
  times sem_ok, dq_ok;
  pushed *msgs;
  size_t nmsgs, capmsgs;
  long errors;
  round rounds[MAX_ROUNDS];
  int nrounds, stopping;
  char line[128];
  size_t linelen;
} run;

static kept kept_now(const run *r) {
  kept k = {0};
  for (int i = 0; i < NCLIENTS; i++) {
    sluice_client_metrics m;
    sluice_client_get_metrics(r->clients[i], &m);
    k.releases += m.replay_releases;
    k.pushes += m.replay_pushes;
    k.restored += m.replay_restored;
    k.permits_restored += m.permits_restored;
    k.permits_lost += m.permits_lost;
  }
  return k;
}

static void say(const char *what, int status) {
  if (env_on("SLUICE_BENCH_LOG"))
    fprintf(stderr, "%.3f %s: %s\n", (double)bench_now_us() / 1e6, what, sluice_err_name(status));
}

/* ---- the semaphore's two holders -------------------------------------------- */

static void hold_acquire(holder *h);

static void end_hold(holder *h) {
  if (!h->since) return;
  times_add(&h->spans, h->since);
  times_add(&h->spans, bench_now_us());
  h->since = 0;
}

static void on_lost(sluice_permit *p, int reason, void *ud) {
  holder *h = ud;
  struct timeval tv = {0, RETRY_MS * 1000};
  end_hold(h);
  if (!h->keeper) return; /* its release timer is due anyway */
  h->held = NULL;
  say("keeper lost its permit", SLUICE_OK);
  evtimer_add(h->retry_ev, &tv);
}

static void on_granted(sluice_sem *sem, int status, sluice_permit *p, void *ud) {
  holder *h = ud;
  struct timeval tv = {0, (status == SLUICE_OK ? HOLD_MS : RETRY_MS) * 1000};
  if (status == SLUICE_ECANCELED) return;
  if (status == SLUICE_OK) {
    h->held = p;
    h->since = bench_now_us();
    sluice_permit_set_lost_cb(p, on_lost, h);
    if (h->waiter) times_add(&h->r->sem_ok, h->since);
  } else {
    h->r->errors++;
    say(h->waiter ? "waiter acquire failed" : "holder acquire failed", status);
  }
  if (status != SLUICE_OK || !h->keeper)
    evtimer_add(status == SLUICE_OK ? h->release_ev : h->retry_ev, &tv);
}

static void hold_release(evutil_socket_t fd, short what, void *arg) {
  holder *h = arg;
  end_hold(h);
  if (h->held) sluice_permit_release(h->held, NULL, NULL);
  h->held = NULL;
  hold_acquire(h);
}

static void hold_retry(evutil_socket_t fd, short what, void *arg) { hold_acquire(arg); }

static void hold_acquire(holder *h) {
  if (h->r->stopping) return;
  if (sluice_sem_acquire(h->sem, 10000, on_granted, h, NULL) != SLUICE_OK) {
    struct timeval tv = {0, RETRY_MS * 1000};
    h->r->errors++;
    evtimer_add(h->retry_ev, &tv);
  }
}

/* ---- the queue's producer and consumer --------------------------------------- */

static void on_pushed(sluice_dq *dq, int status, const char *id, int64_t due, void *ud) {
  run *r = ud;
  size_t seq = strtoul(id + 1, NULL, 10);
  if (seq < r->nmsgs) {
    r->msgs[seq].status = status;
    if (status == SLUICE_OK) r->msgs[seq].acked = bench_now_us();
  }
  if (status != SLUICE_OK) {
    r->errors++;
    say("push failed", status);
  }
}

static void push_tick(evutil_socket_t fd, short what, void *arg) {
  run *r = arg;
  if (r->nmsgs == r->capmsgs) {
    r->capmsgs = r->capmsgs ? 2 * r->capmsgs : 8192;
    r->msgs = realloc(r->msgs, r->capmsgs * sizeof *r->msgs);
    if (!r->msgs) exit(1);
  }
  char id[24];
  snprintf(id, sizeof id, "p%zu", r->nmsgs);
  r->msgs[r->nmsgs] = (pushed){bench_now_us(), 0, 0, 0, 1};
  sluice_dq_item item = {"tick", 4, 0, 0, id};
  if (sluice_dq_push(r->dq, &item, on_pushed, r) != SLUICE_OK) r->errors++;
  r->nmsgs++;
}

static void on_msg(sluice_dq_consumer *con, sluice_dq_msg *m, void *ud) {
  run *r = ud;
  size_t seq = strtoul(sluice_dq_msg_id(m) + 1, NULL, 10);
  uint64_t now = bench_now_us();
  if (seq < r->nmsgs && !r->msgs[seq].delivered++) r->msgs[seq].delivered_at = now;
  times_add(&r->dq_ok, now);
  sluice_dq_ack(m, NULL, NULL);
}

/* ---- the driver's lines ---------------------------------------------------------- */

static void on_line(run *r, const char *line) {
  unsigned long long t, d;
  int k;
  if (sscanf(line, "start %d %llu", &k, &t) == 2 && r->nrounds < MAX_ROUNDS)
    r->rounds[r->nrounds++] = (round){k, t, 0, kept_now(r)};
  else if (sscanf(line, "end %d %llu %llu", &k, &t, &d) == 3 && r->nrounds > 0)
    r->rounds[r->nrounds - 1].done = d;
}

/* EOF ends the driver's part of the phase. The pipe stays readable at
 * EOF: still watched, it would end the tail at its first turn too. */
static void on_pipe(evutil_socket_t fd, short what, void *arg) {
  run *r = arg;
  char buf[256];
  ssize_t n = read(fd, buf, sizeof buf);
  if (n < 0 && errno == EINTR) return;
  if (n <= 0) {
    event_del(r->pipe_ev);
    event_base_loopbreak(r->base);
    return;
  }
  for (ssize_t i = 0; i < n; i++) {
    if (buf[i] != '\n') {
      if (r->linelen + 1 < sizeof r->line) r->line[r->linelen++] = buf[i];
      continue;
    }
    r->line[r->linelen] = '\0';
    r->linelen = 0;
    on_line(r, r->line);
  }
}

/* ---- accounting -------------------------------------------------------------------- */

/* Per kind, over its rounds. */
typedef struct stats {
  bench_lat *sem, *dq, *detect, *overlap;
  long acked, lost, lost_old, dups, doubt, overlaps, errors;
  double wait_max;     /* ms, the longest wait for a delivery (wait_ms) */
  double overlap_past; /* ms, the latest end of an overlap after the new master answered */
  kept k;
  double sem_normal, dq_normal; /* median spacing of successes over the phase */
  int rounds;
} stats;

/* Longest stretch without a success from the last one at or before the
 * trigger to the first one after done (successes may go on for a while
 * between the two, e.g. before a CLUSTER FAILOVER pauses the old master);
 * -1 when none came after done before `until`. */
static double recovery_ms(const times *t, const round *rd, uint64_t until) {
  size_t i = 0;
  while (i + 1 < t->n && t->v[i + 1] <= rd->trigger) i++;
  if (t->n == 0 || t->v[i] > rd->trigger) return -1;
  uint64_t gap = 0;
  for (; i + 1 < t->n && t->v[i + 1] <= until; i++) {
    if (t->v[i + 1] - t->v[i] > gap) gap = t->v[i + 1] - t->v[i];
    if (t->v[i + 1] > rd->done) return (double)gap / 1000;
  }
  return -1;
}

/* The round an event at `at` belongs to: the last one that started less
 * than ATTRIBUTE_MS after it; -1 before the first. */
static int round_of(const run *r, uint64_t at) {
  int k = -1;
  for (int i = 0; i < r->nrounds; i++)
    if (r->rounds[i].trigger <= at + ATTRIBUTE_MS * 1000ull) k = i;
  return k;
}

static uint64_t max_u64(uint64_t a, uint64_t b) { return a > b ? a : b; }
static uint64_t min_u64(uint64_t a, uint64_t b) { return a < b ? a : b; }

/* How long an acknowledged message waited for its first delivery (never
 * delivered: until `end`) once both it was acknowledged and the new master
 * was known up: a push that the consumer did not hear of waits seconds,
 * where the next push would otherwise hide it. */
static double wait_ms(const pushed *m, const round *rd, uint64_t end) {
  uint64_t from = max_u64(m->acked, rd->done ? rd->done : rd->trigger);
  uint64_t to = m->delivered ? m->delivered_at : end;
  return to > from ? (double)(to - from) / 1000 : 0;
}

static void count_pushes(const run *r, stats st[FO_NKINDS], uint64_t end) {
  for (size_t i = 0; i < r->nmsgs; i++) {
    const pushed *m = &r->msgs[i];
    int k = round_of(r, m->sent);
    if (k < 0) continue;
    stats *s = &st[r->rounds[k].kind];
    double w = m->acked ? wait_ms(m, &r->rounds[k], end) : 0;
    if (w > s->wait_max) s->wait_max = w;
    if (m->acked) s->acked++;
    if (m->acked && !m->delivered) s->lost++;
    if (m->acked && !m->delivered && m->acked + RECORD_WINDOW_MS * 1000ull < r->rounds[k].trigger)
      s->lost_old++;
    if (m->delivered > 1) s->dups += m->delivered - 1;
    if (m->status == SLUICE_EINDOUBT) s->doubt++;
  }
}

/* Every stretch where a hold of each holder and one of the keeper overlap
 * (the keeper's spans are few: it holds across rounds). */
static void count_overlaps(const run *r, stats st[FO_NKINDS]) {
  const times *a = &r->h[0].spans, *b = &r->h[1].spans, *c = &r->h[2].spans;
  for (size_t i = 0; i + 1 < a->n; i += 2)
    for (size_t j = 0; j + 1 < b->n; j += 2)
      for (size_t l = 0; l + 1 < c->n; l += 2) {
        uint64_t from = max_u64(max_u64(a->v[i], b->v[j]), c->v[l]);
        uint64_t to = min_u64(min_u64(a->v[i + 1], b->v[j + 1]), c->v[l + 1]);
        if (from >= to) continue;
        int k = round_of(r, from);
        if (k < 0) continue;
        stats *s = &st[r->rounds[k].kind];
        uint64_t done = r->rounds[k].done;
        if (env_on("SLUICE_BENCH_LOG"))
          fprintf(stderr, "%.3f overlap until %.3f (the new master answered at %.3f)\n",
                  (double)from / 1e6, (double)to / 1e6, (double)done / 1e6);
        s->overlaps++;
        bench_lat_add(s->overlap, (double)(to - from) / 1000);
        if (done && to > done && (double)(to - done) / 1000 > s->overlap_past)
          s->overlap_past = (double)(to - done) / 1000;
      }
}

static void kept_add(kept *to, const kept *a, const kept *b) { /* to += a - b */
  to->releases += a->releases - b->releases;
  to->pushes += a->pushes - b->pushes;
  to->restored += a->restored - b->restored;
  to->permits_restored += a->permits_restored - b->permits_restored;
  to->permits_lost += a->permits_lost - b->permits_lost;
}

static double median_spacing(const times *t) {
  bench_lat *l = bench_lat_new();
  for (size_t i = 0; i + 1 < t->n; i++) bench_lat_add(l, (double)(t->v[i + 1] - t->v[i]) / 1000);
  double m = bench_lat_pct(l, 50);
  bench_lat_free(l);
  return m;
}

static void account(run *r, stats st[FO_NKINDS]) {
  kept end = kept_now(r);
  for (int i = 0; i < r->nrounds; i++) {
    const round *rd = &r->rounds[i];
    stats *s = &st[rd->kind];
    s->rounds++;
    uint64_t until = i + 1 < r->nrounds ? r->rounds[i + 1].trigger : UINT64_MAX;
    bench_lat_add(s->sem, recovery_ms(&r->sem_ok, rd, until));
    bench_lat_add(s->dq, recovery_ms(&r->dq_ok, rd, until));
    bench_lat_add(s->detect, rd->done ? (double)(rd->done - rd->trigger) / 1000 : -1);
    kept_add(&s->k, i + 1 < r->nrounds ? &r->rounds[i + 1].at_start : &end, &rd->at_start);
    s->sem_normal = median_spacing(&r->sem_ok);
    s->dq_normal = median_spacing(&r->dq_ok);
    s->errors = r->errors;
  }
  count_pushes(r, st, bench_now_us());
  count_overlaps(r, st);
}

/* ---- one phase ------------------------------------------------------------------ */

/* SLUICE_BENCH_LOG=1: every client's log on stderr, to see a slow round. */
static void print_log(sluice_client *c, int level, const char *msg, void *ud) {
  fprintf(stderr, "%.3f %s %s: %s\n", (double)bench_now_us() / 1e6, (const char *)ud,
          sluice_log_level_name(level), msg);
}

static sluice_client *client_at(struct event_base *base, const char *url, const char *who) {
  sluice_client_options o;
  sluice_client *c = NULL;
  sluice_client_options_init(&o);
  o.url = url;
  const char *wait = getenv("SLUICE_BENCH_WAIT_REPLICAS");
  if (wait && atoi(wait) > 0) o.wait_replicas = (unsigned)atoi(wait);
  o.replay_off = env_on("SLUICE_BENCH_REPLAY_OFF");
  if (sluice_client_new(base, &o, &c) != SLUICE_OK) {
    fprintf(stderr, "bench_failover: %s: %s\n", url, sluice_client_last_error(NULL));
    exit(1);
  }
  if (env_on("SLUICE_BENCH_LOG")) sluice_client_set_log_cb(c, print_log, (void *)who);
  return c;
}

static int run_open(run *r, const char *url, int out_fd, sluice_dq_consumer **con) {
  static const char *const who[NCLIENTS] = {"holder", "waiter", "keeper", "producer", "consumer"};
  struct event_config *cfg = event_config_new();
  event_config_set_flag(cfg, EVENT_BASE_FLAG_PRECISE_TIMER);
  r->base = event_base_new_with_config(cfg);
  event_config_free(cfg);
  for (int i = 0; i < NCLIENTS; i++) r->clients[i] = client_at(r->base, url, who[i]);
  sluice_sem_options so;
  sluice_sem_options_init(&so);
  so.permits = 2; /* the keeper's and the one passed around; default lease (30 s) */
  for (int i = 0; i < 3; i++) {
    holder *h = &r->h[i];
    h->r = r;
    h->waiter = i == 1;
    h->keeper = i == 2;
    h->release_ev = evtimer_new(r->base, hold_release, h);
    h->retry_ev = evtimer_new(r->base, hold_retry, h);
    if (sluice_sem_new(r->clients[i], NAME, &so, &h->sem) != SLUICE_OK) return -1;
  }
  if (sluice_dq_new(r->clients[3], NAME, NULL, &r->dq) != SLUICE_OK ||
      sluice_dq_consumer_new(r->clients[4], NAME, NULL, on_msg, r, con) != SLUICE_OK)
    return -1;
  r->push_ev = event_new(r->base, -1, EV_PERSIST, push_tick, r);
  r->pipe_ev = event_new(r->base, out_fd, EV_READ | EV_PERSIST, on_pipe, r);
  struct timeval tick = {0, PUSH_MS * 1000};
  event_add(r->push_ev, &tick);
  event_add(r->pipe_ev, NULL);
  for (int i = 0; i < 3; i++) hold_acquire(&r->h[i]);
  return 0;
}

/* Freeing a semaphore returns and frees its permits: no timer may touch
 * them afterwards. */
static void run_close(run *r, sluice_dq_consumer *con) {
  r->stopping = 1;
  event_del(r->push_ev);
  event_del(r->pipe_ev);
  for (int i = 0; i < 3; i++) {
    event_del(r->h[i].release_ev);
    event_del(r->h[i].retry_ev);
    r->h[i].held = NULL;
    sluice_sem_free(r->h[i].sem);
  }
  sluice_dq_consumer_free(con);
  sluice_dq_free(r->dq);
  for (int i = 0; i < NCLIENTS; i++) sluice_client_free(r->clients[i]);
  struct timeval drain = {1, 0};
  event_base_loopexit(r->base, &drain);
  event_base_dispatch(r->base);
  for (int i = 0; i < 3; i++) {
    event_free(r->h[i].release_ev);
    event_free(r->h[i].retry_ev);
    free(r->h[i].spans.v);
  }
  event_free(r->push_ev);
  event_free(r->pipe_ev);
  event_base_free(r->base);
  free(r->sem_ok.v);
  free(r->dq_ok.v);
  free(r->msgs);
}

/* One topology: the workloads on url while the driver fails it over. */
static int phase(const char *url, const char *spec, enum fo_kind first, enum fo_kind last,
                 int rounds, stats st[FO_NKINDS]) {
  int go[2], out[2];
  if (pipe(go) != 0 || pipe(out) != 0) return -1;
  fflush(NULL);
  pid_t pid = fork();
  if (pid == 0) {
    close(go[1]);
    close(out[0]);
    fo_driver(go[0], out[1], spec, first, last, rounds);
  }
  close(go[0]);
  close(out[1]);
  run *r = calloc(1, sizeof *r);
  sluice_dq_consumer *con = NULL;
  if (!r || run_open(r, url, out[0], &con) != 0) return -1;
  /* Two quiet seconds first: the normal rhythm, then the driver starts. */
  struct timeval warm = {2, 0};
  event_base_loopexit(r->base, &warm);
  event_base_dispatch(r->base);
  if (write(go[1], "g", 1) != 1) return -1;
  event_base_dispatch(r->base); /* until the driver's pipe closes */
  event_del(r->push_ev);        /* the tail: what was pushed gets delivered */
  struct timeval tail = {TAIL_MS / 1000, 0};
  event_base_loopexit(r->base, &tail);
  event_base_dispatch(r->base);
  int wst = 0;
  waitpid(pid, &wst, 0);
  r->stopping = 1;
  end_hold(&r->h[2]); /* the keeper's hold ends with the run */
  account(r, st);
  run_close(r, con);
  free(r);
  close(out[0]);
  close(go[1]);
  return WIFEXITED(wst) && WEXITSTATUS(wst) == 0 ? 0 : -1;
}

/* ---- topologies ------------------------------------------------------------ */

static const struct topology {
  const char *name, *what, *args, *url;
  enum fo_kind first, last;
} topologies[] = {
    {"cluster", "cluster (3 masters + 1 replica each)", "cluster '%s/c' 3 1", "redis+cluster://%s",
     FO_CLUSTER_MANUAL, FO_CLUSTER_SIGKILL},
    {"sentinel", "Sentinel set (master, replica, 3 sentinels)", "sentinel '%s/s' " FO_MASTER_NAME,
     "redis+sentinel://%s/" FO_MASTER_NAME, FO_SENTINEL_MANUAL, FO_SENTINEL_SIGKILL},
    {"single", "one Redis (appendonly yes, appendfsync everysec)", "single '%s/n'", "redis://%s",
     FO_SINGLE_RESTART, FO_SINGLE_RESTART},
    {"bare", "one Redis (no persistence)", "single '%s/n' bare", "redis://%s", FO_SINGLE_EMPTY,
     FO_SINGLE_EMPTY},
};

/* SLUICE_BENCH_KIND=TEXT: of a topology's kinds, only the first whose name
 * contains TEXT (all of them when none does). */
static void only_kind(enum fo_kind *first, enum fo_kind *last) {
  const char *want = getenv("SLUICE_BENCH_KIND");
  for (int k = *first; want && *want && k <= (int)*last; k++)
    if (strstr(fo_kind_names[k], want)) {
      *first = *last = (enum fo_kind)k;
      return;
    }
}

static int run_topology(const struct topology *t, int rounds, stats st[FO_NKINDS]) {
  char spec[256], url[320];
  int rc = fo_topology_start("fo", t->args, spec, sizeof spec);
  if (rc == 0) {
    snprintf(url, sizeof url, t->url, spec);
    printf("%s: %s\n", t->what, url);
    fflush(stdout);
    enum fo_kind first = t->first, last = t->last;
    only_kind(&first, &last);
    rc = phase(url, spec, first, last, rounds, st);
  }
  fo_topology_stop();
  return rc;
}

/* ---- report ------------------------------------------------------------------- */

static void print_recovery(stats st[FO_NKINDS]) {
  static const char *const cols[] = {"failover", "rounds", "detect p50", "sem p50",
                                     "sem max",  "dq p50", "dq max",     NULL};
  bench_table *t = bench_table_new(
      "recovery (ms): detect = the act to the new master's answer; sem (the waiter), dq (the "
      "consumer) = last success before -> first success after",
      cols);
  for (int k = 0; k < FO_NKINDS; k++)
    if (st[k].rounds)
      bench_table_row(t, "%s|%d|%.0f|%.0f|%.0f|%.0f|%.0f", fo_kind_names[k], st[k].rounds,
                      bench_lat_pct(st[k].detect, 50), bench_lat_pct(st[k].sem, 50),
                      bench_lat_max(st[k].sem), bench_lat_pct(st[k].dq, 50),
                      bench_lat_max(st[k].dq));
  bench_table_print(t, stdout);
  bench_table_free(t);
}

static void print_kept(stats st[FO_NKINDS]) {
  static const char *const cols[] = {
      "failover",          "pushes acked",     "lost",         "of them old", "dups",
      "in doubt",          "permits restored", "permits lost", "overlaps",    "overlap max ms",
      "past detection ms", "sent again",       "wait max ms",  NULL};
  bench_table *t = bench_table_new(
      "what the failovers cost (all rounds of a kind); old: acknowledged more than the record's "
      "window (3 s, without replicas) before the act; sent again: releases / pushes, of them "
      "missing on the new node; past detection: the latest an overlap ended after the new master "
      "answered; wait max: the longest an acknowledged push waited for its first delivery once "
      "it was acknowledged and the new master answered",
      cols);
  for (int k = 0; k < FO_NKINDS; k++) {
    const stats *s = &st[k];
    if (!s->rounds) continue;
    bench_table_row(t, "%s|%ld|%ld|%ld|%ld|%ld|%llu|%llu|%ld|%.0f|%.0f|%llu / %llu, %llu|%.0f",
                    fo_kind_names[k], s->acked, s->lost, s->lost_old, s->dups, s->doubt,
                    (unsigned long long)s->k.permits_restored,
                    (unsigned long long)s->k.permits_lost, s->overlaps,
                    s->overlaps ? bench_lat_max(s->overlap) : 0.0, s->overlap_past,
                    (unsigned long long)s->k.releases, (unsigned long long)s->k.pushes,
                    (unsigned long long)s->k.restored, s->wait_max);
  }
  bench_table_print(t, stdout);
  bench_table_free(t);
}

int main(int argc, char **argv) {
  int rounds = argc > 1 ? atoi(argv[1]) : DEFAULT_ROUNDS;
  if (rounds < 1 || rounds > 16) {
    fprintf(stderr, "usage: bench_failover [ROUNDS 1..16]\n");
    return 2;
  }
  signal(SIGPIPE, SIG_IGN);
  if (bench_can_pin()) bench_pin_self(BENCH_CPU_CLIENT);
  const char *wait = getenv("SLUICE_BENCH_WAIT_REPLICAS");
  printf(
      "failover recovery: %d rounds per kind; a 2-permit semaphore, one permit kept by a "
      "keeper, the other passed between two holders (%d ms each), a push every %d ms; "
      "wait_replicas %d, replay %s; pinning %s\n",
      rounds, HOLD_MS, PUSH_MS, wait ? atoi(wait) : 0,
      env_on("SLUICE_BENCH_REPLAY_OFF") ? "off" : "on (default)",
      bench_can_pin() ? "on (servers CPU 0, client CPU 1)" : "off");
  stats st[FO_NKINDS];
  for (int k = 0; k < FO_NKINDS; k++) {
    memset(&st[k], 0, sizeof st[k]);
    st[k].sem = bench_lat_new();
    st[k].dq = bench_lat_new();
    st[k].detect = bench_lat_new();
    st[k].overlap = bench_lat_new();
  }
  int rc = 0;
  const char *only = getenv("SLUICE_BENCH_ONLY");
  for (size_t i = 0; i < sizeof topologies / sizeof topologies[0]; i++)
    if ((!only || strcmp(only, topologies[i].name) == 0) &&
        run_topology(&topologies[i], rounds, st) != 0)
      rc = -1;
  print_recovery(st);
  print_kept(st);
  for (size_t i = 0; i < sizeof topologies / sizeof topologies[0]; i++) {
    const stats *s = &st[topologies[i].first];
    if (s->rounds)
      printf(
          "%s: normal spacing (median) %.1f ms between the waiter's grants, %.1f ms between "
          "deliveries; %ld operations failed\n",
          topologies[i].what, s->sem_normal, s->dq_normal, s->errors);
  }
  printf("(-1: no success after the new master before the next round, or %d s after the last)\n",
         TAIL_MS / 1000);
  for (int k = 0; k < FO_NKINDS; k++) {
    bench_lat_free(st[k].sem);
    bench_lat_free(st[k].dq);
    bench_lat_free(st[k].detect);
    bench_lat_free(st[k].overlap);
  }
  return rc == 0 ? 0 : 1;
}
