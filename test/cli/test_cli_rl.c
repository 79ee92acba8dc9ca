/* The `sluice rl` tool, run as a separate process against the test server:
 * its output and every exit status it documents. */
#include <stdarg.h>
#include <string.h>

#include "harness.h"

typedef th_tool_out run_out;

/* Run `sluice rl ARGS...` (NULL-terminated); --redis is added unless the
 * first argument is "-" (then it is dropped and ARGS must carry their own). */
static run_out rl(const char *first, ...) {
  th_argv a = {.n = 0};
  int own_redis = strcmp(first, "-") == 0;
  th_argv_add(&a, "rl", NULL);
  if (!own_redis) th_argv_add(&a, first, NULL);
  TH_ARGV_ADD_VA(a, first);
  if (!own_redis) th_argv_add(&a, "--redis", th_server.url, NULL);
  run_out r;
  th_tool_run(&r, &a, 0);
  return r;
}

static long long field(const run_out *r, const char *name) {
  char pat[64];
  snprintf(pat, sizeof pat, "%s=", name);
  const char *p = strstr(r->out, pat);
  if (!p) th_fail(__FILE__, __LINE__, "no %s in output: %s", name, r->out);
  return strtoll(p + strlen(pat), NULL, 10);
}

static void test_check(void) {
  run_out r = rl("check", "api", "1.2.3.4", "--algo", "sliding-log", "--limit", "2", "--period",
                 "60000", NULL);
  TH_ASSERT_EQ(r.status, 0);
  TH_ASSERT_EQ(field(&r, "allowed"), 1);
  TH_ASSERT_EQ(field(&r, "limit"), 2);
  TH_ASSERT_EQ(field(&r, "remaining"), 1);
  TH_ASSERT_EQ(field(&r, "retry_after_ms"), 0);
  TH_ASSERT_EQ(field(&r, "reset_after_ms"), 60000);
  r = rl("check", "api", "1.2.3.4", "--algo", "sliding-log", "--limit", "2", "--period", "60000",
         "--cost", "1", NULL);
  TH_ASSERT_EQ(r.status, 0);
  r = rl("check", "api", "1.2.3.4", "--algo", "sliding-log", "--limit", "2", "--period", "60000",
         NULL);
  TH_ASSERT_EQ(r.status, 1); /* rate-limited */
  TH_ASSERT_EQ(field(&r, "allowed"), 0);
  TH_ASSERT_CMP(field(&r, "retry_after_ms"), >, 59000);
  TH_ASSERT_EQ(th_redis_int(&th_server, "LLEN sluice:rl:{3:api:1.2.3.4}:log"), 5); /* 2 entries */
  /* GCRA with a burst; --prefix moves the key. */
  r = rl("check", "g", "k", "--algo", "gcra", "--limit", "1", "--period", "60000", "--burst", "3",
         "--cost", "3", "--prefix", "other:", NULL);
  TH_ASSERT_EQ(r.status, 0);
  TH_ASSERT_EQ(field(&r, "limit"), 3);
  TH_ASSERT_EQ(field(&r, "remaining"), 0);
  TH_ASSERT_EQ(th_redis_int(&th_server, "EXISTS other:rl:{1:g:k}:gcra"), 1);
}

static void test_wait(void) {
  const char *common[] = {"--algo", "gcra", "--limit", "1", "--period", "300", "--burst", "1"};
  run_out r = rl("check", "w", "k", common[0], common[1], common[2], common[3], common[4],
                 common[5], common[6], common[7], NULL);
  TH_ASSERT_EQ(r.status, 0);
  uint64_t t0 = th_now_ms();
  r = rl("wait", "w", "k", common[0], common[1], common[2], common[3], common[4], common[5],
         common[6], common[7], "--timeout", "3000", NULL);
  TH_ASSERT_EQ(r.status, 0);
  TH_ASSERT_EQ(field(&r, "allowed"), 1);
  TH_ASSERT_CMP(th_now_ms() - t0, >=, 200);
  /* Cannot pass within the timeout: 75, with the last denial printed. */
  r = rl("wait", "w2", "k", "--algo", "fixed", "--limit", "1", "--period", "600000", NULL);
  TH_ASSERT_EQ(r.status, 0);
  r = rl("wait", "w2", "k", "--algo", "fixed", "--limit", "1", "--period", "600000", "--timeout",
         "100", NULL);
  TH_ASSERT_EQ(r.status, 75);
  TH_ASSERT_EQ(field(&r, "allowed"), 0);
}

