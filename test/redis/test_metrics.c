/* Metrics and the log hook against the test server: counters where things
 * happen, and log lines for a down/up cycle and a failed AUTH. */
#include <string.h>

#include <event2/event.h>
#include <sluice/sluice.h>

#include "harness.h"
#include "prom_check.h"

typedef struct logbook {
  char text[8192];
  int up, down, error, warn;
  int flag;
  int auth; /* an ERROR line naming the AUTH reply */
} logbook;

static void on_log(sluice_client *c, int level, const char *msg, void *ud) {
  logbook *b = ud;
  size_t n = strlen(b->text);
  snprintf(b->text + n, sizeof b->text - n, "%s %s\n", sluice_log_level_name(level), msg);
  th_note("log: %s %s\n", sluice_log_level_name(level), msg);
  if (strstr(msg, "connected to")) b->up++, b->flag = 1;
  if (strstr(msg, "down:")) b->down++;
  if (level == SLUICE_LOG_ERROR) b->error++, b->flag = 1;
  if (level == SLUICE_LOG_ERROR && strstr(msg, "AUTH: ")) b->auth = 1;
  if (level == SLUICE_LOG_WARN) b->warn++;
}

static sluice_client *client_on(struct event_base *base, const th_redis *r) {
  sluice_client_options o;
  th_client_options(&o, r->url);
  o.reconnect_min_ms = 10;
  o.reconnect_max_ms = 100;
  return th_client_with(base, &o);
}

/* A client_on th_server whose log goes to b (emptied). */
static sluice_client *logged_client(struct event_base *base, logbook *b) {
  memset(b, 0, sizeof *b);
  sluice_client *c = client_on(base, &th_server);
  sluice_client_set_log_cb(c, on_log, b);
  return c;
}

/* sem's metrics into sm; returns its waits. */
static unsigned long long sem_waits(sluice_sem *sem, sluice_sem_metrics *sm) {
  sluice_sem_get_metrics(sem, sm);
  return sm->waits;
}

static void test_log_down_up(void) {
  struct event_base *base = event_base_new();
  logbook b;
  sluice_client *c = logged_client(base, &b);
  TH_ASSERT(th_loop_until(base, &b.flag, 5000));
  TH_ASSERT(strstr(b.text, "INFO connecting to "));
  TH_ASSERT(strstr(b.text, "INFO connected to "));
  th_redis_restart(&th_server);
  b.flag = 0;
  TH_ASSERT(th_loop_until(base, &b.flag, 10000)); /* back up */
  TH_ASSERT_EQ(b.down, 1);
  TH_ASSERT(strstr(b.text, "WARN connection to "));
  TH_ASSERT(strstr(b.text, "; reconnecting in "));
  TH_ASSERT_EQ(b.up, 2);
  sluice_client_metrics m;
  sluice_client_get_metrics(c, &m);
  TH_ASSERT_EQ(m.reconnects, 1);
  TH_ASSERT_EQ(m.disconnects, 1);
  th_free_client_and_loop(base, c, 10000);
}

static void test_log_failed_auth(void) {
  th_redis secured;
  const char *extra[] = {"--requirepass", "right", NULL};
  TH_ASSERT_EQ(th_redis_start(&secured, 0, extra), 0);
  struct event_base *base = event_base_new();
  sluice_client_options o;
  sluice_client *c;
  logbook b;
  memset(&b, 0, sizeof b);
  th_client_options(&o, NULL);
  o.unix_path = secured.sock;
  o.password = "wrong";
  c = th_client_with(base, &o);
  sluice_client_set_log_cb(c, on_log, &b);
  /* Wait for the AUTH answer itself: on a loaded machine an attempt
   * before it can fail otherwise (a handshake timeout). */
  TH_ASSERT(th_loop_until(base, &b.auth, 10000));
  TH_ASSERT(strstr(b.text, "ERROR handshake failed with "));
  TH_ASSERT(strstr(b.text, "AUTH: WRONGPASS") || strstr(b.text, "AUTH: ERR invalid password"));
  TH_ASSERT(strstr(b.text, "retrying in "));
  sluice_client_metrics m;
  sluice_client_get_metrics(c, &m);
  TH_ASSERT_CMP(m.connect_failures, >=, 1);
  th_free_client_and_loop(base, c, 10000);
  th_redis_stop(&secured);
}

