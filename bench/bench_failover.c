/*
 * Failover recovery (not part of bench/run.sh's default set:
 * `bench/run.sh bench_failover`, or `bench_failover [ROUNDS]` alone).
 *
 * On a private Redis Cluster (3 masters + 1 replica each, node timeout
 * 1000 ms) and a private Sentinel set (master, replica, 3 sentinels,
 * down-after 1000 ms), both from bench/topology.sh and pinned to the server
 * CPU, two workloads run on this process's event loop:
 *  - a semaphore waiter: a holder client takes the 1-permit semaphore "fo",
 *    holds it HOLD_MS, releases it and asks again; a waiter client blocks in
 *    sluice_sem_acquire, and releases and asks again as soon as it is
 *    granted. A success is a grant to the waiter (one per HOLD_MS or so);
 *  - a delay-queue consumer: a producer client pushes one message of delay 0
 *    every PUSH_MS to queue "fo"; a success is a delivery to the consumer.
 * On the cluster both names carry the hash tag {fo}, so one master holds
 * both, and that master is the one failed over.
 *
 * A driver process (forked before any client exists, so it holds none of
 * their sockets) fails the master over ROUNDS times per kind while the loop
 * goes on: CLUSTER FAILOVER on its replica, SIGSTOP of the master (the
 * replica takes over after the node timeout; the old master is resumed and
 * rejoins as a replica), SENTINEL FAILOVER, SIGSTOP of the Sentinel master.
 * It reports when it acted and when the new master answered ROLE master.
 *
 * SLUICE_BENCH_LOG=1 prints every client's log on stderr;
 * SLUICE_BENCH_WAIT_REPLICAS=N runs every client with wait_replicas = N.
 *
 * Recovery of a round = the longest stretch without a success from the last
 * success before the driver acted to the first success after the new master
 * answered ROLE master: last success before -> first success after.
 */
#include "bench.h"

#include <errno.h>
#include <signal.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <event2/event.h>
#include <hiredis/hiredis.h>
#include <sluice/sluice.h>

#define DEFAULT_ROUNDS 3
#define HOLD_MS 50
#define PUSH_MS 20
#define RETRY_MS 10
#define SETTLE_MS 3000  /* quiet time after a failover, the old master rejoined */
#define TAIL_MS 15000   /* after the last round: more than an acquire's timeout */
#define NAME "fo"
#define MASTER_NAME "fomaster"

enum kind { CLUSTER_MANUAL, CLUSTER_SIGSTOP, SENTINEL_MANUAL, SENTINEL_SIGSTOP, NKINDS };
static const char *const kind_names[NKINDS] = {
    "cluster: CLUSTER FAILOVER on the replica", "cluster: SIGSTOP of the master",
    "sentinel: SENTINEL FAILOVER", "sentinel: SIGSTOP of the master"};

/* ---- the driver (a child process; plain blocking hiredis) ----------------- */

static void sleep_ms(unsigned ms) {
  struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
  while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {}
}

static redisContext *connect_addr(const char *host, int port) {
  struct timeval tv = {1, 0};
  redisContext *c = redisConnectWithTimeout(host, port, tv);
  if (c && c->err) {
    redisFree(c);
    return NULL;
  }
  if (c) redisSetTimeout(c, tv);
  return c;
}

/* One command on host:port; NULL when it cannot connect or gets no reply. */
static redisReply *cmd_at(const char *host, int port, const char *fmt, ...) {
  redisContext *c = connect_addr(host, port);
  if (!c) return NULL;
  va_list ap;
  va_start(ap, fmt);
  redisReply *r = redisvCommand(c, fmt, ap);
  va_end(ap);
  redisFree(c);
  return r;
}

typedef struct addr {
  char host[64];
  int port;
} addr;

/* ROLE: 1 master, 0 replica with its link up, -1 otherwise (or no answer). */
static int role(const addr *a) {
  redisReply *r = cmd_at(a->host, a->port, "ROLE");
  int v = -1;
  if (r && r->type == REDIS_REPLY_ARRAY && r->elements > 0 &&
      r->element[0]->type == REDIS_REPLY_STRING) {
    if (strcmp(r->element[0]->str, "master") == 0) v = 1;
    else if (r->elements > 3 && r->element[3]->type == REDIS_REPLY_STRING &&
             strcmp(r->element[3]->str, "connected") == 0)
      v = 0;
  }
  if (r) freeReplyObject(r);
  return v;
}

