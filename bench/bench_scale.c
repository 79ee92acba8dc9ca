/*
 * Scale benchmark (not a pass/fail test): what one operation costs Redis,
 * and what one item costs Redis's memory, as the state grows; and what
 * idle holders and waiters cost Redis per second. Each size is printed
 * with its ratio to the smallest size of its table: constant ratios mean
 * the cost does not grow with the state.
 *  - queued messages (16-byte payloads, due now), 1e3..1e6: bytes per
 *    message; Redis time per push, and per message taken and acknowledged;
 *  - held permits of one semaphore (TTL 3 s, renewed every second),
 *    acquired over one renewal period as a server would, 1e2..1e5: bytes
 *    per permit; Redis script calls, commands and CPU per second while they
 *    are only held; Redis time of one more acquire and release;
 *  - idle waiters blocked on one handle of a held 1-permit semaphore,
 *    1e2..1e5: bytes per waiter; Redis calls, commands and CPU per second;
 *  - renewals of 10,000 permits held one by one, at a 3 s and at the
 *    default 30 s lease: Redis calls per second and per renewal period;
 *  - limiter keys (one check each, limit 100 per hour), 1e3..1e6, for each
 *    algorithm: bytes per key; Redis time per check among them;
 *  - one sliding-log key grown to 1e4..1e5 entries: bytes per entry.
 * "Redis time" is the duration Redis itself logs for each script call
 * (SLOWLOG with a zero threshold, during the timed phase only), divided by
 * the operations the calls carried: the least of 3 runs. Memory is INFO's used_memory before and
 * after filling, divided by the items.
 *
 *   bench_scale [--max N]   sizes above N are skipped
 */
#include "bench.h"

#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <event2/event.h>
#include <hiredis/hiredis.h>
#include <sluice/sluice.h>

static bench_redis rs;
static redisContext *mon; /* INFO, SLOWLOG, CONFIG, FLUSHALL */
static struct event_base *base;
static long size_max = 1000000;

/* ---- Redis's own numbers ------------------------------------------------- */

static redisReply *mon_cmd(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  redisReply *r = redisvCommand(mon, fmt, ap);
  va_end(ap);
  if (!r || r->type == REDIS_REPLY_ERROR) {
    fprintf(stderr, "bench_scale: %s: %s\n", fmt, r ? r->str : mon->errstr);
    exit(1);
  }
  return r;
}

/* A number from INFO section: the text after "<field>:" (or, for a
 * commandstats line, after "<field>"), 0 if absent. */
static double info_num(const char *section, const char *field) {
  redisReply *r = mon_cmd("INFO %s", section);
  const char *p = strstr(r->str, field);
  double v = p ? strtod(p + strlen(field), NULL) : 0;
  freeReplyObject(r);
  return v;
}

typedef struct snap {
  double mem, cpu, cmds, calls;
} snap;

static snap take_snap(void) {
  snap s;
  s.mem = info_num("memory", "\nused_memory:");
  s.cpu = info_num("cpu", "used_cpu_sys:") + info_num("cpu", "used_cpu_user:");
  s.cmds = info_num("stats", "total_commands_processed:");
  s.calls = info_num("commandstats", "cmdstat_evalsha:calls=");
  return s;
}

/* Log every command's duration from now on (the timed phases only: the
 * log takes memory). */
static void timed_begin(void) {
  freeReplyObject(mon_cmd("CONFIG SET slowlog-max-len 1000000"));
  freeReplyObject(mon_cmd("SLOWLOG RESET"));
  freeReplyObject(mon_cmd("CONFIG SET slowlog-log-slower-than 0"));
}

/* Microseconds Redis spent in calls of the scripts in list (NULL-ended)
 * since timed_begin; logging stops. */
