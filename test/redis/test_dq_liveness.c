/* Delay-queue liveness when consumers die or stop. Consumer processes, each
 * in its own process group with its own client — forked library consumers,
 * or `sluice dq consume` ($SLUICE_BIN) running a bash CMD — are killed with
 * SIGKILL or stopped with SIGSTOP while others wait. The others must take
 * every due message within about a second, and a dead or stopped consumer's
 * messages within about a second of their visibility deadline.
 *
 * Consumers report on one pipe, a line each (atomic: shorter than
 * PIPE_BUF): "d WHO ATTEMPT INDEX MS 0" when a message is delivered (CMD
 * writes it on fd 3, which the tool passes on), "s WHO ATTEMPT INDEX MS
 * STATUS" when a library consumer's settlement is answered. MS is the wall
 * clock, which Redis's TIME shares on this host. */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <event2/event.h>
#include <sluice/sluice.h>

#include "dq_util.h"
#include "harness.h"

enum { CONSUMERS = 3, MSGS = 300, HOLD_MS = 50, VIS_MS = 5000, MAX_DELIVERIES = 4 };

typedef struct consumer_cfg {
  int who;
  int cli; /* 1: the tool, running CMD; 0: a forked library consumer */
  unsigned batch, max_in_flight, visibility_ms;
  unsigned hold_ms, first_hold_ms; /* handler time; on attempt 1 */
  int fd;                          /* write end of the report pipe */
} consumer_cfg;

/* ---- a library consumer (child process) --------------------------------------- */

static struct event_base *child_base;

typedef struct held {
  struct event *ev;
  sluice_dq_msg *msg;
  const consumer_cfg *cfg;
  unsigned index, attempt;
} held;

static void put(const consumer_cfg *cfg, char kind, unsigned attempt, unsigned index, int status) {
  char line[96];
  int n = snprintf(line, sizeof line, "%c %d %u %u %lld %d\n", kind, cfg->who, attempt, index,
                   (long long)dqt_unix_ms(), status);
  if (write(cfg->fd, line, (size_t)n) != n) _exit(3);
}

static void on_settled(sluice_dq_consumer *con, int status, const char *id, void *ud) {
  held *h = ud;
  put(h->cfg, 's', h->attempt, h->index, status);
  free(h);
}

static void release_cb(evutil_socket_t fd, short what, void *arg) {
  held *h = arg;
  event_free(h->ev);
  if (sluice_dq_ack(h->msg, on_settled, h) != SLUICE_OK) _exit(4);
}

/* Each message is held (the handler's work), then acknowledged. */
static void handler(sluice_dq_consumer *con, sluice_dq_msg *m, void *ud) {
  const consumer_cfg *cfg = ud;
  held *h = calloc(1, sizeof *h);
  if (!h) _exit(5);
  h->msg = m;
  h->cfg = cfg;
  h->index = (unsigned)strtoul(sluice_dq_msg_payload(m, NULL), NULL, 10);
  h->attempt = sluice_dq_msg_attempt(m);
  put(cfg, 'd', h->attempt, h->index, 0);
  unsigned ms = h->attempt == 1 ? cfg->first_hold_ms : cfg->hold_ms;
  h->ev = evtimer_new(child_base, release_cb, h);
  struct timeval tv = {ms / 1000, (ms % 1000) * 1000};
  evtimer_add(h->ev, &tv);
}

static void library_consumer(const consumer_cfg *cfg) {
  struct event_base *base = child_base = event_base_new();
  sluice_client *c = dqt_client(base);
  sluice_dq_consumer_options o = dqt_options(cfg->batch, cfg->max_in_flight, cfg->visibility_ms, 0);
  sluice_dq_consumer *con = NULL;
  if (sluice_dq_consumer_new(c, "live", &o, handler, (void *)cfg, &con) != 0) _exit(2);
  event_base_dispatch(base);
  _exit(0);
}

/* ---- the tool as a consumer ---------------------------------------------------- */

static char work[64];      /* the case's scratch directory */
static char cmd_path[128]; /* the CMD script in it */

/* CMD: reports its delivery on fd 3, then works HOLD_S seconds (FIRST_S
 * on attempt 1). */
