/*
 * Delay queue benchmark (not a pass/fail test):
 *  - push throughput (batches of 100, and single pushes pipelined);
 *  - consume throughput (take + ack of due messages), beside redis-benchmark
 *    running the same take script (EVALSHA, same KEYS/ARGV but take
 *    number 0: one repeated number would make every run after the first a
 *    stale one) with the ratio;
 *  - delivery lateness p50/p99/max at 1,000 and 10,000 messages/s, producer
 *    in another process, delays 20..1020 ms;
 *  - Redis commands per second of an idle consumer;
 *  - BullMQ (bench/node/dq.js) doing the same against the same server.
 * The consumer's event_base uses EVENT_BASE_FLAG_PRECISE_TIMER: without it
 * libevent rounds timer waits up to whole ms (see docs/delay-queue.md).
 */
#include "bench.h"

#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <event2/event.h>
#include <hiredis/hiredis.h>
#include <sluice/sluice.h>

#include "dq/dq_args.h"

#define N_PUSH 100000
#define N_CONSUME 100000
/* Longer than the idle poll (60 s) and two BRPOP periods (30 s): an idle
 * consumer's cost is only seen over a whole cycle. */
#define IDLE_SECONDS 65
#define TAKE_BATCH 100

static bench_redis rs;

static struct event_base *new_base(void) {
  struct event_config *cfg = event_config_new();
  event_config_set_flag(cfg, EVENT_BASE_FLAG_PRECISE_TIMER);
  struct event_base *b = event_base_new_with_config(cfg);
  event_config_free(cfg);
  return b;
}

static sluice_client *new_client(struct event_base *base) {
  sluice_client_options o;
  sluice_client *c = NULL;
  sluice_client_options_init(&o);
  o.replay_off = bench_replay_off();
  o.url = rs.url;
  o.op_timeout_ms = 30000;
  if (sluice_client_new(base, &o, &c) != 0) {
    fprintf(stderr, "bench_dq: cannot create client\n");
    exit(1);
  }
  return c;
}

static void finish(struct event_base *base, sluice_client *c) {
  sluice_client_free(c);
  event_base_dispatch(base);
  event_base_free(base);
}