static double timed_end(const sluice__script *const *list) {
  freeReplyObject(mon_cmd("CONFIG SET slowlog-log-slower-than -1"));
  redisReply *r = mon_cmd("SLOWLOG GET -1");
  double us = 0;
  for (size_t i = 0; i < r->elements; i++) {
    const redisReply *e = r->element[i], *args = e->element[3];
    if (args->elements < 2 || strcasecmp(args->element[0]->str, "EVALSHA") != 0) continue;
    for (const sluice__script *const *s = list; *s; s++)
      if (strcmp(args->element[1]->str, (*s)->sha) == 0) us += (double)e->element[2]->integer;
  }
  freeReplyObject(r);
  freeReplyObject(mon_cmd("SLOWLOG RESET"));
  return us;
}

static void flush(void) { freeReplyObject(mon_cmd("FLUSHALL")); }

/* ---- the client side ------------------------------------------------------ */

/* A connected client (its scripts loaded, so they are not counted as the
 * items' memory). */
static sluice_client *new_client(void) {
  sluice_client_options o;
  sluice_client *c = NULL;
  sluice_client_options_init(&o);
  o.url = rs.url;
  o.op_timeout_ms = 60000;
  if (sluice_client_new(base, &o, &c) != 0) {
    fprintf(stderr, "bench_scale: cannot create client\n");
    exit(1);
  }
  while (!sluice_client_is_connected(c)) event_base_loop(base, EVLOOP_ONCE);
  return c;
}

static void close_client(sluice_client *c) {
  sluice_client_free(c);
  event_base_dispatch(base);
}

static void loop_ms(unsigned ms) {
  struct timeval tv = {ms / 1000, (ms % 1000) * 1000};
  event_base_loopexit(base, &tv);
  event_base_dispatch(base);
}

/* n operations, at most window outstanding: start(p, i) starts operation i
 * (0 on success) whose callback calls pump_done. */
typedef struct pump {
  long next, done, n, failed;
  long window;
  int (*start)(struct pump *p, long i);
  void *ud;
} pump;

static void pump_fill(pump *p) {
  while (p->next < p->n && p->next - p->done < p->window)
    if (p->start(p, p->next++) != 0) p->done++, p->failed++;
}

static void pump_done(pump *p, int ok) {
  p->done++;
  if (!ok) p->failed++;
  pump_fill(p);
}

static void pump_run(pump *p, const char *what) {
  pump_fill(p);
  while (p->done < p->n) event_base_loop(base, EVLOOP_ONCE);
  if (p->failed) {
    fprintf(stderr, "bench_scale: %s: %ld of %ld failed\n", what, p->failed, p->n);
    exit(1);
  }
}

static double ratio(double v, double first) { return first > 0 ? v / first : 0; }

/* Timed phases run ROUNDS times and keep the smallest: a neighbour that
 * takes Redis's CPU for a moment only ever makes a run slower. */
#define ROUNDS 3

static double least(double a, double b) { return a < b ? a : b; }

/* ---- queued messages ------------------------------------------------------ */

#define PUSH_BATCH 1000
#define MSG_OPS 1000

static sluice_dq_item msg_items[PUSH_BATCH];

static void on_pushed(sluice_dq *dq, int status, const sluice_dq_push_result *r, size_t n,
                      void *ud) {
  pump_done(ud, status == SLUICE_OK);
}

static void on_push1(sluice_dq *dq, int status, const char *id, int64_t due, void *ud) {
  pump_done(ud, status == SLUICE_OK);
}

static int push_batch(pump *p, long i) {
  return sluice_dq_push_batch(p->ud, msg_items, PUSH_BATCH, on_pushed, p);
}

static int push_one(pump *p, long i) { return sluice_dq_push(p->ud, msg_items, on_push1, p); }

typedef struct taker {
  long got, want;
  sluice_dq_consumer *con;
} taker;

static void on_msg(sluice_dq_consumer *con, sluice_dq_msg *m, void *ud) {
  taker *t = ud;
  sluice_dq_ack(m, NULL, NULL);
  if (++t->got == t->want) {
    sluice_dq_consumer_free(con);
    t->con = NULL;
  }
}

