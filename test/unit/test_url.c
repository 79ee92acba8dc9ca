/* The URL parser (src/net/url.c) without Redis: every accepted form, what is
 * rejected and with which status, and that a rejected URL leaves nothing
 * to free. */
#include <string.h>

#include <sluice/sluice.h>

#include "harness.h"
#include "net/url.h"

/* Parse url, expect OK, and compare every field (NULL: field unset). */
static void expect_ok(const char *url, const char *host, int port, const char *path,
                      const char *user, const char *pass, int db) {
  sluice__endpoint ep;
  int rc = sluice__parse_url(url, &ep);
  if (rc != SLUICE_OK) th_fail(__FILE__, __LINE__, "\"%s\": %s", url, sluice_err_name(rc));
#define FIELD(f, want)                                                        \
  do {                                                                        \
    if ((want) == NULL ? ep.f != NULL : (!ep.f || strcmp(ep.f, (want)) != 0)) \
      th_fail(__FILE__, __LINE__, "\"%s\": " #f " \"%s\", want \"%s\"", url,  \
              ep.f ? ep.f : "(null)", (want) ? (want) : "(null)");            \
  } while (0)
  FIELD(host, host);
  FIELD(unix_path, path);
  FIELD(username, user);
  FIELD(password, pass);
#undef FIELD
  if (ep.port != port) th_fail(__FILE__, __LINE__, "\"%s\": port %d, want %d", url, ep.port, port);
  if (ep.db != db) th_fail(__FILE__, __LINE__, "\"%s\": db %d, want %d", url, ep.db, db);
  sluice__endpoint_clear(&ep);
  TH_ASSERT(ep.host == NULL && ep.password == NULL);
}

/* Parse url, expect status, and an endpoint holding nothing. */
static void expect_rc(const char *url, int status) {
  sluice__endpoint ep;
  memset(&ep, 0x5a, sizeof ep); /* the parser must reset it, even on error */
  int rc = sluice__parse_url(url, &ep);
  if (rc != status)
    th_fail(__FILE__, __LINE__, "\"%s\": %s, want %s", url ? url : "(NULL)", sluice_err_name(rc),
            sluice_err_name(status));
  TH_ASSERT(ep.host == NULL && ep.unix_path == NULL && ep.username == NULL && ep.password == NULL);
  TH_ASSERT_EQ(ep.port, 0);
  TH_ASSERT_EQ(ep.db, 0);
}

/* rediss:// parses with TLS on (a build without TLS refuses it later, in
 * sluice_client_new: the tls test checks that). */
static void test_rediss_form(void) {
  sluice__endpoint ep;
  TH_ASSERT_EQ(sluice__parse_url("rediss://h:6390", &ep), SLUICE_OK);
  TH_ASSERT_EQ(ep.tls, 1);
  TH_ASSERT_STR_EQ(ep.host, "h");
  TH_ASSERT_EQ(ep.port, 6390);
  sluice__endpoint_clear(&ep);
}

static void test_redis_forms(void) {
  expect_ok("redis://localhost", "localhost", 6379, NULL, NULL, NULL, 0);
  expect_ok("redis://10.0.0.7:6380", "10.0.0.7", 6380, NULL, NULL, NULL, 0);
  expect_ok("redis://h:6380/3", "h", 6380, NULL, NULL, NULL, 3);
  expect_ok("redis://h/15", "h", 6379, NULL, NULL, NULL, 15);
  expect_ok("redis://h/", "h", 6379, NULL, NULL, NULL, 0); /* empty db: 0 */
  expect_ok("redis://[::1]:7000/2", "::1", 7000, NULL, NULL, NULL, 2);
  expect_ok("redis://[::1]", "::1", 6379, NULL, NULL, NULL, 0);
  /* No host: loopback, the common default of Redis clients. */
  expect_ok("redis://", "127.0.0.1", 6379, NULL, NULL, NULL, 0);
  expect_ok("redis://:6390", "127.0.0.1", 6390, NULL, NULL, NULL, 0);
  expect_ok("redis:///4", "127.0.0.1", 6379, NULL, NULL, NULL, 4);
}

