/* `sluice dq consume`, run as a separate process against the test server:
 * concurrency, retries and dead letters, crashes, renewal of long runs and
 * the --timeout watchdog,
 * draining on SIGTERM, and CMDs that cannot run. Handlers are small sh
 * scripts that leave files behind; cases wait for those files (or for the
 * tool's messages) rather than for fixed times. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdarg.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness.h"

static char work[256];   /* this case's scratch directory */
static char errlog[300]; /* the tool's stderr */

static void setup(void) {
  snprintf(work, sizeof work, "%s/case-XXXXXX", th_server.dir);
  TH_ASSERT(mkdtemp(work) != NULL);
  snprintf(errlog, sizeof errlog, "%s/stderr", work);
}

/* The server's directory must be empty again when the harness removes it. */
static void cleanup(void) {
  char cmd[320];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", work);
  TH_ASSERT_EQ(system(cmd), 0);
}

/* Start `sluice dq ARGS...` (NULL-terminated; --redis added after the
 * subcommand) with stdout and stderr appended to errlog; returns the pid. */
static pid_t start(const char *sub, ...) {
  th_argv a = {.n = 0};
  th_argv_add(&a, "dq", sub, "--redis", th_server.url, NULL);
  TH_ARGV_ADD_VA(a, sub);
  return th_tool_start(&a, errlog);
}

/* The exit status of pid, which must exit within ms (else it is killed). */
static int wait_exit(pid_t pid, unsigned ms) { return th_tool_wait(pid, ms); }

static void push(const char *queue, const char *payload) {
  TH_ASSERT_EQ(wait_exit(start("push", queue, payload, NULL), 10000), 0);
}

/* Messages of queue q by state (the tool uses the default "sluice:" prefix). */
static long long delayed(const char *q) {
  return th_redis_int(&th_server, "ZCARD sluice:dq:{%s}:z", q);
}
static long long in_flight(const char *q) {
  return th_redis_int(&th_server, "ZCARD sluice:dq:{%s}:f", q);
}
/* Nothing of q in flight any more, and n of its messages delayed. */
static void expect_settled(const char *q, long long n) {
  TH_ASSERT_EQ(in_flight(q), 0);
  TH_ASSERT_EQ(delayed(q), n);
}
static long long dead(const char *q) {
  return th_redis_int(&th_server, "ZCARD sluice:dq:{%s}:d", q);
}

/* Write an executable sh script into the scratch dir; returns its path. */
static const char *script(const char *name, const char *body) {
  static char path[320];
  snprintf(path, sizeof path, "%s/%s", work, name);
  FILE *f = fopen(path, "w");
  TH_ASSERT(f != NULL);
  fprintf(f, "#!/bin/sh\nd='%s'\n%s", work, body);
  TH_ASSERT_EQ(fclose(f), 0);
  TH_ASSERT_EQ(chmod(path, 0700), 0);
  return path;
}

static int count_files(const char *prefix) {
  DIR *d = opendir(work);
  TH_ASSERT(d != NULL);
  struct dirent *e;
  int n = 0;
  while ((e = readdir(d)) != NULL) n += strncmp(e->d_name, prefix, strlen(prefix)) == 0;
  closedir(d);
  return n;
}

static void wait_files(const char *prefix, int n, unsigned ms) {
  uint64_t end = th_now_ms() + ms;
  while (count_files(prefix) < n && th_now_ms() < end) usleep(5000);
  TH_ASSERT_EQ(count_files(prefix), n);
}

static char *read_file(const char *path) {
  static char buf[16384];
  FILE *f = fopen(path, "r");
  size_t n = f ? fread(buf, 1, sizeof buf - 1, f) : 0;
  if (f) fclose(f);
  buf[n] = 0;
  return buf;
}

static int log_has(const char *text) { return strstr(read_file(errlog), text) != NULL; }

static void wait_log(const char *text, unsigned ms) {
  uint64_t end = th_now_ms() + ms;
  while (!log_has(text) && th_now_ms() < end) usleep(5000);
  if (!log_has(text)) th_fail(__FILE__, __LINE__, "no '%s' in: %s", text, read_file(errlog));
}