/* Redis microseconds per message pushed (one a call). */
static double push_phase(sluice_dq *dq) {
  static const sluice__script *const push[] = {&sluice__lua_dq_push, NULL};
  timed_begin();
  pump one = {0, 0, MSG_OPS, 0, 50, push_one, dq};
  pump_run(&one, "push");
  return timed_end(push) / MSG_OPS;
}

/* Redis microseconds per message taken and acknowledged. */
static double take_phase(sluice_client *c) {
  sluice_dq_consumer_options o;
  sluice_dq_consumer_options_init(&o);
  taker t = {0, MSG_OPS, NULL};
  static const sluice__script *const scripts[] = {&sluice__lua_dq_take, &sluice__lua_dq_ack, NULL};
  timed_begin();
  if (sluice_dq_consumer_new(c, "scale", &o, on_msg, &t, &t.con) != 0) exit(1);
  while (t.con) event_base_loop(base, EVLOOP_ONCE);
  loop_ms(200); /* the last acks and the return of the prefetched ones */
  return timed_end(scripts) / MSG_OPS;
}

static void messages(long n, bench_table *tab, double *first) {
  flush();
  sluice_client *c = new_client();
  sluice_dq *dq = NULL;
  if (sluice_dq_new(c, "scale", NULL, &dq) != 0) exit(1);
  sluice_dq *other = NULL; /* Redis's buffers grow for a batch before the count */
  if (sluice_dq_new(c, "warm-up", NULL, &other) != 0) exit(1);
  pump warm = {0, 0, 1, 0, 1, push_batch, other};
  pump_run(&warm, "push");
  sluice_dq_free(other);
  snap s0 = take_snap();
  pump fill = {0, 0, n / PUSH_BATCH, 0, 4, push_batch, dq};
  pump_run(&fill, "push");
  double bytes = (take_snap().mem - s0.mem) / (double)n;
  double push_us = 1e9, take_us = 1e9;
  for (int round = 0; round < ROUNDS; round++) { /* the queue stays within n..n + MSG_OPS */
    push_us = least(push_us, push_phase(dq));
    take_us = least(take_us, take_phase(c));
  }
  if (!first[0]) first[0] = bytes, first[1] = push_us, first[2] = take_us;
  bench_table_row(tab, "%ld|%.0f|%.2f|%.2f|%.2f|%.2f|%.2f", n, bytes, ratio(bytes, first[0]),
                  push_us, ratio(push_us, first[1]), take_us, ratio(take_us, first[2]));
  sluice_dq_free(dq);
  close_client(c);
}

/* ---- semaphores ------------------------------------------------------------ */

#define SEM_OPS 1000
#define IDLE_MS 6000

typedef struct holding {
  sluice_sem *sem;
  sluice_permit **held;
  long n;
} holding;

static void on_held(sluice_sem *s, int status, sluice_permit *p, void *ud) {
  pump *pm = ud;
  holding *h = pm->ud;
  if (status == SLUICE_OK) h->held[h->n++] = p;
  pump_done(pm, status == SLUICE_OK);
}

static int acquire_one(pump *p, long i) {
  return sluice_sem_try_acquire(((holding *)p->ud)->sem, on_held, p);
}

static void on_released(sluice_sem *s, int status, void *ud) { pump_done(ud, status == SLUICE_OK); }

static void on_cycle(sluice_sem *s, int status, sluice_permit *permit, void *ud) {
  if (status != SLUICE_OK || sluice_permit_release(permit, on_released, ud) != 0) pump_done(ud, 0);
}

static int cycle_one(pump *p, long i) { return sluice_sem_try_acquire(p->ud, on_cycle, p); }

/* Redis microseconds per permit acquired and released. */
static double cycle_phase(sluice_sem *s) {
  static const sluice__script *const op[] = {&sluice__lua_sem_acquire, &sluice__lua_sem_release,
                                             NULL};
  timed_begin();
  pump cyc = {0, 0, SEM_OPS, 0, 50, cycle_one, s};
  pump_run(&cyc, "acquire and release");
  return timed_end(op) / SEM_OPS;
}

