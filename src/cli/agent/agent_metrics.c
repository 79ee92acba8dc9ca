/* The agent's /metrics: Prometheus text of its decisions per rule, its
 * answers per front, protocol errors, reloads and decision latency, then
 * the client's own metrics (connection, steps' latency). */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "agent.h"

typedef struct text {
  char *buf;
  size_t len, size;
  int failed;
} text;

static void add(text *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void add(text *t, const char *fmt, ...) {
  for (int tries = 0; tries < 2 && !t->failed; tries++) {
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(t->buf + t->len, t->size - t->len, fmt, ap);
    va_end(ap);
    if (n < 0) break;
    if ((size_t)n < t->size - t->len) {
      t->len += (size_t)n;
      return;
    }
    size_t size = t->size * 2 + (size_t)n;
    char *b = realloc(t->buf, size);
    if (!b) break;
    t->buf = b;
    t->size = size;
  }
  t->failed = 1;
}

static void rule_lines(text *t, const agent_rules *rules) {
  static const char *const outcome[4] = {"allowed", "denied", "policy_allowed", "policy_denied"};
  add(t,
      "# HELP sluice_agent_decisions_total Decisions per rule: by Redis (or the local "
      "limiter), or by the rule's failure policy.\n"
      "# TYPE sluice_agent_decisions_total counter\n");
  for (int i = 0; i < rules->n; i++) {
    const agent_rule_counts *c = &rules->rule[i].counts;
    const uint64_t v[4] = {c->allowed, c->denied, c->policy_allowed, c->policy_denied};
    char name[AGENT_TEXT_MAX * 6];
    sluice_prometheus_escape(rules->rule[i].name, name, sizeof name);
    for (int k = 0; k < 4; k++)
      add(t, "sluice_agent_decisions_total{rule=\"%s\",outcome=\"%s\"} %llu\n", name, outcome[k],
          (unsigned long long)v[k]);
  }
}

static void agent_lines(text *t, const agent_stats *st, int nrules) {
  static const char *const front[2] = {"http", "spop"};
  add(t,
      "# HELP sluice_agent_answers_total Answers to the proxies.\n"
      "# TYPE sluice_agent_answers_total counter\n");
  for (int f = 0; f < 2; f++)
    for (int a = 1; a >= 0; a--)
      add(t, "sluice_agent_answers_total{front=\"%s\",allowed=\"%d\"} %llu\n", front[f], a,
          (unsigned long long)st->answers[f][a]);
  add(t,
      "# HELP sluice_agent_protocol_errors_total Malformed requests and refused frames.\n"
      "# TYPE sluice_agent_protocol_errors_total counter\n");
  for (int f = 0; f < 2; f++)
    add(t, "sluice_agent_protocol_errors_total{front=\"%s\"} %llu\n", front[f],
        (unsigned long long)st->protocol_errors[f]);
  add(t,
      "# HELP sluice_agent_reloads_total Reloads of the rule file (SIGHUP).\n"
      "# TYPE sluice_agent_reloads_total counter\n"
      "sluice_agent_reloads_total{result=\"ok\"} %llu\n"
      "sluice_agent_reloads_total{result=\"refused\"} %llu\n"
      "# HELP sluice_agent_rules Rules in use.\n# TYPE sluice_agent_rules gauge\n"
      "sluice_agent_rules %d\n",
      (unsigned long long)st->reloads_ok, (unsigned long long)st->reloads_refused, nrules);
  static const char *const le[AGENT_LATENCY_BUCKETS] = {"0.00025", "0.0005", "0.001", "0.002",
                                                        "0.005",   "0.01",   "0.025", "0.05",
                                                        "0.1",     "0.25",   "0.5",   "+Inf"};
  add(t,
      "# HELP sluice_agent_decision_seconds From a request's arrival to its answer.\n"
      "# TYPE sluice_agent_decision_seconds histogram\n");
  uint64_t cumulative = 0;
  for (int b = 0; b < AGENT_LATENCY_BUCKETS; b++) {
    cumulative += st->latency[b];
    add(t, "sluice_agent_decision_seconds_bucket{le=\"%s\"} %llu\n", le[b],
        (unsigned long long)cumulative);
  }
  add(t, "sluice_agent_decision_seconds_sum %.6f\nsluice_agent_decision_seconds_count %llu\n",
      st->latency_sum_s, (unsigned long long)st->latency_count);
}

static void keys_lines(text *t, const agent_rules *rules) {
  agent_keys_stats k;
  agent_keys_get_stats(rules->keys, &k);
  add(t,
      "# HELP sluice_agent_permits_held Permits of concurrency rules held for requests.\n"
      "# TYPE sluice_agent_permits_held gauge\nsluice_agent_permits_held %u\n"
      "# HELP sluice_agent_key_semaphores Semaphore handles of keyed concurrency rules.\n"
      "# TYPE sluice_agent_key_semaphores gauge\nsluice_agent_key_semaphores %u\n"
      "# HELP sluice_agent_key_semaphores_max Their cap (max_keys).\n"
      "# TYPE sluice_agent_key_semaphores_max gauge\nsluice_agent_key_semaphores_max %u\n"
      "# HELP sluice_agent_key_semaphores_freed_total Handles freed: idle for key_idle_s, "
      "or evicted (the longest idle) to make room at the cap.\n"
      "# TYPE sluice_agent_key_semaphores_freed_total counter\n"
      "sluice_agent_key_semaphores_freed_total{reason=\"idle\"} %llu\n"
      "sluice_agent_key_semaphores_freed_total{reason=\"evicted\"} %llu\n"
      "# HELP sluice_agent_key_refused_total Requests a keyed rule refused to check: every "
      "handle in use at the cap (the rule's failure policy answered).\n"
      "# TYPE sluice_agent_key_refused_total counter\nsluice_agent_key_refused_total %llu\n"
      "# HELP sluice_agent_key_connection_up Whether the connection of the keyed rules' own "
      "client is up.\n"
      "# TYPE sluice_agent_key_connection_up gauge\nsluice_agent_key_connection_up %d\n",
      agent_permits_count(rules->permits), k.live, k.max, (unsigned long long)k.freed_idle,
      (unsigned long long)k.evicted, (unsigned long long)k.refused, k.connected);
}

char *agent_metrics_text(const agent_rules *rules, const sluice_client *client, size_t *len) {
  text t = {malloc(4096), 0, 4096, 0};
  if (!t.buf) return NULL;
  t.buf[0] = 0;
  rule_lines(&t, rules);
  if (rules->stats) agent_lines(&t, rules->stats, rules->n);
  keys_lines(&t, rules);
  char *lib = NULL;
  size_t lib_len = 0;
  if (client && sluice_client_prometheus(client, &lib, &lib_len) == 0) {
    add(&t, "%s", lib);
    sluice_prometheus_free(lib);
  }
  if (t.failed) {
    free(t.buf);
    return NULL;
  }
  *len = t.len;
  return t.buf;
}
