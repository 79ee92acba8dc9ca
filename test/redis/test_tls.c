/* TLS (rediss://): every primitive over TLS against a private redis-server
 * that serves only TLS on a loopback port and requires client certificates,
 * with a CA and certificates made by openssl at run time; the failures a
 * user meets (wrong CA, wrong name, no client certificate) and their texts;
 * the URL's TLS parameters; the tool. Built without TLS, it checks instead
 * that rediss:// is refused with a reason. Either way it first says which
 * hiredis the binary runs with. */
#include <dlfcn.h>
#include <stdarg.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <event2/event.h>
#include <hiredis/async.h>
#include <sluice/sluice.h>

#include "dq_util.h"
#include "harness.h"
#include "rl_util.h"
#include "sem_util.h"

#ifdef SLUICE_HAVE_TLS
static char certs[160]; /* temp dir with the CA, server and client files */
static int tls_port;

/* A file of the cert dir (one of a few rotating buffers). */
static const char *cert(const char *name) {
  static char buf[4][256];
  static int i;
  i = (i + 1) % 4;
  snprintf(buf[i], sizeof buf[i], "%s/%s", certs, name);
  return buf[i];
}

/* The rediss:// URL of the test server with a query. */
static const char *tls_url(const char *query) {
  static char buf[2][2048];
  static int i;
  i = (i + 1) % 2;
  snprintf(buf[i], sizeof buf[i], "rediss://127.0.0.1:%d%s%s", tls_port, *query ? "?" : "", query);
  return buf[i];
}

/* ca=, cert= and key= for the test CA and client certificate. */
static const char *good_query(void) {
  static char q[800];
  snprintf(q, sizeof q, "ca=%s&cert=%s&key=%s", cert("ca.crt"), cert("client.crt"),
           cert("client.key"));
  return q;
}

typedef struct state_rec {
  int changes;
  int up;
  int status;
} state_rec;

static void on_state(sluice_client *c, int connected, int status, void *ud) {
  state_rec *r = ud;
  r->changes++;
  r->up = connected;
  r->status = status;
}

static sluice_client *client_for(struct event_base *base, const char *url, state_rec *st) {
  sluice_client *c = th_client(base, url, 3000);
  if (st) sluice_client_set_state_cb(c, on_state, st);
  return c;
}

#endif

/* Which hiredis this binary was built with and which one it loaded. */
static void test_hiredis_build(void) {
  Dl_info info;
  TH_ASSERT(dladdr((void *)redisAsyncConnect, &info) != 0 && info.dli_fname);
  th_note("built against hiredis %d.%d.%d, running %s; TLS %s\n", HIREDIS_MAJOR, HIREDIS_MINOR,
          HIREDIS_PATCH, info.dli_fname,
#ifdef SLUICE_HAVE_TLS
          "on"
#else
          "off"
#endif
  );
  /* The library's file name carries its major version (libhiredis.so.1.1.0
   * for 1.x, libhiredis.so.0.14 for 0.14): headers and library must agree. */
  TH_ASSERT(strstr(info.dli_fname, HIREDIS_MAJOR >= 1 ? "libhiredis.so.1" : "libhiredis.so.0"));
#ifdef SLUICE_HAVE_TLS
  TH_ASSERT_CMP(HIREDIS_MAJOR, >=, 1);
#endif
}

typedef th_tool_out run_out;

/* Run the sluice tool with args (NULL-terminated), stderr joined to stdout. */
static run_out run_cli(const char *first, ...) {
  th_argv a = {.n = 0};
  th_argv_add(&a, first, NULL);
  TH_ARGV_ADD_VA(a, first);
  run_out r;
  th_tool_run(&r, &a, 1);
  return r;
}

#define TH_ASSERT_CONTAINS(hay, needle)                                                            \
  do {                                                                                             \
    const char *th_h_ = (hay);                                                                     \
    if (!th_h_ || !strstr(th_h_, (needle)))                                                        \
      th_fail(__FILE__, __LINE__, "\"%s\" does not contain \"%s\"", th_h_ ? th_h_ : "", (needle)); \
  } while (0)