/* Redis calls, commands and CPU per second over ms of waiting. */
static void idle_rates_for(unsigned ms, double *calls, double *cmds, double *cpu) {
  snap a = take_snap();
  loop_ms(ms);
  snap b = take_snap();
  double s = ms / 1000.0;
  *calls = (b.calls - a.calls) / s;
  *cmds = (b.cmds - a.cmds) / s;
  *cpu = 100 * (b.cpu - a.cpu) / s;
}

static void idle_rates(double *calls, double *cmds, double *cpu) {
  idle_rates_for(IDLE_MS, calls, cmds, cpu);
}

static sluice_sem *scale_sem(sluice_client *c, unsigned permits, unsigned ttl_ms) {
  sluice_sem_options o;
  sluice_sem_options_init(&o);
  o.permits = permits;
  o.ttl_ms = ttl_ms;
  sluice_sem *s = NULL;
  if (sluice_sem_new(c, "scale", &o, &s) != 0) exit(1);
  return s;
}

/* n permits taken one after another over one renewal period, a
 * thousandth of them each thousandth of it, so their renewals fall due at
 * different times, as in a server. */
static void hold(holding *h, long n, unsigned period_ms) {
  for (long tick = 0; tick < 1000; tick++) {
    pump p = {0, 0, (tick + 1) * n / 1000 - tick * n / 1000, 0, 256, acquire_one, h};
    pump_run(&p, "acquire");
    loop_ms(period_ms / 1000 ? period_ms / 1000 : 1);
  }
}

static void permits(long n, bench_table *tab, double *first) {
  flush();
  sluice_client *c = new_client();
  sluice_sem *s = scale_sem(c, (unsigned)n + SEM_OPS, 3000);
  holding h = {s, calloc((size_t)n, sizeof *h.held), 0};
  snap s0 = take_snap();
  hold(&h, n, 1000);
  double bytes = (take_snap().mem - s0.mem) / (double)n, calls, cmds, cpu;
  idle_rates(&calls, &cmds, &cpu);
  double op_us = 1e9;
  for (int round = 0; round < ROUNDS; round++) op_us = least(op_us, cycle_phase(s));
  if (!first[0]) first[0] = bytes, first[1] = calls, first[2] = op_us;
  bench_table_row(tab, "%ld|%.0f|%.2f|%.1f|%.2f|%.0f|%.1f|%.2f|%.2f", n, bytes,
                  ratio(bytes, first[0]), calls, ratio(calls, first[1]), cmds, cpu, op_us,
                  ratio(op_us, first[2]));
  for (long i = 0; i < h.n; i++) sluice_permit_release(h.held[i], NULL, NULL);
  free(h.held);
  sluice_sem_free(s);
  close_client(c);
}

/* Renewal calls per second of n permits held one by one under a lease of
 * ttl_ms (renewed every ttl_ms / 3), measured over RENEW_PERIODS periods
 * once every permit is held. */
#define RENEW_PERIODS 4

static void renewals(unsigned ttl_ms, long n, bench_table *tab) {
  flush();
  sluice_client *c = new_client();
  sluice_sem *s = scale_sem(c, (unsigned)n, ttl_ms);
  holding h = {s, calloc((size_t)n, sizeof *h.held), 0};
  unsigned renew_ms = ttl_ms / 3;
  hold(&h, n, renew_ms);
  double calls, cmds, cpu;
  idle_rates_for(RENEW_PERIODS * renew_ms, &calls, &cmds, &cpu);
  bench_table_row(tab, "%.0f|%.0f|%ld|%.1f|%.1f|%.0f|%.0f|%.1f", ttl_ms / 1000.0, renew_ms / 1000.0,
                  n, calls, calls * renew_ms / 1000.0,
                  calls > 0 ? n / (calls * renew_ms / 1000.0) : 0, cmds, cpu);
  for (long i = 0; i < h.n; i++) sluice_permit_release(h.held[i], NULL, NULL);
  free(h.held);
  sluice_sem_free(s);
  close_client(c);
}

typedef struct crowd {
  long granted;
} crowd;