static void test_ports_and_dbs(void) {
  expect_ok("redis://h:1", "h", 1, NULL, NULL, NULL, 0);
  expect_ok("redis://h:65535", "h", 65535, NULL, NULL, NULL, 0);
  expect_ok("redis://h:06379", "h", 6379, NULL, NULL, NULL, 0);
  expect_rc("redis://h:0", SLUICE_EINVAL);
  expect_rc("redis://h:65536", SLUICE_EINVAL);
  expect_rc("redis://h:", SLUICE_EINVAL);
  expect_rc("redis://h:-1", SLUICE_EINVAL);
  expect_rc("redis://h:+1", SLUICE_EINVAL);
  expect_rc("redis://h: 80", SLUICE_EINVAL);
  expect_rc("redis://h:80x", SLUICE_EINVAL);
  expect_rc("redis://h:6379:6380", SLUICE_EINVAL);
  expect_rc("redis://h:99999999999999999999", SLUICE_EINVAL); /* no overflow to a valid port */
  expect_rc("redis://[::1]:0", SLUICE_EINVAL);
  expect_rc("redis://[::1:6379", SLUICE_EINVAL); /* unclosed bracket */
  expect_ok("redis://h/1048576", "h", 6379, NULL, NULL, NULL, 1 << 20);
  expect_rc("redis://h/1048577", SLUICE_EINVAL);
  expect_rc("redis://h/x", SLUICE_EINVAL);
  expect_rc("redis://h/-1", SLUICE_EINVAL);
  expect_rc("redis://h/1/2", SLUICE_EINVAL);
  expect_rc("redis://h/9999999999", SLUICE_EINVAL);
}

static void test_credentials(void) {
  expect_ok("redis://alice:s3cret@h", "h", 6379, NULL, "alice", "s3cret", 0);
  expect_ok("redis://:s3cret@h:6380", "h", 6380, NULL, NULL, "s3cret", 0);
  /* A lone word before '@' is meant as a password (requirepass). */
  expect_ok("redis://s3cret@h", "h", 6379, NULL, NULL, "s3cret", 0);
  expect_ok("redis://alice:@h", "h", 6379, NULL, "alice", "", 0);
  expect_ok("redis://@h", "h", 6379, NULL, NULL, NULL, 0);
  /* The last '@' ends the credentials: a raw '@' may stay in a password. */
  expect_ok("redis://u:p@ss@h", "h", 6379, NULL, "u", "p@ss", 0);
  /* The first ':' splits user from password. */
  expect_ok("redis://u:a:b@h", "h", 6379, NULL, "u", "a:b", 0);
  expect_ok("redis://u:p@", "127.0.0.1", 6379, NULL, "u", "p", 0);
}

static void test_percent_escapes(void) {
  expect_ok("redis://us%40r:p%3A%40w%25@h", "h", 6379, NULL, "us@r", "p:@w%", 0);
  expect_ok("redis://u:%2f%2F@h", "h", 6379, NULL, "u", "//", 0);
  /* Not an escape: kept as written. */
  expect_ok("redis://u:100%@h", "h", 6379, NULL, "u", "100%", 0);
  expect_ok("redis://u:%4@h", "h", 6379, NULL, "u", "%4", 0);
  expect_ok("redis://u:%zz@h", "h", 6379, NULL, "u", "%zz", 0);
  expect_ok("redis://u:%41@h", "h", 6379, NULL, "u", "A", 0); /* escape at the very end */
  expect_ok("unix:///tmp/a%20b.sock", NULL, 0, "/tmp/a b.sock", NULL, NULL, 0);
}

static void test_unix_forms(void) {
  expect_ok("unix:///tmp/r.sock", NULL, 0, "/tmp/r.sock", NULL, NULL, 0);
  expect_ok("unix:/tmp/r.sock", NULL, 0, "/tmp/r.sock", NULL, NULL, 0);
  expect_ok("/tmp/r.sock", NULL, 0, "/tmp/r.sock", NULL, NULL, 0);
  expect_ok("unix:///tmp/r.sock?db=7", NULL, 0, "/tmp/r.sock", NULL, NULL, 7);
  expect_ok("/r?db=0", NULL, 0, "/r", NULL, NULL, 0);
  expect_rc("unix://", SLUICE_EINVAL);
  expect_rc("unix:", SLUICE_EINVAL);
  expect_rc("unix://tmp/r.sock", SLUICE_EINVAL); /* relative */
  expect_rc("unix:///tmp/r.sock?db=", SLUICE_EINVAL);
  expect_rc("unix:///tmp/r.sock?db=x", SLUICE_EINVAL);
  expect_rc("unix:///tmp/r.sock?db=1048577", SLUICE_EINVAL);
  expect_rc("unix:///tmp/r.sock?timeout=1", SLUICE_EINVAL);
  expect_ok("unix:///?db=1", NULL, 0, "/", NULL, NULL, 1);
}

