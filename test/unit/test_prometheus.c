/* The Prometheus exposition without Redis: label values escaped and made
 * valid UTF-8 (src/base/promtext.c), and sluice_client_prometheus on a
 * client that cannot connect, with handles of every kind, odd names and
 * two handles on one name (src/inspect/prometheus.c). */
#include <string.h>

#include <event2/event.h>
#include <sluice/sluice.h>

#include "base/promtext.h"
#include "harness.h"
#include "prom_check.h"

/* Both ways in: the text buffer, and the public function. */
static void escapes_as(const char *value, const char *want) {
  sluice__text t = {0};
  sluice__prom_label_value(&t, value);
  TH_ASSERT(!t.oom);
  TH_ASSERT_STR_EQ(t.s ? t.s : "", want);
  sluice__text_reset(&t);
  char buf[64];
  TH_ASSERT_EQ(sluice_prometheus_escape(value, buf, sizeof buf), strlen(want));
  TH_ASSERT_STR_EQ(buf, want);
}

/* The three escapes the format defines, nothing else touched. */
static void test_escapes(void) {
  escapes_as("", "");
  escapes_as("plain-name_1.x", "plain-name_1.x");
  escapes_as("a\\b", "a\\\\b");
  escapes_as("say \"hi\"", "say \\\"hi\\\"");
  escapes_as("two\nlines", "two\\nlines");
  escapes_as("\\n", "\\\\n"); /* a backslash and an n stay two characters */
  escapes_as("tab\tcr\r{}=,", "tab\tcr\r{}=,");
  escapes_as("\"\\\n", "\\\"\\\\\\n");
}

/* Well-formed UTF-8 passes as is; every byte outside a well-formed
 * sequence becomes U+FFFD (EF BF BD). */
static void test_utf8(void) {
  const char *fffd = "\xEF\xBF\xBD";
  escapes_as("caf\xC3\xA9 \xE2\x82\xAC \xF0\x9F\x98\x80",
             "caf\xC3\xA9 \xE2\x82\xAC \xF0\x9F\x98\x80");
  escapes_as("\xEF\xBF\xBF\xF4\x8F\xBF\xBF", "\xEF\xBF\xBF\xF4\x8F\xBF\xBF"); /* U+FFFF, U+10FFFF */
  char want[64];
  snprintf(want, sizeof want, "a%sb", fffd);
  escapes_as(
      "a\xFF"
      "b",
      want); /* never a lead byte */
  escapes_as(
      "a\x80"
      "b",
      want); /* a lone continuation byte */
  escapes_as(
      "a\xC3"
      "b",
      want); /* a lead byte without its continuation */
  snprintf(want, sizeof want, "%s%s", fffd, fffd);
  escapes_as("\xC0\xAF", want); /* overlong '/' */
  escapes_as("\xC3", fffd);     /* cut short by the end */
  snprintf(want, sizeof want, "%s%s%s", fffd, fffd, fffd);
  escapes_as("\xED\xA0\x80", want); /* a surrogate (U+D800) */
  escapes_as("\xE0\x80\xAF", want); /* overlong in three bytes */
  snprintf(want, sizeof want, "%s%s%s%s", fffd, fffd, fffd, fffd);
  escapes_as("\xF4\x90\x80\x80", want); /* past U+10FFFF */
  escapes_as("\xF8\x88\x80\x80", want); /* five-byte form */
  snprintf(want, sizeof want, "%s%sx\\\"", fffd, fffd);
  escapes_as("\xE2\x82x\"", want); /* cut short (each byte), then an escape */
}

/* sluice_prometheus_escape cuts short like snprintf and says how long the
 * whole would be. */