/* 8 messages, 4 at once, handlers sleeping 1 s: every handler records when
 * it ran; at most 4 intervals ever overlap, and 4 do. */
static void test_concurrency(void) {
  setup();
  const char *h = script("h.sh",
                         "s=$(date +%s%N)\n"
                         "sleep 1\n"
                         "echo \"$s $(date +%s%N)\" > \"$d/t.$SLUICE_DQ_ID\"\n");
  for (int i = 0; i < 8; i++) push("c", "x");
  uint64_t t0 = th_now_ms();
  pid_t pid = start("consume", "c", "--concurrency", "4", "--count", "8", "--", h, NULL);
  TH_ASSERT_EQ(wait_exit(pid, 20000), 0);
  uint64_t took = th_now_ms() - t0;
  TH_ASSERT_EQ(count_files("t."), 8);
  long long s[8], e[8];
  DIR *d = opendir(work);
  struct dirent *de;
  int n = 0;
  while ((de = readdir(d)) != NULL) {
    if (strncmp(de->d_name, "t.", 2) != 0) continue;
    char path[600];
    snprintf(path, sizeof path, "%s/%s", work, de->d_name);
    TH_ASSERT_EQ(sscanf(read_file(path), "%lld %lld", &s[n], &e[n]), 2);
    n++;
  }
  closedir(d);
  TH_ASSERT_EQ(n, 8);
  int most = 0;
  for (int i = 0; i < n; i++) {
    int at = 0; /* handlers running when handler i started */
    for (int j = 0; j < n; j++) at += s[j] <= s[i] && s[i] < e[j];
    if (at > most) most = at;
  }
  TH_ASSERT_EQ(most, 4);
  /* Two rounds of 1 s, not eight. */
  TH_ASSERT_CMP(took, >=, 2000);
  TH_ASSERT_CMP(took, <, 6000);
  TH_ASSERT_EQ(delayed("c") + in_flight("c") + dead("c"), 0);
  cleanup();
}

/* A handler that always fails is retried until --max-attempts, then
 * dead-lettered; one that fails once is acknowledged on its second run.
 * --batch is the older name of --concurrency. */
static void test_failures_retried_then_dead(void) {
  setup();
  const char *h = script("h.sh",
                         "p=$(cat)\n"
                         "echo \"$p $SLUICE_DQ_ATTEMPT\" >> \"$d/log\"\n"
                         "case \"$p\" in\n"
                         "always) exit 3 ;;\n"
                         "once) [ \"$SLUICE_DQ_ATTEMPT\" -ge 2 ] || exit 1 ;;\n"
                         "esac\n");
  push("f", "always");
  push("f", "once");
  pid_t pid = start("consume", "f", "--batch", "2", "--max-attempts", "3", "--retry-delay", "0",
                    "--count", "5", "--", h, NULL);
  TH_ASSERT_EQ(wait_exit(pid, 20000), 0);
  char path[300];
  snprintf(path, sizeof path, "%s/log", work);
  const char *log = read_file(path);
  const char *want[] = {"always 1\n", "always 2\n", "always 3\n", "once 1\n", "once 2\n"};
  for (int i = 0; i < 5; i++)
    if (!strstr(log, want[i])) th_fail(__FILE__, __LINE__, "no '%s' in: %s", want[i], log);
  TH_ASSERT_EQ(dead("f"), 1);
  TH_ASSERT_EQ(delayed("f") + in_flight("f"), 0);
  TH_ASSERT(log_has("attempt 3: CMD exited with status 3"));
  TH_ASSERT(log_has("moving it to the dead letters"));
  cleanup();
}

/* A handler killed by a signal (here its own SIGKILL) counts as a failure:
 * the message comes back, and the second run acknowledges it. */
