/* Delay queue under load and failure: many messages across consumer
 * processes, consumers killed mid-batch, Redis restarted or connections
 * killed, and a steady stream delivered on time. */
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <event2/event.h>
#include <sluice/sluice.h>

#include "dq_util.h"
#include "harness.h"

/* What a child consumer reports per delivery, through a pipe (atomic write). */
typedef struct report {
  uint32_t index; /* message index, parsed from the payload */
  uint32_t attempt;
  int32_t late_ms;
  uint32_t pad;
} report;

typedef struct child_cfg {
  const char *queue;
  unsigned batch, max_in_flight, visibility_ms, max_attempts;
  int ack; /* 0: hold every message forever (a consumer about to die) */
  int fd;  /* write end of the report pipe */
} child_cfg;

static void child_handler(sluice_dq_consumer *con, sluice_dq_msg *m, void *ud) {
  const child_cfg *cfg = ud;
  size_t len;
  const char *p = sluice_dq_msg_payload(m, &len);
  report r = {(uint32_t)strtoul(p, NULL, 10), sluice_dq_msg_attempt(m),
              (int32_t)(dqt_unix_ms() - sluice_dq_msg_due_ms(m)), 0};
  if (cfg->ack) sluice_dq_ack(m, NULL, NULL);
  if (write(cfg->fd, &r, sizeof r) != sizeof r) _exit(3);
}

/* Fork a consumer process that reports deliveries to cfg->fd and runs until
 * killed. */
static pid_t spawn_consumer(const child_cfg *cfg) {
  pid_t pid = fork();
  TH_ASSERT(pid >= 0);
  if (pid) return pid;
  prctl(PR_SET_PDEATHSIG, SIGKILL); /* never outlive a failed case */
  if (getppid() == 1) _exit(1);
  struct event_base *base = event_base_new();
  sluice_client *c = dqt_client(base);
  sluice_dq_consumer_options o = dqt_options(cfg->batch, cfg->max_in_flight, cfg->visibility_ms,
                                             cfg->max_attempts);
  sluice_dq_consumer *con = NULL;
  if (sluice_dq_consumer_new(c, cfg->queue, &o, child_handler, (void *)cfg, &con) != 0) _exit(2);
  event_base_dispatch(base);
  _exit(0);
}

static void kill_child(pid_t pid) {
  kill(pid, SIGKILL);
  while (waitpid(pid, NULL, 0) < 0 && errno == EINTR) {}
}

/* Read n reports from fd within timeout_ms. */
static void read_reports(int fd, report *out, int n, unsigned timeout_ms) {
  uint64_t end = th_now_ms() + timeout_ms;
  for (int got = 0; got < n;) {
    struct pollfd pfd = {fd, POLLIN, 0};
    int left = (int)(end - th_now_ms());
    TH_ASSERT(th_now_ms() < end);
    if (poll(&pfd, 1, left) <= 0) continue;
    ssize_t r = read(fd, &out[got], sizeof *out);
    TH_ASSERT_EQ(r, (ssize_t)sizeof *out);
    got++;
  }
}

typedef struct batch_wait {
  int outstanding, failed;
} batch_wait;

static void on_batch(sluice_dq *dq, int status, const sluice_dq_push_result *res, size_t n,
                     void *ud) {
  batch_wait *w = ud;
  w->outstanding--;
  if (status != SLUICE_OK) {
    th_note("push batch failed: %s\n", sluice_err_name(status));
    w->failed++;
  }
  for (size_t i = 0; i < n; i++)
    if (res[i].status != SLUICE_OK) w->failed++;
}

/* Push messages first..first+count-1 (payload = decimal index, id = "m" +
 * index), delay from delay_fn, in batches of 1000, all pipelined. */