static void on_waited(sluice_sem *s, int status, sluice_permit *p, void *ud) {
  if (status == SLUICE_OK) ((crowd *)ud)->granted++, sluice_permit_release(p, NULL, NULL);
}

static void on_first(sluice_sem *s, int status, sluice_permit *p, void *ud) {
  *(sluice_permit **)ud = p;
}

typedef struct waiting {
  long n;
  double bytes, calls, cmds, cpu;
} waiting;

static void waiters(long n, waiting *w) {
  flush();
  sluice_client *c = new_client();
  sluice_sem *s = scale_sem(c, 1, 3000);
  sluice_permit *held = NULL;
  sluice_sem_try_acquire(s, on_first, &held);
  while (!held) event_base_loop(base, EVLOOP_ONCE);
  loop_ms(3000); /* Redis shrinks the new connections' buffers meanwhile */
  snap s0 = take_snap();
  crowd cr = {0};
  for (long i = 0; i < n; i++)
    if (sluice_sem_acquire(s, 0, on_waited, &cr, NULL) != 0) exit(1);
  loop_ms(2000); /* every waiter queued */
  w->n = n;
  w->bytes = (take_snap().mem - s0.mem) / (double)n;
  idle_rates(&w->calls, &w->cmds, &w->cpu);
  sluice_permit_release(held, NULL, NULL);
  sluice_sem_free(s);
  close_client(c);
}

/* ---- limiter keys ---------------------------------------------------------- */

#define RL_OPS 5000

static void on_checked(sluice_limiter *lim, int status, const sluice_rl_result *r, void *ud) {
  pump_done(ud, status == SLUICE_OK);
}

/* Which keys check_key uses: keys < 0, "w<i>" (warm-up); 0, "k<i>" (the
 * fill); > 0, one of "k0".."k<keys - 1>" at random. */
typedef struct keyspace {
  sluice_limiter *lim;
  long keys;
} keyspace;

static int check_key(pump *p, long i) {
  keyspace *k = p->ud;
  char key[32];
  if (k->keys < 0) snprintf(key, sizeof key, "w%ld", i);
  else snprintf(key, sizeof key, "k%ld", k->keys ? (long)rand() % k->keys : i);
  return sluice_limiter_check(k->lim, key, 1, on_checked, p);
}

static const sluice__script *algo_script(sluice_rl_algo a) {
  return a == SLUICE_RL_FIXED             ? &sluice__lua_rl_fixed
         : a == SLUICE_RL_SLIDING_LOG     ? &sluice__lua_rl_sliding_log
         : a == SLUICE_RL_SLIDING_COUNTER ? &sluice__lua_rl_sliding_counter
                                          : &sluice__lua_rl_gcra;
}

/* Redis microseconds per check of a random key. */
static double check_phase(keyspace *k, sluice_rl_algo algo) {
  const sluice__script *const list[] = {algo_script(algo), NULL};
  timed_begin();
  pump ops = {0, 0, RL_OPS, 0, 200, check_key, k};
  pump_run(&ops, "check");
  return timed_end(list) / RL_OPS;
}

static void limiter_keys(sluice_rl_algo algo, long n, bench_table *tab, double *first) {
  flush();
  sluice_client *c = new_client();
  sluice_limiter_options o;
  sluice_limiter_options_init(&o);
  o.algo = algo;
  o.limit = 100;
  o.period_ms = 3600000;
  keyspace k = {NULL, 0};
  if (sluice_limiter_new(c, "scale", &o, &k.lim) != 0) exit(1);
  k.keys = -2000; /* keys "w<i>": Redis's buffers grow for full batches */
  pump warm = {0, 0, 2000, 0, 2000, check_key, &k};
  pump_run(&warm, "check");
  k.keys = 0;
  snap s0 = take_snap();
  pump fill = {0, 0, n, 0, 2000, check_key, &k};
  pump_run(&fill, "check");
  double bytes = (take_snap().mem - s0.mem) / (double)n;
  k.keys = n;
  double op_us = 1e9;
  for (int round = 0; round < ROUNDS; round++) op_us = least(op_us, check_phase(&k, algo));
  if (!first[0]) first[0] = bytes, first[1] = op_us;
  bench_table_row(tab, "%s|%ld|%.0f|%.2f|%.2f|%.2f", sluice_rl_algo_name(algo), n, bytes,
                  ratio(bytes, first[0]), op_us, ratio(op_us, first[1]));
  sluice_limiter_free(k.lim);
  close_client(c);
}

