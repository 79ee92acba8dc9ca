/*
 * What a client crash during a failover loses (not part of bench/run.sh's
 * default set: `bench/run.sh bench_crash`, or `bench_crash [ROUNDS]`).
 *
 * The record of unreplicated writes lives in the client's memory: a client
 * that dies during a failover takes it along. Here a producer, a child
 * process of its own (its own event loop and client, default options),
 * pushes one message of delay 0 every PUSH_MS to queue "fo" under ids of
 * its own ("g<round>.<n>") and writes each id to a pipe the moment its push
 * is acknowledged, and every SAMPLE_MS its record's size and oldest entry's
 * age. The driver of failover_driver.c fails the topology over ROUNDS times
 * per variant (the variants take turns), and this process
 *  - "kill at the act": SIGKILLs the producer when the driver acts;
 *  - "kill at promotion": SIGKILLs it when the new master first answers ROLE
 *    master, before the old master is restarted and before the clients'
 *    next look at the topology;
 *  - "control": leaves it alive (its record replays), and stops it (SIGTERM:
 *    it stops pushing and exits once its record is empty, 5 s at most)
 *    FINISH_MS after the driver's round ended.
 * A consumer in this process (default options, never killed) takes and acks
 * every message. Lost = acknowledged pushes never delivered by the end
 * (TAIL_MS after the last round): neither queued, in flight nor delivered on
 * the new master. The window = the producer's record at its death (the last
 * sample it wrote; the control: the sample last read at promotion). The
 * pushes acknowledged from the act to promotion are counted apart: on a
 * SENTINEL FAILOVER the old master still answers then.
 * A fresh producer starts FINISH_MS after each round's end.
 *
 * SLUICE_BENCH_ONLY=manual|sentinel|cluster runs that failover kind alone.
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
#define PUSH_MS 20
#define SAMPLE_MS 10
#define FINISH_MS 3000
#define TAIL_MS 10000
#define NAME FO_SLOT_NAME
#define NVARIANTS 3
#define MAX_GENS 64
#define LINE_CAP 128

enum variant { KILL_AT_ACT, KILL_AT_PROMOTION, CONTROL };
static const char *const variant_names[NVARIANTS] = {"kill at the act", "kill at promotion",
                                                     "control (not killed)"};

static void die(const char *what) {
  fprintf(stderr, "bench_crash: %s\n", what);
  exit(1);
}

/* ---- the producer (a child process) ------------------------------------------ */

typedef struct producer {
  struct event_base *base;
  sluice_client *client;
  sluice_dq *dq;
  struct event *push_ev, *sample_ev, *term_ev;
  int gen, fd, stopping;
  unsigned long seq;
  uint64_t stop_at;
} producer;

static void say_line(int fd, const char *line, int len) {
  if (write(fd, line, (size_t)len) != len) _exit(3); /* the parent is gone */
}

static void sample(producer *p) {
  sluice_client_metrics m;
  char line[80];
  sluice_client_get_metrics(p->client, &m);
  int n = snprintf(line, sizeof line, "r %d %zu %llu\n", p->gen, m.record_entries,
                   (unsigned long long)m.record_oldest_ms);
  say_line(p->fd, line, n);
}

static void on_pushed(sluice_dq *dq, int status, const char *id, int64_t due, void *ud) {
  producer *p = ud;
  char line[64];
  if (status != SLUICE_OK) return;
  int n = snprintf(line, sizeof line, "a %s %llu\n", id + 1, (unsigned long long)bench_now_us());
  say_line(p->fd, line, n);
  sample(p);
}

static void push_tick(evutil_socket_t fd, short what, void *arg) {
  producer *p = arg;
  char id[32];
  snprintf(id, sizeof id, "g%d.%lu", p->gen, p->seq++);
  sluice_dq_item item = {"tick", 4, 0, 0, id};
  sluice_dq_push(p->dq, &item, on_pushed, p);
}

