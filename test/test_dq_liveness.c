/* Delay-queue liveness when consumers die or stop. Consumer processes
 * (forked, each with its own client, in its own process group) are killed
 * with SIGKILL or stopped with SIGSTOP while others wait; the others must
 * take every due message within about a second, and a dead or stopped
 * consumer's messages within about a second of their visibility deadline.
 * Consumers report deliveries and settlements through a pipe. */
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

enum { CONSUMERS = 3, MSGS = 300, HOLD_MS = 50, VIS_MS = 5000, MAX_DELIVERIES = 4 };

/* What a consumer reports, through the pipe (one atomic write each). */
typedef struct report {
  uint8_t kind;     /* 'd' delivered, 's' settled */
  uint8_t who;      /* consumer number */
  uint16_t attempt;
  int32_t status;   /* of a settlement */
  uint32_t index;   /* the message's payload */
  uint32_t pad;
  int64_t at_ms;    /* wall clock (Redis's TIME is on the same host) */
} report;

typedef struct consumer_cfg {
  uint8_t who;
  unsigned batch, max_in_flight, visibility_ms, hold_ms;
  int fd;           /* write end of the report pipe */
} consumer_cfg;

static struct event_base *child_base; /* the consumer process's loop */

typedef struct held {
  struct event *ev;
  sluice_dq_msg *msg;
  const consumer_cfg *cfg;
  uint32_t index;
  uint16_t attempt;
} held;

static void put(const consumer_cfg *cfg, uint8_t kind, uint32_t index, unsigned attempt,
                int status) {
  report r = {kind, cfg->who, (uint16_t)attempt, status, index, 0, dqt_unix_ms()};
  if (write(cfg->fd, &r, sizeof r) != sizeof r) _exit(3);
}

static void on_settled(sluice_dq_consumer *con, int status, const char *id, void *ud) {
  held *h = ud;
  put(h->cfg, 's', h->index, h->attempt, status);
  free(h);
}

static void release_cb(evutil_socket_t fd, short what, void *arg) {
  held *h = arg;
  event_free(h->ev);
  if (sluice_dq_ack(h->msg, on_settled, h) != SLUICE_OK) _exit(4);
}

/* Each message is held hold_ms (the handler's work), then acknowledged. */
static void handler(sluice_dq_consumer *con, sluice_dq_msg *m, void *ud) {
  const consumer_cfg *cfg = ud;
  held *h = calloc(1, sizeof *h);
  if (!h) _exit(5);
  h->msg = m;
  h->cfg = cfg;
  h->index = (uint32_t)strtoul(sluice_dq_msg_payload(m, NULL), NULL, 10);
  h->attempt = (uint16_t)sluice_dq_msg_attempt(m);
  put(cfg, 'd', h->index, h->attempt, 0);
  h->ev = evtimer_new(child_base, release_cb, h);
  struct timeval tv = {cfg->hold_ms / 1000, (cfg->hold_ms % 1000) * 1000};
  evtimer_add(h->ev, &tv);
}

/* Fork a consumer of queue "live" in its own process group. */
static pid_t spawn(const consumer_cfg *cfg) {
  pid_t pid = fork();
  TH_ASSERT(pid >= 0);
  if (pid) {
    setpgid(pid, pid);
    return pid;
  }
  setpgid(0, 0);
  prctl(PR_SET_PDEATHSIG, SIGKILL); /* never outlive a failed case */
  if (getppid() == 1) _exit(1);
  struct event_base *base = child_base = event_base_new();
  sluice_client *c = dqt_client(base);
  sluice_dq_consumer_options o;
  sluice_dq_consumer_options_init(&o);
  o.batch = cfg->batch;
  o.max_in_flight = cfg->max_in_flight;
  o.visibility_ms = cfg->visibility_ms;
  o.max_attempts = 0;
  sluice_dq_consumer *con = NULL;
  if (sluice_dq_consumer_new(c, "live", &o, handler, (void *)cfg, &con) != 0) _exit(2);
  event_base_dispatch(base);
  _exit(0);
}

static void kill_group(pid_t pid) {
  kill(-pid, SIGKILL);
  while (waitpid(pid, NULL, 0) < 0 && errno == EINTR) {}
}

