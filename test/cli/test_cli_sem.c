/* The `sluice sem` tool, run as a separate process against the test server. */
#include <fcntl.h>
#include <signal.h>
#include <stdarg.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness.h"

/* Start `sluice sem ARGS...` (NULL-terminated) with --redis set; returns pid. */
static pid_t start(const char *first, ...) {
  th_argv a = {.n = 0};
  th_argv_add(&a, "sem", first, "--redis", th_server.url, NULL);
  TH_ARGV_ADD_VA(a, first);
  return th_tool_start(&a, NULL);
}

static int wait_exit(pid_t pid) { return th_tool_wait(pid, 60000); }

static int file_exists(const char *path) {
  struct stat sb;
  return stat(path, &sb) == 0;
}

static void wait_for_file(const char *path, unsigned ms) {
  uint64_t end = th_now_ms() + ms;
  while (!file_exists(path) && th_now_ms() < end) usleep(5000);
  TH_ASSERT(file_exists(path));
}

typedef th_tool_out tool_out;

/* Run `sluice sem ARGS...` (NULL-terminated; no --redis added) to its end. */
static tool_out tool(const char *first, ...) {
  th_argv a = {.n = 0};
  th_argv_add(&a, "sem", first, NULL);
  TH_ARGV_ADD_VA(a, first);
  tool_out r;
  th_tool_run(&r, &a, 0);
  return r;
}

static void assert_has(const char *text, const char *want) {
  if (!strstr(text, want)) th_fail(__FILE__, __LINE__, "no '%s' in: %s", want, text);
}

static void test_exit_status_and_release(void) {
  TH_ASSERT_EQ(wait_exit(start("run", "m", "--ttl", "1000", "--", "sh", "-c", "exit 7", NULL)), 7);
  TH_ASSERT_EQ(th_redis_int(&th_server, "ZCARD sluice:sem:{m}:holders"), 0);
  TH_ASSERT_EQ(wait_exit(start("run", "m", "--", "true", NULL)), 0);
  TH_ASSERT_EQ(wait_exit(start("run", "m", "--", "/nonexistent/cmd", NULL)), 127);
  TH_ASSERT_EQ(th_redis_int(&th_server, "ZCARD sluice:sem:{m}:holders"), 0);
}

static void test_busy_and_timeout(void) {
  char marker[256];
  snprintf(marker, sizeof marker, "%s/held", th_server.dir);
  char script[400];
  snprintf(script, sizeof script, "touch %s; sleep 3", marker);
  pid_t holder = start("run", "m", "--ttl", "2000", "--", "sh", "-c", script, NULL);
  wait_for_file(marker, 5000);
  TH_ASSERT_EQ(wait_exit(start("run", "m", "--no-wait", "--", "true", NULL)), 75);
  uint64_t t0 = th_now_ms();
  TH_ASSERT_EQ(wait_exit(start("run", "m", "--wait", "300", "--", "true", NULL)), 75);
  TH_ASSERT_CMP(th_now_ms() - t0, >=, 300);
  /* A waiter with time enough gets in when the holder's command ends. */
  TH_ASSERT_EQ(wait_exit(start("run", "m", "--wait", "10000", "--", "true", NULL)), 0);
  TH_ASSERT_EQ(wait_exit(holder), 0);
  unlink(marker);
}

/* Six concurrent runs of a command that fails if another instance is inside
 * (mkdir is atomic): the semaphore makes them take turns. */
static void test_mutual_exclusion(void) {
  char script[512];
  snprintf(script, sizeof script, "mkdir %s/inside || exit 42; sleep 0.05; rmdir %s/inside",
           th_server.dir, th_server.dir);
  pid_t pids[6];
  for (int i = 0; i < 6; i++)
    pids[i] = start("run", "x", "-n", "1", "--ttl", "2000", "--wait", "20000", "--", "sh", "-c",
                    script, NULL);
  for (int i = 0; i < 6; i++) TH_ASSERT_EQ(wait_exit(pids[i]), 0);
}

/* Redis stops answering while the command runs: the lease cannot be renewed,
 * the command gets SIGTERM and the tool exits 76. */