static void test_bad_schemes(void) {
  expect_rc(NULL, SLUICE_EINVAL);
  expect_rc("", SLUICE_EINVAL);
  expect_rc("localhost:6379", SLUICE_EINVAL);
  expect_rc("http://h", SLUICE_EINVAL);
  expect_rc("REDIS://h", SLUICE_EINVAL);
  expect_rc("redis:/h", SLUICE_EINVAL);
  expect_rc("redis:", SLUICE_EINVAL);
  expect_rc("tmp/r.sock", SLUICE_EINVAL);
}

/* Long inputs are copied whole (ASan/valgrind check the bounds); over-long
 * numbers are rejected, never wrapped. */
static void test_long_inputs(void) {
  enum { N = 64 * 1024 };
  char *url = malloc(N + 64), *want = malloc(N + 1);
  TH_ASSERT(url && want);
  memset(want, 'h', N);
  want[N] = '\0';
  snprintf(url, N + 64, "redis://%s:6380/1", want);
  expect_ok(url, want, 6380, NULL, NULL, NULL, 1);
  snprintf(url, N + 64, "redis://u:%s@h", want);
  expect_ok(url, "h", 6379, NULL, "u", want, 0);
  want[0] = '/';
  snprintf(url, N + 64, "unix://%s", want);
  expect_ok(url, NULL, 0, want, NULL, NULL, 0);
  memset(want, '9', N);
  snprintf(url, N + 64, "redis://h:%s", want);
  expect_rc(url, SLUICE_EINVAL);
  snprintf(url, N + 64, "redis://h/%s", want);
  expect_rc(url, SLUICE_EINVAL);
  free(url);
  free(want);
}

/* redis+cluster:// and rediss+cluster://: the seeds, credentials for every
 * node, TLS, and what a cluster URL cannot say. */
static void test_cluster_forms(void) {
  sluice__endpoint ep;
  TH_ASSERT_EQ(sluice__parse_url("redis+cluster://u:p%40ss@10.0.0.1:7000,[::1]:7001,h:7002/", &ep),
               SLUICE_OK);
  TH_ASSERT_EQ(ep.cluster, 1);
  TH_ASSERT_EQ(ep.nseeds, 3);
  TH_ASSERT_STR_EQ(ep.seed_hosts[0], "10.0.0.1");
  TH_ASSERT_EQ(ep.seed_ports[0], 7000);
  TH_ASSERT_STR_EQ(ep.seed_hosts[1], "::1");
  TH_ASSERT_STR_EQ(ep.seed_hosts[2], "h");
  TH_ASSERT_EQ(ep.seed_ports[2], 7002);
  TH_ASSERT_STR_EQ(ep.username, "u");
  TH_ASSERT_STR_EQ(ep.password, "p@ss");
  TH_ASSERT_EQ(ep.tls, 0);
  sluice__endpoint_clear(&ep);
  TH_ASSERT_EQ(sluice__parse_url("rediss+cluster://h:7000/0?verify=0", &ep), SLUICE_OK);
  TH_ASSERT_EQ(ep.tls, 1);
  TH_ASSERT_EQ(ep.tls_skip_verify, 1);
  TH_ASSERT_EQ(ep.nseeds, 1);
  sluice__endpoint_clear(&ep);
  static const char *const bad[] = {"redis+cluster://",        "redis+cluster://h",
                                    "redis+cluster://h:1/1",   "redis+cluster://h:1,,h:2",
                                    "redis+cluster://h:99999", "redis+cluster://h:1?verify=0",
                                    "redis+cluster://h:1?x=1", NULL};
  for (int i = 0; bad[i]; i++) expect_rc(bad[i], SLUICE_EINVAL);
  /* From the options, no URL. */
  memset(&ep, 0, sizeof ep);
  TH_ASSERT_EQ(sluice__endpoint_cluster(&ep, "a:1,b:2"), SLUICE_OK);
  TH_ASSERT_EQ(ep.nseeds, 2);
  sluice__endpoint_clear(&ep);
  memset(&ep, 0, sizeof ep);
  TH_ASSERT_EQ(sluice__endpoint_cluster(&ep, "a"), SLUICE_EINVAL);
  sluice__endpoint_clear(&ep);
}