static void test_crash_retried(void) {
  setup();
  const char *h = script("h.sh",
                         "echo \"$SLUICE_DQ_ATTEMPT\" >> \"$d/log\"\n"
                         "[ \"$SLUICE_DQ_ATTEMPT\" -ge 2 ] || kill -9 $$\n");
  push("k", "x");
  pid_t pid = start("consume", "k", "--retry-delay", "0", "--count", "2", "--", h, NULL);
  TH_ASSERT_EQ(wait_exit(pid, 20000), 0);
  char path[300];
  snprintf(path, sizeof path, "%s/log", work);
  TH_ASSERT_STR_EQ(read_file(path), "1\n2\n");
  TH_ASSERT(log_has("attempt 1: CMD killed by signal 9"));
  TH_ASSERT_EQ(delayed("k") + in_flight("k") + dead("k"), 0);
  cleanup();
}

/* The tool's log says each of has and none of lacks (lists ending in NULL). */
static void expect_log(const char *const *has, const char *const *lacks) {
  for (; has && *has; has++)
    if (!log_has(*has)) th_fail(__FILE__, __LINE__, "the log lacks \"%s\"", *has);
  for (; lacks && *lacks; lacks++)
    if (log_has(*lacks)) th_fail(__FILE__, __LINE__, "the log says \"%s\"", *lacks);
}

/* Handlers that finish only when told: wait for the "go" file (at most 30 s). */
#define WAIT_GO                                           \
  "touch \"$d/started.$SLUICE_DQ_ID\"\n"                  \
  "i=0\n"                                                 \
  "while [ ! -e \"$d/go\" ]; do\n"                        \
  "  i=$((i+1)); [ $i -lt 1500 ] || exit 9; sleep 0.02\n" \
  "done\n"

/* SIGTERM while 3 of 4 messages are being handled: the tool takes nothing
 * more, the 3 handlers finish and are acknowledged, the 4th message stays
 * queued, and the exit status is 0. */
static void test_sigterm_drains(void) {
  setup();
  const char *h = script("h.sh", WAIT_GO "touch \"$d/done.$SLUICE_DQ_ID\"\n");
  for (int i = 0; i < 4; i++) push("s", "x");
  pid_t pid = start("consume", "s", "--concurrency", "3", "--", h, NULL);
  wait_files("started.", 3, 10000);
  TH_ASSERT_EQ(kill(pid, SIGTERM), 0);
  wait_log("stopping: waiting for 3 running CMDs", 10000);
  char go[300];
  snprintf(go, sizeof go, "%s/go", work);
  TH_ASSERT(fclose(fopen(go, "w")) == 0);
  TH_ASSERT_EQ(wait_exit(pid, 20000), 0);
  TH_ASSERT_EQ(count_files("done."), 3);
  TH_ASSERT_EQ(count_files("started."), 3);
  expect_settled("s", 1);
  TH_ASSERT_EQ(dead("s"), 0);
  cleanup();
}

/* A second SIGTERM reaches the handlers; they exit 1 from their trap and
 * their messages are retried (not lost, not acknowledged). */
static void test_second_signal_forwards(void) {
  setup();
  const char *h = script("h.sh", "trap 'touch \"$d/term.$SLUICE_DQ_ID\"; exit 1' TERM\n" WAIT_GO);
  push("t", "x");
  push("t", "y");
  pid_t pid = start("consume", "t", "--concurrency", "2", "--retry-delay", "60000", "--", h, NULL);
  wait_files("started.", 2, 10000);
  TH_ASSERT_EQ(kill(pid, SIGTERM), 0);
  wait_log("stopping: waiting for 2 running CMDs", 10000);
  TH_ASSERT_EQ(kill(pid, SIGTERM), 0);
  TH_ASSERT_EQ(wait_exit(pid, 20000), 0);
  TH_ASSERT(log_has("sending SIGTERM to 2 running CMDs"));
  TH_ASSERT_EQ(count_files("term."), 2);
  expect_settled("t", 2);
  cleanup();
}

/* A run 5x longer than --visibility is renewed all along: never stopped,
 * never delivered to a second slot, and its ack counts. --count 1 makes
 * the tool stop taking at once, so the renewals also go on while it
 * drains. */
