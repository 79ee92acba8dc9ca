/* The client: connecting, scripts, deadlines, reconnect, NOSCRIPT, close. */
#include <stdlib.h>
#include <string.h>

#include <event2/event.h>
#include <sluice/sluice.h>

#include "harness.h"
#include "core/engine.h"
#include "limiter/rl_args.h"
#include "net/url.h"

typedef struct result {
  int done;
  int status;
  long long value;
  char err[128];
} result;

static void on_reply(void *ud, int status, const redisReply *reply) {
  result *r = ud;
  r->done++;
  r->status = status;
  int64_t v;
  if (status == SLUICE_OK && sluice__reply_i64(reply, &v) == 0) r->value = v;
  if (status == SLUICE_EREDIS) snprintf(r->err, sizeof r->err, "%s", reply->str);
}

/* One case's loop and client, set up once and torn down once. */
typedef struct client_fx {
  struct event_base *base;
  sluice_client *c;
} client_fx;

/* A new loop and a client of options o. */
static client_fx client_fx_open_with(const sluice_client_options *o) {
  client_fx fx;
  fx.base = event_base_new();
  TH_ASSERT(fx.base != NULL);
  fx.c = th_client_with(fx.base, o);
  return fx;
}

/* The same with th_client's options. */
static client_fx client_fx_open(unsigned op_timeout) {
  sluice_client_options o;
  th_client_quick_options(&o, th_server.url, op_timeout);
  return client_fx_open_with(&o);
}

static void client_fx_close(client_fx *fx) { th_free_client_and_loop(fx->base, fx->c, 5000); }

static void ping(sluice_client *c, result *r, unsigned timeout) {
  memset(r, 0, sizeof *r);
  TH_ASSERT_EQ(sluice__eval(c, &sluice__lua_ping, 0, 0, NULL, NULL, timeout, on_reply, r, NULL), 0);
}

/* A ping run to its answer (3 s at most): its status. */
static int ping_wait(client_fx *fx, result *r, unsigned timeout) {
  ping(fx->c, r, timeout);
  TH_ASSERT(th_loop_until(fx->base, &r->done, 3000));
  return r->status;
}

static void test_script_runs(void) {
  client_fx fx = client_fx_open(2000);
  result r;
  ping(fx.c, &r, 0);
  TH_ASSERT_EQ(r.done, 0); /* never inside the call that started it */
  TH_ASSERT(th_loop_until(fx.base, &r.done, 3000));
  TH_ASSERT_EQ(r.status, SLUICE_OK);
  TH_ASSERT_CMP(r.value, >, 1600000000000LL);
  TH_ASSERT(sluice_client_is_connected(fx.c));
  client_fx_close(&fx);
}

static int results_done(const result *rs, int n) {
  int done = 0;
  for (int i = 0; i < n; i++) done += rs[i].done;
  return done;
}

static void test_pipelined(void) {
  client_fx fx = client_fx_open(2000);
  enum { N = 2000 };
  static result rs[N];
  int done = 0;
  for (int i = 0; i < N; i++) ping(fx.c, &rs[i], 0);
  TH_LOOP_UNTIL(fx.base, (done = results_done(rs, N)) == N, 5000);
  TH_ASSERT_EQ(done, N);
  for (int i = 0; i < N; i++) TH_ASSERT_EQ(rs[i].status, SLUICE_OK);
  client_fx_close(&fx);
}

static void test_noscript_recovery(void) {
  client_fx fx = client_fx_open(2000);
  result r;
  ping_wait(&fx, &r, 0);
  th_redis_int_all("SCRIPT FLUSH"); /* wherever the ping goes */
  TH_ASSERT_EQ(ping_wait(&fx, &r, 0), SLUICE_OK);
  sluice_client_stats st;
  sluice_client_get_stats(fx.c, &st);
  TH_ASSERT_CMP(st.noscript_reloads, >=, 1);
  client_fx_close(&fx);
}

static void test_redis_error(void) {
  client_fx fx = client_fx_open(2000);
  result r = {0};
  const char *argv[] = {"NOSUCHCOMMAND"};
  TH_ASSERT_EQ(sluice__command(fx.c, 1, argv, NULL, 0, on_reply, &r, NULL), 0);
  TH_ASSERT(th_loop_until(fx.base, &r.done, 3000));
  TH_ASSERT_EQ(r.status, SLUICE_EREDIS);
  TH_ASSERT(strstr(r.err, "unknown command") != NULL);
  client_fx_close(&fx);
}