static void write_cmd(void) {
  snprintf(cmd_path, sizeof cmd_path, "%s/cmd.sh", work);
  FILE *f = fopen(cmd_path, "w");
  TH_ASSERT(f != NULL);
  fputs(
      "#!/bin/bash\n"
      "read -r i\n"
      "t=${EPOCHREALTIME/./}\n"
      "echo \"d $WHO $SLUICE_DQ_ATTEMPT $i ${t:0:13} 0\" >&3\n"
      "if [ \"$SLUICE_DQ_ATTEMPT\" = 1 ]; then sleep \"$FIRST_S\"; else sleep \"$HOLD_S\"; fi\n",
      f);
  TH_ASSERT_EQ(fclose(f), 0);
  TH_ASSERT_EQ(chmod(cmd_path, 0700), 0);
}

static void log_path(char *out, size_t size, int who) {
  snprintf(out, size, "%s/consumer-%d.log", work, who);
}

static void cli_consumer(const consumer_cfg *cfg) {
  const char *bin = getenv("SLUICE_BIN");
  if (!bin) _exit(6);
  char j[16], vis[16], who[16], hold[16], first[16], path[300];
  snprintf(j, sizeof j, "%u", cfg->max_in_flight);
  snprintf(vis, sizeof vis, "%u", cfg->visibility_ms);
  snprintf(who, sizeof who, "%d", cfg->who);
  snprintf(hold, sizeof hold, "%u.%03u", cfg->hold_ms / 1000, cfg->hold_ms % 1000);
  snprintf(first, sizeof first, "%u.%03u", cfg->first_hold_ms / 1000, cfg->first_hold_ms % 1000);
  setenv("WHO", who, 1);
  setenv("HOLD_S", hold, 1);
  setenv("FIRST_S", first, 1);
  setenv("LC_ALL", "C", 1);
  log_path(path, sizeof path, cfg->who);
  int log = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
  if (log < 0 || dup2(cfg->fd, 3) < 0 || dup2(log, 1) < 0 || dup2(log, 2) < 0) _exit(7);
  execl(bin, bin, "dq", "consume", "live", "--redis", th_server.url, "-j", j, "--visibility", vis,
        "--max-attempts", "0", "--", cmd_path, (char *)NULL);
  _exit(8);
}

/* Fork a consumer in its own process group. */
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
  if (cfg->cli) cli_consumer(cfg);
  library_consumer(cfg);
  return -1;
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

/* ---- one run: consumers, messages, reports -------------------------------------- */

typedef struct delivery {
  int who;
  unsigned attempt;
  int64_t at_ms;
} delivery;

typedef struct msg_state {
  int64_t due_ms;
  int n; /* deliveries seen */
  delivery d[MAX_DELIVERIES];
  int acked_by; /* -1: no acknowledgement reported */
} msg_state;

typedef struct run {
  consumer_cfg cfg[CONSUMERS];
  pid_t pid[CONSUMERS];
  int killed[CONSUMERS];
  int64_t killed_at_ms[CONSUMERS];
  int fd[2];
  char buf[4096]; /* a partial line */
  size_t have;
  int n; /* messages used, up to MSGS */
  msg_state m[MSGS];
  int late_settles, late_by; /* settlements answered SLUICE_ELATE; the first's consumer */
} run;

static void run_start(run *r, int cli, unsigned batch, unsigned max_in_flight) {
  memset(r, 0, sizeof *r);
  r->n = MSGS;
  TH_ASSERT_EQ(pipe(r->fd), 0);
  for (int i = 0; i < MSGS; i++) r->m[i].acked_by = -1;
  for (int k = 0; k < CONSUMERS; k++)
    r->cfg[k] = (consumer_cfg){k, cli, batch, max_in_flight, VIS_MS, HOLD_MS, HOLD_MS, r->fd[1]};
  TH_ASSERT_EQ(th_mkdtemp(work, sizeof work, "liveness"), 0);
  if (cli) write_cmd();
}

static void start_consumer(run *r, int k) { r->pid[k] = spawn(&r->cfg[k]); }

static void kill_consumer(run *r, int k) {
  kill_group(r->pid[k]);
  r->killed[k] = 1;
  r->killed_at_ms[k] = dqt_unix_ms();
}