static void test_long_run_renewed(void) {
  setup();
  const char *h = script("h.sh", "touch \"$d/started.$$\"\nsleep 1.5\n");
  push("r", "x");
  uint64_t t0 = th_now_ms();
  pid_t pid = start("consume", "r", "--visibility", "300", "--concurrency", "2", "--count", "1",
                    "--", h, NULL);
  TH_ASSERT_EQ(wait_exit(pid, 20000), 0);
  TH_ASSERT_CMP(th_now_ms() - t0, >=, 1500);
  TH_ASSERT_EQ(count_files("started."), 1);
  expect_log(NULL, (const char *const[]){"SIGTERM", "after its visibility deadline", "lost", NULL});
  expect_settled("r", 0);
  cleanup();
}

/* A run past --timeout (ignoring SIGTERM) gets SIGTERM at the timeout and
 * SIGKILL a grace later (--visibility / 5), and its message is retried in
 * time: Redis accepted the retry (no "late" settle). */
static void test_timeout_watchdog(void) {
  setup();
  const char *h = script("h.sh",
                         "trap 'touch \"$d/term\"' TERM\n"
                         "touch \"$d/started\"\n"
                         "i=0; while [ $i -lt 1500 ]; do sleep 0.02; i=$((i+1)); done\n");
  push("v", "x");
  pid_t pid = start("consume", "v", "--visibility", "4000", "--timeout", "1000", "--max-attempts",
                    "2", "--retry-delay", "60000", "--count", "1", "--", h, NULL);
  wait_files("started", 1, 10000);
  uint64_t t0 = th_now_ms();
  TH_ASSERT_EQ(wait_exit(pid, 20000), 0);
  uint64_t took = th_now_ms() - t0;
  th_note("stopped after %llu ms (timeout 1000 ms, grace 800 ms)\n", (unsigned long long)took);
  TH_ASSERT_CMP(took, >=, 1000);
  TH_ASSERT_CMP(took, <, 4000);
  TH_ASSERT_EQ(count_files("term"), 1);
  expect_log((const char *const[]){"ran past --timeout 1000 ms: SIGTERM",
                                   "still runs after SIGTERM: SIGKILL",
                                   "attempt 1: CMD stopped (--timeout)", NULL},
             (const char *const[]){"after its visibility deadline", "settle failed", NULL});
  expect_settled("v", 1);
  cleanup();
}

/* CMD missing or not executable: a clear message and 127/126 before any
 * message is taken. A CMD that disappears while consuming stops the tool
 * (127) and its message is retried. Bad numbers are usage errors. */
static void test_cmd_not_found_and_usage(void) {
  setup();
  push("n", "x");
  TH_ASSERT_EQ(wait_exit(start("consume", "n", "--", "/nonexistent/cmd", NULL), 10000), 127);
  TH_ASSERT(log_has("cannot run '/nonexistent/cmd'"));
  TH_ASSERT_EQ(wait_exit(start("consume", "n", "--", "sluice-test-no-such-cmd", NULL), 10000), 127);
  TH_ASSERT(log_has("cannot run 'sluice-test-no-such-cmd': command not found"));
  TH_ASSERT_EQ(wait_exit(start("consume", "n", "--", work, NULL), 10000), 126);
  TH_ASSERT_EQ(delayed("n"), 1); /* untouched */
  TH_ASSERT_EQ(wait_exit(start("consume", "n", "--concurrency", "0", "--", "true", NULL), 10000),
               64);
  TH_ASSERT_EQ(wait_exit(start("consume", "n", "--concurrency", "x", "--", "true", NULL), 10000),
               64);
  TH_ASSERT_EQ(
      wait_exit(start("consume", "n", "--concurrency", "10001", "--", "true", NULL), 10000), 64);
  TH_ASSERT_EQ(wait_exit(start("consume", "n", "--concurrency", "2", NULL), 10000), 64);
  /* The script runs for the first message and removes itself. */
  const char *h = script("h.sh", "rm -f \"$0\"\n");
  push("n", "y");
  TH_ASSERT_EQ(wait_exit(start("consume", "n", "--", h, NULL), 10000), 127);
  TH_ASSERT(log_has("No such file or directory"));
  expect_settled("n", 1);
  cleanup();
}

/* Run `sluice dq ARGS...` against url (no other --redis), stdout and stderr
 * to errlog (emptied first); returns the exit status. */