static void test_deadline(void) {
  client_fx fx = client_fx_open(2000);
  result r;
  ping_wait(&fx, &r, 0);
  th_redis_pause(&th_server);
  uint64_t t0 = th_now_ms();
  TH_ASSERT_EQ(ping_wait(&fx, &r, 150), SLUICE_ETIMEDOUT);
  TH_ASSERT_CMP(th_now_ms() - t0, <, 1000);
  th_redis_resume(&th_server);
  /* The late reply is dropped; the connection keeps working. */
  th_loop_for(fx.base, 100);
  TH_ASSERT_EQ(r.done, 1);
  TH_ASSERT_EQ(ping_wait(&fx, &r, 0), SLUICE_OK);
  client_fx_close(&fx);
}

/* More than the socket takes while the server is stopped: the rest waits
 * for the socket to drain (a write event), and every step still completes,
 * in order. */
static void test_full_socket(void) {
  client_fx fx = client_fx_open(5000);
  enum { N = 40, ARG = 256 << 10 };
  static result rs[N];
  char *arg = malloc(ARG);
  TH_ASSERT(arg != NULL);
  memset(arg, 'x', ARG);
  const char *argv[1] = {arg};
  size_t lens[1] = {ARG};
  ping_wait(&fx, &rs[0], 0);
  th_redis_pause(&th_server);
  memset(rs, 0, sizeof rs);
  for (int i = 0; i < N; i++)
    TH_ASSERT_EQ(sluice__eval(fx.c, &sluice__lua_ping, 0, 1, argv, lens, 0, on_reply, &rs[i], NULL),
                 0);
  th_loop_for(fx.base, 100); /* 10 MiB: the socket fills and stays full */
  TH_ASSERT_EQ(results_done(rs, N), 0);
  th_redis_resume(&th_server);
  int done = 0;
  TH_LOOP_UNTIL(fx.base, (done = results_done(rs, N)) == N, 5000);
  TH_ASSERT_EQ(done, N);
  for (int i = 0; i < N; i++) TH_ASSERT_EQ(rs[i].status, SLUICE_OK);
  for (int i = 1; i < N; i++) TH_ASSERT_CMP(rs[i].value, >=, rs[i - 1].value);
  free(arg);
  client_fx_close(&fx);
}

static int state_ups, state_downs;
static void on_state(sluice_client *c, int connected, int status, void *ud) {
  if (connected) state_ups++;
  else state_downs++;
}

/* The client back by itself within ms: connected, and a ping answered. */
static void expect_back(client_fx *fx, result *r, unsigned ms) {
  TH_LOOP_UNTIL(fx->base, sluice_client_is_connected(fx->c), ms);
  TH_ASSERT(sluice_client_is_connected(fx->c));
  TH_ASSERT_EQ(ping_wait(fx, r, 0), SLUICE_OK);
}

static void test_reconnect_after_client_kill(void) {
  client_fx fx = client_fx_open(2000);
  sluice_client_set_state_cb(fx.c, on_state, NULL);
  result r;
  ping_wait(&fx, &r, 0);
  th_redis_kill_clients();
  int one = 0;
  while (!state_downs && th_loop_until(fx.base, &one, 50) == 0 && !state_downs) {}
  TH_ASSERT_CMP(state_downs, >=, 1);
  /* While down, operations fail at once rather than wait. */
  if (!sluice_client_is_connected(fx.c)) {
    TH_ASSERT_EQ(ping_wait(&fx, &r, 0), SLUICE_ECONNECTION);
  }
  /* ...and the client comes back by itself. */
  expect_back(&fx, &r, 3000);
  client_fx_close(&fx);
}

/* Redis stops answering (SIGSTOP, like a host gone without a reset): once
 * nothing came back for a whole operation timeout the connection is
 * replaced, later operations fail fast, and the client recovers when Redis
 * answers again. */