/* Sampled every SAMPLE_MS; once stopping, exits when the record is empty. */
static void sample_tick(evutil_socket_t fd, short what, void *arg) {
  producer *p = arg;
  sluice_client_metrics m;
  sample(p);
  sluice_client_get_metrics(p->client, &m);
  if (p->stopping && (m.record_entries == 0 || bench_now_us() > p->stop_at)) _exit(0);
}

static void on_term(evutil_socket_t fd, short what, void *arg) {
  producer *p = arg;
  p->stopping = 1;
  p->stop_at = bench_now_us() + 5000000ull;
  event_del(p->push_ev);
}

static void producer_main(const char *url, int gen, int fd) {
  /* Not the parent's handlers: they stop the topology. */
  signal(SIGINT, SIG_DFL);
  signal(SIGTERM, SIG_DFL);
  signal(SIGSEGV, SIG_DFL);
  signal(SIGABRT, SIG_DFL);
  producer p = {.gen = gen, .fd = fd};
  sluice_client_options o;
  sluice_client_options_init(&o);
  o.url = url;
  p.base = event_base_new();
  if (!p.base || sluice_client_new(p.base, &o, &p.client) != SLUICE_OK ||
      sluice_dq_new(p.client, NAME, NULL, &p.dq) != SLUICE_OK)
    _exit(2);
  p.push_ev = event_new(p.base, -1, EV_PERSIST, push_tick, &p);
  p.sample_ev = event_new(p.base, -1, EV_PERSIST, sample_tick, &p);
  p.term_ev = evsignal_new(p.base, SIGTERM, on_term, &p);
  struct timeval push = {0, PUSH_MS * 1000}, every = {0, SAMPLE_MS * 1000};
  event_add(p.push_ev, &push);
  event_add(p.sample_ev, &every);
  event_add(p.term_ev, NULL);
  event_base_dispatch(p.base);
  _exit(0);
}

/* ---- this process: the consumer and the rounds -------------------------------- */

/* One push: when its acknowledgement was written (0: none), whether it came back. */
typedef struct slot {
  uint64_t acked_at;
  int delivered;
} slot;

/* One producer's life: its round, what it acknowledged and what came back. */
typedef struct gen {
  pid_t pid;
  int variant;
  uint64_t act_at, up_at; /* the driver's act, the new master's first answer */
  slot *slots;            /* by seq */
  size_t cap;
  size_t entries, oldest_ms;         /* its last sample */
  size_t win_entries, win_oldest_ms; /* the window: the record at its death */
  int killed;
} gen;

typedef struct run {
  struct event_base *base;
  const char *url;
  gen gens[MAX_GENS];
  int ngens, nrounds, total;
  int prod_fd[2];
  struct event *driver_ev, *prod_ev, *finish_ev;
  char dline[LINE_CAP], pline[LINE_CAP];
  size_t dlen, plen;
} run;

static slot *slot_of(gen *g, size_t seq) {
  if (seq >= g->cap) {
    size_t cap = g->cap ? g->cap : 1024;
    while (cap <= seq) cap *= 2;
    g->slots = realloc(g->slots, cap * sizeof *g->slots);
    if (!g->slots) die("out of memory");
    memset(g->slots + g->cap, 0, (cap - g->cap) * sizeof *g->slots);
    g->cap = cap;
  }
  return &g->slots[seq];
}

static void fork_producer(run *r) {
  if (r->ngens >= r->total) return;
  gen *g = &r->gens[r->ngens];
  g->variant = r->ngens % NVARIANTS;
  fflush(NULL);
  pid_t pid = fork();
  if (pid < 0) die("fork failed");
  if (pid == 0) producer_main(r->url, r->ngens, r->prod_fd[1]);
  g->pid = pid;
  r->ngens++;
}

static void kill_producer(gen *g) {
  kill(g->pid, SIGKILL);
  waitpid(g->pid, NULL, 0);
  g->killed = 1;
}

