/* One request's decision: every matching rule is checked at once, and the
 * answer leaves when all have answered or at the local deadline, whichever
 * comes first; a rule still waiting for Redis then gets its failure policy,
 * so the proxy never waits on Redis past its own timeout. */
#include <arpa/inet.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include <event2/event.h>

#include "agent.h"

struct agent_decision;

/* How long after its rules' timeouts a decision is answered at the latest. */
#define AGENT_DEADLINE_SLACK_MS 25

typedef struct agent_slot {
  struct agent_decision *d;
  int answered;
  agent_key_sem *keyed; /* a keyed rule's semaphore, used until its acquire ends */
} agent_slot;

struct agent_decision {
  agent_rules *rules; /* a reference: a reload must not free them under us */
  agent_decision_cb *cb;
  void *ud;
  struct event *deadline;
  struct timespec started;
  int pending; /* checks not yet answered by the library */
  int replied;
  int n;
  agent_verdict v[AGENT_RULES_MAX];
  agent_slot slot[AGENT_RULES_MAX];
};

static int matches(const agent_rule *r, const agent_request *req) {
  if (r->listener[0] && (!req->listener || strcmp(r->listener, req->listener) != 0)) return 0;
  if (r->host[0] && (!req->host || strcasecmp(r->host, req->host) != 0)) return 0;
  if (r->method[0] && (!req->method || strcmp(r->method, req->method) != 0)) return 0;
  if (r->path_prefix[0] &&
      (!req->path || strncmp(r->path_prefix, req->path, strlen(r->path_prefix)) != 0))
    return 0;
  return 1;
}

/* addr masked to bits ("10.1.2.0/24"); -1 when it is not an address. */
static int masked_addr(const char *addr, int bits, char *out, size_t size) {
  unsigned char a[16];
  int family = strchr(addr, ':') ? AF_INET6 : AF_INET;
  int len = family == AF_INET6 ? 16 : 4;
  if (inet_pton(family, addr, a) != 1) return -1;
  if (bits > len * 8) bits = len * 8;
  for (int i = 0; i < len; i++) {
    int keep = bits - i * 8;
    a[i] &= keep >= 8 ? 0xff : keep <= 0 ? 0 : (unsigned char)(0xff << (8 - keep));
  }
  char text[INET6_ADDRSTRLEN];
  if (!inet_ntop(family, a, text, sizeof text)) return -1;
  int n = snprintf(out, size, "%s/%d", text, bits);
  return n < 0 || (size_t)n >= size ? -1 : 0;
}

int agent_key_build(const agent_rule *rule, const agent_request *req, char *buf, size_t size) {
  size_t used = 0;
  for (int i = 0; i < rule->nkey; i++) {
    const agent_key_part *p = &rule->key[i];
    char net[INET6_ADDRSTRLEN + 8];
    const char *v = NULL;
    switch (p->kind) {
      case AGENT_KEY_ADDR:
        v = req->addr;
        if (v && p->prefix_bits >= 0)
          v = masked_addr(v, p->prefix_bits, net, sizeof net) ? NULL : net;
        break;
      case AGENT_KEY_HEADER:
        v = req->get_header ? req->get_header(req->ctx, p->header) : NULL;
        break;
      case AGENT_KEY_HOST: v = req->host; break;
      case AGENT_KEY_PATH: v = req->path; break;
      case AGENT_KEY_METHOD: v = req->method; break;
      case AGENT_KEY_LISTENER: v = req->listener; break;
    }
    if (!v || !*v) return -1;
    size_t n = strlen(v);
    /* Parts are joined by '|'; a key holds at most SLUICE_NAME_MAX bytes. */
    if (used + n + (i > 0) > SLUICE_NAME_MAX || used + n + (i > 0) >= size) return -1;
    if (i > 0) buf[used++] = '|';
    memcpy(buf + used, v, n);
    used += n;
  }
  buf[used] = 0;
  return used ? 0 : -1;
}