static void test_dead_connection_replaced(void) {
  client_fx fx = client_fx_open(300);
  sluice_client_set_state_cb(fx.c, on_state, NULL);
  result r;
  ping_wait(&fx, &r, 0);
  th_redis_pause(&th_server);
  TH_ASSERT_EQ(ping_wait(&fx, &r, 0), SLUICE_ETIMEDOUT);
  TH_LOOP_UNTIL(fx.base, state_downs >= 1, 3000); /* reported from the loop */
  TH_ASSERT_CMP(state_downs, >=, 1);
  TH_ASSERT(!sluice_client_is_connected(fx.c));
  /* The whole reason, not a prefix of it. */
  TH_ASSERT_STR_EQ(sluice_client_last_error(fx.c),
                   "no reply within the operation timeout: connection presumed dead");
  uint64_t t0 = th_now_ms();
  TH_ASSERT_EQ(ping_wait(&fx, &r, 0), SLUICE_ECONNECTION); /* at once, not after 300 ms */
  TH_ASSERT_CMP(th_now_ms() - t0, <, 100);
  th_redis_resume(&th_server);
  expect_back(&fx, &r, 5000);
  client_fx_close(&fx);
}

static void test_reconnect_after_restart(void) {
  client_fx fx = client_fx_open(2000);
  result r;
  ping_wait(&fx, &r, 0);
  th_redis_restart(&th_server); /* scripts are gone too: NOSCRIPT path */
  uint64_t end = th_now_ms() + 5000;
  int ok = 0;
  while (!ok && th_now_ms() < end) {
    ok = ping_wait(&fx, &r, 500) == SLUICE_OK;
    if (!ok) th_loop_for(fx.base, 20);
  }
  TH_ASSERT(ok);
  client_fx_close(&fx);
}

static void test_close_cancels_pending(void) {
  client_fx fx = client_fx_open(2000);
  result r;
  ping(fx.c, &r, 0);
  sluice_client_free(fx.c);
  TH_ASSERT_EQ(r.done, 0);
  TH_ASSERT(th_loop_drain(fx.base, 3000));
  TH_ASSERT_EQ(r.done, 1);
  TH_ASSERT_EQ(r.status, SLUICE_ECANCELED);
  event_base_free(fx.base);
}

static void test_connect_refused_fails_within_deadline(void) {
  sluice_client_options o;
  th_client_options(&o, "unix:///nonexistent/sluice.sock");
  o.reconnect_min_ms = 20;
  client_fx fx = client_fx_open_with(&o);
  result r;
  ping(fx.c, &r, 300);
  TH_ASSERT(th_loop_until(fx.base, &r.done, 2000));
  TH_ASSERT_EQ(r.status, SLUICE_ECONNECTION);
  TH_ASSERT(strlen(sluice_client_last_error(fx.c)) > 0);
  client_fx_close(&fx);
}

static void test_url_parsing(void) {
  sluice__endpoint ep;
  TH_ASSERT_EQ(sluice__parse_url("redis://u:p%40ss@example:6380/3", &ep), 0);
  TH_ASSERT_STR_EQ(ep.host, "example");
  TH_ASSERT_EQ(ep.port, 6380);
  TH_ASSERT_STR_EQ(ep.username, "u");
  TH_ASSERT_STR_EQ(ep.password, "p@ss");
  TH_ASSERT_EQ(ep.db, 3);
  sluice__endpoint_clear(&ep);
  TH_ASSERT_EQ(sluice__parse_url("redis://:secret@[::1]", &ep), 0);
  TH_ASSERT_STR_EQ(ep.host, "::1");
  TH_ASSERT(ep.username == NULL);
  TH_ASSERT_STR_EQ(ep.password, "secret");
  TH_ASSERT_EQ(ep.port, 6379);
  sluice__endpoint_clear(&ep);
  TH_ASSERT_EQ(sluice__parse_url("unix:///tmp/r.sock?db=2", &ep), 0);
  TH_ASSERT_STR_EQ(ep.unix_path, "/tmp/r.sock");
  TH_ASSERT_EQ(ep.db, 2);
  sluice__endpoint_clear(&ep);
  TH_ASSERT_EQ(sluice__parse_url("http://x", &ep), SLUICE_EINVAL);
  TH_ASSERT_EQ(sluice__parse_url("redis://h:99999", &ep), SLUICE_EINVAL);
  TH_ASSERT_EQ(sluice__parse_url("redis://h/x", &ep), SLUICE_EINVAL);
  TH_ASSERT_EQ(sluice__parse_url("", &ep), SLUICE_EINVAL);
  TH_ASSERT_EQ(sluice__parse_url(NULL, &ep), SLUICE_EINVAL);
}