static pid_t server_pid(const addr *a) {
  redisReply *r = cmd_at(a->host, a->port, "INFO server");
  pid_t pid = 0;
  const char *p = r && r->type == REDIS_REPLY_STRING ? strstr(r->str, "process_id:") : NULL;
  if (p) pid = (pid_t)atol(p + 11);
  if (r) freeReplyObject(r);
  return pid;
}

/* Poll until role(a) == want; 0, or -1 after timeout_ms. */
static int wait_role(const addr *a, int want, unsigned timeout_ms) {
  uint64_t end = bench_now_us() + timeout_ms * 1000ull;
  while (bench_now_us() < end) {
    if (role(a) == want) return 0;
    sleep_ms(10);
  }
  return -1;
}

/* The first "host:port" of s (a comma ends it). */
static int parse_addr(const char *s, addr *a) {
  size_t len = strcspn(s, ",");
  const char *colon = memchr(s, ':', len);
  if (!colon || (size_t)(colon - s) >= sizeof a->host) return -1;
  snprintf(a->host, sizeof a->host, "%.*s", (int)(colon - s), s);
  a->port = atoi(colon + 1);
  return 0;
}

/* Every node of the list answers cluster_state:ok (a stopped one is skipped
 * by the caller not listing it: here all are expected up). */
static int cluster_all_ok(const char *seeds) {
  char list[512];
  snprintf(list, sizeof list, "%s", seeds);
  for (char *save = NULL, *s = strtok_r(list, ",", &save); s; s = strtok_r(NULL, ",", &save)) {
    addr a;
    if (parse_addr(s, &a) != 0) return 0;
    redisReply *r = cmd_at(a.host, a.port, "CLUSTER INFO");
    int ok = r && r->type == REDIS_REPLY_STRING && strstr(r->str, "cluster_state:ok");
    if (r) freeReplyObject(r);
    if (!ok) return 0;
  }
  return 1;
}

/* "ip:port@bus" of a CLUSTER NODES line into a. */
static int node_addr(const char *field, addr *a) {
  char buf[96];
  snprintf(buf, sizeof buf, "%.*s", (int)strcspn(field, "@ "), field);
  return parse_addr(buf, a);
}

/* Whether a master line's slot ranges (fields 9 on) hold slot. */
static int owns_slot(char **f, int nf, long slot) {
  for (int i = 8; i < nf; i++) {
    if (f[i][0] == '[') continue; /* a slot being migrated */
    char *dash = strchr(f[i], '-');
    long lo = atol(f[i]), hi = dash ? atol(dash + 1) : lo;
    if (slot >= lo && slot <= hi) return 1;
  }
  return 0;
}

/* The master of NAME's slot and a replica of it, from CLUSTER NODES on a
 * seed (CLUSTER SLOTS leaves out replicas that have not replicated a byte
 * yet). */
static int cluster_pair(const char *seeds, addr *master, addr *replica) {
  addr seed;
  if (parse_addr(seeds, &seed) != 0) return -1;
  redisReply *k = cmd_at(seed.host, seed.port, "CLUSTER KEYSLOT %s", NAME);
  long slot = k && k->type == REDIS_REPLY_INTEGER ? (long)k->integer : -1;
  if (k) freeReplyObject(k);
  redisReply *r = slot >= 0 ? cmd_at(seed.host, seed.port, "CLUSTER NODES") : NULL;
  if (!r || r->type != REDIS_REPLY_STRING) {
    if (r) freeReplyObject(r);
    return -1;
  }
  char master_id[48] = "";
  int found = 0;
  for (int pass = 0; pass < 2; pass++) {
    char *text = strdup(r->str);
    for (char *save = NULL, *line = strtok_r(text, "\n", &save); line;
         line = strtok_r(NULL, "\n", &save)) {
      char *f[64];
      int nf = 0;
      for (char *s2 = NULL, *w = strtok_r(line, " ", &s2); w && nf < 64; w = strtok_r(NULL, " ", &s2))
        f[nf++] = w;
      if (nf < 8 || strstr(f[2], "fail")) continue;
      if (pass == 0 && strstr(f[2], "master") && owns_slot(f, nf, slot)) {
        snprintf(master_id, sizeof master_id, "%s", f[0]);
        found |= node_addr(f[1], master) == 0;
      } else if (pass == 1 && strstr(f[2], "slave") && strcmp(f[3], master_id) == 0) {
        found |= (node_addr(f[1], replica) == 0) << 1;
      }
    }
    free(text);
  }
  freeReplyObject(r);
  return found == 3 ? 0 : -1;
}