static void push_range(struct event_base *base, sluice_dq *dq, uint32_t first, uint32_t count,
                       int64_t (*delay_fn)(uint32_t)) {
  enum { B = 1000 };
  static sluice_dq_item items[B];
  static char texts[B][12], ids[B][12];
  batch_wait w = {0, 0};
  for (uint32_t done = 0; done < count;) {
    uint32_t n = count - done < B ? count - done : B;
    for (uint32_t i = 0; i < n; i++) {
      uint32_t idx = first + done + i;
      snprintf(texts[i], sizeof texts[i], "%u", idx);
      snprintf(ids[i], sizeof ids[i], "m%u", idx);
      items[i] = (sluice_dq_item){texts[i], strlen(texts[i]), delay_fn(idx), 0, ids[i]};
    }
    TH_ASSERT_EQ(sluice_dq_push_batch(dq, items, n, on_batch, &w), SLUICE_OK);
    w.outstanding++;
    done += n;
  }
  uint64_t end = th_now_ms() + 30000;
  while (w.outstanding && th_now_ms() < end) event_base_loop(base, EVLOOP_ONCE);
  TH_ASSERT_EQ(w.outstanding, 0);
  TH_ASSERT_EQ(w.failed, 0);
}

static int64_t random_delay(uint32_t idx) { return (int64_t)(rand() % 3000); }
static int64_t no_delay(uint32_t idx) { return 0; }

static int cmp_int(const void *a, const void *b) {
  int x = *(const int *)a, y = *(const int *)b;
  return (x > y) - (x < y);
}

/* ---- no loss, no duplicates --------------------------------------------------- */

enum { MANY = 100000, PROCS = 4 };

/* Under valgrind (its preload library is in LD_PRELOAD) everything runs ~20x
 * slower: check memory with fewer messages, the full count otherwise. */
static int many(void) {
  const char *pre = getenv("LD_PRELOAD");
  return pre && strstr(pre, "vgpreload") ? MANY / 20 : MANY;
}

static void test_many_messages_many_consumers(void) {
  int fds[2];
  TH_ASSERT_EQ(pipe(fds), 0);
  child_cfg cfg = {"many", 64, 512, 30000, 5, 1, fds[1]};
  pid_t kids[PROCS];
  for (int i = 0; i < PROCS; i++) kids[i] = spawn_consumer(&cfg);
  close(fds[1]);
  struct event_base *base = event_base_new();
  sluice_client_options co;
  th_client_options(&co, th_server.url);
  co.op_timeout_ms = 30000; /* 100 batches of 1000 queue up behind each other */
  co.connect_timeout_ms = 10000;
  sluice_client *c = th_client_with(base, &co);
  const int n = many();
  sluice_dq *dq = dqt_queue(c, "many");
  srand(42);
  uint64_t t0 = th_now_ms();
  push_range(base, dq, 0, (uint32_t)n, random_delay);
  th_note("pushed %d messages in %llu ms\n", n, (unsigned long long)(th_now_ms() - t0));
  static unsigned char seen[MANY];
  static int late[MANY];
  int delivered = 0, dups = 0;
  report r;
  uint64_t end = th_now_ms() + 40000;
  while (delivered < n && th_now_ms() < end) {
    read_reports(fds[0], &r, 1, 40000);
    TH_ASSERT(r.index < (uint32_t)n);
    TH_ASSERT_EQ(r.attempt, 1);
    if (seen[r.index]++) dups++;
    else late[delivered++] = r.late_ms;
  }
  TH_ASSERT_EQ(delivered, n);
  /* Anything more within a while would be a duplicate. */
  struct pollfd pfd = {fds[0], POLLIN, 0};
  TH_ASSERT_EQ(poll(&pfd, 1, 300), 0);
  TH_ASSERT_EQ(dups, 0);
  th_note("delivered all in %llu ms across %d processes\n", (unsigned long long)(th_now_ms() - t0),
          PROCS);
  qsort(late, (size_t)n, sizeof late[0], cmp_int);
  th_note("lateness under load: p50 %d ms, p99 %d ms, max %d ms\n", late[n / 2], late[n * 99 / 100],
          late[n - 1]);
  for (int i = 0; i < PROCS; i++) kill_child(kids[i]);
  close(fds[0]);
  dqt_info in;
  sluice_dq_info info = dqt_inspect(base, dq, &in);
  TH_ASSERT_EQ(info.delayed + info.in_flight + info.dead, 0);
  sluice_dq_free(dq);
  dqt_finish(base, c);
}

/* ---- consumers killed mid-batch ----------------------------------------------- */

typedef struct collect {
  int n, reached, target;
  int want; /* > 0: reached when the message of this index comes */
  unsigned attempts[64];
  uint32_t index[64];
  uint64_t at[64];
  int acks;
} collect;