static void test_bad_input(void) {
  struct event_base *base = event_base_new();
  sluice_client *c = NULL;
  TH_ASSERT_EQ(sluice_client_new(NULL, NULL, &c), SLUICE_EINVAL);
  TH_ASSERT_EQ(sluice_client_new(base, NULL, NULL), SLUICE_EINVAL);
  sluice_client_options o;
  sluice_client_options_init(&o);
  o.url = "bogus";
  TH_ASSERT_EQ(sluice_client_new(base, &o, &c), SLUICE_EINVAL);
  TH_ASSERT(c == NULL);
  sluice_client_free(NULL);
  TH_ASSERT_STR_EQ(sluice_strerror(SLUICE_ETIMEDOUT), "operation timed out");
  TH_ASSERT_STR_EQ(sluice_err_name(SLUICE_EBUSY), "SLUICE_EBUSY");
  TH_ASSERT_STR_EQ(sluice_strerror(12345), "unknown status");
  event_base_free(base);
}

/* AUTH (password and ACL user) and SELECT run on every (re)connect. */
static void test_auth_and_select(void) {
  static const char *const extra[] = {"--requirepass", "sekret", "--user", "alice", "on",
                                      ">pw",           "~*",     "&*",     "+@all", NULL};
  th_redis r;
  TH_ASSERT_EQ(th_redis_start(&r, 0, extra), 0);
  struct event_base *base = event_base_new();
  for (int variant = 0; variant < 3; variant++) {
    sluice_client_options o;
    th_client_options(&o, NULL);
    o.unix_path = r.sock;
    o.db = 3;
    o.reconnect_min_ms = 20;
    if (variant == 0) o.password = "sekret";
    if (variant == 1) {
      o.username = "alice";
      o.password = "pw";
    }
    if (variant == 2) o.password = "wrong";
    sluice_client *c = th_client_with(base, &o);
    result res = {0};
    const char *argv[] = {"SET", "k", "v"};
    TH_ASSERT_EQ(sluice__command(c, 3, argv, NULL, 1000, on_reply, &res, NULL), 0);
    TH_ASSERT(th_loop_until(base, &res.done, 3000));
    if (variant == 2) {
      TH_ASSERT(res.status != SLUICE_OK);
      /* The step may time out before the handshake's AUTH is refused (a
       * loaded machine, valgrind): the refusal is what is awaited. */
      TH_LOOP_UNTIL(base, strstr(sluice_client_last_error(c), "AUTH") != NULL, 5000);
      TH_ASSERT(strstr(sluice_client_last_error(c), "AUTH") != NULL);
      TH_ASSERT(!sluice_client_is_connected(c));
    } else {
      TH_ASSERT_EQ(res.status, SLUICE_OK);
      /* After a reconnect, AUTH and SELECT run again. */
      redisContext *sc = th_redis_connect(&r);
      redisReply *rep = redisCommand(sc, "AUTH sekret");
      freeReplyObject(rep);
      rep = redisCommand(sc, "CLIENT KILL TYPE normal SKIPME yes");
      freeReplyObject(rep);
      uint64_t end = th_now_ms() + 3000;
      do {
        memset(&res, 0, sizeof res);
        const char *incr[] = {"INCR", "n"};
        TH_ASSERT_EQ(sluice__command(c, 2, incr, NULL, 1000, on_reply, &res, NULL), 0);
        TH_ASSERT(th_loop_until(base, &res.done, 3000));
        if (res.status != SLUICE_OK) th_loop_for(base, 20);
      } while (res.status != SLUICE_OK && th_now_ms() < end);
      TH_ASSERT_EQ(res.status, SLUICE_OK);
      rep = redisCommand(sc, "SELECT 3");
      freeReplyObject(rep);
      rep = redisCommand(sc, "EXISTS k");
      TH_ASSERT_EQ(rep->integer, 1);
      freeReplyObject(rep);
      rep = redisCommand(sc, "FLUSHALL");
      freeReplyObject(rep);
      redisFree(sc);
    }
    sluice_client_free(c);
    TH_ASSERT(th_loop_drain(base, 3000));
  }
  event_base_free(base);
  th_redis_stop(&r);
}