static int sentinel_pair(const char *sentinels, addr *master, addr *replica) {
  char list[256];
  snprintf(list, sizeof list, "%s", sentinels);
  for (char *save = NULL, *s = strtok_r(list, ",", &save); s; s = strtok_r(NULL, ",", &save)) {
    addr sa;
    if (parse_addr(s, &sa) != 0) continue;
    redisReply *r = cmd_at(sa.host, sa.port, "SENTINEL get-master-addr-by-name %s", MASTER_NAME);
    int ok = r && r->type == REDIS_REPLY_ARRAY && r->elements == 2;
    if (ok) {
      snprintf(master->host, sizeof master->host, "%s", r->element[0]->str);
      master->port = atoi(r->element[1]->str);
    }
    if (r) freeReplyObject(r);
    if (!ok) continue;
    r = cmd_at(sa.host, sa.port, "SENTINEL replicas %s", MASTER_NAME);
    ok = 0;
    for (size_t i = 0; r && r->type == REDIS_REPLY_ARRAY && i < r->elements && !ok; i++) {
      redisReply *e = r->element[i];
      for (size_t j = 0; j + 1 < e->elements; j += 2) {
        if (strcmp(e->element[j]->str, "ip") == 0)
          snprintf(replica->host, sizeof replica->host, "%s", e->element[j + 1]->str);
        if (strcmp(e->element[j]->str, "port") == 0) replica->port = atoi(e->element[j + 1]->str);
      }
      ok = replica->port > 0;
    }
    if (r) freeReplyObject(r);
    return ok ? 0 : -1;
  }
  return -1;
}

/* SENTINEL FAILOVER, asked again while a sentinel answers -INPROG or
 * -NOGOODSLAVE (its view of the replica still refreshing). */
static int sentinel_failover(const char *sentinels) {
  addr sa;
  if (parse_addr(sentinels, &sa) != 0) return -1;
  uint64_t end = bench_now_us() + 15000000ull;
  while (bench_now_us() < end) {
    redisReply *r = cmd_at(sa.host, sa.port, "SENTINEL FAILOVER %s", MASTER_NAME);
    int ok = r && r->type == REDIS_REPLY_STATUS;
    if (r) freeReplyObject(r);
    if (ok) return 0;
    sleep_ms(200);
  }
  return -1;
}

/* One failover of kind k; writes "k trigger_us done_us" to out. After it,
 * the old master is a linked replica again and the topology quiet. */
static int drive_one(enum kind k, const char *spec, FILE *out) {
  addr m, r;
  int sentinel = k == SENTINEL_MANUAL || k == SENTINEL_SIGSTOP;
  if ((sentinel ? sentinel_pair(spec, &m, &r) : cluster_pair(spec, &m, &r)) != 0) {
    fprintf(stderr, "bench_failover: no master/replica pair found\n");
    return -1;
  }
  pid_t pid = k == CLUSTER_SIGSTOP || k == SENTINEL_SIGSTOP ? server_pid(&m) : 0;
  uint64_t trigger = bench_now_us();
  int rc = 0;
  if (k == CLUSTER_MANUAL) {
    redisReply *x = cmd_at(r.host, r.port, "CLUSTER FAILOVER");
    rc = x && x->type == REDIS_REPLY_STATUS ? 0 : -1;
    if (x) freeReplyObject(x);
  } else if (k == SENTINEL_MANUAL) {
    rc = sentinel_failover(spec);
  } else {
    rc = pid > 0 ? kill(pid, SIGSTOP) : -1;
  }
  if (rc == 0) rc = wait_role(&r, 1, 60000);
  uint64_t done = bench_now_us();
  if (pid > 0) kill(pid, SIGCONT);
  if (rc != 0) {
    fprintf(stderr, "bench_failover: %s: no new master\n", kind_names[k]);
    return -1;
  }
  fprintf(out, "%d %llu %llu\n", (int)k, (unsigned long long)trigger, (unsigned long long)done);
  fflush(out);
  /* The old master back as a linked replica, the cluster ok everywhere. */
  if (wait_role(&m, 0, 60000) != 0) {
    fprintf(stderr, "bench_failover: %s: old master did not rejoin as a replica\n", kind_names[k]);
    return -1;
  }
  for (int i = 0; !sentinel && i < 3000 && !cluster_all_ok(spec); i++) sleep_ms(10);
  /* Sentinels refresh their view of the new replica every second: a
   * failover asked before that finds no good replica. */
  sleep_ms(sentinel ? SETTLE_MS + 2000 : SETTLE_MS);
  /* A waiter stuck on a paused node may need its acquire's timeout (10 s)
   * to recover: leave it that long before the next round. */
  if (pid > 0) sleep_ms(10000);
  return 0;
}