static void run_end(run *r) {
  for (int k = 0; k < CONSUMERS; k++)
    if (!r->killed[k] && r->pid[k]) kill_group(r->pid[k]);
  close(r->fd[0]);
  close(r->fd[1]);
  char rm[128];
  snprintf(rm, sizeof rm, "rm -rf '%s'", work);
  TH_ASSERT_EQ(system(rm), 0);
}

static void on_pushed(sluice_dq *dq, int status, const sluice_dq_push_result *res, size_t n,
                      void *ud) {
  TH_ASSERT_EQ(status, SLUICE_OK);
  for (size_t i = 0; i < n; i++) TH_ASSERT_EQ(res[i].status, SLUICE_OK);
  *(int *)ud = 1;
}

/* Push messages first..first+n-1 (payload: the number), each due at its
 * due_ms, in one batch. */
static void push(const run *r, int first, int n) {
  struct event_base *base = event_base_new();
  sluice_client *c = dqt_client(base);
  sluice_dq *dq = dqt_queue(c, "live");
  static char text[MSGS][12];
  static sluice_dq_item items[MSGS];
  for (int i = 0; i < n; i++) {
    snprintf(text[i], sizeof text[i], "%d", first + i);
    items[i] = (sluice_dq_item){text[i], strlen(text[i]), 0, r->m[first + i].due_ms, NULL};
  }
  int done = 0;
  TH_ASSERT_EQ(sluice_dq_push_batch(dq, items, (size_t)n, on_pushed, &done), SLUICE_OK);
  TH_ASSERT(th_loop_until(base, &done, 5000));
  sluice_dq_free(dq);
  dqt_finish(base, c);
}

static void take_line(run *r, const char *line) {
  char kind;
  int who, status;
  unsigned attempt, index;
  long long at;
  if (sscanf(line, "%c %d %u %u %lld %d", &kind, &who, &attempt, &index, &at, &status) != 6 ||
      index >= (unsigned)r->n)
    th_fail(__FILE__, __LINE__, "bad report: %s", line);
  msg_state *m = &r->m[index];
  if (kind == 'd' && m->n < MAX_DELIVERIES) m->d[m->n++] = (delivery){who, attempt, at};
  if (kind == 's' && status == SLUICE_OK) m->acked_by = who;
  if (kind == 's' && status == SLUICE_ELATE && !r->late_settles++) r->late_by = who;
}

/* Read reports for up to ms. */
static void read_reports(run *r, unsigned ms) {
  uint64_t end = th_now_ms() + ms;
  for (;;) {
    struct pollfd pfd = {r->fd[0], POLLIN, 0};
    int left = (int)(end > th_now_ms() ? end - th_now_ms() : 0);
    if (poll(&pfd, 1, left) <= 0) return;
    ssize_t got = read(r->fd[0], r->buf + r->have, sizeof r->buf - 1 - r->have);
    TH_ASSERT(got > 0);
    r->have += (size_t)got;
    r->buf[r->have] = '\0';
    char *line = r->buf, *nl;
    while ((nl = strchr(line, '\n')) != NULL) {
      *nl = '\0';
      take_line(r, line);
      line = nl + 1;
    }
    r->have -= (size_t)(line - r->buf);
    memmove(r->buf, line, r->have);
  }
}

static int delivered_to(const run *r, int k) {
  for (int i = 0; i < r->n; i++)
    for (int j = 0; j < r->m[i].n; j++)
      if (r->m[i].d[j].who == k) return 1;
  return 0;
}

/* Until consumer k (-1: any) has reported a delivery (it is busy); returns k. */
static int wait_busy(run *r, int k, unsigned ms) {
  uint64_t end = th_now_ms() + ms;
  for (;;) {
    for (int x = 0; x < CONSUMERS; x++)
      if ((k < 0 || k == x) && delivered_to(r, x)) return x;
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
    int missing = 0;
    for (int i = 0; i < r->n; i++) missing += r->m[i].n == 0;
    if (!missing && queue_empty()) return;
    if (th_now_ms() >= end)
      th_fail(__FILE__, __LINE__, "%d of %d messages never delivered in %u ms", missing, r->n, ms);
  }
}

static int cmp_i64(const void *a, const void *b) {
  int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
  return (x > y) - (x < y);
}