static void decision_free_if_done(agent_decision *d) {
  if (!d->replied || d->pending > 0) return;
  if (d->deadline) event_free(d->deadline);
  agent_rules_unref(d->rules);
  free(d);
}

/* The decision's latency into the histogram (upper bounds in us). */
static const unsigned latency_bounds_us[AGENT_LATENCY_BUCKETS - 1] = {
    250, 500, 1000, 2000, 5000, 10000, 25000, 50000, 100000, 250000, 500000};

static void count_latency(agent_stats *st, const struct timespec *started) {
  struct timespec now;
  clock_gettime(CLOCK_MONOTONIC, &now);
  double s = (double)(now.tv_sec - started->tv_sec) + (now.tv_nsec - started->tv_nsec) / 1e9;
  int b = 0;
  while (b < AGENT_LATENCY_BUCKETS - 1 && s * 1e6 > latency_bounds_us[b]) b++;
  st->latency[b]++;
  st->latency_count++;
  st->latency_sum_s += s;
}

void agent_count_answer(agent_rules *rules, int front, int allowed) {
  if (rules->stats) rules->stats->answers[front != 0][allowed != 0]++;
}

static void count_verdict(agent_verdict *v) {
  agent_rule_counts *c = &((agent_rule *)v->rule)->counts;
  if (v->checked) v->allowed ? c->allowed++ : c->denied++;
  else v->allowed ? c->policy_allowed++ : c->policy_denied++;
}

static void reply(agent_decision *d) {
  if (d->replied) return;
  d->replied = 1;
  int allowed = 1;
  int64_t retry = 0;
  for (int i = 0; i < d->n; i++) {
    agent_verdict *v = &d->v[i];
    if (!d->slot[i].answered) { /* past the backstop: the rule's policy (local: allow) */
      v->allowed = v->rule->down != AGENT_DOWN_DENY;
      v->checked = 0;
    }
    count_verdict(v);
    if (!v->allowed) {
      allowed = 0;
      int64_t r = v->checked ? v->res.retry_after_ms : 1000;
      if (r > retry) retry = r;
    }
  }
  if (d->deadline) event_del(d->deadline);
  if (d->rules->stats) count_latency(d->rules->stats, &d->started);
  d->cb(d->v, d->n, allowed, retry, d->ud);
}

static void on_check(sluice_limiter *lim, int status, const sluice_rl_result *res, void *ud) {
  (void)lim;
  agent_slot *s = ud;
  agent_decision *d = s->d;
  agent_verdict *v = &d->v[s - d->slot];
  d->pending--;
  if (!d->replied) {
    s->answered = 1;
    if (status == SLUICE_OK && res) {
      v->allowed = res->allowed;
      v->checked = res->source != SLUICE_RL_UNCHECKED;
      v->res = *res;
    } else { /* fail-closed, or an error Redis gave: the policy says */
      v->allowed = v->rule->down == AGENT_DOWN_ALLOW;
      v->checked = 0;
    }
    if (d->pending == 0) reply(d);
  }
  decision_free_if_done(d);
}

/* A concurrency rule's permit: held until the response (or its lease). */
static void on_acquire(sluice_sem *sem, int status, sluice_permit *permit, void *ud) {
  (void)sem;
  agent_slot *s = ud;
  agent_decision *d = s->d;
  agent_verdict *v = &d->v[s - d->slot];
  agent_key_sem *keyed = s->keyed; /* its use goes to the held permit, or back */
  s->keyed = NULL;
  d->pending--;
  if (d->replied) { /* answered on its deadline without it */
    if (status == SLUICE_OK) sluice_permit_release(permit, NULL, NULL);
    agent_key_sem_put(keyed);
  } else {
    s->answered = 1;
    v->res.limit = v->rule->permits;
    v->res.remaining = -1;
    if (status == SLUICE_OK) {
      char id[AGENT_PERMIT_ID_MAX];
      snprintf(id, sizeof id, "%s", sluice_permit_id(permit));
      v->allowed = d->rules->permits && agent_permits_hold(d->rules->permits, d->rules, permit,
                                                           v->rule->lease_ms, keyed) == 0;
      v->checked = v->allowed;
      if (v->allowed) memcpy(v->permit, id, sizeof id);
      else if (!d->rules->permits) {
        sluice_permit_release(permit, NULL, NULL);
        agent_key_sem_put(keyed);
      }
    } else {
      agent_key_sem_put(keyed);
      if (status == SLUICE_EBUSY) { /* every permit is held */
        v->allowed = 0;
        v->checked = 1;
        v->res.remaining = 0;
        v->res.retry_after_ms = 1000; /* unknown: when a request ends */
      } else {
        v->allowed = v->rule->down == AGENT_DOWN_ALLOW;
        v->checked = 0;
      }
    }
    if (d->pending == 0) reply(d);
  }
  decision_free_if_done(d);
}