static void driver(int go_fd, int out_fd, const char *spec, enum kind first, enum kind last,
                   int rounds) {
  if (bench_can_pin()) bench_pin_self(BENCH_CPU_SERVER);
  char b;
  while (read(go_fd, &b, 1) < 0 && errno == EINTR) {}
  FILE *out = fdopen(out_fd, "w");
  int rc = 0;
  for (int k = first; k <= (int)last && rc == 0; k++)
    for (int i = 0; i < rounds && rc == 0; i++) rc = drive_one((enum kind)k, spec, out);
  fclose(out);
  _exit(rc == 0 ? 0 : 1);
}

/* ---- the workloads (this process's loop) ---------------------------------- */

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

typedef struct round {
  int kind;
  uint64_t trigger, done;
} round;

typedef struct run {
  struct event_base *base;
  sluice_sem *hold_sem, *wait_sem;
  sluice_dq *dq;
  struct event *hold_ev, *retry_hold, *retry_wait, *push_ev, *pipe_ev;
  sluice_permit *held;
  times sem_ok, dq_ok;
  long errors;
  round rounds[64];
  int nrounds, stopping;
  char line[128];
  size_t linelen;
} run;

static void hold_acquire(run *r);
static void wait_acquire(run *r);

static void on_hold(sluice_sem *sem, int status, sluice_permit *p, void *ud) {
  run *r = ud;
  struct timeval tv = {0, (status == SLUICE_OK ? HOLD_MS : RETRY_MS) * 1000};
  if (status == SLUICE_OK) r->held = p;
  else if (status != SLUICE_ECANCELED) r->errors++;
  const char *log = getenv("SLUICE_BENCH_LOG");
  if (status != SLUICE_OK && log && *log == '1')
    fprintf(stderr, "%.3f hold acquire failed: %s\n", (double)bench_now_us() / 1e6,
            sluice_err_name(status));
  if (status != SLUICE_ECANCELED) evtimer_add(status == SLUICE_OK ? r->hold_ev : r->retry_hold, &tv);
}

static void hold_release(evutil_socket_t fd, short what, void *arg) {
  run *r = arg;
  if (r->held) sluice_permit_release(r->held, NULL, NULL);
  r->held = NULL;
  hold_acquire(r);
}

static void hold_retry(evutil_socket_t fd, short what, void *arg) { hold_acquire(arg); }

static void hold_acquire(run *r) {
  if (!r->stopping && sluice_sem_acquire(r->hold_sem, 10000, on_hold, r, NULL) != SLUICE_OK) {
    struct timeval tv = {0, RETRY_MS * 1000};
    r->errors++;
    evtimer_add(r->retry_hold, &tv);
  }
}

static void on_wait(sluice_sem *sem, int status, sluice_permit *p, void *ud) {
  run *r = ud;
  if (status == SLUICE_OK) {
    times_add(&r->sem_ok, bench_now_us());
    sluice_permit_release(p, NULL, NULL);
    wait_acquire(r);
  } else if (status != SLUICE_ECANCELED) {
    struct timeval tv = {0, RETRY_MS * 1000};
    r->errors++;
    evtimer_add(r->retry_wait, &tv);
  }
}

static void wait_retry(evutil_socket_t fd, short what, void *arg) { wait_acquire(arg); }

static void wait_acquire(run *r) {
  if (!r->stopping && sluice_sem_acquire(r->wait_sem, 10000, on_wait, r, NULL) != SLUICE_OK) {
    struct timeval tv = {0, RETRY_MS * 1000};
    r->errors++;
    evtimer_add(r->retry_wait, &tv);
  }
}