static int64_t unix_us(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

/* ---- pushing ------------------------------------------------------------- */

typedef struct pusher {
  sluice_dq *dq;
  int outstanding, failed;
  uint64_t sent, total;
} pusher;

static void on_batch(sluice_dq *dq, int status, const sluice_dq_push_result *r, size_t n,
                     void *ud) {
  pusher *p = ud;
  p->outstanding--;
  if (status != SLUICE_OK) p->failed++;
}

static void on_one(sluice_dq *dq, int status, const char *id, int64_t due, void *ud) {
  pusher *p = ud;
  p->outstanding--;
  if (status != SLUICE_OK) p->failed++;
}

/* Push total messages of delay_ms, batch per call (1: sluice_dq_push), with
 * up to depth calls in flight. Returns messages per second; *cpu_us (if not
 * NULL) the client's CPU per message. */
static double push_run(struct event_base *base, sluice_dq *dq, uint64_t total, size_t batch,
                       int depth, int64_t delay_ms, double *cpu_us) {
  static sluice_dq_item items[TAKE_BATCH];
  for (size_t i = 0; i < batch; i++)
    items[i] = (sluice_dq_item){"payload-0123456789", 18, delay_ms, 0, NULL};
  pusher p = {dq, 0, 0, 0, total};
  uint64_t t0 = bench_now_us();
  bench_cpu cpu = bench_cpu_start();
  while (p.sent < total || p.outstanding) {
    while (p.sent < total && p.outstanding < depth) {
      int rc = batch == 1 ? sluice_dq_push(dq, items, on_one, &p)
                          : sluice_dq_push_batch(dq, items, batch, on_batch, &p);
      if (rc) {
        fprintf(stderr, "bench_dq: push: %s\n", sluice_strerror(rc));
        exit(1);
      }
      p.outstanding++;
      p.sent += batch;
    }
    event_base_loop(base, EVLOOP_ONCE);
  }
  if (p.failed) fprintf(stderr, "bench_dq: %d pushes failed\n", p.failed);
  if (cpu_us) *cpu_us = bench_cpu_us_per_op(&cpu, (long)total);
  return (double)total * 1e6 / (double)(bench_now_us() - t0);
}

/* ---- consuming ----------------------------------------------------------- */

typedef struct sink {
  uint64_t got, acked, want;
  bench_lat *lat; /* lateness samples (us), or NULL */
} sink;

static void on_ack(sluice_dq_consumer *con, int status, const char *id, void *ud) {
  ((sink *)ud)->acked++;
}

static void on_msg(sluice_dq_consumer *con, sluice_dq_msg *m, void *ud) {
  sink *s = ud;
  if (s->lat) bench_lat_add(s->lat, (double)(unix_us() - sluice_dq_msg_due_ms(m) * 1000));
  s->got++;
  sluice_dq_ack(m, on_ack, s);
}

static sluice_dq_consumer *consumer(sluice_client *c, const char *q, sink *s) {
  sluice_dq_consumer_options o;
  sluice_dq_consumer *con = NULL;
  sluice_dq_consumer_options_init(&o);
  o.batch = TAKE_BATCH;
  o.max_in_flight = 1000;
  if (sluice_dq_consumer_new(c, q, &o, on_msg, s, &con) != 0) exit(1);
  return con;
}

static double consume_run(double *cpu_us) {
  struct event_base *base = new_base();
  sluice_client *c = new_client(base);
  sluice_dq *dq = NULL;
  sluice_dq_new(c, "consume", NULL, &dq);
  push_run(base, dq, N_CONSUME, TAKE_BATCH, 16, 0, NULL);
  sink s = {0, 0, N_CONSUME, NULL};
  uint64_t t0 = bench_now_us();
  bench_cpu cpu = bench_cpu_start();
  sluice_dq_consumer *con = consumer(c, "consume", &s);
  while (s.acked < N_CONSUME) event_base_loop(base, EVLOOP_ONCE);
  double rate = (double)N_CONSUME * 1e6 / (double)(bench_now_us() - t0);
  *cpu_us = bench_cpu_us_per_op(&cpu, N_CONSUME);
  sluice_dq_consumer_free(con);
  sluice_dq_free(dq);
  finish(base, c);
  return rate;
}

/* The take script alone, by redis-benchmark: messages/s (batch per call). */
static int take_rb(double *msgs_per_s, bench_rb_result *res) {
  char sha[41];
  struct event_base *base = new_base();
  sluice_client *c = new_client(base);
  sluice_dq *dq = NULL;
  sluice_dq_new(c, "rb", NULL, &dq);
  push_run(base, dq, N_CONSUME, TAKE_BATCH, 16, 0, NULL);
  sluice_dq_free(dq);
  finish(base, c);
  if (bench_script_load(&rs, &sluice__lua_dq_take, sha) != 0) return -1;
  /* What the consumer sends (bench's consumer options), built the same way. */
  static char kz[] = "sluice:dq:{rb}:z", kf[] = "sluice:dq:{rb}:f", kd[] = "sluice:dq:{rb}:d",
              kh[] = "sluice:dq:{rb}:h", kc[] = "sluice:dq:{rb}:c";
  char *keys[DQ_NKEYS] = {kz, kf, kd, kh, kc};
  sluice_dq_consumer_options co;
  sluice_dq_consumer_options_init(&co);
  sluice__args a;
  if (sluice__args_init(&a, DQ_TAKE_ARGS, DQ_TAKE_NUMS) != 0) return -1;
  sluice__dq_take_args(&a, keys, co.retention_ms, TAKE_BATCH, co.visibility_ms, co.max_attempts,
                       "redis-benchmark", co.max_poll_ms, 0, 0);
  bench_rb_opts o = {.clients = 4, .requests = N_CONSUME / TAKE_BATCH, .pipeline = 4};
  int rc = a.failed ? -1 : bench_evalsha(&rs, &o, sha, a.nkeys, a.argc, a.argv, res);
  sluice__args_clear(&a);
  if (rc != 0) return -1;
  *msgs_per_s = res->rps * TAKE_BATCH;
  return 0;
}

/* ---- lateness ------------------------------------------------------------ */

typedef struct pacer {
  struct event_base *base;
  sluice_dq *dq;
  struct event *ev;
  uint64_t t0, sent, total;
  double rate;
  pusher p;
} pacer;

static void pace_cb(evutil_socket_t fd, short what, void *arg) {
  static sluice_dq_item items[SLUICE_DQ_BATCH_MAX];
  pacer *pc = arg;
  uint64_t due = (uint64_t)((double)(bench_now_us() - pc->t0) * pc->rate / 1e6) + 1;
  if (due > pc->total) due = pc->total;
  size_t n = 0;
  for (; pc->sent < due && n < SLUICE_DQ_BATCH_MAX; pc->sent++, n++)
    items[n] = (sluice_dq_item){"late", 4, 20 + rand() % 1000, 0, NULL};
  if (n && sluice_dq_push_batch(pc->dq, items, n, on_batch, &pc->p) == 0) pc->p.outstanding++;
  if (pc->sent < pc->total) {
    struct timeval tv = {0, 1000};
    evtimer_add(pc->ev, &tv);
  }
}

/* Producer process: rate messages/s for seconds, then exit. */
static void produce(double rate, double seconds) {
  bench_pin_self(BENCH_CPU_CLIENT);
  struct event_base *base = new_base();
  sluice_client *c = new_client(base);
  pacer pc = {base, NULL, NULL, bench_now_us(), 0, (uint64_t)(rate * seconds), rate, {0}};
  sluice_dq_new(c, "late", NULL, &pc.dq);
  pc.ev = evtimer_new(base, pace_cb, &pc);
  srand(7);
  event_active(pc.ev, 0, 0);
  while (pc.sent < pc.total || pc.p.outstanding) event_base_loop(base, EVLOOP_ONCE);
  event_free(pc.ev);
  sluice_dq_free(pc.dq);
  finish(base, c);
  _exit(0);
}

static void lateness_run(double rate, double seconds, bench_lat *lat) {
  pid_t pid = fork();
  if (pid == 0) produce(rate, seconds);
  struct event_base *base = new_base();
  sluice_client *c = new_client(base);
  sink s = {0, 0, (uint64_t)(rate * seconds), lat};
  sluice_dq_consumer *con = consumer(c, "late", &s);
  while (s.got < s.want) event_base_loop(base, EVLOOP_ONCE);
  waitpid(pid, NULL, 0);
  sluice_dq_consumer_free(con);
  finish(base, c);
}

/* ---- idle cost ----------------------------------------------------------- */

static long long total_commands(void) {
  struct timeval tv = {2, 0};
  redisContext *rc = redisConnectWithTimeout(rs.host, rs.port, tv);
  long long v = -1;
  redisReply *rep = rc && !rc->err ? redisCommand(rc, "INFO stats") : NULL;
  if (rep && rep->type == REDIS_REPLY_STRING) {
    const char *p = strstr(rep->str, "total_commands_processed:");
    if (p) v = strtoll(p + 25, NULL, 10);
  }
  if (rep) freeReplyObject(rep);
  if (rc) redisFree(rc);
  return v;
}

static double idle_run(double seconds) {
  struct event_base *base = new_base();
  sluice_client *c = new_client(base);
  sluice_dq *dq = NULL;
  sluice_dq_new(c, "idle", NULL, &dq);
  push_run(base, dq, 1, 1, 1, 3600000, NULL);
  sink s = {0};
  sluice_dq_consumer *con = consumer(c, "idle", &s);
  struct timeval settle = {1, 0}, span = {(time_t)seconds, 0};
  event_base_loopexit(base, &settle);
  event_base_dispatch(base);
  long long c0 = total_commands();
  event_base_loopexit(base, &span);
  event_base_dispatch(base);
  long long used = total_commands() - c0 - 1; /* minus our INFO */
  sluice_dq_consumer_free(con);
  sluice_dq_free(dq);
  finish(base, c);
  return (double)used / seconds;
}

/* ---- BullMQ -------------------------------------------------------------- */

/* Run dq.js MODE ARGS and read the number after "key": in its JSON line. */
static int node_run(const char *args, const char *const *keys, double *vals, int n) {
  char cmd[512], line[512] = "";
  snprintf(cmd, sizeof cmd, "taskset -c %d node '%s/dq.js' %s 2>&1", BENCH_CPU_CLIENT,
           bench_node_dir(), args);
  FILE *p = popen(cmd, "r");
  if (!p) return -1;
  while (fgets(line, sizeof line, p) && line[0] != '{') {}
  int st = pclose(p);
  for (int i = 0; i < n; i++) {
    char key[64];
    snprintf(key, sizeof key, "\"%s\":", keys[i]);
    const char *at = strstr(line, key);
    if (!at || st != 0) {
      fprintf(stderr, "bench_dq: node %s failed: %s", args, line);
      return -1;
    }
    vals[i] = strtod(at + strlen(key), NULL);
  }
  return 0;
}

/* ---- cluster ---------------------------------------------------------------- */

/* Pushes (batches of 100) and consumption (take + ack) spread over CL_QUEUES
 * queues, whose slots spread over the masters, on the private cluster and,
 * in the same run, on the standalone server. No redis-benchmark beside it:
 * its --cluster picks the slot of each "{tag}" itself, so the take script
 * would find no messages there to take. The servers share one core here:
 * this shows the client's routing cost, not scaling. */
#define CL_QUEUES 16
#define CL_MSGS 50000

typedef struct cl_result {
  double push, push_cpu, consume, consume_cpu;
} cl_result;

static double cl_push(struct event_base *base, sluice_dq **dqs, uint64_t total, double *cpu_us) {
  static sluice_dq_item items[TAKE_BATCH];
  for (size_t i = 0; i < TAKE_BATCH; i++)
    items[i] = (sluice_dq_item){"payload-0123456789", 18, 0, 0, NULL};
  pusher p = {NULL, 0, 0, 0, total};
  uint64_t t0 = bench_now_us();
  bench_cpu cpu = bench_cpu_start();
  for (int q = 0; p.sent < total || p.outstanding;) {
    while (p.sent < total && p.outstanding < 16) {
      if (sluice_dq_push_batch(dqs[q++ % CL_QUEUES], items, TAKE_BATCH, on_batch, &p) != 0) exit(1);
      p.outstanding++;
      p.sent += TAKE_BATCH;
    }
    event_base_loop(base, EVLOOP_ONCE);
  }
  if (p.failed) fprintf(stderr, "bench_dq: cluster: %d pushes failed\n", p.failed);
  *cpu_us = bench_cpu_us_per_op(&cpu, (long)total);
  return (double)total * 1e6 / (double)(bench_now_us() - t0);
}

static void cl_one(const char *url, cl_result *out) {
  struct event_base *base = new_base();
  sluice_client_options o;
  sluice_client *c = NULL;
  sluice_client_options_init(&o);
  o.replay_off = bench_replay_off();
  o.url = url;
  o.op_timeout_ms = 30000;
  if (sluice_client_new(base, &o, &c) != 0) exit(1);
  sluice_dq *dqs[CL_QUEUES];
  char name[CL_QUEUES][16];
  for (int i = 0; i < CL_QUEUES; i++) {
    snprintf(name[i], sizeof name[i], "cq%d", i);
    sluice_dq_new(c, name[i], NULL, &dqs[i]);
  }
  double cpu;
  cl_push(base, dqs, 10000, &cpu); /* warm up, and drained below with the rest */
  out->push = cl_push(base, dqs, CL_MSGS, &out->push_cpu);
  sink s = {0, 0, CL_MSGS + 10000, NULL};
  uint64_t t0 = bench_now_us();
  bench_cpu cc = bench_cpu_start();
  sluice_dq_consumer *cons[CL_QUEUES];
  for (int i = 0; i < CL_QUEUES; i++) cons[i] = consumer(c, name[i], &s);
  while (s.acked < s.want) event_base_loop(base, EVLOOP_ONCE);
  out->consume = (double)s.want * 1e6 / (double)(bench_now_us() - t0);
  out->consume_cpu = bench_cpu_us_per_op(&cc, (long)s.want);
  for (int i = 0; i < CL_QUEUES; i++) {
    sluice_dq_consumer_free(cons[i]);
    sluice_dq_free(dqs[i]);
  }
  finish(base, c);
}

static void cluster_run(void) {
  bench_cluster cl;
  if (bench_cluster_attach(&cl) != 0) return;
  cl_result best[2];
  memset(best, 0, sizeof best);
  const char *urls[2] = {rs.url, cl.url};
  for (int rep = 0; rep < 2; rep++)
    for (int k = 0; k < 2; k++) {
      cl_result one;
      cl_one(urls[k], &one);
      if (one.push > best[k].push) {
        best[k].push = one.push;
        best[k].push_cpu = one.push_cpu;
      }
      if (one.consume > best[k].consume) {
        best[k].consume = one.consume;
        best[k].consume_cpu = one.consume_cpu;
      }
      if (k) bench_cluster_flush(&cl);
      else bench_redis_flush(&rs);
    }
  static const char *const cols[] = {"messages/s", "standalone",         "CPU us/msg", "cluster",
                                     "CPU us/msg", "cluster/standalone", NULL};
  char title[200];
  snprintf(title, sizeof title,
           "Delay queue: cluster (%d masters, one core between them) vs standalone, same run, %d "
           "queues, best of 2",
           cl.n, CL_QUEUES);
  bench_table *t = bench_table_new(title, cols);
  bench_table_row(t, "push, batches of 100|%.0f|%.2f|%.0f|%.2f|%.2f", best[0].push,
                  best[0].push_cpu, best[1].push, best[1].push_cpu, best[1].push / best[0].push);
  bench_table_row(t, "consume (take + ack), a consumer per queue|%.0f|%.2f|%.0f|%.2f|%.2f",
                  best[0].consume, best[0].consume_cpu, best[1].consume, best[1].consume_cpu,
                  best[1].consume / best[0].consume);
  bench_table_print(t, stdout);
  bench_table_free(t);
  printf("cluster: BullMQ not run on the cluster (not measured here)\n\n");
}

int main(void) {
  char args[256];
  signal(SIGPIPE, SIG_IGN);
  if (bench_redis_start(&rs) != 0) return 1;
  if (bench_can_pin()) bench_pin_self(BENCH_CPU_CLIENT);
  int node = bench_node_available();

  struct event_base *base = new_base();
  sluice_client *c = new_client(base);
  sluice_dq *dq = NULL;
  sluice_dq_new(c, "push", NULL, &dq);
  push_run(base, dq, 10000, TAKE_BATCH, 16, 600000, NULL); /* warm up */
  double cpu_batch, cpu_single, cpu_consume;
  double push_batch = push_run(base, dq, N_PUSH, TAKE_BATCH, 16, 600000, &cpu_batch);
  double push_single = push_run(base, dq, N_PUSH / 2, 1, 256, 600000, &cpu_single);
  sluice_dq_free(dq);
  finish(base, c);
  bench_redis_flush(&rs);
  double consume = consume_run(&cpu_consume);
  bench_redis_flush(&rs);
  double take_msgs = 0;
  bench_rb_result rb = {0};
  int have_rb = bench_have_redis_benchmark() && take_rb(&take_msgs, &rb) == 0;
  bench_redis_flush(&rs);

  static const char *const cols[] = {"delay queue", "sluice",        "CPU us/msg", "BullMQ",
                                     "CPU us/msg",  "sluice/BullMQ", NULL};
  bench_table *t = bench_table_new("Delay queue: throughput (messages/s)", cols);
  double bull[2] = {0}, bull_cons_v[2] = {0};
  static const char *const k_push[] = {"push_per_s", "cpu_us_per_op"};
  static const char *const k_cons[] = {"consume_per_s", "cpu_us_per_op"};
  snprintf(args, sizeof args, "push %s %d %d", rs.host, rs.port, N_PUSH);
  int bull_push = node && node_run(args, k_push, bull, 2) == 0;
  snprintf(args, sizeof args, "consume %s %d %d", rs.host, rs.port, N_CONSUME / 2);
  int bull_cons = node && node_run(args, k_cons, bull_cons_v, 2) == 0;
  bench_redis_flush(&rs);
  if (bull_push)
    bench_table_row(t, "push, batches of 100|%.0f|%.2f|%.0f|%.2f|%.2f", push_batch, cpu_batch,
                    bull[0], bull[1], push_batch / bull[0]);
  else bench_table_row(t, "push, batches of 100|%.0f|%.2f|-|-|-", push_batch, cpu_batch);
  bench_table_row(t, "push, single (256 in flight)|%.0f|%.2f|-|-|-", push_single, cpu_single);
  if (bull_cons)
    bench_table_row(t, "consume (take + ack)|%.0f|%.2f|%.0f|%.2f|%.2f", consume, cpu_consume,
                    bull_cons_v[0], bull_cons_v[1], consume / bull_cons_v[0]);
  else bench_table_row(t, "consume (take + ack)|%.0f|%.2f|-|-|-", consume, cpu_consume);
  bench_table_print(t, stdout);
  bench_table_free(t);
  if (have_rb)
    printf(
        "take script alone (redis-benchmark, EVALSHA dq_take, batch 100, same KEYS/ARGV): "
        "%.0f calls/s = %.0f messages/s; sluice consume / take alone = %.2f\n\n",
        rb.rps, take_msgs, consume / take_msgs);

  static const char *const lcols[] = {"lateness (ms)", "p50",        "p99",        "max",
                                      "BullMQ p50",    "BullMQ p99", "BullMQ max", NULL};
  t = bench_table_new("Delay queue: delivery lateness, delays 20..1020 ms", lcols);
  static const double rates[] = {1000, 10000};
  static const double secs[] = {5, 3};
  static const char *const k_late[] = {"p50_ms", "p99_ms", "max_ms"};
  for (int i = 0; i < 2; i++) {
    bench_lat *lat = bench_lat_new();
    lateness_run(rates[i], secs[i], lat);
    bench_redis_flush(&rs);
    double b[3];
    snprintf(args, sizeof args, "lateness %s %d %.0f %.0f", rs.host, rs.port, rates[i], secs[i]);
    if (node && node_run(args, k_late, b, 3) == 0)
      bench_table_row(t, "%.0f msg/s|%.2f|%.2f|%.2f|%.0f|%.0f|%.0f", rates[i],
                      bench_lat_pct(lat, 50) / 1000, bench_lat_pct(lat, 99) / 1000,
                      bench_lat_max(lat) / 1000, b[0], b[1], b[2]);
    else
      bench_table_row(t, "%.0f msg/s|%.2f|%.2f|%.2f|-|-|-", rates[i], bench_lat_pct(lat, 50) / 1000,
                      bench_lat_pct(lat, 99) / 1000, bench_lat_max(lat) / 1000);
    bench_lat_free(lat);
    bench_redis_flush(&rs);
  }
  bench_table_print(t, stdout);
  bench_table_free(t);

  cluster_run();

  double idle = idle_run(IDLE_SECONDS), bull_idle = -1;
  static const char *const k_idle[] = {"idle_cmds_per_s"};
  snprintf(args, sizeof args, "idle %s %d 5", rs.host, rs.port);
  if (node && node_run(args, k_idle, &bull_idle, 1) != 0) bull_idle = -1;
  if (bull_idle >= 0)
    printf(
        "idle consumer: sluice %.2f Redis commands/s over %d s, BullMQ worker %.2f commands/s "
        "over 5 s\n",
        idle, IDLE_SECONDS, bull_idle);
  else
    printf("idle consumer: sluice %.2f Redis commands/s over %d s (BullMQ skipped)\n", idle,
           IDLE_SECONDS);
  bench_redis_stop(&rs);
  return 0;
}
