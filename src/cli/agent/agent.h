/* `sluice agent`: rate limits for proxies (nginx auth_request, HAProxy SPOE), decided by
 * rules read from a file. Built only on the public API, like the tool. */
#ifndef SLUICE_CLI_AGENT_H
#define SLUICE_CLI_AGENT_H

#include <stddef.h>
#include <stdint.h>
#include <sluice/sluice.h>

struct event_base;

/* What a rule does when Redis cannot answer in time. */
typedef enum agent_down {
  AGENT_DOWN_DENY = 0,
  AGENT_DOWN_ALLOW = 1,
  AGENT_DOWN_LOCAL = 2
} agent_down;

/* One part of a rule's key. */
typedef enum agent_key_kind {
  AGENT_KEY_ADDR,     /* the client's address, or its network (addr/24) */
  AGENT_KEY_HEADER,   /* a request header's value (header:X-User) */
  AGENT_KEY_HOST,     /* the original request's host */
  AGENT_KEY_PATH,     /* its path */
  AGENT_KEY_METHOD,   /* its method */
  AGENT_KEY_LISTENER, /* the proxy's listener name */
} agent_key_kind;

#define AGENT_KEY_PARTS_MAX 4
#define AGENT_RULES_MAX 64
#define AGENT_TEXT_MAX 128     /* a rule's name, a match's value, a header name */
#define AGENT_PERMIT_ID_MAX 40 /* a permit's id (32 hex) and its NUL */

typedef struct agent_key_part {
  agent_key_kind kind;
  int prefix_bits; /* AGENT_KEY_ADDR: -1 the whole address */
  char header[AGENT_TEXT_MAX];
} agent_key_part;

/* A rule's decisions since the agent started (kept across reloads by name). */
typedef struct agent_rule_counts {
  uint64_t allowed, denied;               /* decided by Redis (or the local limiter) */
  uint64_t policy_allowed, policy_denied; /* by the failure policy */
} agent_rule_counts;

/* Decision latency buckets, in microseconds (the last is +Inf). */
#define AGENT_LATENCY_BUCKETS 12

/* The agent's own counters, for /metrics. */
typedef struct agent_stats {
  uint64_t answers[2][2];      /* [front: 0 http, 1 spop][allowed] */
  uint64_t protocol_errors[2]; /* [1]: SPOP frames refused ([0] unused) */
  uint64_t reloads_ok, reloads_refused;
  uint64_t latency[AGENT_LATENCY_BUCKETS];
  uint64_t latency_count;
  double latency_sum_s;
} agent_stats;

typedef struct agent_rule {
  char name[AGENT_TEXT_MAX];
  agent_rule_counts counts;
  int line; /* of its [rule NAME] header, for messages */
  /* Which requests it covers; "" matches any. */
  char listener[AGENT_TEXT_MAX], host[AGENT_TEXT_MAX], path_prefix[AGENT_TEXT_MAX],
      method[AGENT_TEXT_MAX];
  agent_key_part key[AGENT_KEY_PARTS_MAX];
  int nkey;
  sluice_limiter_options opts;
  unsigned cost;
  agent_down down;
  unsigned timeout_ms; /* the local deadline: well inside the proxy's own */
  sluice_limiter *lim;
  /* algo = concurrency: at most permits requests in flight (SPOP only),
   * each holding a permit of semaphore NAME until its response or lease_ms;
   * with a key, of semaphore "[NAME]KEY" per key value (agent_keys.c). */
  int concurrency;
  unsigned permits, lease_ms;
  sluice_sem *sem; /* without a key */
} agent_rule;

/* The [agent] section: read at start only (a reload keeps them). */
typedef struct agent_settings {
  char http[AGENT_TEXT_MAX]; /* "host:port" of the auth-request listener, or "" */
  char spop[AGENT_TEXT_MAX]; /* "host:port" of the SPOP listener, or "" */
  unsigned max_connections;  /* SPOP connections at once */
  unsigned max_header_bytes;
  unsigned idle_timeout_s;
  unsigned max_keys;   /* keyed concurrency rules: semaphore handles live at once */
  unsigned key_idle_s; /* a keyed handle unused this long is freed */
} agent_settings;

/* A parsed file. Decisions in flight hold a reference, so a reload frees
 * the old rules (and their limiters) only once nothing uses them. */
typedef struct agent_permits agent_permits;
typedef struct agent_keys agent_keys;

typedef struct agent_rules {
  int refs;
  agent_stats *stats;     /* the agent's, set by whoever loads the rules */
  agent_permits *permits; /* the agent's held permits, likewise */
  agent_keys *keys;       /* the agent's keyed semaphores, likewise */
  agent_settings settings;
  agent_rule rule[AGENT_RULES_MAX];
  int n;
} agent_rules;

/* Parse path. NULL on error, with "FILE:LINE: reason" in why. */
agent_rules *agent_rules_load(const char *path, char *why, size_t why_size);
/* Create each rule's limiter on client; 0, or -1 with why filled. */
int agent_rules_start(agent_rules *rules, sluice_client *client, char *why, size_t why_size);
/* Carry each rule's counts over from old to next (rules of the same name). */
void agent_rules_keep_counts(agent_rules *next, const agent_rules *old);
void agent_rules_ref(agent_rules *rules);
void agent_rules_unref(agent_rules *rules);