static void collect_ack(sluice_dq_consumer *con, int status, const char *id, void *ud) {
  collect *k = ud;
  if (status == SLUICE_OK) k->acks++;
}

static void collector(sluice_dq_consumer *con, sluice_dq_msg *m, void *ud) {
  collect *k = ud;
  TH_ASSERT(k->n < 64);
  k->attempts[k->n] = sluice_dq_msg_attempt(m);
  k->index[k->n] = (uint32_t)strtoul(sluice_dq_msg_payload(m, NULL), NULL, 10);
  k->at[k->n] = th_now_ms();
  k->n++;
  TH_ASSERT_EQ(sluice_dq_ack(m, collect_ack, k), SLUICE_OK);
  if (k->want > 0 ? k->index[k->n - 1] == (uint32_t)k->want : k->n >= k->target) k->reached = 1;
}

/* A consumer child (cfg, its report pipe set here) takes n messages and is
 * killed holding them; their reports into held. */
static void consumer_dies_holding(child_cfg *cfg, report *held, int n) {
  int fds[2];
  TH_ASSERT_EQ(pipe(fds), 0);
  cfg->fd = fds[1];
  pid_t kid = spawn_consumer(cfg);
  read_reports(fds[0], held, n, 5000);
  kill_child(kid);
  close(fds[0]);
  close(fds[1]);
}

/* A queue with pushed messages due now (payloads 0 .. pushed - 1) whose
 * first n a consumer child (cfg) took and was killed holding. */
static sluice_dq *queue_after_crash(struct event_base *base, sluice_client *c, child_cfg *cfg,
                                    uint32_t pushed, report *held, int n) {
  sluice_dq *dq = dqt_queue(c, cfg->queue);
  push_range(base, dq, 0, pushed, no_delay);
  consumer_dies_holding(cfg, held, n);
  return dq;
}

/* A consumer of queue (options o) that acks and records into k. */
static sluice_dq_consumer *collecting_consumer(sluice_client *c, const char *queue,
                                               const sluice_dq_consumer_options *o, collect *k) {
  sluice_dq_consumer *con = NULL;
  TH_ASSERT_EQ(sluice_dq_consumer_new(c, queue, o, collector, k, &con), SLUICE_OK);
  return con;
}

static void test_crash_redelivery(void) {
  struct event_base *base = event_base_new();
  sluice_client *c = dqt_client(base);
  /* A consumer takes a batch of 10 and dies holding them. */
  report held[10];
  sluice_dq *dq = queue_after_crash(base, c, &(child_cfg){"crash", 10, 10, 400, 5, 0, -1}, 20, held,
                                    10);
  uint64_t killed = th_now_ms();
  /* Another consumer gets the other ten at once, then the dead one's ten
   * after their visibility deadline, as attempt 2. */
  collect k = {.target = 20};
  sluice_dq_consumer_options o;
  sluice_dq_consumer_options_init(&o);
  o.visibility_ms = 400;
  sluice_dq_consumer *con = collecting_consumer(c, "crash", &o, &k);
  TH_ASSERT(th_loop_until(base, &k.reached, 5000));
  unsigned char seen[20] = {0};
  int second = 0;
  for (int i = 0; i < 20; i++) {
    TH_ASSERT(k.index[i] < 20);
    TH_ASSERT_EQ(seen[k.index[i]]++, 0);
    int was_held = 0;
    for (int j = 0; j < 10; j++) was_held |= held[j].index == k.index[i];
    TH_ASSERT_EQ(k.attempts[i], was_held ? 2 : 1);
    if (was_held) {
      second++;
      TH_ASSERT_CMP(k.at[i] + 5, >=, killed + 300); /* not before the deadline */
    }
  }
  TH_ASSERT_EQ(second, 10);
  uint64_t end = th_now_ms() + 3000;
  while (k.acks < 20 && th_now_ms() < end) th_loop_for(base, 5);
  TH_ASSERT_EQ(k.acks, 20);
  dqt_info in;
  sluice_dq_info info = dqt_inspect(base, dq, &in);
  TH_ASSERT_EQ(info.delayed + info.in_flight + info.dead, 0);
  sluice_dq_consumer_free(con);
  sluice_dq_free(dq);
  dqt_finish(base, c);
}