/* A base on the precise clock gets no coarse-clock warning. */
static void test_precise_clock(void) {
  struct event_base *base = th_precise_base();
  logbook b;
  sluice_client *c = logged_client(base, &b);
  while (!strstr(b.text, "event_base clock steps") && !strstr(b.text, "coarse"))
    th_loop_until(base, &b.error, 5);
  TH_ASSERT(strstr(b.text, "(precise)"));
  TH_ASSERT(!strstr(b.text, "coarse"));
  th_free_client_and_loop(base, c, 10000);
}

/* ---- counters ------------------------------------------------------------ */

typedef struct st {
  int flag, n;
  sluice_permit *p;
} st;

static void on_acq(sluice_sem *s, int status, sluice_permit *p, void *ud) {
  st *x = ud;
  x->p = p;
  x->n++;
  x->flag = 1;
}
static void on_rl(sluice_limiter *l, int status, const sluice_rl_result *r, void *ud) {
  st *x = ud;
  if (++x->n == 3) x->flag = 1;
}
static void on_acked(sluice_dq_consumer *con, int status, const char *id, void *ud) {
  st *x = ud;
  TH_ASSERT_EQ(status, SLUICE_OK);
  x->flag = 1;
}
static void on_msg(sluice_dq_consumer *con, sluice_dq_msg *m, void *ud) {
  sluice_dq_ack(m, on_acked, ud);
}

/* The Prometheus text says what the getters say (nothing ran since). */
static void check_exposition(const sluice_client *c, const sluice_client_metrics *m,
                             const sluice_sem_metrics *sm, const sluice_limiter_metrics *lm,
                             const sluice_dq_consumer_metrics *cm) {
  char *text, series[128];
  TH_ASSERT_EQ(sluice_client_prometheus(c, &text, NULL), SLUICE_OK);
  prom_check_text(text);
  TH_ASSERT_EQ(prom_value(text, "sluice_client_connection_up{connection=\"command\"}"), 1);
  TH_ASSERT_EQ(prom_value(text, "sluice_client_scripts_started_total"), m->evals);
  TH_ASSERT_EQ(prom_value(text, "sluice_client_completions_total{status=\"SLUICE_OK\"}"),
               m->by_status[0]);
  for (size_t i = 0; i < m->nkinds; i++) {
    snprintf(series, sizeof series, "sluice_step_completed_total{step=\"%s\"}", m->kinds[i].name);
    TH_ASSERT_EQ(prom_value(text, series), m->kinds[i].ops);
    snprintf(series, sizeof series, "sluice_step_duration_seconds_count{step=\"%s\"}",
             m->kinds[i].name);
    TH_ASSERT_EQ(prom_value(text, series), m->kinds[i].latency.count);
  }
  TH_ASSERT_EQ(prom_value(text, "sluice_sem_grants_total{name=\"m\"}"), sm->grants);
  TH_ASSERT_EQ(prom_value(text, "sluice_sem_busy_total{name=\"m\"}"), sm->busy);
  TH_ASSERT_EQ(prom_value(text, "sluice_sem_wait_seconds_count{name=\"m\"}"), sm->wait.count);
  /* Both waits ended well within a minute (the second had 5 s at most). */
  TH_ASSERT_EQ(prom_value(text, "sluice_sem_wait_seconds_bucket{name=\"m\",le=\"67.108864\"}"), 2);
  TH_ASSERT_EQ(prom_value(text, "sluice_limiter_denied_total{name=\"m\",algorithm=\"fixed\"}"),
               lm->denied);
  TH_ASSERT_EQ(prom_value(text, "sluice_dq_pushed_total{name=\"m\"}"), 1);
  TH_ASSERT_EQ(prom_value(text, "sluice_dq_consumer_acked_total{name=\"m\"}"), cm->acked);
  TH_ASSERT_EQ(prom_value(text, "sluice_dq_consumer_lateness_seconds_count{name=\"m\"}"),
               cm->lateness.count);
  prom_check_promtool(text);
  sluice_prometheus_free(text);
}