/* The producer of the round on: the last one forked. */
static gen *current(run *r) { return r->ngens ? &r->gens[r->ngens - 1] : NULL; }

static void on_driver_line(run *r, const char *line) {
  gen *g = current(r);
  int kind;
  unsigned long long t;
  if (!g) return;
  if (sscanf(line, "start %d %llu", &kind, &t) == 2) {
    g->act_at = t;
    if (g->variant == KILL_AT_ACT) kill_producer(g);
  }
  if (sscanf(line, "up %d %llu", &kind, &t) == 2) {
    g->up_at = t;
    if (g->variant == KILL_AT_PROMOTION) kill_producer(g);
    if (g->variant == CONTROL) {
      g->win_entries = g->entries;
      g->win_oldest_ms = g->oldest_ms;
    }
  }
  if (strncmp(line, "end ", 4) == 0) {
    struct timeval tv = {FINISH_MS / 1000, 0};
    r->nrounds++;
    evtimer_add(r->finish_ev, &tv);
  }
}

/* The control producer told to stop: it exits once its record is empty. */
static void stop_control(run *r) {
  gen *g = current(r);
  if (g && !g->killed) kill(g->pid, SIGTERM);
}

/* A round over: its producer stopped if alive, the next round's started. */
static void on_finish(evutil_socket_t fd, short what, void *arg) {
  run *r = arg;
  stop_control(r);
  fork_producer(r);
}

static void on_producer_line(run *r, const char *line) {
  int id;
  unsigned long seq;
  unsigned long long at;
  size_t entries, oldest;
  if (sscanf(line, "a %d.%lu %llu", &id, &seq, &at) == 3 && id >= 0 && id < r->ngens)
    slot_of(&r->gens[id], seq)->acked_at = at;
  else if (sscanf(line, "r %d %zu %zu", &id, &entries, &oldest) == 3 && id >= 0 && id < r->ngens) {
    gen *g = &r->gens[id];
    g->entries = entries;
    g->oldest_ms = oldest;
    if (g->variant != CONTROL) {
      g->win_entries = entries; /* its last sample ends up the one at its death */
      g->win_oldest_ms = oldest;
    }
  }
}

/* Lines from fd into buf; at EOF the loop breaks (the driver is done). */
static void read_lines(run *r, evutil_socket_t fd, struct event *ev, char *buf, size_t *len,
                       void (*on)(run *, const char *)) {
  char chunk[4096];
  ssize_t n = read(fd, chunk, sizeof chunk);
  if (n < 0 && errno == EINTR) return;
  if (n <= 0) {
    event_del(ev);
    event_base_loopbreak(r->base);
    return;
  }
  for (ssize_t i = 0; i < n; i++) {
    if (chunk[i] != '\n') {
      if (*len + 1 < LINE_CAP) buf[(*len)++] = chunk[i];
      continue;
    }
    buf[*len] = '\0';
    *len = 0;
    on(r, buf);
  }
}

static void on_driver(evutil_socket_t fd, short what, void *arg) {
  run *r = arg;
  read_lines(r, fd, r->driver_ev, r->dline, &r->dlen, on_driver_line);
}

static void on_producer(evutil_socket_t fd, short what, void *arg) {
  run *r = arg;
  read_lines(r, fd, r->prod_ev, r->pline, &r->plen, on_producer_line);
}

static void on_msg(sluice_dq_consumer *con, sluice_dq_msg *m, void *ud) {
  run *r = ud;
  int id;
  unsigned long seq;
  if (sscanf(sluice_dq_msg_id(m), "g%d.%lu", &id, &seq) == 2 && id >= 0 && id < r->ngens)
    slot_of(&r->gens[id], seq)->delivered = 1;
  sluice_dq_ack(m, NULL, NULL);
}

/* ---- accounting ------------------------------------------------------------------ */

typedef struct stats {
  int rounds;
  long acked, lost, during; /* during: acknowledged from the act to promotion */
  bench_lat *entries, *oldest;
  char lost_by_round[64];
} stats;