#ifndef SLUICE_HAVE_TLS

/* Without TLS, rediss:// and options.tls are refused at once, with a reason. */
static void test_refused_without_tls(void) {
  struct event_base *base = event_base_new();
  sluice_client_options o;
  sluice_client_options_init(&o);
  o.url = "rediss://127.0.0.1:6380";
  sluice_client *c = NULL;
  TH_ASSERT_EQ(sluice_client_new(base, &o, &c), SLUICE_EINVAL);
  TH_ASSERT(c == NULL);
  TH_ASSERT_CONTAINS(sluice_client_last_error(NULL), "TLS needs hiredis >= 1.0");
  TH_ASSERT_CONTAINS(sluice_client_last_error(NULL), "libhiredis_ssl");
  sluice_client_options_init(&o);
  o.tls = 1;
  TH_ASSERT_EQ(sluice_client_new(base, &o, &c), SLUICE_EINVAL);
  TH_ASSERT_CONTAINS(sluice_client_last_error(NULL), "TLS needs hiredis >= 1.0");
  /* A plain client afterwards works and clears the text. */
  th_client_options(&o, th_server.url);
  c = th_client_with(base, &o);
  TH_ASSERT_STR_EQ(sluice_client_last_error(NULL), "");
  th_free_client_and_loop(base, c, 5000);
}

static void test_cli_refused_without_tls(void) {
  run_out r = run_cli("rl", "check", "api", "k", "--algo", "fixed", "--limit", "2", "--period",
                      "60000", "--redis", "rediss://127.0.0.1:6380", NULL);
  TH_ASSERT_EQ(r.status, 64);
  TH_ASSERT_CONTAINS(r.out, "TLS needs hiredis >= 1.0");
}

static const th_case cases[] = {
    TH_CASE(hiredis_build, 0),
    TH_CASE(refused_without_tls, 0),
    TH_CASE(cli_refused_without_tls, 0),
};
TH_MAIN(cases)

#else /* SLUICE_HAVE_TLS */

/* Does a CLIENT LIST line of the test server hold both texts? */
static int client_list_has(const char *a, const char *b) {
  redisContext *rc = th_redis_connect(&th_server);
  TH_ASSERT(rc && !rc->err);
  redisReply *rep = redisCommand(rc, "CLIENT LIST");
  TH_ASSERT(rep && rep->type == REDIS_REPLY_STRING);
  int found = 0;
  for (char *line = strtok(rep->str, "\n"); line && !found; line = strtok(NULL, "\n"))
    found = strstr(line, a) && strstr(line, b);
  freeReplyObject(rep);
  redisFree(rc);
  return found;
}

/* Run the loop until cond() holds, up to ms. */
static int loop_until_cond(struct event_base *base, int (*cond)(void), unsigned ms) {
  uint64_t end = th_now_ms() + ms;
  while (!cond() && th_now_ms() < end) th_loop_for(base, 5);
  return cond();
}

static int one_queued(void) { return th_redis_int(&th_server, "ZCARD sluice:sem:{t}:queue") == 1; }

static char laddr[64]; /* "laddr=127.0.0.1:<tls port>" */

static int brpop_on_tls_port(void) { return client_list_has("cmd=brpop", laddr); }

/* A semaphore over TLS: try_acquire, then a blocking acquire (it waits in
 * BRPOP on the blocking connection, over TLS too) woken by the release. */