/* Which messages were late, by whom and when, beside the kills: what a
 * failed bound below needs to be understood. */
static void name_late(const run *r, int64_t over_ms) {
  for (int k = 0; k < CONSUMERS; k++)
    if (r->killed[k]) th_note("consumer %d killed at %lld\n", k, (long long)r->killed_at_ms[k]);
  for (int i = 0; i < r->n; i++) {
    const msg_state *m = &r->m[i];
    const delivery *last = &m->d[m->n - 1];
    if (last->attempt == 1 && last->at_ms - m->due_ms > over_ms)
      th_note("message %d due %lld taken %lld ms late by consumer %d\n", i, (long long)m->due_ms,
              (long long)(last->at_ms - m->due_ms), last->who);
  }
}

/* The checks. A message a killed consumer held (its last delivery is not
 * its first attempt) must come again within a second of its visibility
 * deadline, reckoned from the killed consumer's delivery or, if it died
 * before reporting it, from the due time (never later than the take).
 * Every other one must be taken within a second of its due time, plus the
 * handlers' time (p99; the slowest within two). */
static void check(run *r, const char *what) {
  int64_t late[MSGS], worst_redelivery = -1;
  int n = 0, nheld = 0;
  for (int i = 0; i < r->n; i++) {
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
  const int64_t p99_bound = 1000 + HOLD_MS, max_bound = 2000 + HOLD_MS;
  if (p99 >= p99_bound || mx >= max_bound) name_late(r, 500);
  th_note("%s: %d messages taken on time: lateness p50 %lld ms, p99 %lld ms, max %lld ms\n", what,
          n, (long long)p50, (long long)p99, (long long)mx);
  th_note("%s: %d held by killed consumers, redelivered at most %lld ms past their deadline\n",
          what, nheld, (long long)worst_redelivery);
  TH_ASSERT_CMP(p99, <, p99_bound);
  TH_ASSERT_CMP(mx, <, max_bound);
}

/* ---- cases ----------------------------------------------------------------------- */

/* Consumer 0 starts first, so under a shared wake list (BRPOP serves the
 * longest-blocked client first) it alone hears that message 0 became the
 * new earliest, and the others knew only an empty queue. It is killed (or
 * it and consumer 1 are) while busy: the others must not wait for their
 * safety poll to learn that anything is due. Message 0 is due in 1 s, the
 * rest later, over 3 s (pushing them makes no new earliest). */
static void kill_while_busy(int cli, int victims) {
  static run r;
  run_start(&r, cli, 16, 16);
  srand(15);
  start_consumer(&r, 0);
  wait_blocked(1);
  for (int k = 1; k < CONSUMERS; k++) start_consumer(&r, k);
  wait_blocked(CONSUMERS);
  int64_t t = dqt_unix_ms() + 1000;
  for (int i = 0; i < MSGS; i++) r.m[i].due_ms = i == 0 ? t : t + 1 + rand() % 3000;
  push(&r, 0, 1);
  push(&r, 1, MSGS - 1);
  for (int k = 0; k < victims; k++) {
    wait_busy(&r, k, 10000);
    kill_consumer(&r, k);
  }
  wait_all(&r, 25000);
  char what[64];
  snprintf(what, sizeof what, "%s, %s of three killed", cli ? "tool" : "library",
           victims == 1 ? "one" : "two");
  check(&r, what);
  run_end(&r);
}

/* Every message due at once; as the first is delivered, all consumers but
 * one die. The survivor has room for a fifth of the burst at once. The
 * tool's burst is smaller: a CMD is two processes (bash, sleep) started on
 * two cores, so 300 at once measure process creation, not the queue. */
static void kill_all_but_one_at_burst(int cli) {
  static run r;
  run_start(&r, cli, cli ? 20 : 64, cli ? 20 : 64);
  r.n = cli ? 100 : MSGS;
  for (int k = 0; k < CONSUMERS; k++) start_consumer(&r, k);
  wait_blocked(CONSUMERS);
  int64_t t = dqt_unix_ms() + 1500;
  for (int i = 0; i < r.n; i++) r.m[i].due_ms = t;
  push(&r, 0, r.n);
  int first = wait_busy(&r, -1, 10000);
  for (int k = 0; k < CONSUMERS - 1; k++) kill_consumer(&r, (first + k) % CONSUMERS);
  wait_all(&r, 25000);
  check(&r,
        cli ? "tool, all but one killed at the burst" : "library, all but one killed at the burst");
  run_end(&r);
}

/* A consumer stopped (SIGSTOP of its process group) past its visibility
 * deadline: its message goes to another consumer within a second of the
 * deadline, and its settlement after SIGCONT is refused (SLUICE_ELATE),
 * not accepted. Both consumers wait when the message is pushed; whichever
 * takes it is stopped at once. The other holds it long enough for the
 * refusal to be about its copy. */
static void sigstop_past_visibility(int cli) {
  static run r;
  run_start(&r, cli, 1, 1);
  for (int k = 0; k < 2; k++) {
    r.cfg[k].visibility_ms = 2000;
    r.cfg[k].first_hold_ms = 2500; /* ends after the resume */
    r.cfg[k].hold_ms = 1000;       /* the second delivery's */
    start_consumer(&r, k);
  }
  wait_blocked(2);
  r.m[0].due_ms = dqt_unix_ms();
  push(&r, 0, 1);
  int s = wait_busy(&r, -1, 5000), other = !s;
  kill(-r.pid[s], SIGSTOP);
  int64_t taken = r.m[0].d[0].at_ms;
  uint64_t end = th_now_ms() + 10000;
  while (r.m[0].n < 2 && th_now_ms() < end) read_reports(&r, 20);
  TH_ASSERT_EQ(r.m[0].n, 2);
  TH_ASSERT_EQ(r.m[0].d[1].who, other);
  int64_t past = r.m[0].d[1].at_ms - (taken + 2000);
  th_note("%s: stopped consumer's message redelivered %lld ms past its deadline\n",
          cli ? "tool" : "library", (long long)past);
  TH_ASSERT_CMP(past, <, 1000);
  kill(-r.pid[s], SIGCONT);
  if (cli) {
    char path[300], text[4096] = "";
    log_path(path, sizeof path, s);
    end = th_now_ms() + 5000;
    while (!strstr(text, "settled after its visibility deadline") && th_now_ms() < end) {
      usleep(20000);
      FILE *f = fopen(path, "r");
      size_t n = f ? fread(text, 1, sizeof text - 1, f) : 0;
      if (f) fclose(f);
      text[n] = '\0';
    }
    char *said = strstr(text, "settled after its visibility deadline");
    TH_ASSERT(said != NULL);
    th_note("the stopped tool said: ...%.*s\n", (int)strcspn(said, "\n"), said);
  } else {
    end = th_now_ms() + 5000;
    while (!r.late_settles && th_now_ms() < end) read_reports(&r, 20);
    TH_ASSERT_CMP(r.late_settles, >=, 1);
    TH_ASSERT_EQ(r.late_by, s);
    TH_ASSERT(r.m[0].acked_by != s);
  }
  run_end(&r);
}

static void test_library_kill_one_of_three_busy(void) { kill_while_busy(0, 1); }
static void test_library_kill_two_of_three_busy(void) { kill_while_busy(0, 2); }
static void test_library_kill_all_but_one_at_burst(void) { kill_all_but_one_at_burst(0); }
static void test_library_sigstop_past_visibility(void) { sigstop_past_visibility(0); }
static void test_tool_kill_one_of_three_busy(void) { kill_while_busy(1, 1); }
static void test_tool_kill_two_of_three_busy(void) { kill_while_busy(1, 2); }
static void test_tool_kill_all_but_one_at_burst(void) { kill_all_but_one_at_burst(1); }
static void test_tool_sigstop_past_visibility(void) { sigstop_past_visibility(1); }

static const th_case cases[] = {
    TH_CASE(library_kill_one_of_three_busy, 60),    TH_CASE(library_kill_two_of_three_busy, 60),
    TH_CASE(library_kill_all_but_one_at_burst, 60), TH_CASE(library_sigstop_past_visibility, 60),
    TH_CASE(tool_kill_one_of_three_busy, 60),       TH_CASE(tool_kill_two_of_three_busy, 60),
    TH_CASE(tool_kill_all_but_one_at_burst, 60),    TH_CASE(tool_sigstop_past_visibility, 60),
};
TH_MAIN(cases)