static void test_escape_api(void) {
  char buf[8];
  memset(buf, 'z', sizeof buf);
  TH_ASSERT_EQ(sluice_prometheus_escape("a\"b\"c\"d", buf, sizeof buf), 10);
  TH_ASSERT_STR_EQ(buf, "a\\\"b\\\"c");
  TH_ASSERT_EQ(sluice_prometheus_escape("abc", buf, 1), 3);
  TH_ASSERT_STR_EQ(buf, "");
  TH_ASSERT_EQ(sluice_prometheus_escape("abc", NULL, 0), 3);
  TH_ASSERT_EQ(sluice_prometheus_escape("abc", NULL, 99), 3); /* no buffer: nothing written */
  TH_ASSERT_EQ(sluice_prometheus_escape(NULL, buf, sizeof buf), 0);
  TH_ASSERT_STR_EQ(buf, "");
}

static void test_seconds_and_text(void) {
  char s[SLUICE__PROM_SECONDS_MAX];
  sluice__prom_seconds(s, 0);
  TH_ASSERT_STR_EQ(s, "0.000000");
  sluice__prom_seconds(s, 64);
  TH_ASSERT_STR_EQ(s, "0.000064");
  sluice__prom_seconds(s, 67108864);
  TH_ASSERT_STR_EQ(s, "67.108864");
  sluice__prom_seconds(s, UINT64_MAX);
  TH_ASSERT_STR_EQ(s, "18446744073709.551615");
  /* The buffer grows past its first size, through both append paths. */
  sluice__text t = {0};
  char big[1000];
  memset(big, 'x', sizeof big - 1);
  big[sizeof big - 1] = '\0';
  for (int i = 0; i < 20; i++) sluice__text_printf(&t, "%d:%s;", i, big);
  for (int i = 0; i < 20; i++) sluice__text_puts(&t, big);
  TH_ASSERT(!t.oom);
  TH_ASSERT_EQ(t.len, strlen(t.s));
  TH_ASSERT_EQ(t.len, 20 * (999 + 2) + 10 + 2 * 10 + 20 * 999);
  TH_ASSERT(strncmp(t.s + 1001 + 1, "1:x", 3) == 0);
  sluice__text_reset(&t);
  TH_ASSERT(t.s == NULL && t.len == 0);
}

/* ---- the exposition of a client ------------------------------------------ */

static void on_msg(sluice_dq_consumer *con, sluice_dq_msg *msg, void *ud) {}

static char *expose(const sluice_client *c) {
  char *text;
  size_t len;
  TH_ASSERT_EQ(sluice_client_prometheus(c, &text, &len), SLUICE_OK);
  TH_ASSERT(text != NULL);
  TH_ASSERT_EQ(len, strlen(text));
  prom_check_text(text);
  return text;
}

static sluice_client *dead_client(struct event_base *base) {
  sluice_client_options o;
  sluice_client *c;
  sluice_client_options_init(&o);
  o.unix_path = "/nonexistent/sluice-test.sock"; /* never connects */
  TH_ASSERT_EQ(sluice_client_new(base, &o, &c), SLUICE_OK);
  return c;
}