static void test_lost_permit_terminates_command(void) {
  char marker[256], script[600];
  snprintf(marker, sizeof marker, "%s/got-term", th_server.dir);
  snprintf(script, sizeof script, "trap 'touch %s; exit 0' TERM; touch %s.started; sleep 20 & wait",
           marker, marker);
  char started[300];
  snprintf(started, sizeof started, "%s.started", marker);
  pid_t pid = start("run", "l", "--ttl", "500", "--", "sh", "-c", script, NULL);
  wait_for_file(started, 5000);
  th_redis_pause(&th_server);
  int code = wait_exit(pid);
  th_redis_resume(&th_server);
  TH_ASSERT_EQ(code, 76);
  TH_ASSERT(file_exists(marker));
}

/* The tool is killed: its command must not run on unprotected. */
static void test_tool_killed_terminates_command(void) {
  char marker[256], script[1200], started[300];
  snprintf(marker, sizeof marker, "%s/orphan-term", th_server.dir);
  snprintf(started, sizeof started, "%s.started", marker);
  snprintf(script, sizeof script, "trap 'touch %s; exit 0' TERM; touch %s; sleep 20 & wait", marker,
           started);
  pid_t pid = start("run", "k", "--ttl", "5000", "--", "sh", "-c", script, NULL);
  wait_for_file(started, 5000);
  kill(pid, SIGKILL);
  waitpid(pid, NULL, 0);
  wait_for_file(marker, 5000);
}

static void test_status_and_usage(void) {
  char marker[256], script[400];
  snprintf(marker, sizeof marker, "%s/st", th_server.dir);
  snprintf(script, sizeof script, "touch %s; sleep 1", marker);
  pid_t holder = start("run", "s", "-n", "2", "--ttl", "3000", "--", "sh", "-c", script, NULL);
  wait_for_file(marker, 5000);
  char out[256];
  snprintf(out, sizeof out, "%s/status.txt", th_server.dir);
  th_argv status = {.n = 0};
  th_argv_add(&status, "sem", "status", "s", "--redis", th_server.url, NULL);
  pid_t pid = th_tool_start(&status, out);
  TH_ASSERT_EQ(wait_exit(pid), 0);
  FILE *f = fopen(out, "r");
  char buf[1024] = {0};
  TH_ASSERT(f && fread(buf, 1, sizeof buf - 1, f) > 0);
  fclose(f);
  TH_ASSERT(strstr(buf, "permits 2, holders 1, waiters 0") != NULL);
  TH_ASSERT(strstr(buf, "ms left") != NULL);
  TH_ASSERT_EQ(wait_exit(holder), 0);
  /* Bad arguments and an unreachable Redis get their own statuses. */
  TH_ASSERT_EQ(wait_exit(start("run", "s", "-n", "0", "--", "true", NULL)), 64);
  TH_ASSERT_EQ(wait_exit(start("run", "s", "--ttl", "abc", "--", "true", NULL)), 64);
  TH_ASSERT_EQ(wait_exit(start("run", "s", NULL)), 64);
  TH_ASSERT_EQ(wait_exit(start("bogus", NULL)), 64);
  th_argv unreachable = {.n = 0};
  th_argv_add(&unreachable, "sem", "status", "s", "--redis", "unix:///nonexistent.sock", NULL);
  pid = th_tool_start(&unreachable, NULL);
  TH_ASSERT_EQ(wait_exit(pid), 69);
}

/* Redis's own words reach stderr, prefixed with the command, and the exit
 * status is the table's 69 whatever the command: a user without EVALSHA
 * (NOPERM), a wrong password (WRONGPASS, the password itself not shown). */