static int dq_at(const char *url, const char *sub, ...) {
  th_argv a = {.n = 0};
  th_argv_add(&a, "dq", sub, NULL);
  if (url) th_argv_add(&a, "--redis", url, NULL);
  TH_ARGV_ADD_VA(a, sub);
  TH_ASSERT(truncate(errlog, 0) == 0 || errno == ENOENT);
  return wait_exit(th_tool_start(&a, errlog), 20000);
}

/* Redis's own words reach stderr, prefixed "sluice: dq push: ", and the
 * exit status is the table's 69: OOM (maxmemory reached, noeviction) and
 * NOPERM (no EVALSHA), the same 69 `sem run` gives for it. */
static void test_redis_errors_verbatim(void) {
  setup();
  th_redis r;
  th_redis_start_full(&r);
  TH_ASSERT_EQ(dq_at(r.url, "push", "q", "hello", NULL), 69);
  wait_log("sluice: dq push: ", 1000);
  wait_log("OOM", 1000);
  th_redis_stop(&r);
  static const char *const noperm[] = {"--user", "default", "on",       "nopass", "~*",
                                       "&*",     "+@all",   "-evalsha", "-eval",  NULL};
  TH_ASSERT_EQ(th_redis_start(&r, 0, noperm), 0);
  TH_ASSERT_EQ(dq_at(r.url, "push", "q", "hello", NULL), 69);
  wait_log("sluice: dq push: ", 1000);
  wait_log("NOPERM", 1000);
  TH_ASSERT_EQ(dq_at(r.url, "status", "q", NULL), 69);
  wait_log("sluice: dq status: ", 1000);
  wait_log("NOPERM", 1000);
  th_redis_stop(&r);
  cleanup();
}

/* Numbers name the option, the range and what was given; long names are
 * cut in the echo and the limit said. */
static void test_bad_numbers_and_long_names(void) {
  setup();
  TH_ASSERT_EQ(dq_at(th_server.url, "push", "q", "--delay", "99999999999999999999", "x", NULL), 64);
  wait_log("sluice: dq push: --delay must be 0..4398046511104 ms, got 99999999999999999999", 1000);
  TH_ASSERT_EQ(dq_at(th_server.url, "push", "q", "--at", "0", "x", NULL), 64);
  wait_log("--at must be 1..4398046511104", 1000);
  TH_ASSERT_EQ(dq_at(th_server.url, "consume", "q", "--concurrency", "10001", "--", "true", NULL),
               64);
  wait_log("sluice: dq consume: --concurrency must be 1..10000, got 10001", 1000);
  TH_ASSERT_EQ(
      dq_at(th_server.url, "consume", "q", "--visibility", "4294967296", "--", "true", NULL), 64);
  wait_log("--visibility must be 10..4294967295 ms, got 4294967296", 1000);
  static char name[100001];
  memset(name, 'q', sizeof name - 1);
  TH_ASSERT_EQ(dq_at(th_server.url, "push", name, "x", NULL), 64);
  wait_log("(100000 bytes)", 1000);
  wait_log("at most 512 bytes", 1000);
  TH_ASSERT_CMP(strlen(read_file(errlog)), <, 300);
  TH_ASSERT_EQ(dq_at(th_server.url, "push", "q", "--id", name, "x", NULL), 64);
  wait_log("at most 128 bytes", 1000);
  TH_ASSERT_CMP(strlen(read_file(errlog)), <, 300);
  TH_ASSERT_EQ(delayed("q"), 0);
  cleanup();
}

static const th_case cases[] = {
    TH_CASE(concurrency, 0),
    TH_CASE(failures_retried_then_dead, 0),
    TH_CASE(crash_retried, 0),
    TH_CASE(sigterm_drains, 0),
    TH_CASE(second_signal_forwards, 0),
    TH_CASE(long_run_renewed, 0),
    TH_CASE(timeout_watchdog, 0),
    TH_CASE(cmd_not_found_and_usage, 0),
    TH_CASE(redis_errors_verbatim, 0),
    TH_CASE(bad_numbers_and_long_names, 0),
};
TH_MAIN(cases)