static void test_counters(void) {
  struct event_base *base = event_base_new();
  sluice_client *c = client_on(base, &th_server);
  sluice_sem *sem;
  st x = {0, 0, NULL}, y = {0, 0, NULL};
  TH_ASSERT_EQ(sluice_sem_new(c, "m", NULL, &sem), SLUICE_OK);
  TH_ASSERT_EQ(sluice_sem_acquire(sem, 1000, on_acq, &x, NULL), SLUICE_OK);
  TH_ASSERT(th_loop_until(base, &x.flag, 5000));
  sluice_permit *first = x.p;
  TH_ASSERT(first != NULL);
  TH_ASSERT_EQ(sluice_sem_acquire(sem, 5000, on_acq, &y, NULL), SLUICE_OK);
  x.flag = 0;
  TH_ASSERT_EQ(sluice_sem_try_acquire(sem, on_acq, &x), SLUICE_OK); /* busy */
  TH_ASSERT(th_loop_until(base, &x.flag, 5000));
  TH_ASSERT(x.p == NULL);
  sluice_sem_metrics sm;
  sluice_sem_get_metrics(sem, &sm);
  TH_ASSERT_EQ(sm.grants, 1);
  TH_ASSERT_EQ(sm.busy, 1);
  /* The second acquire queues in Redis: no event says so. */
  TH_LOOP_UNTIL(base, sem_waits(sem, &sm) > 0, 5000);
  TH_ASSERT_CMP(sm.waits, >, 0);
  /* Release the first permit: the waiter is handed it. */
  TH_ASSERT_EQ(y.flag, 0);
  sluice_permit_release(first, NULL, NULL);
  TH_ASSERT(th_loop_until(base, &y.flag, 5000));
  TH_ASSERT(y.p != NULL);
  sluice_sem_get_metrics(sem, &sm);
  TH_ASSERT_EQ(sm.grants, 2);
  TH_ASSERT_EQ(sm.waits, 1);
  TH_ASSERT_EQ(sm.wait.count, 2); /* both were blocking acquires */
  TH_ASSERT_CMP(sm.wait.max_us, >=, sm.wait.p50_us);
  sluice_permit_release(y.p, NULL, NULL);

  sluice_limiter_options lo;
  sluice_limiter *lim;
  sluice_limiter_options_init(&lo);
  lo.limit = 2;
  lo.period_ms = 60000;
  TH_ASSERT_EQ(sluice_limiter_new(c, "m", &lo, &lim), SLUICE_OK);
  st r = {0, 0, NULL};
  for (int i = 0; i < 3; i++) TH_ASSERT_EQ(sluice_limiter_check(lim, "k", 1, on_rl, &r), SLUICE_OK);
  TH_ASSERT(th_loop_until(base, &r.flag, 5000));
  sluice_limiter_metrics lm;
  sluice_limiter_get_metrics(lim, &lm);
  TH_ASSERT_EQ(lm.allowed, 2);
  TH_ASSERT_EQ(lm.denied, 1);

  sluice_dq *dq;
  sluice_dq_consumer *con;
  st d = {0, 0, NULL};
  TH_ASSERT_EQ(sluice_dq_new(c, "m", NULL, &dq), SLUICE_OK);
  sluice_dq_item it = {"x", 1, 0, 0, NULL};
  TH_ASSERT_EQ(sluice_dq_push(dq, &it, NULL, NULL), SLUICE_OK);
  TH_ASSERT_EQ(sluice_dq_consumer_new(c, "m", NULL, on_msg, &d, &con), SLUICE_OK);
  TH_ASSERT(th_loop_until(base, &d.flag, 5000));
  sluice_dq_consumer_metrics cm;
  sluice_dq_consumer_get_metrics(con, &cm);
  TH_ASSERT_EQ(cm.acked, 1);
  sluice_dq_metrics dm;
  sluice_dq_get_metrics(dq, &dm);
  TH_ASSERT_EQ(dm.pushed, 1);
  TH_ASSERT_EQ(cm.delivered, 1);
  TH_ASSERT_EQ(cm.redelivered, 0);
  TH_ASSERT_EQ(cm.lateness.count, 1);

  sluice_client_metrics m;
  sluice_client_get_metrics(c, &m);
  TH_ASSERT_CMP(m.evals, >=, 6);
  TH_ASSERT_CMP(m.by_status[0], >=, 6);
  int seen_acquire = 0;
  for (size_t i = 0; i < m.nkinds; i++) {
    th_note("%-16s ops %llu errors %llu p50 %llu us p99 %llu us max %llu us\n", m.kinds[i].name,
            (unsigned long long)m.kinds[i].ops, (unsigned long long)m.kinds[i].errors,
            (unsigned long long)m.kinds[i].latency.p50_us,
            (unsigned long long)m.kinds[i].latency.p99_us,
            (unsigned long long)m.kinds[i].latency.max_us);
    if (strcmp(m.kinds[i].name, "sem_acquire") == 0) seen_acquire = m.kinds[i].ops >= 2;
  }
  TH_ASSERT(seen_acquire);
  check_exposition(c, &m, &sm, &lm, &cm);

  sluice_dq_consumer_free(con);
  sluice_dq_free(dq);
  sluice_limiter_free(lim);
  sluice_sem_free(sem);
  th_free_client_and_loop(base, c, 10000);
}