static void on_pushed(sluice_dq *dq, int status, const char *id, int64_t due, void *ud) {
  if (status != SLUICE_OK) ((run *)ud)->errors++;
  const char *log = getenv("SLUICE_BENCH_LOG");
  if (status != SLUICE_OK && log && *log == '1')
    fprintf(stderr, "%.3f push failed: %s\n", (double)bench_now_us() / 1e6, sluice_err_name(status));
}

static void push_tick(evutil_socket_t fd, short what, void *arg) {
  run *r = arg;
  sluice_dq_item item = {"tick", 4, 0, 0, NULL};
  if (sluice_dq_push(r->dq, &item, on_pushed, r) != SLUICE_OK) r->errors++;
}

static void on_msg(sluice_dq_consumer *con, sluice_dq_msg *m, void *ud) {
  times_add(&((run *)ud)->dq_ok, bench_now_us());
  sluice_dq_ack(m, NULL, NULL);
}

/* The driver's lines; EOF ends the phase. */
static void on_pipe(evutil_socket_t fd, short what, void *arg) {
  run *r = arg;
  char buf[256];
  ssize_t n = read(fd, buf, sizeof buf);
  if (n < 0 && errno == EINTR) return;
  if (n <= 0) {
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
    unsigned long long t, d;
    int k;
    if (r->nrounds < 64 && sscanf(r->line, "%d %llu %llu", &k, &t, &d) == 3)
      r->rounds[r->nrounds++] = (round){k, t, d};
  }
}

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
  if (sluice_client_new(base, &o, &c) != SLUICE_OK) {
    fprintf(stderr, "bench_failover: %s: %s\n", url, sluice_client_last_error(NULL));
    exit(1);
  }
  const char *log = getenv("SLUICE_BENCH_LOG");
  if (log && *log == '1') sluice_client_set_log_cb(c, print_log, (void *)who);
  return c;
}

typedef struct stats {
  bench_lat *sem, *dq;
  double sem_normal, dq_normal; /* median spacing of successes over the phase */
  long errors;
  int rounds;
} stats;

static double median_spacing(const times *t) {
  bench_lat *l = bench_lat_new();
  for (size_t i = 0; i + 1 < t->n; i++) bench_lat_add(l, (double)(t->v[i + 1] - t->v[i]) / 1000);
  double m = bench_lat_pct(l, 50);
  bench_lat_free(l);
  return m;
}