static void on_deadline(evutil_socket_t fd, short what, void *ud) {
  (void)fd, (void)what;
  agent_decision *d = ud;
  reply(d);
  decision_free_if_done(d);
}

/* Whether rule covers req; its key (a rate rule's, a keyed concurrency
 * rule's) into key. */
static int applies(const agent_rule *r, const agent_request *req, char *key, size_t size) {
  if (!matches(r, req) || (r->concurrency && !req->can_hold)) return 0;
  if (r->concurrency && !r->nkey) return 1;
  return agent_key_build(r, req, key, size) == 0 && (!r->concurrency || agent_keys_fit(r, key));
}

/* Start rule r's check for slot s: 0, or the error that refused it. */
static int start_check(agent_decision *d, agent_slot *s, agent_rule *r, const char *key) {
  if (!r->concurrency) return sluice_limiter_check(r->lim, key, r->cost, on_check, s);
  if (!r->nkey) return sluice_sem_try_acquire(r->sem, on_acquire, s);
  /* At the cap with every handle in use: refused, like an unreachable Redis. */
  if (!d->rules->keys || !(s->keyed = agent_keys_get(d->rules->keys, r, key))) return -1;
  int rc = sluice_sem_try_acquire(agent_key_sem_handle(s->keyed), on_acquire, s);
  if (rc) {
    agent_key_sem_put(s->keyed);
    s->keyed = NULL;
  }
  return rc;
}

int agent_decide(struct event_base *base, agent_rules *rules, const agent_request *req,
                 agent_decision_cb *cb, void *ud) {
  agent_decision *d = calloc(1, sizeof *d);
  if (!d) return -1;
  d->rules = rules;
  agent_rules_ref(rules);
  d->cb = cb;
  d->ud = ud;
  clock_gettime(CLOCK_MONOTONIC, &d->started);
  unsigned longest = 0;
  char key[SLUICE_NAME_MAX + 1];
  for (int i = 0; i < rules->n; i++) {
    agent_rule *r = &rules->rule[i];
    if (!applies(r, req, key, sizeof key)) continue;
    int k = d->n++;
    d->v[k].rule = r;
    d->slot[k].d = d;
    if (start_check(d, &d->slot[k], r, key) != 0) {
      d->slot[k].answered = 1; /* refused at once: the policy decides */
      d->v[k].allowed = r->down == AGENT_DOWN_ALLOW;
      continue;
    }
    d->pending++;
    if (r->timeout_ms > longest) longest = r->timeout_ms;
  }
  if (d->pending == 0) {
    reply(d);
    decision_free_if_done(d);
    return 0;
  }
  if (!(d->deadline = evtimer_new(base, on_deadline, d))) {
    /* Without a timer the library's own op deadline still ends each check. */
  } else {
    /* A backstop: each check's own deadline (the rule's timeout_ms, on the
     * library's op timer) ends it first, with the limiter's failure policy
     * (a local decision among them); this one answers should that slip. */
    longest += AGENT_DEADLINE_SLACK_MS;
    struct timeval tv = {longest / 1000, (longest % 1000) * 1000};
    evtimer_add(d->deadline, &tv);
  }
  return 0;
}