/* Wait until n clients sit in a blocking call (idle consumers listening). */
static void wait_blocked(long long n) {
  uint64_t end = th_now_ms() + 10000;
  while (th_redis_clients(1) < n && th_now_ms() < end) usleep(5000);
  TH_ASSERT_CMP(th_redis_clients(1), >=, n);
}

/* ---- one run: messages, reports, what is checked ---------------------------- */

typedef struct delivery {
  uint8_t who;
  uint16_t attempt;
  int64_t at_ms;
} delivery;

typedef struct msg_state {
  int64_t due_ms;
  int n;                       /* deliveries seen */
  delivery d[MAX_DELIVERIES];
  int acked_by;                /* -1: no acknowledgement reported */
} msg_state;

typedef struct run {
  consumer_cfg cfg[CONSUMERS];
  pid_t pid[CONSUMERS];
  int killed[CONSUMERS];
  int fd[2];
  msg_state m[MSGS];
  int late_settles;            /* settlements answered SLUICE_ELATE */
  int late_by;                 /* the consumer of the first */
} run;

static void run_start(run *r, unsigned batch, unsigned max_in_flight) {
  memset(r, 0, sizeof *r);
  TH_ASSERT_EQ(pipe(r->fd), 0);
  for (int i = 0; i < MSGS; i++) r->m[i].acked_by = -1;
  for (int k = 0; k < CONSUMERS; k++)
    r->cfg[k] = (consumer_cfg){(uint8_t)k, batch, max_in_flight, VIS_MS, HOLD_MS, r->fd[1]};
}

static void start_consumer(run *r, int k) { r->pid[k] = spawn(&r->cfg[k]); }

static void kill_consumer(run *r, int k) {
  kill_group(r->pid[k]);
  r->killed[k] = 1;
  printf("# consumer %d killed at +%lld ms\n", k, (long long)(dqt_unix_ms() % 100000));
}

static void run_end(run *r) {
  for (int k = 0; k < CONSUMERS; k++)
    if (!r->killed[k] && r->pid[k]) kill_group(r->pid[k]);
  close(r->fd[0]);
  close(r->fd[1]);
}

static void on_pushed(sluice_dq *dq, int status, const sluice_dq_push_result *res, size_t n,
                      void *ud) {
  int *done = ud;
  TH_ASSERT_EQ(status, SLUICE_OK);
  for (size_t i = 0; i < n; i++) TH_ASSERT_EQ(res[i].status, SLUICE_OK);
  *done = 1;
}

/* Push messages first..first+n-1 (payload: the number), message first + i
 * due at at_ms[i], in one batch. */
static void push_at(const int64_t *at_ms, int first, int n) {
  struct event_base *base = event_base_new();
  sluice_client *c = dqt_client(base);
  sluice_dq *dq = dqt_queue(c, "live");
  static char text[MSGS][12];
  static sluice_dq_item items[MSGS];
  for (int i = 0; i < n; i++) {
    snprintf(text[i], sizeof text[i], "%d", first + i);
    items[i] = (sluice_dq_item){text[i], strlen(text[i]), 0, at_ms[i], NULL};
  }
  int done = 0;
  TH_ASSERT_EQ(sluice_dq_push_batch(dq, items, (size_t)n, on_pushed, &done), SLUICE_OK);
  TH_ASSERT(th_loop_until(base, &done, 5000));
  sluice_dq_free(dq);
  dqt_finish(base, c);
}

/* Read reports for up to ms; returns the number read. */
static int read_reports(run *r, unsigned ms) {
  int got = 0;
  uint64_t end = th_now_ms() + ms;
  for (;;) {
    struct pollfd pfd = {r->fd[0], POLLIN, 0};
    int left = (int)(end > th_now_ms() ? end - th_now_ms() : 0);
    if (poll(&pfd, 1, left) <= 0) return got;
    report x;
    TH_ASSERT_EQ(read(r->fd[0], &x, sizeof x), (ssize_t)sizeof x);
    got++;
    TH_ASSERT(x.index < MSGS);
    msg_state *m = &r->m[x.index];
    if (x.kind == 'd' && m->n < MAX_DELIVERIES) m->d[m->n++] = (delivery){x.who, x.attempt, x.at_ms};
    if (x.kind == 's' && x.status == SLUICE_OK) m->acked_by = x.who;
    if (x.kind == 's' && x.status == SLUICE_ELATE && !r->late_settles++) r->late_by = x.who;
  }
}