static void test_semaphore(void) {
  struct event_base *base = event_base_new();
  state_rec st = {0};
  sluice_client *c = client_for(base, tls_url(good_query()), &st);
  sluice_sem *s = sem_test_new(c, "t", 1, 10000, 0);
  acq_result a = sem_hold(base, s);
  TH_ASSERT(st.up);
  TH_ASSERT_EQ(th_redis_int(&th_server, "ZCARD sluice:sem:{t}:holders"), 1);
  acq_result w = {0};
  TH_ASSERT_EQ(sluice_sem_acquire(s, 10000, acq_cb, &w, NULL), SLUICE_OK);
  TH_ASSERT(loop_until_cond(base, one_queued, 5000));
  TH_ASSERT(loop_until_cond(base, brpop_on_tls_port, 5000));
  TH_ASSERT_EQ(w.done, 0);
  /* Woken by the release through BRPOP, not by a heartbeat. */
  TH_ASSERT_CMP(sem_handoff_ms(base, a.permit, &w, 5000), <, 500);
  sluice_permit_release(w.permit, NULL, NULL);
  sluice_sem_free(s);
  th_free_client_and_loop(base, c, 5000);
}

static void test_limiter(void) {
  struct event_base *base = event_base_new();
  sluice_client *c = client_for(base, tls_url(good_query()), NULL);
  sluice_limiter *lim = rl_test_new(c, "api", SLUICE_RL_GCRA, 2, 60000);
  for (int i = 0; i < 3; i++) {
    sluice_rl_result res = rl_test_check(base, lim, "k", 1);
    TH_ASSERT_EQ(res.source, SLUICE_RL_REDIS);
    TH_ASSERT_EQ(res.allowed, i < 2);
  }
  sluice_limiter_free(lim);
  th_free_client_and_loop(base, c, 5000);
}

typedef struct dq_rec {
  int got;
  int settled;
  int settle_status;
  char payload[32];
} dq_rec;

static void on_settle(sluice_dq_consumer *con, int status, const char *id, void *ud) {
  dq_rec *r = ud;
  r->settled++;
  r->settle_status = status;
}

static void on_msg(sluice_dq_consumer *con, sluice_dq_msg *m, void *ud) {
  dq_rec *r = ud;
  size_t len;
  const char *p = sluice_dq_msg_payload(m, &len);
  snprintf(r->payload, sizeof r->payload, "%.*s", (int)len, p);
  r->got++;
  TH_ASSERT_EQ(sluice_dq_ack(m, on_settle, r), SLUICE_OK);
}

static void test_delay_queue(void) {
  struct event_base *base = event_base_new();
  sluice_client *c = client_for(base, tls_url(good_query()), NULL);
  sluice_dq *dq = dqt_queue(c, "jobs");
  dq_rec r = {0};
  sluice_dq_consumer *con = NULL;
  TH_ASSERT_EQ(sluice_dq_consumer_new(c, "jobs", NULL, on_msg, &r, &con), SLUICE_OK);
  dqt_push p;
  TH_ASSERT_EQ(dqt_push_wait(base, dq, NULL, "over tls", 100, &p), SLUICE_OK);
  TH_ASSERT(th_loop_until(base, &r.settled, 10000));
  TH_ASSERT_EQ(r.got, 1);
  TH_ASSERT_STR_EQ(r.payload, "over tls");
  TH_ASSERT_EQ(r.settle_status, SLUICE_OK);
  sluice_dq_consumer_free(con);
  sluice_dq_free(dq);
  th_free_client_and_loop(base, c, 5000);
}

/* After the server restarts, the client reconnects over TLS by itself. */
static void test_reconnect(void) {
  struct event_base *base = event_base_new();
  state_rec st = {0};
  sluice_client *c = client_for(base, tls_url(good_query()), &st);
  TH_ASSERT(th_loop_until(base, &st.changes, 5000));
  TH_ASSERT_EQ(st.up, 1);
  th_redis_restart(&th_server); /* kill -9, then the same TLS arguments */
  uint64_t end = th_now_ms() + 10000;
  while (st.changes < 2 && th_now_ms() < end) th_loop_for(base, 5);
  TH_ASSERT_EQ(st.up, 0); /* the loss was seen */
  while (!st.up && th_now_ms() < end) th_loop_for(base, 5);
  TH_ASSERT_EQ(st.up, 1);
  sluice_client_stats stats;
  sluice_client_get_stats(c, &stats);
  TH_ASSERT_CMP(stats.reconnects, >=, 1);
  sluice_limiter *lim = rl_test_new(c, "api", SLUICE_RL_FIXED, 1, 60000);
  TH_ASSERT_EQ(rl_test_check(base, lim, "k", 1).allowed, 1);
  sluice_limiter_free(lim);
  th_free_client_and_loop(base, c, 5000);
}

