/* The topology's "another node now" event on one Redis: a restart (same
 * address, new run_id) is reported once, before the first step on the new
 * node; a reconnect to the same server is not; a user that may not run
 * INFO loses only the report. Seen through the client's log. */
#include <string.h>

#include <event2/event.h>
#include <sluice/sluice.h>

#include "harness.h"
#include "core/engine.h"

typedef struct logbook {
  int changes;      /* "a different Redis node" lines */
  int ups;          /* "connected to" lines */
  int change_at_up; /* ups seen when the last change was logged */
} logbook;

static void on_log(sluice_client *c, int level, const char *msg, void *ud) {
  logbook *b = ud;
  if (strstr(msg, "a different Redis node serves")) b->changes++, b->change_at_up = b->ups;
  if (strncmp(msg, "connected to ", 13) == 0) b->ups++;
}

typedef struct pinged {
  int done, status;
} pinged;

static void on_ping(void *ud, int status, const redisReply *reply) {
  pinged *p = ud;
  p->done = 1;
  p->status = status;
}

/* A ping until one succeeds (the client reconnects meanwhile). */
static void ping_until_ok(struct event_base *base, sluice_client *c) {
  uint64_t end = th_now_ms() + 10000;
  pinged p = {0, -1};
  while (p.status != SLUICE_OK && th_now_ms() < end) {
    p.done = 0;
    const char *argv[1] = {"PING"};
    TH_ASSERT_EQ(sluice__command(c, 1, argv, NULL, 500, on_ping, &p, NULL), SLUICE_OK);
    TH_ASSERT(th_loop_until(base, &p.done, 3000));
    if (p.status != SLUICE_OK) th_loop_for(base, 20);
  }
  TH_ASSERT_EQ(p.status, SLUICE_OK);
}

static sluice_client *logged_client(struct event_base *base, const char *url, logbook *b) {
  sluice_client *c = th_client(base, url, 2000);
  sluice_client_set_log_cb(c, on_log, b);
  ping_until_ok(base, c);
  th_loop_for(base, 20); /* the log leaves from the loop */
  TH_ASSERT_EQ(b->ups, 1);
  TH_ASSERT_EQ(b->changes, 0); /* the first node is no change */
  return c;
}

static void close_client(struct event_base *base, sluice_client *c) {
  th_free_client_and_loop(base, c, 5000);
}

/* r restarted (its data and run_id gone), and c back on it. */
static void restart_and_back(struct event_base *base, sluice_client *c, th_redis *r) {
  th_redis_restart(r);
  ping_until_ok(base, c);
  th_loop_for(base, 100); /* the log leaves from the loop */
}

static void test_restart_reported_once(void) {
  struct event_base *base = event_base_new();
  logbook b = {0};
  sluice_client *c = logged_client(base, th_server.url, &b);
  restart_and_back(base, c, &th_server);
  TH_ASSERT_EQ(b.changes, 1);
  TH_ASSERT_EQ(b.change_at_up, 1); /* logged before the new node's "connected" */
  TH_ASSERT_EQ(b.ups, 2);
  /* The same server again (its clients killed): no change. */
  TH_ASSERT_CMP(th_redis_kill_clients(), >=, 1);
  th_loop_for(base, 50);
  ping_until_ok(base, c);
  th_loop_for(base, 100);
  TH_ASSERT_EQ(b.ups, 3);
  TH_ASSERT_EQ(b.changes, 1);
  close_client(base, c);
}

/* INFO refused (NOPERM): the handshake still completes; a restart then
 * goes unreported, since nothing tells the two servers apart. */
static void test_info_refused(void) {
  static const char *const noinfo[] = {"--user", "default", "on",    "nopass", "~*",
                                       "&*",     "+@all",   "-info", NULL};
  th_redis r;
  TH_ASSERT_EQ(th_redis_start(&r, 0, noinfo), 0);
  struct event_base *base = event_base_new();
  logbook b = {0};
  sluice_client *c = logged_client(base, r.url, &b);
  restart_and_back(base, c, &r);
  TH_ASSERT_EQ(b.ups, 2);
  TH_ASSERT_EQ(b.changes, 0);
  close_client(base, c);
  th_redis_stop(&r);
}

static const th_case cases[] = {
    TH_CASE(restart_reported_once, 0),
    TH_CASE(info_refused, 0),
};
TH_MAIN(cases)
