/* The `sluice sem` tool, run as a separate process against the test server. */
#include <signal.h>
#include <stdarg.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness.h"

static const char *sluice_bin(void) {
  const char *b = getenv("SLUICE_BIN");
  if (!b) th_fail(__FILE__, __LINE__, "SLUICE_BIN not set");
  return b;
}

/* Start `sluice sem ARGS...` (NULL-terminated) with --redis set; returns pid. */
static pid_t start(const char *first, ...) {
  const char *argv[40];
  int n = 0;
  va_list ap;
  argv[n++] = sluice_bin();
  argv[n++] = "sem";
  argv[n++] = first;
  argv[n++] = "--redis";
  argv[n++] = th_server.url;
  va_start(ap, first);
  const char *a;
  while ((a = va_arg(ap, const char *)) && n < 39) argv[n++] = a;
  va_end(ap);
  argv[n] = NULL;
  pid_t pid = fork();
  TH_ASSERT(pid >= 0);
  if (pid == 0) {
    execv(argv[0], (char *const *)argv);
    _exit(99);
  }
  return pid;
}

static int wait_exit(pid_t pid) {
  int st;
  TH_ASSERT_EQ(waitpid(pid, &st, 0), pid);
  TH_ASSERT(WIFEXITED(st));
  return WEXITSTATUS(st);
}

static int file_exists(const char *path) {
  struct stat sb;
  return stat(path, &sb) == 0;
}

static void wait_for_file(const char *path, unsigned ms) {
  uint64_t end = th_now_ms() + ms;
  while (!file_exists(path) && th_now_ms() < end) usleep(5000);
  TH_ASSERT(file_exists(path));
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
  snprintf(script, sizeof script,
           "mkdir %s/inside || exit 42; sleep 0.05; rmdir %s/inside", th_server.dir,
           th_server.dir);
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
  snprintf(script, sizeof script, "trap 'touch %s; exit 0' TERM; touch %s; sleep 20 & wait",
           marker, started);
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
  pid_t pid = fork();
  if (pid == 0) {
    FILE *f = freopen(out, "w", stdout);
    (void)f;
    execl(sluice_bin(), sluice_bin(), "sem", "status", "s", "--redis", th_server.url, (char *)NULL);
    _exit(99);
  }
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
  pid = fork();
  if (pid == 0) {
    execl(sluice_bin(), sluice_bin(), "sem", "status", "s", "--redis", "unix:///nonexistent.sock",
          (char *)NULL);
    _exit(99);
  }
  TH_ASSERT_EQ(wait_exit(pid), 69);
}

int main(int argc, char **argv) {
  static const th_case cases[] = {
      {"exit_status_and_release", test_exit_status_and_release, 0},
      {"busy_and_timeout", test_busy_and_timeout, 0},
      {"mutual_exclusion", test_mutual_exclusion, 0},
      {"lost_permit_terminates_command", test_lost_permit_terminates_command, 0},
      {"tool_killed_terminates_command", test_tool_killed_terminates_command, 0},
      {"status_and_usage", test_status_and_usage, 0},
      {NULL, NULL, 0}};
  return th_main(argc, argv, cases);
}