static void test_redis_errors_verbatim(void) {
  static const char *const noperm[] = {"--user", "default", "on",       "nopass", "~*",
                                       "&*",     "+@all",   "-evalsha", "-eval",  NULL};
  th_redis r;
  TH_ASSERT_EQ(th_redis_start(&r, 0, noperm), 0);
  tool_out t = tool("run", "m", "--redis", r.url, "--", "true", NULL);
  TH_ASSERT_EQ(t.status, 69);
  assert_has(t.err, "sluice: sem run: ");
  assert_has(t.err, "NOPERM");
  t = tool("status", "m", "--redis", r.url, NULL);
  TH_ASSERT_EQ(t.status, 69);
  assert_has(t.err, "sluice: sem status: ");
  assert_has(t.err, "NOPERM");
  th_redis_stop(&r);

  static const char *const pass[] = {"--requirepass", "sekret", NULL};
  th_redis_start_tcp(&r, pass);
  char url[96];
  snprintf(url, sizeof url, "redis://:wrong-one@127.0.0.1:%d", r.port);
  t = tool("run", "m", "--redis", url, "--", "true", NULL);
  TH_ASSERT_EQ(t.status, 69);
  assert_has(t.err, "sluice: sem run: ");
  assert_has(t.err, "WRONGPASS");
  TH_ASSERT(strstr(t.err, "wrong-one") == NULL); /* logs must not keep it */
  th_redis_stop(&r);
}

/* Numbers out of range name the option, the range and what was given; an
 * overlong name is cut in the echo and the limit said. */
static void test_bad_numbers_and_long_names(void) {
  tool_out t = tool("run", "m", "-n", "2000000", "--", "true", NULL);
  TH_ASSERT_EQ(t.status, 64);
  assert_has(t.err, "sluice: sem run: -n must be 1..1000000, got 2000000");
  t = tool("run", "m", "--ttl", "99999999999", "--", "true", NULL);
  TH_ASSERT_EQ(t.status, 64);
  assert_has(t.err, "sluice: sem run: --ttl must be 10..86400000 ms, got 99999999999");
  t = tool("run", "m", "--wait", "18446744073709551616", "--", "true", NULL); /* 2^64 */
  TH_ASSERT_EQ(t.status, 64);
  assert_has(t.err, "--wait must be 0..4294967295 ms, got 18446744073709551616");
  t = tool("run", "m", "--ttl", "5s", "--", "true", NULL);
  TH_ASSERT_EQ(t.status, 64);
  assert_has(t.err, "--ttl must be 10..86400000 ms, got '5s'");
  static char name[100001];
  memset(name, 'a', sizeof name - 1);
  t = tool("run", name, "--", "true", NULL);
  TH_ASSERT_EQ(t.status, 64);
  assert_has(t.err, "(100000 bytes)");
  assert_has(t.err, "at most 512 bytes");
  TH_ASSERT_CMP(strlen(t.err), <, 300);
  t = tool("status", name, NULL);
  TH_ASSERT_EQ(t.status, 64);
  TH_ASSERT_CMP(strlen(t.err), <, 300);
}

/* `sem release NAME ID`: the id `sem status` shows is released (and the
 * freed permit goes to the waiter at once), a second release says it was
 * not held (1), a malformed id is a usage error. */
static void test_release_by_id(void) {
  char go[256], started[256], script[700];
  snprintf(go, sizeof go, "%s/rel-go", th_server.dir);
  snprintf(started, sizeof started, "%s/rel-started", th_server.dir);
  snprintf(script, sizeof script,
           "touch %s; i=0; while [ ! -e %s ] && [ $i -lt 1500 ]; do sleep 0.02; i=$((i+1)); done",
           started, go);
  pid_t holder = start("run", "r", "-n", "1", "--ttl", "30000", "--", "sh", "-c", script, NULL);
  wait_for_file(started, 5000);
  pid_t waiter = start("run", "r", "--wait", "20000", "--", "true", NULL);
  tool_out t = tool("status", "r", "--redis", th_server.url, NULL);
  TH_ASSERT_EQ(t.status, 0);
  const char *h = strstr(t.out, "holder ");
  TH_ASSERT(h != NULL);
  char id[33];
  memcpy(id, h + 7, 32);
  id[32] = '\0';
  t = tool("release", "r", id, "--redis", th_server.url, NULL);
  TH_ASSERT_EQ(t.status, 0);
  TH_ASSERT_STR_EQ(t.err, "");
  /* The waiter got the permit while the holder's command still runs. */
  TH_ASSERT_EQ(wait_exit(waiter), 0);
  t = tool("release", "r", id, "--redis", th_server.url, NULL);
  TH_ASSERT_EQ(t.status, 1);
  assert_has(t.err, "sluice: sem release: ");
  assert_has(t.err, "is not held");
  t = tool("release", "r", "not-a-permit-id", "--redis", th_server.url, NULL);
  TH_ASSERT_EQ(t.status, 64);
  assert_has(t.err, "32 hex digits");
  t = tool("release", "r", NULL);
  TH_ASSERT_EQ(t.status, 64);
  TH_ASSERT(fclose(fopen(go, "w")) == 0);
  TH_ASSERT_EQ(wait_exit(holder), 0);
  unlink(go);
  unlink(started);
}