/* A connection that must fail: the state callback reports it (no hang), an
 * operation fails with ECONNECTION or ETIMEDOUT instead of hanging, and the
 * error text holds want. */
static void expect_connect_error(const char *url, const char *want) {
  struct event_base *base = event_base_new();
  state_rec st = {0};
  sluice_client *c = client_for(base, url, &st);
  TH_ASSERT(th_loop_until(base, &st.changes, 5000));
  TH_ASSERT_EQ(st.up, 0);
  TH_ASSERT_EQ(st.status, SLUICE_ECONNECTION);
  TH_ASSERT(!sluice_client_is_connected(c));
  th_note("%s\n", sluice_client_last_error(c));
  TH_ASSERT_CONTAINS(sluice_client_last_error(c), want);
  sluice_limiter *lim = rl_test_new(c, "api", SLUICE_RL_FIXED, 1, 1000);
  rl_answer r = rl_test_answer(base, lim, "k", 1);
  TH_ASSERT(r.status == SLUICE_ECONNECTION || r.status == SLUICE_ETIMEDOUT);
  /* Still failing the same way after reconnect attempts. */
  int changes = st.changes;
  uint64_t end = th_now_ms() + 5000;
  while (st.changes < changes + 2 && th_now_ms() < end) th_loop_for(base, 5);
  TH_ASSERT_CMP(st.changes, >=, changes + 2);
  TH_ASSERT_CONTAINS(sluice_client_last_error(c), want);
  sluice_limiter_free(lim);
  th_free_client_and_loop(base, c, 5000);
}

static void test_wrong_ca(void) {
  char q[800];
  snprintf(q, sizeof q, "ca=%s&cert=%s&key=%s", cert("other-ca.crt"), cert("client.crt"),
           cert("client.key"));
  expect_connect_error(tls_url(q), "TLS: server certificate not accepted");
}

static void test_wrong_server_name(void) {
  char q[900];
  snprintf(q, sizeof q, "%s&sni=not-this-server.example", good_query());
  expect_connect_error(tls_url(q), "hostname mismatch");
}

static void test_client_cert_missing(void) {
  char q[300];
  snprintf(q, sizeof q, "ca=%s", cert("ca.crt"));
  expect_connect_error(tls_url(q), "requires a client certificate");
}

/* Plain Redis protocol to the TLS port fails too, and does not hang. */
static void test_plain_to_tls_port(void) {
  char url[64];
  snprintf(url, sizeof url, "redis://127.0.0.1:%d", tls_port);
  expect_connect_error(url, "connect");
}

/* rediss:// to a plain-text port: the server never answers the TLS hello
 * (it waits for a line end), and the error says so at the connect
 * deadline rather than "connect timed out". A file that is there but holds
 * no certificate gets OpenSSL's reason. */