/* One sliding-log key grown to n entries (one check of cost 1 each,
 * limit LOG_LIMIT per hour): bytes per entry from used_memory's growth
 * past the first LOG_BASE entries (which carry the key's own cost), and
 * from MEMORY USAGE of the key. */
#define LOG_LIMIT 100000
#define LOG_BASE 1000

static int check_log(pump *p, long i) {
  return sluice_limiter_check(p->ud, "log", 1, on_checked, p);
}

static double key_usage(void) {
  redisReply *k = mon_cmd("KEYS *log*");
  double v = 0;
  if (k->elements == 1) {
    redisReply *u = mon_cmd("MEMORY USAGE %s SAMPLES 0", k->element[0]->str);
    v = (double)u->integer;
    freeReplyObject(u);
  }
  freeReplyObject(k);
  return v;
}

static void log_entries(long n, bench_table *tab) {
  flush();
  sluice_client *c = new_client();
  sluice_limiter_options o;
  sluice_limiter_options_init(&o);
  o.algo = SLUICE_RL_SLIDING_LOG;
  o.limit = LOG_LIMIT;
  o.period_ms = 3600000;
  sluice_limiter *lim = NULL;
  if (sluice_limiter_new(c, "scale", &o, &lim) != 0) exit(1);
  pump first = {0, 0, LOG_BASE, 0, 2000, check_log, lim};
  pump_run(&first, "check");
  snap s0 = take_snap();
  pump grow = {0, 0, n - LOG_BASE, 0, 2000, check_log, lim};
  pump_run(&grow, "check");
  double bytes = (take_snap().mem - s0.mem) / (double)(n - LOG_BASE);
  double usage = key_usage();
  bench_table_row(tab, "%ld|%.1f|%.0f|%.1f", n, bytes, usage, usage / n);
  sluice_limiter_free(lim);
  close_client(c);
}

static void run_log(void) {
  const char *cols[] = {"entries", "bytes/entry", "MEMORY USAGE", "usage/entry", NULL};
  bench_table *t = bench_table_new("scale: one sliding-log key as it grows", cols);
  for (long n = 10000; n <= size_max && n <= LOG_LIMIT; n *= 10) log_entries(n, t);
  bench_table_print(t, stdout);
  bench_table_free(t);
}

/* ---- main ------------------------------------------------------------------ */

static void run_messages(void) {
  const char *cols[] = {"messages", "bytes/msg", "x", "push us", "x", "take+ack us", "x", NULL};
  bench_table *t = bench_table_new("scale: queued messages (16-byte payloads, due now)", cols);
  double first[3] = {0};
  for (long n = 1000; n <= size_max && n <= 1000000; n *= 10) messages(n, t, first);
  bench_table_print(t, stdout);
  bench_table_free(t);
}

/* A few hundred waiters take less memory than used_memory moves by on
 * its own meanwhile (Redis's buffers resized and freed): bytes per waiter
 * from a growth under MEM_NOISE are shown, without a ratio, and the
 * ratios are taken against the first size above it. */
#define MEM_NOISE (128 * 1024)

static void waiters_rows(bench_table *t, const waiting *w, int rows) {
  const waiting *mem_base = NULL;
  for (int i = 0; i < rows && !mem_base; i++)
    if (w[i].bytes * w[i].n >= MEM_NOISE) mem_base = &w[i];
  for (int i = 0; i < rows; i++) {
    char x[16] = "-";
    if (mem_base && w[i].bytes * w[i].n >= MEM_NOISE)
      snprintf(x, sizeof x, "%.2f", ratio(w[i].bytes, mem_base->bytes));
    bench_table_row(t, "%ld|%.0f|%s|%.1f|%.2f|%.0f|%.2f|%.1f", w[i].n, w[i].bytes, x, w[i].calls,
                    ratio(w[i].calls, w[0].calls), w[i].cmds, ratio(w[i].cmds, w[0].cmds),
                    w[i].cpu);
  }
}

