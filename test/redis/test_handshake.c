/* No step before the handshake: steps started at once on a new client wait
 * for its handshake, and when a step of it fails (AUTH, SELECT) they fail
 * with that step's words and nothing is written anywhere. On one Redis, a
 * Sentinel-managed master and a cluster (TH_TOPOLOGY). */
#include <stdlib.h>
#include <string.h>

#include <event2/event.h>
#include <sluice/sluice.h>

#include "harness.h"
#include "sem_util.h"

/* url with "user:pass@" put after its scheme. */
static void with_credentials(char *out, size_t size, const char *url, const char *cred) {
  const char *rest = strstr(url, "://");
  TH_ASSERT(rest != NULL);
  snprintf(out, size, "%.*s%s@%s", (int)(rest + 3 - url), url, cred, rest + 3);
}

/* A try_acquire issued right after sluice_client_new on url: it fails as
 * never sent, and the last error carries the handshake step's words. */
static void expect_refused(const char *url, const char *step, const char *words) {
  struct event_base *base = event_base_new();
  sluice_client *c = th_client(base, url, 2000);
  sluice_sem *s = sem_test_new(c, "hs", 1, 5000, 0);
  acq_result a = sem_try(base, s);
  TH_ASSERT_EQ(a.status, SLUICE_ECONNECTION);
  const char *err = sluice_client_last_error(c);
  if (!strstr(err, step) || !strstr(err, words))
    th_fail(__FILE__, __LINE__, "last error \"%s\" lacks \"%s\" / \"%s\"", err, step, words);
  th_loop_for(base, 100); /* a reconnect fails the same way meanwhile */
  sluice_sem_free(s);
  th_free_client_and_loop(base, c, 5000);
}

/* The keys every db holds on r (INFO keyspace's "keys=" summed). */
static long long keys_anywhere(th_redis *r) {
  redisContext *x = th_redis_connect(r);
  TH_ASSERT(x != NULL);
  redisReply *a = redisCommand(x, "AUTH pw");
  freeReplyObject(a);
  redisReply *info = redisCommand(x, "INFO keyspace");
  TH_ASSERT(info && info->type == REDIS_REPLY_STRING);
  long long n = 0;
  for (const char *p = info->str; (p = strstr(p, "keys=")); p += 5) n += atoll(p + 5);
  freeReplyObject(info);
  redisFree(x);
  return n;
}

static void test_standalone(void) {
  static const char *const pw[] = {"--requirepass", "pw", NULL};
  th_redis r;
  th_redis_start_tcp(&r, pw);
  char url[128];
  snprintf(url, sizeof url, "redis://:pw@127.0.0.1:%d/99", r.port);
  expect_refused(url, "SELECT", "DB index is out of range");
  snprintf(url, sizeof url, "redis://:wrong@127.0.0.1:%d/3", r.port);
  expect_refused(url, "AUTH", "WRONGPASS");
  TH_ASSERT_EQ(keys_anywhere(&r), 0);
  th_redis_stop(&r);
}

/* The topology's own nodes have no password: AUTH with one fails there. */
static void test_topology(void) {
  if (th_server_topo() == TH_TOPO_STANDALONE) return; /* test_standalone's */
  char url[1024];
  with_credentials(url, sizeof url, th_server.url, ":wrong");
  expect_refused(url, "AUTH", "AUTH");
  if (th_server_topo() == TH_TOPO_SENTINEL) {
    snprintf(url, sizeof url, "%s/99", th_server.url);
    expect_refused(url, "SELECT", "DB index is out of range");
  }
  TH_ASSERT_EQ(th_redis_int_all("DBSIZE"), 0);
}

static const th_case cases[] = {
    TH_CASE(standalone, 30),
    TH_CASE(topology, 30),
};
TH_MAIN(cases)