static void test_exposition(void) {
  struct event_base *base = event_base_new();
  sluice_client *c = dead_client(base);
  sluice_sem *s1, *s2, *odd;
  sluice_limiter *lim;
  sluice_dq *dq;
  sluice_dq_consumer *con;
  sluice_limiter_options lo;
  sluice_limiter_options_init(&lo);
  lo.algo = SLUICE_RL_GCRA;
  lo.limit = 10;
  lo.period_ms = 1000;
  TH_ASSERT_EQ(sluice_sem_new(c, "db", NULL, &s1), SLUICE_OK);
  TH_ASSERT_EQ(sluice_sem_new(c, "db", NULL, &s2), SLUICE_OK);
  TH_ASSERT_EQ(sluice_sem_new(c, "a\\b\"c\nd\xFF", NULL, &odd), SLUICE_OK);
  TH_ASSERT_EQ(sluice_limiter_new(c, "api", &lo, &lim), SLUICE_OK);
  TH_ASSERT_EQ(sluice_dq_new(c, "jobs", NULL, &dq), SLUICE_OK);
  TH_ASSERT_EQ(sluice_dq_consumer_new(c, "jobs", NULL, on_msg, NULL, &con), SLUICE_OK);
  char *text = expose(c);
  th_note("%zu bytes\n", strlen(text));
  TH_ASSERT_EQ(prom_value(text, "sluice_client_handles{kind=\"sem\"}"), 3);
  TH_ASSERT_EQ(prom_value(text, "sluice_client_handles{kind=\"limiter\"}"), 1);
  TH_ASSERT_EQ(prom_value(text, "sluice_client_handles{kind=\"dq\"}"), 1);
  TH_ASSERT_EQ(prom_value(text, "sluice_client_handles{kind=\"dq_consumer\"}"), 1);
  TH_ASSERT_EQ(prom_value(text, "sluice_client_connection_up{connection=\"command\"}"), 0);
  /* The two "db" handles are one series. */
  TH_ASSERT_EQ(prom_value(text, "sluice_sem_grants_total{name=\"db\"}"), 0);
  TH_ASSERT_EQ(prom_value(text, "sluice_sem_grants_total{name=\"a\\\\b\\\"c\\nd\xEF\xBF\xBD\"}"),
               0);
  TH_ASSERT_EQ(prom_value(text, "sluice_limiter_allowed_total{name=\"api\",algorithm=\"gcra\"}"),
               0);
  TH_ASSERT_EQ(prom_value(text,
                          "sluice_limiter_wait_seconds_bucket{name=\"api\",algorithm=\"gcra\","
                          "le=\"+Inf\"}"),
               0);
  TH_ASSERT_EQ(prom_value(text, "sluice_dq_pushed_total{name=\"jobs\"}"), 0);
  TH_ASSERT_EQ(prom_value(text, "sluice_dq_consumer_in_flight{name=\"jobs\"}"), 0);
  TH_ASSERT(strstr(text, "# TYPE sluice_sem_wait_seconds histogram\n"));
  TH_ASSERT(strstr(text, "sluice_sem_wait_seconds_bucket{name=\"db\",le=\"0.000016\"} 0\n"));
  TH_ASSERT(strstr(text, "sluice_sem_wait_seconds_sum{name=\"db\"} 0.000000\n"));
  prom_check_promtool(text);
  sluice_prometheus_free(text);

  /* Freed handles leave; a name with no handle left leaves with them. */
  sluice_sem_free(s1);
  sluice_sem_free(odd);
  sluice_dq_consumer_free(con);
  text = expose(c);
  TH_ASSERT_EQ(prom_value(text, "sluice_client_handles{kind=\"sem\"}"), 1);
  TH_ASSERT_EQ(prom_value(text, "sluice_sem_grants_total{name=\"db\"}"), 0);
  TH_ASSERT(!strstr(text, "\\\"c"));
  TH_ASSERT(!strstr(text, "sluice_dq_consumer_"));
  sluice_prometheus_free(text);

  sluice_sem_free(s2);
  sluice_limiter_free(lim);
  sluice_dq_free(dq);
  th_free_client_and_loop(base, c, 10000);
}

static void test_bad_arguments(void) {
  char *text = (char *)"untouched";
  size_t len = 7;
  TH_ASSERT_EQ(sluice_client_prometheus(NULL, &text, &len), SLUICE_EINVAL);
  TH_ASSERT(text == NULL);
  TH_ASSERT_EQ(len, 0);
  struct event_base *base = event_base_new();
  sluice_client *c = dead_client(base);
  TH_ASSERT_EQ(sluice_client_prometheus(c, NULL, NULL), SLUICE_EINVAL);
  TH_ASSERT_EQ(sluice_client_prometheus(c, &text, NULL), SLUICE_OK); /* len is optional */
  prom_check_text(text);
  sluice_prometheus_free(text);
  sluice_prometheus_free(NULL);
  th_free_client_and_loop(base, c, 10000);
}

static const th_case cases[] = {
    TH_CASE(escapes, 10),          TH_CASE(utf8, 10),       TH_CASE(escape_api, 10),
    TH_CASE(seconds_and_text, 10), TH_CASE(exposition, 30), TH_CASE(bad_arguments, 30),
};
TH_MAIN_LOCAL(cases)