/* One topology: the workloads on url while the driver fails it over. */
static int phase(const char *url, const char *spec, enum kind first, enum kind last, int rounds,
                 stats st[NKINDS]) {
  int go[2], out[2];
  if (pipe(go) != 0 || pipe(out) != 0) return -1;
  fflush(NULL);
  pid_t pid = fork();
  if (pid == 0) {
    close(go[1]);
    close(out[0]);
    driver(go[0], out[1], spec, first, last, rounds);
  }
  close(go[0]);
  close(out[1]);
  struct event_config *cfg = event_config_new();
  event_config_set_flag(cfg, EVENT_BASE_FLAG_PRECISE_TIMER);
  run r;
  memset(&r, 0, sizeof r);
  r.base = event_base_new_with_config(cfg);
  event_config_free(cfg);
  sluice_client *hc = client_at(r.base, url, "holder"), *wc = client_at(r.base, url, "waiter"),
                *pc = client_at(r.base, url, "producer"), *cc = client_at(r.base, url, "consumer");
  sluice_sem_options so;
  sluice_sem_options_init(&so);
  so.permits = 1; /* default lease (30 s) */
  sluice_dq_consumer *con = NULL;
  if (sluice_sem_new(hc, NAME, &so, &r.hold_sem) != SLUICE_OK ||
      sluice_sem_new(wc, NAME, &so, &r.wait_sem) != SLUICE_OK ||
      sluice_dq_new(pc, NAME, NULL, &r.dq) != SLUICE_OK ||
      sluice_dq_consumer_new(cc, NAME, NULL, on_msg, &r, &con) != SLUICE_OK)
    return -1;
  r.hold_ev = evtimer_new(r.base, hold_release, &r);
  r.retry_hold = evtimer_new(r.base, hold_retry, &r);
  r.retry_wait = evtimer_new(r.base, wait_retry, &r);
  r.push_ev = event_new(r.base, -1, EV_PERSIST, push_tick, &r);
  r.pipe_ev = event_new(r.base, out[0], EV_READ | EV_PERSIST, on_pipe, &r);
  struct timeval tick = {0, PUSH_MS * 1000};
  event_add(r.push_ev, &tick);
  event_add(r.pipe_ev, NULL);
  hold_acquire(&r);
  wait_acquire(&r);
  /* Two quiet seconds first: the normal rhythm, then the driver starts. */
  struct timeval warm = {2, 0};
  event_base_loopexit(r.base, &warm);
  event_base_dispatch(r.base);
  if (write(go[1], "g", 1) != 1) return -1;
  event_base_dispatch(r.base); /* until the driver's pipe closes */
  struct timeval tail = {TAIL_MS / 1000, 0}; /* the last round's recovery */
  event_base_loopexit(r.base, &tail);
  event_base_dispatch(r.base);
  int wst = 0;
  waitpid(pid, &wst, 0);
  r.stopping = 1;
  for (int i = 0; i < r.nrounds; i++) {
    stats *s = &st[r.rounds[i].kind];
    s->rounds++;
    uint64_t until = i + 1 < r.nrounds ? r.rounds[i + 1].trigger : UINT64_MAX;
    double a = recovery_ms(&r.sem_ok, &r.rounds[i], until),
           b = recovery_ms(&r.dq_ok, &r.rounds[i], until);
    bench_lat_add(s->sem, a);
    bench_lat_add(s->dq, b);
  }
  for (int k = first; k <= (int)last; k++) {
    st[k].sem_normal = median_spacing(&r.sem_ok);
    st[k].dq_normal = median_spacing(&r.dq_ok);
    st[k].errors = r.errors;
  }
  event_del(r.push_ev);
  event_del(r.pipe_ev);
  /* Freeing a semaphore returns and frees its permits: no timer may touch
   * them afterwards. */
  r.stopping = 1;
  event_del(r.hold_ev);
  event_del(r.retry_hold);
  event_del(r.retry_wait);
  r.held = NULL;
  sluice_dq_consumer_free(con);
  sluice_dq_free(r.dq);
  sluice_sem_free(r.wait_sem);
  sluice_sem_free(r.hold_sem);
  sluice_client_free(hc);
  sluice_client_free(wc);
  sluice_client_free(pc);
  sluice_client_free(cc);
  struct timeval drain = {1, 0};
  event_base_loopexit(r.base, &drain);
  event_base_dispatch(r.base);
  event_free(r.hold_ev);
  event_free(r.retry_hold);
  event_free(r.retry_wait);
  event_free(r.push_ev);
  event_free(r.pipe_ev);
  event_base_free(r.base);
  close(out[0]);
  close(go[1]);
  free(r.sem_ok.v);
  free(r.dq_ok.v);
  return WIFEXITED(wst) && WEXITSTATUS(wst) == 0 ? 0 : -1;
}

/* ---- topologies ------------------------------------------------------------ */

static char topo_dir[160];

static void topo_stop(void) {
  if (!topo_dir[0]) return;
  char cmd[400];
  snprintf(cmd, sizeof cmd, "'%s' stop '%s'", bench_topology_script(), topo_dir);
  if (system(cmd) != 0) fprintf(stderr, "bench_failover: could not stop %s\n", topo_dir);
  topo_dir[0] = '\0';
}

/* bench/topology.sh ARGS into out (its one line: seeds or sentinels). */
static int topo_start(const char *args, char *out, size_t cap) {
  char cmd[512];
  snprintf(cmd, sizeof cmd, "'%s' %s", bench_topology_script(), args);
  FILE *p = popen(cmd, "r");
  if (!p) return -1;
  int got = fgets(out, (int)cap, p) != NULL;
  int st = pclose(p);
  if (!got || st != 0) return -1;
  out[strcspn(out, "\n")] = '\0';
  return 0;
}