/* Until consumer k has reported a delivery (it is busy). */
static void wait_busy(run *r, int k, unsigned ms) {
  uint64_t end = th_now_ms() + ms;
  for (;;) {
    for (int i = 0; i < MSGS; i++)
      for (int j = 0; j < r->m[i].n; j++)
        if (r->m[i].d[j].who == k) return;
    TH_ASSERT(th_now_ms() < end);
    read_reports(r, 5);
  }
}

static int queue_empty(void) {
  return th_redis_int(&th_server, "ZCARD sluice:dq:{live}:f") == 0 &&
         th_redis_int(&th_server, "ZCARD sluice:dq:{live}:z") == 0;
}

/* Until every message was delivered and none is left. */
static void wait_all(run *r, unsigned ms) {
  uint64_t end = th_now_ms() + ms;
  for (;;) {
    read_reports(r, 100);
    int all = 1;
    for (int i = 0; i < MSGS && all; i++) all = r->m[i].n > 0;
    if (all && queue_empty()) return;
    if (th_now_ms() >= end) {
      int missing = 0;
      for (int i = 0; i < MSGS; i++) missing += r->m[i].n == 0;
      th_fail(__FILE__, __LINE__, "%d of %d messages never delivered in %u ms", missing, MSGS,
              ms);
    }
  }
}

static int cmp_i64(const void *a, const void *b) {
  int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
  return (x > y) - (x < y);
}

/* The checks: a message a killed consumer held (delivered again: its last
 * delivery is not its first attempt) must come again within a second of its
 * visibility deadline; every other one must be taken within a second (plus
 * the handlers' time) of its due time. The deadline is reckoned from the
 * killed consumer's delivery, or if it died before reporting it, from the
 * due time (never later than the take). */
static void check(run *r, const char *what) {
  int64_t late[MSGS], worst_redelivery = -1;
  int n = 0, nheld = 0;
  for (int i = 0; i < MSGS; i++) {
    msg_state *m = &r->m[i];
    const delivery *last = &m->d[m->n - 1];
    if (last->attempt == 1) {
      late[n++] = last->at_ms - m->due_ms;
      continue;
    }
    int64_t taken = m->due_ms;
    for (int j = 0; j + 1 < m->n; j++)
      if (r->killed[m->d[j].who]) taken = m->d[j].at_ms;
    nheld++;
    int64_t past = last->at_ms - (taken + VIS_MS);
    if (past > worst_redelivery) worst_redelivery = past;
    TH_ASSERT_CMP(past, <, 1000);
  }
  qsort(late, (size_t)n, sizeof late[0], cmp_i64);
  int64_t p50 = late[n / 2], p99 = late[n * 99 / 100], mx = late[n - 1];
  printf("# %s: %d messages taken on time: lateness p50 %lld ms, p99 %lld ms, max %lld ms\n",
         what, n, (long long)p50, (long long)p99, (long long)mx);
  printf("# %s: %d held by killed consumers, redelivered at most %lld ms past their "
         "deadline\n", what, nheld, (long long)worst_redelivery);
  TH_ASSERT_CMP(p99, <, 1000 + HOLD_MS);
  TH_ASSERT_CMP(mx, <, 2000 + HOLD_MS);
}

/* Due times: message 0 first, at +lead ms, the rest spread over the next
 * spread ms (later than message 0, so pushing them is no new earliest). */
static void due_times(run *r, int64_t *at, int64_t lead, int64_t spread) {
  int64_t base = dqt_unix_ms() + lead;
  for (int i = 0; i < MSGS; i++) {
    at[i] = i == 0 ? base : base + 1 + (int64_t)(rand() % (int)spread);
    r->m[i].due_ms = at[i];
  }
}

/* ---- cases ------------------------------------------------------------------- */

/* Consumer 0 starts first, so under a shared wake list (BRPOP serves the
 * longest-blocked client first) it alone hears that message 0 became the
 * new earliest; the others then saw an empty queue. It is killed while busy:
 * the others must not wait for a poll to learn that anything is due. */