/* Two handles on one name are one series: their counts add up; freeing
 * one takes its counts away. */
static void test_prometheus_sums_handles(void) {
  struct event_base *base = event_base_new();
  sluice_client *c = client_on(base, &th_server);
  sluice_sem_options so;
  sluice_sem *a, *b;
  st x = {0, 0, NULL}, y = {0, 0, NULL};
  sluice_sem_options_init(&so);
  so.permits = 2;
  TH_ASSERT_EQ(sluice_sem_new(c, "dup", &so, &a), SLUICE_OK);
  TH_ASSERT_EQ(sluice_sem_new(c, "dup", &so, &b), SLUICE_OK);
  TH_ASSERT_EQ(sluice_sem_try_acquire(a, on_acq, &x), SLUICE_OK);
  TH_ASSERT_EQ(sluice_sem_try_acquire(b, on_acq, &y), SLUICE_OK);
  TH_ASSERT(th_loop_until(base, &x.flag, 5000));
  TH_ASSERT(th_loop_until(base, &y.flag, 5000));
  TH_ASSERT(x.p && y.p);
  char *text;
  TH_ASSERT_EQ(sluice_client_prometheus(c, &text, NULL), SLUICE_OK);
  prom_check_text(text);
  TH_ASSERT_EQ(prom_value(text, "sluice_sem_grants_total{name=\"dup\"}"), 2);
  TH_ASSERT_EQ(prom_value(text, "sluice_client_handles{kind=\"sem\"}"), 2);
  sluice_prometheus_free(text);
  sluice_permit_release(x.p, NULL, NULL);
  sluice_sem_free(a);
  TH_ASSERT_EQ(sluice_client_prometheus(c, &text, NULL), SLUICE_OK);
  TH_ASSERT_EQ(prom_value(text, "sluice_sem_grants_total{name=\"dup\"}"), 1);
  TH_ASSERT_EQ(prom_value(text, "sluice_client_handles{kind=\"sem\"}"), 1);
  sluice_prometheus_free(text);
  sluice_permit_release(y.p, NULL, NULL);
  sluice_sem_free(b);
  th_free_client_and_loop(base, c, 10000);
}

static const th_case cases[] = {
    TH_CASE(log_down_up, 30, .standalone_only = "restarts the server"),
    TH_CASE(log_failed_auth, 30),
    TH_CASE(precise_clock, 30),
    TH_CASE(counters, 30),
    TH_CASE(prometheus_sums_handles, 30),
};
TH_MAIN(cases)