static void test_tls_to_plain_port(void) {
  th_redis plain;
  th_redis_start_tcp(&plain, NULL);
  char url[900];
  snprintf(url, sizeof url, "rediss://127.0.0.1:%d?%s", plain.port, good_query());
  struct event_base *base = event_base_new();
  sluice_client_options o;
  sluice_client_options_init(&o);
  o.url = url;
  o.connect_timeout_ms = 300;
  sluice_client *c = NULL;
  TH_ASSERT_EQ(sluice_client_new(base, &o, &c), SLUICE_OK);
  state_rec st = {0};
  sluice_client_set_state_cb(c, on_state, &st);
  TH_ASSERT(th_loop_until(base, &st.changes, 3000));
  TH_ASSERT_EQ(st.up, 0);
  TH_ASSERT_CONTAINS(sluice_client_last_error(c),
                     "TLS handshake failed: the server did not answer TLS");
  client_close_drain(base, c);
  th_redis_stop(&plain);

  snprintf(url, sizeof url, "rediss://127.0.0.1:1?ca=%s", cert("client.key")); /* not a CA */
  o.url = url;
  TH_ASSERT_EQ(sluice_client_new(base, &o, &c), SLUICE_EINVAL);
  TH_ASSERT_CONTAINS(sluice_client_last_error(NULL), "TLS: cannot load CA file");
  TH_ASSERT(strstr(sluice_client_last_error(NULL), "system lib") == NULL);
  event_base_free(base);
}

/* The server's name given as SNI, reached by address; and verify=0 with a
 * CA that does not match (tests only). */
static void test_sni_and_skip_verify(void) {
  char q[2][900];
  snprintf(q[0], sizeof q[0], "%s&sni=localhost", good_query());
  snprintf(q[1], sizeof q[1], "ca=%s&cert=%s&key=%s&verify=0", cert("other-ca.crt"),
           cert("client.crt"), cert("client.key"));
  for (int i = 0; i < 2; i++) {
    struct event_base *base = event_base_new();
    state_rec st = {0};
    sluice_client *c = client_for(base, tls_url(q[i]), &st);
    TH_ASSERT(th_loop_until(base, &st.changes, 5000));
    TH_ASSERT_EQ(st.up, 1);
    th_free_client_and_loop(base, c, 5000);
  }
}

/* The TLS fields of sluice_client_options, with host and port. */
static void test_options(void) {
  struct event_base *base = event_base_new();
  sluice_client_options o;
  th_client_options(&o, NULL);
  o.port = tls_port;
  o.tls = 1;
  o.tls_ca_file = cert("ca.crt");
  o.tls_cert_file = cert("client.crt");
  o.tls_key_file = cert("client.key");
  o.tls_server_name = "localhost";
  sluice_client *c = th_client_with(base, &o);
  state_rec st = {0};
  sluice_client_set_state_cb(c, on_state, &st);
  TH_ASSERT(th_loop_until(base, &st.changes, 5000));
  TH_ASSERT_EQ(st.up, 1);
  client_close_drain(base, c);
  /* A URL's query wins over the options: this CA cannot verify the server. */
  char q[300];
  snprintf(q, sizeof q, "ca=%s", cert("other-ca.crt"));
  o.url = tls_url(q);
  TH_ASSERT_EQ(sluice_client_new(base, &o, &c), SLUICE_OK);
  st.changes = 0;
  sluice_client_set_state_cb(c, on_state, &st);
  TH_ASSERT(th_loop_until(base, &st.changes, 5000));
  TH_ASSERT_EQ(st.up, 0);
  TH_ASSERT_CONTAINS(sluice_client_last_error(c), "certificate");
  th_free_client_and_loop(base, c, 5000);
}