static void kill_while_busy(int victims) {
  static run r;
  int64_t at[MSGS];
  run_start(&r, 16, 16);
  srand(15);
  start_consumer(&r, 0);
  wait_blocked(1);
  for (int k = 1; k < CONSUMERS; k++) start_consumer(&r, k);
  wait_blocked(CONSUMERS);
  due_times(&r, at, 1000, 3000);
  push_at(at, 0, 1);
  push_at(at + 1, 1, MSGS - 1);
  for (int k = 0; k < victims; k++) {
    wait_busy(&r, k, 10000);
    kill_consumer(&r, k);
  }
  wait_all(&r, 25000);
  check(&r, victims == 1 ? "one of three killed" : "two of three killed");
  run_end(&r);
}

static void test_kill_one_of_three_busy(void) { kill_while_busy(1); }
static void test_kill_two_of_three_busy(void) { kill_while_busy(2); }

/* Every message due at once; at the moment the first is delivered, all
 * consumers but one die. */
static void test_kill_all_but_one_at_burst(void) {
  static run r;
  int64_t at[MSGS];
  run_start(&r, 64, 64);
  for (int k = 0; k < CONSUMERS; k++) start_consumer(&r, k);
  wait_blocked(CONSUMERS);
  int64_t t = dqt_unix_ms() + 1500;
  for (int i = 0; i < MSGS; i++) r.m[i].due_ms = at[i] = t;
  push_at(at, 0, MSGS);
  uint64_t end = th_now_ms() + 10000;
  int first = 0;
  while (!first && th_now_ms() < end) {
    read_reports(&r, 5);
    for (int i = 0; i < MSGS && !first; i++) first = r.m[i].n > 0;
  }
  TH_ASSERT(first);
  kill_consumer(&r, 0);
  kill_consumer(&r, 1);
  wait_all(&r, 25000);
  check(&r, "all but one killed at the burst");
  run_end(&r);
}

/* A consumer stopped (SIGSTOP) past its visibility deadline: its message
 * goes to another consumer within a second of the deadline, and its
 * acknowledgement after SIGCONT is refused (SLUICE_ELATE), not accepted.
 * Both consumers wait when the message is pushed; whichever takes it is
 * stopped at once. */
static void test_sigstop_past_visibility(void) {
  static run r;
  int64_t at[1];
  run_start(&r, 16, 16);
  for (int k = 0; k < 2; k++) {
    r.cfg[k].visibility_ms = 1000;
    r.cfg[k].hold_ms = 1500; /* acks after the resume; the redelivery's is late too */
    start_consumer(&r, k);
  }
  wait_blocked(2);
  r.m[0].due_ms = at[0] = dqt_unix_ms();
  push_at(at, 0, 1);
  uint64_t end = th_now_ms() + 5000;
  while (!r.m[0].n && th_now_ms() < end) read_reports(&r, 5);
  TH_ASSERT_EQ(r.m[0].n, 1);
  int s = r.m[0].d[0].who, other = !s;
  kill(-r.pid[s], SIGSTOP);
  int64_t taken = r.m[0].d[0].at_ms;
  end = th_now_ms() + 10000;
  while (r.m[0].n < 2 && th_now_ms() < end) read_reports(&r, 20);
  TH_ASSERT_EQ(r.m[0].n, 2);
  TH_ASSERT_EQ(r.m[0].d[1].who, other);
  int64_t past = r.m[0].d[1].at_ms - (taken + 1000);
  printf("# stopped consumer's message redelivered %lld ms past its deadline\n",
         (long long)past);
  TH_ASSERT_CMP(past, <, 1000);
  kill(-r.pid[s], SIGCONT);
  end = th_now_ms() + 5000;
  while (!r.late_settles && th_now_ms() < end) read_reports(&r, 20);
  TH_ASSERT_CMP(r.late_settles, >=, 1);
  TH_ASSERT_EQ(r.late_by, s);
  TH_ASSERT(r.m[0].acked_by != s);
  run_end(&r);
}

int main(int argc, char **argv) {
  static const th_case cases[] = {
      {"kill_one_of_three_busy", test_kill_one_of_three_busy, 60},
      {"kill_two_of_three_busy", test_kill_two_of_three_busy, 60},
      {"kill_all_but_one_at_burst", test_kill_all_but_one_at_burst, 60},
      {"sigstop_past_visibility", test_sigstop_past_visibility, 60},
      {NULL, NULL, 0},
  };
  return th_main(argc, argv, cases);
}
