/*
 * Secrets never leak: a marker password (and a marker sentinel_password)
 * is looked for in every output path of the tool and the library, on a
 * single Redis and through Sentinel, and found nowhere:
 *  - the tool's stdout and stderr: sem run, sem status, dq push, dq consume,
 *    rl check, top --once, and the errors (wrong password, nothing
 *    listening, a bad password file);
 *  - the tool's /proc/PID/cmdline and /proc/PID/environ, and the
 *    environment of the commands it runs (sem run, dq consume), read by
 *    those commands themselves while the tool runs;
 *  - the library's log hook and sluice_client_last_error.
 * And the password file (option and tool, flag and environment) works.
 * Suite "redis"; the Sentinel case starts its own sentinel set.
 */
#include <string.h>
#include <sys/stat.h>

#include "sem_util.h"
#include "topology.h"

#define MARK "Mk7q"             /* in every secret, and nowhere else */
#define DATA_PW MARK "-data-pw" /* the data nodes' password (user app) */
#define SENT_PW MARK "-sent-pw" /* the sentinels' password (user sen) */

static void assert_no_marker(const char *what, const char *text) {
  if (strstr(text, MARK)) th_fail(__FILE__, __LINE__, "%s shows a secret: %s", what, text);
}

static void assert_has(const char *what, const char *text, const char *want) {
  if (!strstr(text, want)) th_fail(__FILE__, __LINE__, "%s: no '%s' in: %s", what, want, text);
}

/* What a command run by the tool sees: the tool's command line and
 * environment as /proc shows them to other processes, and its own. */
#define DUMP                                                               \
  "echo CMDLINE; tr '\\0' ' ' < /proc/$PPID/cmdline; echo; echo ENVIRON; " \
  "tr '\\0' '\\n' < /proc/$PPID/environ; echo OWN; env"

/* The tool on one URL: given by --redis, or in SLUICE_REDIS when by_env. */
typedef struct on_url {
  const char *url;
  int by_env;
} on_url;

/* `sluice WORDS... [--redis URL] [-- sh -c DUMP]`, stdout and stderr
 * joined; env_more: one more environment change, or NULL. */
static th_run tool(const on_url *t, const char *const *words, int dump, const char *env_more) {
  const char *args[32];
  char redis[600];
  int n = 0;
  snprintf(redis, sizeof redis, "SLUICE_REDIS=%s", t->url);
  const char *env[] = {t->by_env ? redis : "SLUICE_REDIS", "SLUICE_REDIS_PASSWORD_FILE", env_more,
                       NULL};
  for (; words[n]; n++) args[n] = words[n];
  if (!t->by_env) args[n++] = "--redis", args[n++] = t->url;
  if (dump) args[n++] = "--", args[n++] = "sh", args[n++] = "-c", args[n++] = DUMP;
  args[n] = NULL;
  return th_tool_capture(args, env, 1);
}

/* The tool's WORDS exit with status and show no secret. */
static void expect(const on_url *t, const char *const *words, int status, const char *want) {
  th_run r = tool(t, words, 0, NULL);
  if (r.status != status) th_fail(__FILE__, __LINE__, "%s: %d: %s", words[0], r.status, r.out);
  if (want) assert_has(words[0], r.out, want);
  assert_no_marker(words[0], r.out);
  th_run_free(&r);
}

/* A command that runs a command: the dump shows nothing secret. */
static void check_dump(const char *what, const on_url *t, const char *const *words) {
  th_run r = tool(t, words, 1, NULL);
  if (r.status) th_fail(__FILE__, __LINE__, "%s: %d: %s", what, r.status, r.out);
  assert_has(what, r.out, "OWN");
  assert_has(what, r.out, t->by_env ? "SLUICE_REDIS=" : "--redis");
  assert_no_marker(what, r.out);
  th_run_free(&r);
}

/* Every command of the tool shows no secret anywhere. */
static void tool_everywhere(const char *url, int by_env, const char *host_part) {
  static const char *const sem_run[] = {"sem", "run", "job", "-n", "1", "--ttl", "5000", NULL};
  static const char *const push[] = {"dq", "push", "q", "--id", "m1", "hello", NULL};
  static const char *const consume[] = {"dq", "consume", "q", "--count", "1", NULL};
  static const char *const status[] = {"sem", "status", "job", NULL};
  static const char *const check[] = {"rl",      "check", "api",      "k",    "--algo", "fixed",
                                      "--limit", "5",     "--period", "1000", NULL};
  static const char *const top[] = {"top", "--once", NULL};
  on_url t = {url, by_env};
  check_dump("sem run (cmdline, environ, the command's environment)", &t, sem_run);
  expect(&t, push, 0, NULL);
  check_dump("dq consume (cmdline, environ, the command's environment)", &t, consume);
  expect(&t, status, 0, "semaphore job");
  expect(&t, check, 0, "allowed=1");
  expect(&t, top, 0, host_part);
}