static void account(const run *r, int kind, stats st[FO_NKINDS][NVARIANTS]) {
  for (int i = 0; i < r->ngens && i < r->nrounds; i++) {
    const gen *g = &r->gens[i];
    stats *s = &st[kind][g->variant];
    long lost = 0;
    for (size_t q = 0; q < g->cap; q++) {
      const slot *sl = &g->slots[q];
      if (!sl->acked_at) continue;
      s->acked++;
      lost += !sl->delivered;
      s->during += sl->acked_at >= g->act_at && sl->acked_at <= g->up_at;
    }
    s->lost += lost;
    s->rounds++;
    size_t used = strlen(s->lost_by_round);
    snprintf(s->lost_by_round + used, sizeof s->lost_by_round - used, "%s%ld", used ? " " : "",
             lost);
    bench_lat_add(s->entries, (double)g->win_entries);
    bench_lat_add(s->oldest, (double)g->win_oldest_ms);
  }
}

/* ---- one failover kind on its topology -------------------------------------- */

static int phase(const char *url, const char *spec, enum fo_kind kind, int rounds,
                 stats st[FO_NKINDS][NVARIANTS]) {
  int go[2], out[2];
  if (pipe(go) != 0 || pipe(out) != 0) return -1;
  fflush(NULL);
  pid_t driver = fork();
  if (driver == 0) {
    close(go[1]);
    close(out[0]);
    fo_driver(go[0], out[1], spec, kind, kind, rounds * NVARIANTS);
  }
  close(go[0]);
  close(out[1]);
  run *r = calloc(1, sizeof *r);
  if (!r || pipe(r->prod_fd) != 0) return -1;
  r->url = url;
  r->total = rounds * NVARIANTS;
  r->base = event_base_new();
  sluice_client_options o;
  sluice_client_options_init(&o);
  o.url = url;
  sluice_client *c = NULL;
  sluice_dq_consumer *con = NULL;
  if (sluice_client_new(r->base, &o, &c) != SLUICE_OK ||
      sluice_dq_consumer_new(c, NAME, NULL, on_msg, r, &con) != SLUICE_OK)
    die(sluice_client_last_error(c));
  r->driver_ev = event_new(r->base, out[0], EV_READ | EV_PERSIST, on_driver, r);
  r->prod_ev = event_new(r->base, r->prod_fd[0], EV_READ | EV_PERSIST, on_producer, r);
  r->finish_ev = evtimer_new(r->base, on_finish, r);
  event_add(r->prod_ev, NULL);
  fork_producer(r);
  struct timeval warm = {2, 0};
  event_base_loopexit(r->base, &warm);
  event_base_dispatch(r->base);
  event_add(r->driver_ev, NULL);
  if (write(go[1], "g", 1) != 1) return -1;
  event_base_dispatch(r->base); /* until the driver's pipe closes */
  event_del(r->finish_ev);
  stop_control(r);
  struct timeval tail = {TAIL_MS / 1000, 0};
  event_base_loopexit(r->base, &tail);
  event_base_dispatch(r->base);
  int wst = 0;
  waitpid(driver, &wst, 0);
  for (int i = 0; i < r->ngens; i++)
    if (!r->gens[i].killed) kill_producer(&r->gens[i]); /* the controls, exited by now */
  account(r, kind, st);
  sluice_dq_consumer_free(con);
  sluice_client_free(c);
  event_free(r->driver_ev);
  event_free(r->prod_ev);
  event_free(r->finish_ev);
  event_base_free(r->base);
  for (int i = 0; i < r->ngens; i++) free(r->gens[i].slots);
  close(r->prod_fd[0]);
  close(r->prod_fd[1]);
  free(r);
  close(out[0]);
  close(go[1]);
  return WIFEXITED(wst) && WEXITSTATUS(wst) == 0 ? 0 : -1;
}