/* CMD inherits the tool's fds but not its Redis connection. */
static void test_cmd_gets_no_redis_fds(void) {
  char out[256], script[700];
  snprintf(out, sizeof out, "%s/fds", th_server.dir);
  snprintf(script, sizeof script,
           "for f in /proc/$$/fd/*; do l=$(readlink \"$f\"); "
           "case \"$l\" in socket:*) echo \"$f $l\";; esac; done > %s",
           out);
  tool_out t = tool("run", "f", "--redis", th_server.url, "--", "sh", "-c", script, NULL);
  TH_ASSERT_EQ(t.status, 0);
  FILE *f = fopen(out, "r");
  TH_ASSERT(f != NULL);
  char buf[1024] = {0};
  size_t n = fread(buf, 1, sizeof buf - 1, f);
  fclose(f);
  unlink(out);
  if (n) th_fail(__FILE__, __LINE__, "CMD inherited sockets: %s", buf);
}

static int process_gone(pid_t pid) {
  char st = th_proc_state(pid);
  return st == 0 || st == 'Z' || st == 'X';
}

/* SIGTERM to the tool reaches what CMD started, not CMD alone: CMD runs
 * in its own process group, which gets the signal. */
static void test_signal_reaches_cmd_group(void) {
  char pidfile[256], script[1000];
  snprintf(pidfile, sizeof pidfile, "%s/bg.pid", th_server.dir);
  snprintf(script, sizeof script, "sleep 30 & echo $! > %s.tmp; mv %s.tmp %s; wait", pidfile,
           pidfile, pidfile);
  th_argv a = {.n = 0}; /* no terminal: CMD gets its own group */
  th_argv_add(&a, "sem", "run", "g", "--redis", th_server.url, "--", "sh", "-c", script, NULL);
  pid_t pid = th_tool_start(&a, "/dev/null");
  wait_for_file(pidfile, 5000);
  FILE *f = fopen(pidfile, "r");
  long bg = 0;
  TH_ASSERT(f && fscanf(f, "%ld", &bg) == 1);
  fclose(f);
  unlink(pidfile);
  TH_ASSERT_EQ(kill(pid, SIGTERM), 0);
  TH_ASSERT_EQ(wait_exit(pid), 128 + SIGTERM);
  uint64_t end = th_now_ms() + 5000;
  while (!process_gone((pid_t)bg) && th_now_ms() < end) usleep(5000);
  int gone = process_gone((pid_t)bg);
  if (!gone) kill((pid_t)bg, SIGKILL);
  TH_ASSERT(gone);
  TH_ASSERT_EQ(th_redis_int(&th_server, "ZCARD sluice:sem:{g}:holders"), 0);
}

static const th_case cases[] = {
    TH_CASE(exit_status_and_release, 0),
    TH_CASE(busy_and_timeout, 0),
    TH_CASE(mutual_exclusion, 0),
    TH_CASE(lost_permit_terminates_command, 0),
    TH_CASE(tool_killed_terminates_command, 0),
    TH_CASE(status_and_usage, 0),
    TH_CASE(redis_errors_verbatim, 0),
    TH_CASE(bad_numbers_and_long_names, 0),
    TH_CASE(release_by_id, 0),
    TH_CASE(cmd_gets_no_redis_fds, 0),
    TH_CASE(signal_reaches_cmd_group, 0),
};
TH_MAIN(cases)