/* A request as a proxy describes it; get_header reads any other header. */
typedef struct agent_request {
  const char *listener, *host, *path, *method, *addr; /* NULL when absent */
  int can_hold; /* the proxy says when the request ends (SPOP): concurrency rules apply */
  const char *(*get_header)(const void *ctx, const char *name);
  const void *ctx;
} agent_request;

/* One rule's outcome, for the answer's RateLimit fields. */
typedef struct agent_verdict {
  const agent_rule *rule;
  int allowed;
  int checked; /* 0: decided by the failure policy, res unknown */
  sluice_rl_result res;
  char permit[AGENT_PERMIT_ID_MAX]; /* a concurrency rule's permit, or "" */
} agent_verdict;

typedef struct agent_decision agent_decision;
/* The answer: allowed when every matching rule allowed; v[0..n) each rule's
 * verdict (valid during the call only). */
typedef void agent_decision_cb(const agent_verdict *v, int n, int allowed, int64_t retry_after_ms,
                               void *ud);

/* Decide req under rules: cb runs exactly once, from the loop or, when no
 * rule matches or every check fails at once, inside this call. It runs at
 * the latest when the matching rules' longest timeout_ms has passed. -1
 * (cb not run) when out of memory. */
int agent_decide(struct event_base *base, agent_rules *rules, const agent_request *req,
                 agent_decision_cb *cb, void *ud);
/* Count an answer of front (0 http, 1 spop) in rules->stats. */
void agent_count_answer(agent_rules *rules, int front, int allowed);

/* Build rule's key for req into buf: 0, or -1 when a part is missing or
 * the key is too long (the rule then does not apply). */
int agent_key_build(const agent_rule *rule, const agent_request *req, char *buf, size_t size);

/* The semaphore handles of keyed concurrency rules (agent_keys.c): one
 * per rule and key value, made on demand, at most max live; one that no
 * permit or acquire uses is freed after idle_s, or sooner to make room. */
typedef struct agent_key_sem agent_key_sem;
agent_keys *agent_keys_new(struct event_base *base, sluice_client *client, unsigned max,
                           unsigned idle_s);
/* The options of a concurrency rule's semaphore(s), keyed or not. */
void agent_rule_sem_options(const agent_rule *r, sluice_sem_options *o);
/* 1 when the semaphore name of rule and key fits SLUICE_NAME_MAX (else the
 * rule does not apply, as for a key too long). */
int agent_keys_fit(const agent_rule *rule, const char *key);
/* The handle of rule's semaphore for key, with one use taken: NULL when
 * every handle is in use at the cap (counted in refused) or on an error. */
agent_key_sem *agent_keys_get(agent_keys *t, const agent_rule *rule, const char *key);
sluice_sem *agent_key_sem_handle(const agent_key_sem *ks);
/* Give back one use (a permit released, an acquire answered); NULL: no-op. */
void agent_key_sem_put(agent_key_sem *ks);
typedef struct agent_keys_stats {
  unsigned live, max;
  uint64_t freed_idle, evicted, refused;
  int connected; /* the handles' client's command connection is up */
} agent_keys_stats;
void agent_keys_get_stats(const agent_keys *t, agent_keys_stats *out);
/* Free every handle, used or not: at the agent's end, once nothing can be
 * pending on them (their client closed, its acquires answered). */
void agent_keys_free(agent_keys *t);

/* Held permits of concurrency rules (agent_permits.c), at most max. */
agent_permits *agent_permits_new(struct event_base *base, unsigned max);
/* Keep permit (a grant of rules' rule) until agent_permits_release names
 * its id or lease_ms passes; then it is released, and the use of keyed
 * (the keyed semaphore it came from, or NULL) given back. -1 (released and
 * given back at once) when the table is full or out of memory. */
int agent_permits_hold(agent_permits *t, agent_rules *rules, sluice_permit *permit,
                       unsigned lease_ms, agent_key_sem *keyed);
/* Release the permit of id: 0, or -1 when none is held (already released
 * or its lease ended). */
int agent_permits_release(agent_permits *t, const char *id);
unsigned agent_permits_count(const agent_permits *t);
/* Release every permit held. */
void agent_permits_free(agent_permits *t);

/* The Prometheus text of /metrics: the agent's counters, then the client's
 * own (sluice_client_prometheus). Free with free(); NULL when out of
 * memory. */
char *agent_metrics_text(const agent_rules *rules, const sluice_client *client, size_t *len);

/* The auth-request HTTP front: serve on settings->http; GET /metrics
 * answers agent_metrics_text. */
typedef struct agent_http agent_http;
agent_http *agent_http_new(struct event_base *base, const agent_settings *s, agent_rules **rules,
                           sluice_client *client, char *why, size_t why_size);
void agent_http_free(agent_http *h);

/* The SPOP front (HAProxy's SPOE): serve on settings->spop. */
typedef struct agent_spop agent_spop;
agent_spop *agent_spop_new(struct event_base *base, const agent_settings *s, agent_rules **rules,
                           char *why, size_t why_size);
void agent_spop_free(agent_spop *s);

#endif