/* TCP, by host/port options and by URL. */
static void test_tcp_connect(void) {
  th_redis r;
  th_redis_start_tcp(&r, NULL);
  int port = r.port;
  struct event_base *base = event_base_new();
  for (int by_url = 0; by_url < 2; by_url++) {
    sluice_client_options o;
    char url[64];
    th_client_options(&o, NULL);
    if (by_url) {
      snprintf(url, sizeof url, "redis://127.0.0.1:%d/2", port);
      o.url = url;
    } else {
      o.host = "127.0.0.1";
      o.port = port;
    }
    sluice_client *c = th_client_with(base, &o);
    result res;
    ping(c, &res, 0);
    TH_ASSERT(th_loop_until(base, &res.done, 3000));
    TH_ASSERT_EQ(res.status, SLUICE_OK);
    sluice_client_free(c);
    TH_ASSERT(th_loop_drain(base, 3000));
  }
  event_base_free(base);
  th_redis_stop(&r);
}

/* The key prefix option names every key. */
static void test_key_prefix(void) {
  sluice_client_options o;
  th_client_options(&o, th_server.url);
  o.key_prefix = "myapp:";
  client_fx fx = client_fx_open_with(&o);
  sluice_client *c = fx.c;
  char *k = sluice__key(c, "sem", "a", "holders");
  TH_ASSERT_STR_EQ(k, "myapp:sem:{a}:holders");
  free(k);
  k = sluice__key(c, "dq", "q", NULL);
  TH_ASSERT_STR_EQ(k, "myapp:dq:{q}");
  free(k);
  /* A limiter's frame writes the same key as sluice__rl_key, braces and
   * colons in the name or key included. */
  const char *suffixes[] = {"gcra", NULL};
  for (int i = 0; i < 2; i++) {
    sluice__rl_frame f;
    TH_ASSERT_EQ(sluice__rl_frame_init(&f, c, "n}:x", suffixes[i]), SLUICE_OK);
    char out[64];
    TH_ASSERT_CMP(sluice__rl_frame_size(&f, 5), <=, sizeof out);
    sluice__rl_frame_key(&f, "k{1}:", 5, out);
    k = sluice__rl_key(c, "n}:x", "k{1}:", suffixes[i]);
    TH_ASSERT_STR_EQ(out, k);
    TH_ASSERT_EQ(strlen(out) + 1, sluice__rl_frame_size(&f, 5));
    TH_ASSERT_STR_EQ(k, i ? "myapp:rl:{4:n}:x:k{1}:}" : "myapp:rl:{4:n}:x:k{1}:}:gcra");
    free(k);
    sluice__rl_frame_clear(&f);
  }
  client_fx_close(&fx);
}

static void test_script_embedding(void) {
  for (const sluice__script *const *s = sluice__lua_all; *s; s++) {
    TH_ASSERT_EQ(strlen((*s)->body), (*s)->len);
    TH_ASSERT_EQ(strlen((*s)->sha), 40);
  }
}

static const th_case cases[] = {
    TH_CASE(script_runs, 0),
    TH_CASE(pipelined, 0),
    TH_CASE(noscript_recovery, 0),
    TH_CASE(redis_error, 0),
    TH_CASE(deadline, 0, .standalone_only = "pauses the server"),
    TH_CASE(full_socket, 0, .standalone_only = "pauses the server"),
    TH_CASE(reconnect_after_client_kill, 0),
    TH_CASE(reconnect_after_restart, 0, .standalone_only = "restarts the server"),
    TH_CASE(dead_connection_replaced, 0, .standalone_only = "pauses the server"),
    TH_CASE(close_cancels_pending, 0),
    {"connect_refused", test_connect_refused_fails_within_deadline, 0},
    TH_CASE(url_parsing, 0),
    TH_CASE(bad_input, 0),
    TH_CASE(script_embedding, 0),
    TH_CASE(auth_and_select, 0),
    TH_CASE(key_prefix, 0),
    TH_CASE(tcp_connect, 0),
};
TH_MAIN(cases)