static void run_sems(void) {
  const char *pc[] = {"held permits",
                      "bytes/permit",
                      "x",
                      "idle calls/s",
                      "x",
                      "idle cmds/s",
                      "Redis CPU %",
                      "acq+rel us",
                      "x",
                      NULL};
  bench_table *t = bench_table_new("scale: held permits (TTL 3 s, renewed every 1 s)", pc);
  double first[3] = {0};
  for (long n = 100; n <= size_max && n <= 100000; n *= 10) permits(n, t, first);
  bench_table_print(t, stdout);
  bench_table_free(t);
  const char *wc[] = {
      "idle waiters", "bytes/waiter", "x", "calls/s", "x", "cmds/s", "x", "Redis CPU %", NULL};
  t = bench_table_new("scale: waiters blocked on one handle (permit held)", wc);
  waiting w[4];
  int rows = 0;
  for (long n = 100; n <= size_max && n <= 100000; n *= 10) waiters(n, &w[rows++]);
  waiters_rows(t, w, rows);
  bench_table_print(t, stdout);
  bench_table_free(t);
  const char *rc[] = {"lease s",      "renew s", "held permits", "calls/s", "calls/period",
                      "permits/call", "cmds/s",  "Redis CPU %",  NULL};
  t = bench_table_new("scale: renewals of permits held one by one", rc);
  if (size_max >= 10000) {
    renewals(3000, 10000, t);
    renewals(30000, 10000, t); /* the default lease */
  }
  bench_table_print(t, stdout);
  bench_table_free(t);
}

static void run_limiters(void) {
  const char *cols[] = {"algorithm", "keys", "bytes/key", "x", "check us", "x", NULL};
  bench_table *t = bench_table_new("scale: limiter keys (one check each, 100 per hour)", cols);
  for (int a = SLUICE_RL_FIXED; a <= SLUICE_RL_GCRA; a++) {
    double first[2] = {0};
    for (long n = 1000; n <= size_max && n <= 1000000; n *= 10)
      limiter_keys((sluice_rl_algo)a, n, t, first);
  }
  bench_table_print(t, stdout);
  bench_table_free(t);
}

int main(int argc, char **argv) {
  if (argc == 3 && strcmp(argv[1], "--max") == 0) size_max = atol(argv[2]);
  else if (argc != 1) {
    fprintf(stderr, "usage: bench_scale [--max N]\n");
    return 2;
  }
  for (size_t i = 0; i < PUSH_BATCH; i++)
    msg_items[i] = (sluice_dq_item){"0123456789abcdef", 16, 0, 0, NULL};
  if (bench_redis_start(&rs) != 0) return 1;
  if (bench_can_pin()) bench_pin_self(BENCH_CPU_CLIENT);
  mon = redisConnect(rs.host, rs.port);
  struct event_config *cfg = event_config_new(); /* timers as a server would have them */
  event_config_set_flag(cfg, EVENT_BASE_FLAG_PRECISE_TIMER);
  base = event_base_new_with_config(cfg);
  event_config_free(cfg);
  if (!mon || mon->err || !base) return 1;
  printf("scale: Redis at %s, %d CPUs, pinning %s, sizes up to %ld\n", rs.url, bench_ncpus(),
         bench_can_pin() ? "on" : "off", size_max);
  run_messages();
  run_sems();
  run_limiters();
  run_log();
  freeReplyObject(mon_cmd("CONFIG SET slowlog-log-slower-than 10000"));
  freeReplyObject(mon_cmd("CONFIG SET slowlog-max-len 128"));
  flush();
  redisFree(mon);
  event_base_free(base);
  bench_redis_stop(&rs);
  return 0;
}