/* Options sluice_client_new refuses, each with its reason. */
static void test_refusals(void) {
  struct event_base *base = event_base_new();
  struct {
    const char *url;
    const char *cert, *key;
    const char *want;
  } bad[] = {
      {"rediss://127.0.0.1:1?bogus=1", NULL, NULL, "unknown URL parameter 'bogus'"},
      {"redis://127.0.0.1:1?ca=/x", NULL, NULL, "use a rediss:// URL"},
      {"rediss://127.0.0.1:1?verify=2", NULL, NULL, "takes 0 or 1"},
      {"rediss://127.0.0.1:1?ca=", NULL, NULL, "needs a value"},
      {"rediss://127.0.0.1:1?ca=/nonexistent/ca.pem", NULL, NULL,
       "TLS: cannot read CA file /nonexistent/ca.pem: No such file or directory"},
      {"rediss://127.0.0.1:1?ca_dir=/nonexistent", NULL, NULL,
       "TLS: cannot read CA directory /nonexistent: No such file or directory"},
      {"rediss://127.0.0.1:1?cert=/nonexistent/c.pem&key=/nonexistent/k.pem", NULL, NULL,
       "TLS: cannot read client certificate /nonexistent/c.pem: No such file or directory"},
      {"rediss://127.0.0.1:1?cert=/x.pem", NULL, NULL, "needs its private key"},
      {"unix:///tmp/x.sock", NULL, NULL, "not a unix socket"},
      {NULL, "client.crt", "server.key", "client key"},
      {"http://x", NULL, NULL, "invalid Redis URL"},
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    sluice_client_options o;
    sluice_client_options_init(&o);
    o.url = bad[i].url;
    o.tls = 1;
    o.port = tls_port;
    if (bad[i].cert) {
      o.tls_cert_file = cert(bad[i].cert);
      o.tls_key_file = cert(bad[i].key);
    }
    sluice_client *c = NULL;
    TH_ASSERT_EQ(sluice_client_new(base, &o, &c), SLUICE_EINVAL);
    TH_ASSERT(c == NULL);
    TH_ASSERT_CONTAINS(sluice_client_last_error(NULL), bad[i].want);
  }
  /* Percent-escapes in values ("%2F" for '/'). */
  char url[800], *u = url;
  u += snprintf(url, sizeof url, "rediss://127.0.0.1:%d?cert=%s&key=%s&ca=", tls_port,
                cert("client.crt"), cert("client.key"));
  for (const char *p = cert("ca.crt"); *p && u < url + sizeof url - 4; p++)
    u += *p == '/' ? snprintf(u, 4, "%%2F") : snprintf(u, 2, "%c", *p);
  state_rec st = {0};
  sluice_client *c = client_for(base, url, &st);
  TH_ASSERT(th_loop_until(base, &st.changes, 5000));
  TH_ASSERT_EQ(st.up, 1);
  client_close_drain(base, c);
  /* TLS fields of the options are ignored while TLS is off. */
  sluice_client_options o;
  th_client_options(&o, th_server.url);
  o.tls_ca_file = "/nonexistent";
  c = th_client_with(base, &o);
  th_free_client_and_loop(base, c, 5000);
}

static void test_cli(void) {
  run_out r = run_cli("rl", "check", "api", "k", "--algo", "fixed", "--limit", "2", "--period",
                      "60000", "--redis", tls_url(good_query()), NULL);
  TH_ASSERT_EQ(r.status, 0);
  TH_ASSERT_CONTAINS(r.out, "allowed=1");
  TH_ASSERT_CMP(th_redis_int(&th_server, "DBSIZE"), >=, 1);
  r = run_cli("sem", "run", "job", "--no-wait", "--redis", tls_url(good_query()), "--", "true",
              NULL);
  TH_ASSERT_EQ(r.status, 0);
  char q[300];
  snprintf(q, sizeof q, "ca=%s", cert("other-ca.crt"));
  r = run_cli("rl", "check", "api", "k", "--algo", "fixed", "--limit", "2", "--period", "60000",
              "--redis", tls_url(q), NULL);
  TH_ASSERT_EQ(r.status, 69);
  TH_ASSERT_CONTAINS(r.out, "server certificate not accepted");
  snprintf(q, sizeof q, "ca=%s", cert("ca.crt"));
  r = run_cli("rl", "check", "api", "k", "--algo", "fixed", "--limit", "2", "--period", "60000",
              "--redis", tls_url(q), NULL);
  TH_ASSERT_EQ(r.status, 69);
  TH_ASSERT_CONTAINS(r.out, "requires a client certificate");
  r = run_cli("rl", "check", "api", "k", "--algo", "fixed", "--limit", "2", "--period", "60000",
              "--redis", "rediss://127.0.0.1:1?ca=/nonexistent.pem", NULL);
  TH_ASSERT_EQ(r.status, 64);
  TH_ASSERT_CONTAINS(r.out, "cannot read CA file /nonexistent.pem: No such file or directory");
}