static void test_usage_and_unreachable(void) {
  TH_ASSERT_EQ(rl("--help", NULL).status, 0);
  TH_ASSERT_EQ(rl("check", "--help", NULL).status, 0);
  TH_ASSERT(strstr(rl("check", "--help", NULL).out, "sliding-log") != NULL);
  TH_ASSERT_EQ(rl("frob", NULL).status, 64);
  TH_ASSERT_EQ(rl("check", "n", "--algo", "fixed", "--limit", "1", "--period", "1", NULL).status,
               64);
  TH_ASSERT_EQ(rl("check", "n", "k", "--limit", "1", "--period", "1", NULL).status, 64);
  TH_ASSERT_EQ(
      rl("check", "n", "k", "--algo", "leaky", "--limit", "1", "--period", "1", NULL).status, 64);
  TH_ASSERT_EQ(
      rl("check", "n", "k", "--algo", "fixed", "--limit", "0", "--period", "1", NULL).status, 64);
  TH_ASSERT_EQ(
      rl("check", "n", "k", "--algo", "fixed", "--limit", "x", "--period", "1", NULL).status, 64);
  TH_ASSERT_EQ(
      rl("check", "n", "k", "--algo", "fixed", "--limit", "2", "--period", "1", "--cost", "3", NULL)
          .status,
      64);
  TH_ASSERT_EQ(
      rl("check", "n", "k", "--algo", "fixed", "--limit", "2", "--period", "1", "--bogus", NULL)
          .status,
      64);
  TH_ASSERT_EQ(
      rl("check", "n", "", "--algo", "fixed", "--limit", "2", "--period", "1", NULL).status, 64);
  /* No server there. */
  char url[300];
  snprintf(url, sizeof url, "unix://%s/nothing.sock", th_server.dir);
  TH_ASSERT_EQ(rl("-", "check", "n", "k", "--algo", "fixed", "--limit", "2", "--period", "1",
                  "--redis", url, NULL)
                   .status,
               69);
  TH_ASSERT_EQ(rl("-", "wait", "n", "k", "--algo", "fixed", "--limit", "2", "--period", "1",
                  "--redis", url, NULL)
                   .status,
               69);
}

static void assert_has(const char *text, const char *want) {
  if (!strstr(text, want)) th_fail(__FILE__, __LINE__, "no '%s' in: %s", want, text);
}

/* Redis's own words (OOM: maxmemory reached, noeviction) reach stderr,
 * prefixed with the command; exit 69. */
static void test_redis_error_verbatim(void) {
  th_redis r;
  th_redis_start_full(&r);
  run_out o = rl("-", "check", "n", "k", "--algo", "fixed", "--limit", "2", "--period", "1000",
                 "--redis", r.url, NULL);
  TH_ASSERT_EQ(o.status, 69);
  assert_has(o.err, "sluice: rl check: ");
  assert_has(o.err, "OOM");
  th_redis_stop(&r);
}

/* Numbers name the option, the range and what was given. */
static void test_bad_numbers(void) {
  run_out o = rl("check", "n", "k", "--algo", "fixed", "--limit", "99999999999", "--period", "1",
                 NULL);
  TH_ASSERT_EQ(o.status, 64);
  assert_has(o.err, "sluice: rl check: --limit must be 1..1000000000, got 99999999999");
  o = rl("wait", "n", "k", "--algo", "fixed", "--limit", "1", "--period", "1", "--timeout", "-1",
         NULL);
  TH_ASSERT_EQ(o.status, 64);
  assert_has(o.err, "sluice: rl wait: --timeout must be 0..4294967295 ms, got '-1'");
  o = rl("check", "n", "k", "--algo", "fixed", "--limit", "2", "--period", "1", "--cost", "3",
         NULL);
  TH_ASSERT_EQ(o.status, 64);
  assert_has(o.err, "--cost must be 1..2, got 3");
  o = rl("check", "n", "k", "--algo", "sliding-log", "--limit", "1000000000", "--period", "60000",
         "--cost", "9999", NULL);
  TH_ASSERT_EQ(o.status, 64);
  assert_has(o.err, "--cost must be at least 10000 with --limit 1000000000");
  /* The largest cost is one entry: answered at once. */
  o = rl("check", "n", "k", "--algo", "sliding-log", "--limit", "1000000000", "--period", "60000",
         "--cost", "1000000000", NULL);
  TH_ASSERT_EQ(o.status, 0);
  TH_ASSERT_EQ(th_redis_int(&th_server, "LLEN sluice:rl:{1:n:k}:log"), 3);
}

static const th_case cases[] = {
    TH_CASE(check, 0),
    TH_CASE(wait, 0),
    TH_CASE(usage_and_unreachable, 0),
    TH_CASE(redis_error_verbatim, 0),
    TH_CASE(bad_numbers, 0),
};
TH_MAIN(cases)