/* The errors: each names the URL, masked. */
static void tool_errors(const char *bad_url, const char *want) {
  static const char *const status[] = {"sem", "status", "job", NULL};
  static const char *const top[] = {"top", "--once", NULL};
  on_url by_flag = {bad_url, 0}, by_env = {bad_url, 1};
  expect(&by_flag, status, 69, want);
  expect(&by_flag, status, 69, "***");
  expect(&by_env, top, 69, "***");
}

static const char *const app_user[] = {"--user", "app", "on",    ">" DATA_PW,
                                       "~*",     "&*",  "+@all", NULL};

static void test_tool_standalone(void) {
  th_redis r;
  th_redis_start_tcp(&r, app_user);
  char url[160], host[64], wrong[160], dead[160];
  snprintf(host, sizeof host, "127.0.0.1:%d", r.port);
  snprintf(url, sizeof url, "redis://app:%s@%s/0", DATA_PW, host);
  tool_everywhere(url, 0, host);
  tool_everywhere(url, 1, host);
  snprintf(wrong, sizeof wrong, "redis://app:%s-wrong@%s", MARK, host);
  tool_errors(wrong, "WRONGPASS");
  th_redis_stop(&r);
  snprintf(dead, sizeof dead, "redis://:%s@%s", DATA_PW, host); /* nothing listens now */
  tool_errors(dead, "cannot reach Redis at redis://:***@");
}

/* A password file: by flag or environment, one line with its line break;
 * a password given twice, or a file missing, is refused naming the file. */
static void test_password_file(void) {
  th_redis r;
  th_redis_start_tcp(&r, app_user);
  char url[96], file[256], env_file[300], twice[128];
  snprintf(url, sizeof url, "redis://app:@127.0.0.1:%d", r.port); /* the user; no password */
  snprintf(file, sizeof file, "%s/pw", r.dir);
  snprintf(env_file, sizeof env_file, "SLUICE_REDIS_PASSWORD_FILE=%s", file);
  FILE *f = fopen(file, "w");
  TH_ASSERT(f != NULL);
  fprintf(f, "%s\n", DATA_PW);
  fclose(f);
  chmod(file, 0600);
  on_url t = {url, 0};
  const char *const by_flag[] = {"sem", "status", "s", "--redis-password-file", file, NULL};
  expect(&t, by_flag, 0, "semaphore s");
  const char *const by_env[] = {"top", "--once", NULL};
  th_run run = tool(&t, by_env, 0, env_file);
  TH_ASSERT_EQ(run.status, 0);
  assert_no_marker("top", run.out);
  th_run_free(&run);

  snprintf(twice, sizeof twice, "redis://app:%s@127.0.0.1:%d", DATA_PW, r.port);
  on_url t2 = {twice, 0};
  expect(&t2, by_flag, 64, "a password is given twice");
  const char *const missing[] = {"sem", "status", "s", "--redis-password-file", "/nonexistent/pw",
                                 NULL};
  expect(&t, missing, 64, "password_file /nonexistent/pw: No such file or directory");

  /* The library's option, and what it refuses. */
  struct event_base *base = event_base_new();
  sluice_client_options o;
  sluice_client_options_init(&o);
  o.url = url;
  o.password_file = file;
  sluice_client *c = NULL;
  TH_ASSERT_EQ(sluice_client_new(base, &o, &c), SLUICE_OK);
  sluice_sem *s = sem_test_new(c, "s", 1, 5000, 0);
  acq_result a = sem_hold(base, s);
  sluice_permit_release(a.permit, NULL, NULL);
  sluice_sem_free(s);
  client_close_drain(base, c);
  f = fopen(file, "w");
  fprintf(f, "%s\nsecond line\n", DATA_PW);
  fclose(f);
  TH_ASSERT_EQ(sluice_client_new(base, &o, &c), SLUICE_EINVAL);
  assert_has("two lines", sluice_client_last_error(NULL), "more than one line");
  assert_no_marker("two lines", sluice_client_last_error(NULL));
  f = fopen(file, "w");
  fclose(f);
  TH_ASSERT_EQ(sluice_client_new(base, &o, &c), SLUICE_EINVAL);
  assert_has("empty", sluice_client_last_error(NULL), "is empty");
  event_base_free(base);
  th_redis_stop(&r);
}

/* ---- the library: log hook and last_error --------------------------------- */

typedef struct seen {
  char text[32 * 1024];
  size_t len;
  const char *want; /* a log line with this sets found */
  int found;
} seen;