static void test_crash_dead_letters(void) {
  struct event_base *base = event_base_new();
  sluice_client *c = dqt_client(base);
  report held[5];
  sluice_dq *dq = queue_after_crash(base, c, &(child_cfg){"crashdead", 10, 10, 200, 1, 0, -1}, 5,
                                    held, 5);
  /* With max_attempts 1, the expired messages go to the dead letters. */
  collect k = {.target = 5};
  sluice_dq_consumer_options o;
  sluice_dq_consumer_options_init(&o);
  o.max_attempts = 1;
  sluice_dq_consumer *con = collecting_consumer(c, "crashdead", &o, &k);
  dqt_info in;
  uint64_t end = th_now_ms() + 3000;
  while (dqt_inspect(base, dq, &in).dead < 5 && th_now_ms() < end) th_loop_for(base, 20);
  TH_ASSERT_EQ(in.info.dead, 5);
  TH_ASSERT_EQ(k.n, 0);
  dqt_dead d = {0};
  TH_ASSERT_EQ(sluice_dq_dead_list(dq, 0, 100, dqt_on_dead, &d), SLUICE_OK);
  TH_ASSERT(th_loop_until(base, &d.done, 3000));
  TH_ASSERT_EQ(d.total, 5);
  TH_ASSERT_EQ(d.attempts, 1);
  memset(&d, 0, sizeof d);
  TH_ASSERT_EQ(sluice_dq_dead_requeue(dq, NULL, dqt_on_dead_count, &d), SLUICE_OK);
  TH_ASSERT(th_loop_until(base, &d.done, 3000));
  TH_ASSERT_EQ(d.count, 5);
  TH_ASSERT(th_loop_until(base, &k.reached, 3000));
  for (int i = 0; i < 5; i++) TH_ASSERT_EQ(k.attempts[i], 1);
  sluice_dq_consumer_free(con);
  sluice_dq_free(dq);
  dqt_finish(base, c);
}

/* ---- Redis restart and killed connections --------------------------------- */

/* Push (retrying while the producer reconnects) one due-now message. */
static void push_retrying(struct event_base *base, sluice_dq *dq, const char *payload) {
  uint64_t end = th_now_ms() + 5000;
  dqt_push p;
  while (dqt_push_wait(base, dq, NULL, payload, 0, &p) != SLUICE_OK) {
    TH_ASSERT(th_now_ms() < end);
    th_loop_for(base, 20);
  }
}

static void test_restart_and_client_kill(void) {
  struct event_base *base = event_base_new();
  sluice_client *c = dqt_client(base);
  sluice_dq *dq = dqt_queue(c, "restart");
  collect k = {.target = 1};
  sluice_dq_consumer_options o;
  sluice_dq_consumer_options_init(&o);
  o.max_poll_ms = 30000; /* only wake-ups and reconnects may find them */
  sluice_dq_consumer *con = collecting_consumer(c, "restart", &o, &k);
  push_retrying(base, dq, "0");
  TH_ASSERT(th_loop_until(base, &k.reached, 3000));
  th_redis_restart(&th_server); /* data gone: continuity is what counts */
  th_loop_for(base, 300);
  /* The record of unreplicated writes may push "0" again to the empty
   * Redis (acknowledged less than replay_window_ms ago): delivered again,
   * at least once, and counted as restored. Then "1". */
  k.want = 1;
  k.reached = 0;
  push_retrying(base, dq, "1");
  TH_ASSERT(th_loop_until(base, &k.reached, 5000));
  sluice_client_metrics cm;
  sluice_client_get_metrics(c, &cm);
  for (int i = 1; i < k.n - 1; i++) TH_ASSERT_EQ(k.index[i], 0);
  TH_ASSERT_CMP(cm.replay_restored, >=, (uint64_t)(k.n - 2));
  /* The same Redis behind a killed connection: nothing is sent again. */
  int before = k.n;
  th_redis_int(&th_server, "CLIENT KILL TYPE normal SKIPME yes");
  th_loop_for(base, 300);
  k.want = 0;
  k.target = before + 1;
  k.reached = 0;
  push_retrying(base, dq, "2");
  TH_ASSERT(th_loop_until(base, &k.reached, 5000));
  TH_ASSERT_EQ(k.index[before], 2);
  /* And a delayed one still fires on time after all that. */
  k.target = before + 2;
  k.reached = 0;
  dqt_push p;
  TH_ASSERT_EQ(dqt_push_wait(base, dq, NULL, "3", 200, &p), SLUICE_OK);
  TH_ASSERT(th_loop_until(base, &k.reached, 3000));
  TH_ASSERT_CMP(dqt_unix_ms() - p.due, <, 100);
  sluice_dq_consumer_free(con);
  sluice_dq_free(dq);
  dqt_finish(base, c);
}