static const struct topology {
  const char *only, *args, *url;
  enum fo_kind kind;
} kinds[] = {
    {"manual", "sentinel '%s/s' " FO_MASTER_NAME, "redis+sentinel://%s/" FO_MASTER_NAME,
     FO_SENTINEL_MANUAL},
    {"sentinel", "sentinel '%s/s' " FO_MASTER_NAME, "redis+sentinel://%s/" FO_MASTER_NAME,
     FO_SENTINEL_SIGKILL},
    {"cluster", "cluster '%s/c' 3 1", "redis+cluster://%s", FO_CLUSTER_SIGKILL},
};

static int run_kind(const struct topology *t, int rounds, stats st[FO_NKINDS][NVARIANTS]) {
  char spec[256] = "", url[320];
  int rc = fo_topology_start("crash", t->args, spec, sizeof spec);
  if (rc == 0) {
    snprintf(url, sizeof url, t->url, spec);
    printf("%s: %s\n", fo_kind_names[t->kind], url);
    fflush(stdout);
    rc = phase(url, spec, t->kind, rounds, st);
  }
  fo_topology_stop();
  return rc;
}

static void print_table(stats st[FO_NKINDS][NVARIANTS]) {
  static const char *const cols[] = {
      "failover", "producer",      "rounds",           "pushes acked",        "acked in failover",
      "lost",     "lost by round", "record p50 / max", "oldest ms p50 / max", NULL};
  bench_table *t = bench_table_new(
      "what a producer's crash during a failover loses; acked in failover: acknowledged from "
      "the act to the new master's first answer; lost: acknowledged pushes never "
      "delivered; record: its record of unreplicated writes at its death (entries, the oldest "
      "one's age; the control: at promotion)",
      cols);
  for (int k = 0; k < FO_NKINDS; k++)
    for (int v = 0; v < NVARIANTS; v++) {
      stats *s = &st[k][v];
      if (!s->rounds) continue;
      bench_table_row(t, "%s|%s|%d|%ld|%ld|%ld|%s|%.0f / %.0f|%.0f / %.0f", fo_kind_names[k],
                      variant_names[v], s->rounds, s->acked, s->during, s->lost, s->lost_by_round,
                      bench_lat_pct(s->entries, 50), bench_lat_max(s->entries),
                      bench_lat_pct(s->oldest, 50), bench_lat_max(s->oldest));
    }
  bench_table_print(t, stdout);
  bench_table_free(t);
}

int main(int argc, char **argv) {
  int rounds = argc > 1 ? atoi(argv[1]) : DEFAULT_ROUNDS;
  if (rounds < 1 || rounds > MAX_GENS / NVARIANTS) {
    fprintf(stderr, "usage: bench_crash [ROUNDS 1..%d]\n", MAX_GENS / NVARIANTS);
    return 2;
  }
  signal(SIGPIPE, SIG_IGN);
  if (bench_can_pin()) bench_pin_self(BENCH_CPU_CLIENT);
  printf(
      "client crash during a failover: %d rounds per variant, a push every %d ms, default "
      "options\n",
      rounds, PUSH_MS);
  static stats st[FO_NKINDS][NVARIANTS];
  for (int k = 0; k < FO_NKINDS; k++)
    for (int v = 0; v < NVARIANTS; v++) {
      st[k][v].entries = bench_lat_new();
      st[k][v].oldest = bench_lat_new();
    }
  int rc = 0;
  const char *only = getenv("SLUICE_BENCH_ONLY");
  for (size_t i = 0; i < sizeof kinds / sizeof kinds[0]; i++)
    if ((!only || strcmp(only, kinds[i].only) == 0) && run_kind(&kinds[i], rounds, st) != 0)
      rc = -1;
  print_table(st);
  for (int k = 0; k < FO_NKINDS; k++)
    for (int v = 0; v < NVARIANTS; v++) {
      bench_lat_free(st[k][v].entries);
      bench_lat_free(st[k][v].oldest);
    }
  return rc == 0 ? 0 : 1;
}