static void on_log(sluice_client *c, int level, const char *msg, void *ud) {
  seen *s = ud;
  int n = snprintf(s->text + s->len, sizeof s->text - s->len, "%s\n", msg);
  if (n > 0 && s->len + (size_t)n < sizeof s->text) s->len += (size_t)n;
  if (s->want && strstr(msg, s->want)) s->found = 1;
  assert_no_marker("log hook", msg);
  assert_no_marker("last_error", sluice_client_last_error(c));
}

/* A client of url whose handshake fails: the log hook says it (want_log)
 * and last_error why (want), never with the secret. */
static void library_refused(const char *url, const char *want_log, const char *want) {
  struct event_base *base = event_base_new();
  sluice_client *c = sem_test_client_at(base, url, 1000);
  seen *s = calloc(1, sizeof *s);
  s->want = want_log;
  sluice_client_set_log_cb(c, on_log, s);
  sluice_sem *sem = sem_test_new(c, "s", 1, 5000, 0);
  sem_try(base, sem); /* whatever it answers, the handshake's failure is logged */
  if (!th_loop_until(base, &s->found, 5000))
    th_fail(__FILE__, __LINE__, "no '%s' in the log: %s", want_log, s->text);
  assert_has("last_error", sluice_client_last_error(c), want);
  assert_no_marker("last_error", sluice_client_last_error(c));
  sluice_sem_free(sem);
  th_free_client_and_loop(base, c, 5000);
  free(s);
}

/* A client of url that works: every log line, and last_error after a
 * refused step (NOPERM), without the secret. */
static void library_works(const char *url) {
  struct event_base *base = event_base_new();
  sluice_client *c = sem_test_client_at(base, url, 2000);
  seen *s = calloc(1, sizeof *s);
  sluice_client_set_log_cb(c, on_log, s);
  sluice_sem *sem = sem_test_new(c, "s", 1, 5000, 0);
  acq_result a = sem_hold(base, sem);
  sluice_permit_release(a.permit, NULL, NULL);
  assert_no_marker("last_error", sluice_client_last_error(c));
  sluice_sem_free(sem);
  client_close_drain(base, c);
  assert_has("log", s->text, "connected to");
  event_base_free(base);
  free(s);
}

static void test_library_standalone(void) {
  th_redis r;
  th_redis_start_tcp(&r, app_user);
  char url[128];
  snprintf(url, sizeof url, "redis://app:%s@127.0.0.1:%d", DATA_PW, r.port);
  library_works(url);
  snprintf(url, sizeof url, "redis://app:%s-wrong@127.0.0.1:%d", MARK, r.port);
  library_refused(url, "WRONGPASS", "WRONGPASS");
  th_redis_stop(&r);
}

/* ---- Sentinel --------------------------------------------------------------- */

static void test_sentinel(void) {
  th_sentinel topo;
  TH_ASSERT_EQ(th_sentinel_start(&topo, "mk"), 0);
  /* The sentinels keep talking to the data nodes and to each other as the
   * default user; sluice uses users of its own. */
  for (int i = 0; i < 2; i++) th_node_acl_user(&topo.data[i], "app", DATA_PW, "~* &* +@all", NULL);
  for (int i = 0; i < 3; i++) th_node_acl_user(&topo.sent[i], "sen", SENT_PW, "+@all", NULL);
  char url[512], wrong[512], dead[512];
  snprintf(url, sizeof url,
           "redis+sentinel://app:%s@%s/mk?sentinel_username=sen&sentinel_password=%s", DATA_PW,
           topo.sentinels, SENT_PW);
  tool_everywhere(url, 0, topo.sentinels);
  tool_everywhere(url, 1, topo.sentinels);
  library_works(url);
  snprintf(wrong, sizeof wrong,
           "redis+sentinel://app:%s@%s/mk?sentinel_username=sen&sentinel_password=%s-wrong",
           DATA_PW, topo.sentinels, MARK);
  tool_errors(wrong, "WRONGPASS");
  library_refused(wrong, "no address", "WRONGPASS");
  th_sentinel_stop(&topo);
  snprintf(dead, sizeof dead, "redis+sentinel://:%s@127.0.0.1:%d/mk?sentinel_password=%s", DATA_PW,
           topo.sent[0].port, SENT_PW);
  tool_errors(dead, "cannot reach Redis at redis+sentinel://:***@");
}

static const th_case cases[] = {
    TH_CASE(tool_standalone, 60),
    TH_CASE(password_file, 30),
    TH_CASE(library_standalone, 30),
    TH_CASE(sentinel, 120),
};
TH_TOPOLOGY_MAIN(cases)
