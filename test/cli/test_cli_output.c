/*
 * The tool's output carries no control character that came from Redis or
 * from a name: `sem status`, `dq status`, `top` (by name and by SCAN) and
 * the errors show ESC, BEL, newlines as \xNN, so stored names or a hostile
 * reply cannot move the cursor, retitle the terminal or forge a line. And
 * errors go to stderr, `top`'s too.
 */
#include <string.h>

#include "harness.h"

#define EVIL "n\x1b[2J\x07\nX" /* clear screen, bell, a forged line */
#define EVIL_SHOWN "n\\x1b[2J\\x07\\x0aX"

/* Only printable text and line ends. */
static void assert_clean(const char *what, const char *text) {
  for (const unsigned char *p = (const unsigned char *)text; *p; p++)
    if ((*p < 0x20 && *p != '\n') || *p == 0x7f)
      th_fail(__FILE__, __LINE__, "%s: byte 0x%02x at %zu of: %s", what, *p,
              (size_t)(p - (const unsigned char *)text), text);
}

static void assert_has(const char *what, const char *text, const char *want) {
  if (!strstr(text, want)) th_fail(__FILE__, __LINE__, "%s: no '%s' in: %s", what, want, text);
}

/* `sluice ARGS --redis URL`: 0 expected, the escaped name on stdout. */
static void shows_escaped(const char *const *args, const char *want) {
  const char *argv[16];
  int n = 0;
  for (; args[n]; n++) argv[n] = args[n];
  argv[n++] = "--redis", argv[n++] = th_server.url, argv[n] = NULL;
  th_run r = th_tool_capture(argv, NULL, 0);
  if (r.status)
    th_fail(__FILE__, __LINE__, "%s %s: %d: %s%s", args[0], args[1], r.status, r.out, r.err);
  assert_clean(args[0], r.out);
  assert_clean(args[0], r.err);
  assert_has(args[0], r.out, want);
  th_run_free(&r);
}

static void test_names_and_ids(void) {
  /* A semaphore whose holder id came from elsewhere (anyone who can write
   * the keys), a queue and a limiter key with the same evil name. */
  freeReplyObject(
      th_redis_command(&th_server, "HSET sluice:sem:{%s}:meta permits 1 fence 1", EVIL));
  freeReplyObject(th_redis_command(&th_server, "ZADD sluice:sem:{%s}:holders 99999999999999 %s",
                                   EVIL, "id\x1b]0;pwned\x07"));
  static const char *const push[] = {"dq", "push",    EVIL,    "--id",    EVIL,
                                     "x",  "--delay", "60000", "--redis", NULL};
  const char *argv[12];
  int n = 0;
  for (; push[n]; n++) argv[n] = push[n];
  argv[n++] = th_server.url, argv[n] = NULL;
  th_run r = th_tool_capture(argv, NULL, 0);
  TH_ASSERT_EQ(r.status, 0);
  assert_clean("dq push", r.out);
  th_run_free(&r);

  static const char *const status[] = {"sem", "status", EVIL, NULL};
  shows_escaped(status, "id\\x1b]0;pwned\\x07");
  static const char *const dq_status[] = {"dq", "status", EVIL, NULL};
  shows_escaped(dq_status, EVIL_SHOWN);
  static const char *const top_named[] = {"top", "--once", EVIL, NULL};
  shows_escaped(top_named, "id\\x1b]0;pwned\\x07");
  static const char *const top_scan[] = {"top", "--once", NULL};
  shows_escaped(top_scan, EVIL_SHOWN);
}

/* Redis's words with control characters in them (here the key names an
 * unknown-command error quotes) are escaped in the error, on stderr. */
static void test_redis_error_escaped(void) {
  static const char *const no_evalsha[] = {"--rename-command", "EVALSHA", "", NULL};
  th_redis r;
  TH_ASSERT_EQ(th_redis_start(&r, 0, no_evalsha), 0);
  const char *const status[] = {"sem", "status", EVIL, "--redis", r.url, NULL};
  th_run run = th_tool_capture(status, NULL, 0);
  TH_ASSERT_EQ(run.status, 69);
  TH_ASSERT_STR_EQ(run.out, "");
  assert_has("sem status", run.err, "unknown command 'EVALSHA'");
  assert_has("sem status", run.err, "n\\x1b[2J\\x07 X"); /* Redis made '\n' a space */
  assert_clean("sem status", run.err);
  th_run_free(&run);

  /* top: the view on stdout says it is incomplete, the error is on stderr. */
  const char *const top[] = {"top", "--once", "--redis", r.url, NULL};
  run = th_tool_capture(top, NULL, 0);
  TH_ASSERT_EQ(run.status, 69);
  assert_has("top", run.out, "(incomplete: see the error on stderr)");
  TH_ASSERT(strstr(run.out, "EVALSHA") == NULL);
  assert_has("top", run.err, "sluice: top: incomplete view: ");
  assert_has("top", run.err, "unknown command 'EVALSHA'");
  assert_clean("top", run.err);
  th_run_free(&run);
  th_redis_stop(&r);
}

static const th_case cases[] = {
    TH_CASE(names_and_ids, 30),
    TH_CASE(redis_error_escaped, 30),
};
TH_MAIN(cases)