/* rediss+cluster://: a one-node cluster that speaks only TLS (cluster bus
 * too); its slot map names its TLS port, and a semaphore with a blocked
 * waiter works through it. */
static void test_cluster(void) {
  int port = th_free_port(), bus = th_free_port();
  TH_ASSERT(port > 0 && bus > 0);
  char p[16], b[16];
  snprintf(p, sizeof p, "%d", port);
  snprintf(b, sizeof b, "%d", bus);
  char keep[3][256];
  snprintf(keep[0], sizeof keep[0], "%s", cert("server.crt"));
  snprintf(keep[1], sizeof keep[1], "%s", cert("server.key"));
  snprintf(keep[2], sizeof keep[2], "%s", cert("ca.crt"));
  const char *args[] = {"--tls-port",
                        p,
                        "--tls-cert-file",
                        keep[0],
                        "--tls-key-file",
                        keep[1],
                        "--tls-ca-cert-file",
                        keep[2],
                        "--tls-auth-clients",
                        "yes",
                        "--tls-cluster",
                        "yes",
                        "--cluster-enabled",
                        "yes",
                        "--cluster-port",
                        b,
                        "--cluster-config-file",
                        "nodes.conf",
                        NULL};
  th_redis node;
  TH_ASSERT_EQ(th_redis_start(&node, 0, args), 0);
  TH_ASSERT_EQ(th_redis_int(&node, "CLUSTER ADDSLOTSRANGE 0 16383"), 0);
  uint64_t end = th_now_ms() + 10000;
  for (;;) { /* the unix socket is plain: the test's own way in */
    redisContext *rc = th_redis_connect(&node);
    redisReply *r = rc ? redisCommand(rc, "CLUSTER INFO") : NULL;
    int ok = r && r->type == REDIS_REPLY_STRING && strstr(r->str, "cluster_state:ok");
    if (r) freeReplyObject(r);
    if (rc) redisFree(rc);
    if (ok) break;
    TH_ASSERT(th_now_ms() < end);
    usleep(20000);
  }
  char url[1024];
  snprintf(url, sizeof url, "rediss+cluster://127.0.0.1:%d?%s", port, good_query());
  struct event_base *base = event_base_new();
  sluice_client *c = client_for(base, url, NULL);
  sluice_sem *s = sem_test_new(c, "tc", 1, 10000, 0);
  acq_result w;
  acq_result a = sem_hold_with_waiter(base, s, s, 10000, &w);
  th_loop_for(base, 100);
  TH_ASSERT_EQ(w.done, 0);
  sluice_permit_release(a.permit, NULL, NULL);
  TH_ASSERT(th_loop_until(base, &w.done, 5000));
  TH_ASSERT_EQ(w.status, SLUICE_OK);
  sluice_permit_release(w.permit, NULL, NULL);
  sluice_sem_free(s);
  th_free_client_and_loop(base, c, 5000);
  char conf[300];
  snprintf(conf, sizeof conf, "%s/nodes.conf", node.dir);
  th_redis_stop(&node);
  unlink(conf);
  rmdir(node.dir);
}

/* A CA, another CA, a server certificate for 127.0.0.1 and localhost, and a
 * client certificate, all from the first CA except other-ca. */