/* ---- due times under a steady stream ------------------------------------- */

enum { PACED_N = 2000 };

typedef struct paced_ctx {
  int delivered, dups, reached;
  int64_t earliest_us; /* smallest (delivery - due time) seen */
  unsigned char seen[PACED_N];
} paced_ctx;

static int64_t unix_us(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

static void paced_handler(sluice_dq_consumer *con, sluice_dq_msg *m, void *ud) {
  paced_ctx *l = ud;
  /* Due at the start of due_ms; ms granularity of the due time. */
  int64_t early = unix_us() - sluice_dq_msg_due_ms(m) * 1000;
  if (early < l->earliest_us) l->earliest_us = early;
  size_t len = 0;
  const char *payload = sluice_dq_msg_payload(m, &len);
  char text[12] = "";
  if (len < sizeof text) memcpy(text, payload, len);
  int i = len && len < sizeof text ? atoi(text) : -1;
  TH_ASSERT(i >= 0 && i < PACED_N);
  if (l->seen[i]++) l->dups++;
  else l->delivered++;
  sluice_dq_ack(m, NULL, NULL);
  if (l->delivered == PACED_N) l->reached = 1;
}

typedef struct pacer {
  sluice_dq *dq;
  struct event *ev;
  int sent;
} pacer;

/* One message every ~1 ms (≈1000/s), delays 10..1010 ms. */
static void pace_cb(evutil_socket_t fd, short what, void *arg) {
  pacer *p = arg;
  char text[12];
  snprintf(text, sizeof text, "%d", p->sent);
  sluice_dq_item it = {text, strlen(text), 10 + rand() % 1000, 0, NULL};
  TH_ASSERT_EQ(sluice_dq_push(p->dq, &it, NULL, NULL), SLUICE_OK);
  if (++p->sent < PACED_N) {
    struct timeval tv = {0, 1000};
    evtimer_add(p->ev, &tv);
  }
}

/* A steady stream of delayed pushes: every message is delivered, once,
 * none before its due time. How late they come is a speed figure:
 * bench/bench_dq measures it. */
static void test_due_times(void) {
  struct event_base *base = event_base_new();
  sluice_client *c = dqt_client(base);
  sluice_dq *dq = dqt_queue(c, "paced");
  paced_ctx *l = calloc(1, sizeof *l);
  l->earliest_us = INT64_MAX;
  sluice_dq_consumer *con = NULL;
  TH_ASSERT_EQ(sluice_dq_consumer_new(c, "paced", NULL, paced_handler, l, &con), SLUICE_OK);
  srand(7);
  pacer p = {dq, NULL, 0};
  p.ev = evtimer_new(base, pace_cb, &p);
  event_active(p.ev, 0, 0);
  /* Bounds a hang, not a speed: the last push is due after ~3 s. */
  TH_ASSERT(th_loop_until(base, &l->reached, 60000));
  th_loop_for(base, 300); /* anything more would be a duplicate */
  TH_ASSERT_EQ(l->delivered, PACED_N);
  TH_ASSERT_EQ(l->dups, 0);
  TH_ASSERT_CMP(l->earliest_us, >=, -1000); /* never early beyond clock granularity */
  event_free(p.ev);
  free(l);
  sluice_dq_consumer_free(con);
  sluice_dq_free(dq);
  dqt_finish(base, c);
}

static const th_case cases[] = {
    TH_CASE(many_messages_many_consumers, 120),
    TH_CASE(crash_redelivery, 30),
    TH_CASE(crash_dead_letters, 30),
    TH_CASE(restart_and_client_kill, 60, .standalone_only = "restarts the server"),
    TH_CASE(due_times, 90),
};
TH_MAIN(cases)
