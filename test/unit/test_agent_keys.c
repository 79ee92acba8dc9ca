/* The agent's keyed semaphore handles (src/cli/agent/agent_keys.c), without
 * Redis (making a handle asks Redis nothing): one handle per rule, key
 * value and options, named "[RULE]KEY"; at the cap the longest idle one
 * makes room, and with none idle a new key is refused and counted; an idle
 * one is freed after key_idle_s, one in use never; handles still in use
 * when the agent stops are freed too (the memcheck suite watches). */
#include <stdio.h>
#include <string.h>

#include <event2/event.h>

#include "agent.h"
#include "harness.h"

#define NOWHERE "unix:///nonexistent/sluice-test-agent-keys.sock"

typedef struct keys_fx {
  struct event_base *base;
  sluice_client *c;
  agent_keys *t;
  agent_rule r; /* "per-key", one permit: the rule of the cap cases */
} keys_fx;

/* A concurrency rule keyed by address, as the rule file makes it. */
static agent_rule keyed_rule(const char *name, unsigned permits) {
  agent_rule r;
  memset(&r, 0, sizeof r);
  snprintf(r.name, sizeof r.name, "%s", name);
  r.concurrency = 1;
  r.permits = permits;
  r.lease_ms = 30000;
  r.timeout_ms = 100;
  r.nkey = 1;
  r.key[0].kind = AGENT_KEY_ADDR;
  r.key[0].prefix_bits = -1;
  return r;
}

static keys_fx fx_open(unsigned max, unsigned idle_s) {
  keys_fx fx;
  fx.base = event_base_new();
  TH_ASSERT(fx.base != NULL);
  fx.c = th_client(fx.base, NOWHERE, 0);
  fx.t = agent_keys_new(fx.base, fx.c, max, idle_s);
  TH_ASSERT(fx.t != NULL);
  fx.r = keyed_rule("per-key", 1);
  return fx;
}

static void fx_close(keys_fx *fx) {
  agent_keys_free(fx->t);
  th_free_client_and_loop(fx->base, fx->c, 5000);
}

static agent_keys_stats stats_of(const keys_fx *fx) {
  agent_keys_stats s;
  agent_keys_get_stats(fx->t, &s);
  return s;
}

static void test_names_and_sharing(void) {
  keys_fx fx = fx_open(10, 60);
  agent_rule r = keyed_rule("exports", 2), other = keyed_rule("exports2", 2),
             changed = keyed_rule("exports", 3);
  agent_key_sem *a = agent_keys_get(fx.t, &r, "10.0.0.1");
  TH_ASSERT(a != NULL);
  TH_ASSERT(agent_keys_get(fx.t, &r, "10.0.0.1") == a); /* one handle per key value */
  TH_ASSERT_STR_EQ(sluice_sem_name(agent_key_sem_handle(a)), "[exports]10.0.0.1");
  agent_key_sem *b = agent_keys_get(fx.t, &r, "10.0.0.2");
  agent_key_sem *o = agent_keys_get(fx.t, &other, "10.0.0.1");
  agent_key_sem *c = agent_keys_get(fx.t, &changed, "10.0.0.1"); /* a reload's new options */
  TH_ASSERT(b && o && c && b != a && o != a && c != a);
  TH_ASSERT_STR_EQ(sluice_sem_name(agent_key_sem_handle(c)), "[exports]10.0.0.1");
  TH_ASSERT_EQ(stats_of(&fx).live, 4);
  agent_key_sem *uses[] = {a, a, b, o, c};
  for (size_t i = 0; i < sizeof uses / sizeof *uses; i++) agent_key_sem_put(uses[i]);
  /* "[r]" and the key hold at most SLUICE_NAME_MAX bytes. */
  agent_rule shortname = keyed_rule("r", 1);
  char key[SLUICE_NAME_MAX + 1];
  memset(key, 'k', SLUICE_NAME_MAX - 3);
  key[SLUICE_NAME_MAX - 3] = 0;
  TH_ASSERT(agent_keys_fit(&shortname, key));
  strcat(key, "k");
  TH_ASSERT(!agent_keys_fit(&shortname, key));
  fx_close(&fx);
}

static void test_cap_evicts_longest_idle(void) {
  keys_fx fx = fx_open(2, 60);
  agent_key_sem *a = agent_keys_get(fx.t, &fx.r, "a"), *b = agent_keys_get(fx.t, &fx.r, "b");
  TH_ASSERT(a && b);
  TH_ASSERT(agent_keys_get(fx.t, &fx.r, "c") == NULL); /* both in use: refused */
  TH_ASSERT_EQ(stats_of(&fx).refused, 1);
  agent_key_sem_put(a);
  agent_key_sem *c = agent_keys_get(fx.t, &fx.r, "c"); /* takes a's place */
  TH_ASSERT(c != NULL);
  TH_ASSERT_EQ(stats_of(&fx).evicted, 1);
  TH_ASSERT(agent_keys_get(fx.t, &fx.r, "a") == NULL);
  TH_ASSERT_EQ(stats_of(&fx).refused, 2);
  /* b then c idle: d takes b's place, and c is found again as it was. */
  agent_key_sem_put(b);
  agent_key_sem_put(c);
  agent_key_sem *d = agent_keys_get(fx.t, &fx.r, "d");
  TH_ASSERT(d != NULL);
  TH_ASSERT(agent_keys_get(fx.t, &fx.r, "c") == c);
  agent_keys_stats s = stats_of(&fx);
  TH_ASSERT(s.evicted == 2 && s.live == 2 && s.max == 2);
  agent_key_sem_put(c);
  agent_key_sem_put(d);
  fx_close(&fx);
}

static void test_idle_freed_in_use_kept(void) {
  keys_fx fx = fx_open(4, 1);
  agent_key_sem *idle = agent_keys_get(fx.t, &fx.r, "idle");
  agent_key_sem *busy = agent_keys_get(fx.t, &fx.r, "busy");
  TH_ASSERT(idle && busy);
  agent_key_sem_put(idle);
  TH_LOOP_UNTIL(fx.base, stats_of(&fx).live == 1, 5000);
  agent_keys_stats s = stats_of(&fx);
  TH_ASSERT(s.live == 1 && s.freed_idle == 1 && s.evicted == 0);
  TH_ASSERT(agent_keys_get(fx.t, &fx.r, "busy") == busy); /* still the same handle */
  agent_key_sem_put(busy);
  agent_key_sem_put(busy);
  fx_close(&fx);
}

static void test_in_use_freed_at_stop(void) {
  keys_fx fx = fx_open(4, 60);
  TH_ASSERT(agent_keys_get(fx.t, &fx.r, "a") && agent_keys_get(fx.t, &fx.r, "b"));
  fx_close(&fx);
}

static const th_case cases[] = {
    TH_CASE(names_and_sharing, 10),
    TH_CASE(cap_evicts_longest_idle, 10),
    TH_CASE(idle_freed_in_use_kept, 10),
    TH_CASE(in_use_freed_at_stop, 10),
};
TH_MAIN_LOCAL(cases)