static int make_certs(void) {
  char cmd[2048];
  snprintf(cmd, sizeof cmd,
           "set -e; cd '%s'; "
           "key='-newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes'; "
           "openssl req -x509 $key -keyout ca.key -out ca.crt -days 2 -subj /CN=sluice-test-ca; "
           "openssl req -x509 $key -keyout other-ca.key -out other-ca.crt -days 2 "
           "  -subj /CN=sluice-other-ca; "
           "printf 'subjectAltName=IP:127.0.0.1,DNS:localhost\\n' >server.ext; "
           "openssl req $key -keyout server.key -out server.csr -subj /CN=localhost; "
           "openssl x509 -req -in server.csr -CA ca.crt -CAkey ca.key -CAcreateserial "
           "  -out server.crt -days 2 -extfile server.ext; "
           "printf 'extendedKeyUsage=clientAuth\\n' >client.ext; "
           "openssl req $key -keyout client.key -out client.csr -subj /CN=sluice-test-client; "
           "openssl x509 -req -in client.csr -CA ca.crt -CAkey ca.key -CAcreateserial "
           "  -out client.crt -days 2 -extfile client.ext",
           certs);
  char full[2300];
  snprintf(full, sizeof full, "(%s) >'%s/openssl.log' 2>&1", cmd, certs);
  int st = system(full);
  return st == 0 ? 0 : -1;
}

static void remove_certs(void) {
  static const char *const names[] = {"ca.key",       "ca.crt",     "ca.srl",     "other-ca.key",
                                      "other-ca.crt", "server.ext", "server.key", "server.csr",
                                      "server.crt",   "client.ext", "client.key", "client.csr",
                                      "client.crt",   "openssl.log"};
  for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) unlink(cert(names[i]));
  rmdir(certs);
}

static const th_case cases[] = {
    TH_CASE(hiredis_build, 0),
    TH_CASE(semaphore, 0),
    TH_CASE(limiter, 0),
    TH_CASE(delay_queue, 0),
    TH_CASE(reconnect, 0),
    TH_CASE(wrong_ca, 0),
    TH_CASE(wrong_server_name, 0),
    TH_CASE(client_cert_missing, 0),
    TH_CASE(plain_to_tls_port, 0),
    TH_CASE(tls_to_plain_port, 0),
    TH_CASE(sni_and_skip_verify, 0),
    TH_CASE(options, 0),
    TH_CASE(refusals, 0),
    TH_CASE(cli, 0),
    TH_CASE(cluster, 0),
};

int main(int argc, char **argv) {
  const char *ci = getenv("CI");
  int under_ci = ci && strcmp(ci, "true") == 0;
  setvbuf(stdout, NULL, _IOLBF, 0);
  if (th_mkdtemp(certs, sizeof certs, "tls") != 0) {
    printf("Bail out! cannot create a temp dir\n");
    return 1;
  }
  if (make_certs() != 0) {
    /* openssl missing or failing: the server cannot be set up. */
    char log[300];
    snprintf(log, sizeof log, "cat '%s/openssl.log' | sed 's/^/# /'", certs);
    if (system(log) != 0) th_note("(no openssl log)\n");
    remove_certs();
    if (under_ci) {
      printf("Bail out! cannot make certificates with openssl (required under CI)\n");
      return 1;
    }
    printf("1..0 # SKIP cannot make certificates with openssl\n");
    return 77;
  }
  tls_port = th_free_port();
  if (tls_port <= 0) {
    remove_certs();
    printf("Bail out! no free loopback port\n");
    return 1;
  }
  snprintf(laddr, sizeof laddr, "laddr=127.0.0.1:%d", tls_port);
  char port[16];
  snprintf(port, sizeof port, "%d", tls_port);
  /* TLS only (the harness's "--port 0" leaves no plain TCP port), and
   * clients must show a certificate from the test CA. */
  const char *args[] = {"--tls-port",
                        port,
                        "--tls-cert-file",
                        cert("server.crt"),
                        "--tls-key-file",
                        cert("server.key"),
                        "--tls-ca-cert-file",
                        cert("ca.crt"),
                        "--tls-auth-clients",
                        "yes",
                        NULL};
  char keep[4][256]; /* cert() rotates its buffers */
  for (int i = 0; i < 3; i++) {
    snprintf(keep[i], sizeof keep[i], "%s", args[3 + 2 * i]);
    args[3 + 2 * i] = keep[i];
  }
  th_server_args = args;
  int rc = th_main_n(argc, argv, cases, sizeof cases / sizeof *cases);
  remove_certs();
  return rc;
}

#endif