/* Parse url, expect SLUICE_EINVAL and a reason containing why. */
static void expect_refused(const char *url, const char *why) {
  expect_rc(url, SLUICE_EINVAL);
  if (!strstr(sluice__endpoint_error(), why))
    th_fail(__FILE__, __LINE__, "\"%s\": reason \"%s\", want \"%s\" in it", url,
            sluice__endpoint_error(), why);
}

/* URLs that could mean something else than they say are refused, each
 * with its reason. */
static void test_ambiguous_forms(void) {
  expect_refused("rediss://h?verify=1&verify=0", "'verify' is given twice");
  expect_refused("rediss://h?ca=/a&sni=x&ca=/b", "'ca' is given twice");
  expect_refused("redis+sentinel://h:1/m?sentinel_password=a&sentinel_password=b",
                 "'sentinel_password' is given twice");
  expect_refused("unix:///s?db=1&db=2", "'db' is given twice");
  expect_refused("redis://[::1]junk:21001", "junk after the IPv6 address '[::1]'");
  expect_refused("redis://[::1]6379", "junk after the IPv6 address");
  expect_refused("redis+cluster://[::1]x:7000", "junk after the IPv6 address");
  expect_refused("redis+sentinel://h:1,[::1]]:2/m", "junk after the IPv6 address");
  expect_refused("redis://::1:6379", "written in brackets");
  expect_refused("redis://h]:6379", "may not hold '['");
  expect_refused("redis://h:", "empty port");
  expect_refused("redis://[::1]:", "empty port");
  expect_refused("redis+cluster://h:1,h2:", "empty port");
  expect_refused("redis://h:65536", "port '65536' is not a number in 1..65535");
  expect_refused("redis://h:0", "port '0'");
  expect_refused("redis+sentinel://h:70000/m", "port '70000'");
  expect_refused("redis+cluster://h", "'h' must be host:port");
  expect_refused("redis://h/1048577", "database '1048577'");
  expect_refused("unix:///s?db=x", "database 'x'");
  expect_refused("redis://h?ca=x", "is for TLS");
  expect_refused("unix:///s?verify=0", "unix:// knows db");
}

/* A control byte anywhere, raw or as an escape, is refused: %00 used to
 * cut the host or password short. */
static void test_control_bytes(void) {
  expect_refused("redis://:pw%00junk@h", "%00 in the password");
  expect_refused("redis://h%00.example:6379", "%00 in the host");
  expect_refused("redis://u%0a:p@h", "%0A in the user name");
  expect_refused("rediss://h?ca=/a%00b", "%00 in URL parameter 'ca'");
  expect_refused("redis+sentinel://h:1/m%1b[2J", "%1B in the master name");
  expect_refused("redis+sentinel://h:1/m?sentinel_password=%7f", "%7F in URL parameter");
  expect_refused("unix:///tmp/a%00b", "%00 in the socket path");
  expect_refused("redis://h\n:6379", "control character 0x0A at byte 9");
  expect_refused("redis://:p\tw@h", "control character 0x09");
  expect_refused("redis://h\x7f", "control character 0x7F");
  /* Escapes of printable bytes stay allowed. */
  expect_ok("redis://:%20%7e@h", "h", 6379, NULL, NULL, " ~", 0);
}

static const th_case cases[] = {
    TH_CASE(redis_forms, 10),     TH_CASE(ports_and_dbs, 10), TH_CASE(credentials, 10),
    TH_CASE(percent_escapes, 10), TH_CASE(unix_forms, 10),    TH_CASE(rediss_form, 0),
    TH_CASE(bad_schemes, 10),     TH_CASE(long_inputs, 10),   TH_CASE(cluster_forms, 10),
    TH_CASE(ambiguous_forms, 10), TH_CASE(control_bytes, 10),
};
TH_MAIN_LOCAL(cases)