static int run_topology(int sentinel, int rounds, stats st[NKINDS]) {
  const char *tmp = getenv("TMPDIR");
  snprintf(topo_dir, sizeof topo_dir, "%s/sluice-bench-fo-XXXXXX", tmp && *tmp ? tmp : "/tmp");
  if (!mkdtemp(topo_dir)) return -1;
  char args[256], spec[256], url[320];
  if (sentinel) snprintf(args, sizeof args, "sentinel '%s/s' %s", topo_dir, MASTER_NAME);
  else snprintf(args, sizeof args, "cluster '%s/c' 3 1", topo_dir);
  int rc = topo_start(args, spec, sizeof spec);
  if (rc == 0) {
    if (sentinel) snprintf(url, sizeof url, "redis+sentinel://%s/%s", spec, MASTER_NAME);
    else snprintf(url, sizeof url, "redis+cluster://%s", spec);
    printf("%s: %s\n", sentinel ? "Sentinel set (master, replica, 3 sentinels)"
                                : "cluster (3 masters + 1 replica each)", url);
    fflush(stdout);
    rc = phase(url, spec, sentinel ? SENTINEL_MANUAL : CLUSTER_MANUAL,
               sentinel ? SENTINEL_SIGSTOP : CLUSTER_SIGSTOP, rounds, st);
  } else {
    fprintf(stderr, "bench_failover: bench/topology.sh %s failed\n", args);
  }
  topo_stop();
  return rc;
}

/* Stop the servers on the way out, a crash included (they run detached). */
static void on_signal(int sig) {
  topo_stop();
  signal(sig, SIG_DFL);
  raise(sig);
}

int main(int argc, char **argv) {
  int rounds = argc > 1 ? atoi(argv[1]) : DEFAULT_ROUNDS;
  if (rounds < 1 || rounds > 16) {
    fprintf(stderr, "usage: bench_failover [ROUNDS 1..16]\n");
    return 2;
  }
  signal(SIGPIPE, SIG_IGN);
  signal(SIGINT, on_signal);
  signal(SIGTERM, on_signal);
  signal(SIGSEGV, on_signal);
  signal(SIGABRT, on_signal);
  if (bench_can_pin()) bench_pin_self(BENCH_CPU_CLIENT);
  const char *wait = getenv("SLUICE_BENCH_WAIT_REPLICAS");
  printf("failover recovery: %d rounds per kind; semaphore waiter (holder releases every %d ms), "
         "delay-queue consumer (a push every %d ms); wait_replicas %d; pinning %s\n",
         rounds, HOLD_MS, PUSH_MS, wait ? atoi(wait) : 0,
         bench_can_pin() ? "on (servers CPU 0, client CPU 1)" : "off");
  stats st[NKINDS];
  for (int k = 0; k < NKINDS; k++) st[k] = (stats){bench_lat_new(), bench_lat_new(), 0, 0, 0, 0};
  int rc = run_topology(0, rounds, st);
  if (run_topology(1, rounds, st) != 0) rc = -1;
  static const char *const cols[] = {"failover", "rounds", "sem min", "sem p50", "sem max",
                                     "dq min", "dq p50", "dq max", NULL};
  bench_table *t = bench_table_new(
      "recovery (ms): last success before -> first success after the failover", cols);
  for (int k = 0; k < NKINDS; k++) {
    if (!st[k].rounds) continue;
    bench_table_row(t, "%s|%d|%.0f|%.0f|%.0f|%.0f|%.0f|%.0f", kind_names[k], st[k].rounds,
                    bench_lat_pct(st[k].sem, 0), bench_lat_pct(st[k].sem, 50),
                    bench_lat_max(st[k].sem), bench_lat_pct(st[k].dq, 0),
                    bench_lat_pct(st[k].dq, 50), bench_lat_max(st[k].dq));
  }
  bench_table_print(t, stdout);
  bench_table_free(t);
  for (int k = 0; k < NKINDS; k += 2)
    if (st[k].rounds)
      printf("%s: normal spacing (median) %.1f ms between waiter grants, %.1f ms between "
             "deliveries; %ld operations failed\n",
             k < SENTINEL_MANUAL ? "cluster" : "sentinel", st[k].sem_normal, st[k].dq_normal,
             st[k].errors);
  printf("(-1: no success after the new master before the next round, or %d s after the last)\n",
         TAIL_MS / 1000);
  for (int k = 0; k < NKINDS; k++) {
    bench_lat_free(st[k].sem);
    bench_lat_free(st[k].dq);
  }
  return rc == 0 ? 0 : 1;
}
