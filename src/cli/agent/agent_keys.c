/* Semaphore handles of keyed concurrency rules: one per rule and key value,
 * made when a request first needs it. Each counts its uses (acquires not
 * yet answered, permits held), and only a handle no one uses is freed, so
 * freeing one never cancels an acquire nor releases a held permit early.
 * Unused handles wait, oldest first, on the idle list: a sweep frees those
 * idle for idle_s, and a new key at the cap takes the oldest one's place.
 *
 * A semaphore is named "[RULE]KEY". A rule's name never holds ']' (inih
 * ends a section's name at the first one), so the first ']' splits any such
 * name into one rule and one key, and an unkeyed rule's semaphore, named
 * RULE, never meets a keyed one. A handle is found by its name and its
 * options: a reload that keeps a rule keeps its handles, one that changes
 * it makes new ones while permits of the old ones are still held. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <event2/event.h>

#include "agent.h"

#define SWEEP_MS 1000

struct agent_key_sem {
  agent_key_sem *next;                  /* in its bucket */
  agent_key_sem *idle_prev, *idle_next; /* on the idle list, while unused */
  agent_keys *t;
  sluice_sem *sem;
  unsigned uses, hash;
  unsigned permits, lease_ms, timeout_ms;
  uint64_t idle_since_ms;
  char name[];
};

struct agent_keys {
  sluice_client *client;
  struct event *sweep;
  agent_key_sem **bucket;
  unsigned nbuckets; /* a power of two */
  agent_key_sem *idle_head, *idle_tail;
  unsigned idle_ms;
  agent_keys_stats stats;
};

static uint64_t now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

static unsigned hash_of(const char *name, const agent_rule *r) {
  unsigned h = 2166136261u;
  for (const char *p = name; *p; p++) h = (h ^ (unsigned char)*p) * 16777619u;
  return h ^ (r->permits * 31u + r->lease_ms) * 16777619u;
}

static void idle_push(agent_keys *t, agent_key_sem *ks) {
  ks->idle_since_ms = now_ms();
  ks->idle_prev = t->idle_tail;
  ks->idle_next = NULL;
  if (t->idle_tail) t->idle_tail->idle_next = ks;
  else t->idle_head = ks;
  t->idle_tail = ks;
}

static void idle_remove(agent_keys *t, agent_key_sem *ks) {
  if (ks->idle_prev) ks->idle_prev->idle_next = ks->idle_next;
  else t->idle_head = ks->idle_next;
  if (ks->idle_next) ks->idle_next->idle_prev = ks->idle_prev;
  else t->idle_tail = ks->idle_prev;
  ks->idle_prev = ks->idle_next = NULL;
}

/* Free an unused handle (nothing pending on it: no callback follows). */
static void destroy(agent_key_sem *ks) {
  agent_keys *t = ks->t;
  agent_key_sem **pp = &t->bucket[ks->hash & (t->nbuckets - 1)];
  while (*pp != ks) pp = &(*pp)->next;
  *pp = ks->next;
  if (!ks->uses) idle_remove(t, ks); /* (in use only when the agent stops) */
  sluice_sem_free(ks->sem);
  free(ks);
  t->stats.live--;
}

static void on_sweep(evutil_socket_t fd, short what, void *ud) {
  (void)fd, (void)what;
  agent_keys *t = ud;
  uint64_t now = now_ms();
  while (t->idle_head && now - t->idle_head->idle_since_ms >= t->idle_ms) {
    destroy(t->idle_head);
    t->stats.freed_idle++;
  }
}

agent_keys *agent_keys_new(struct event_base *base, sluice_client *client, unsigned max,
                           unsigned idle_s) {
  agent_keys *t = calloc(1, sizeof *t);
  if (!t) return NULL;
  t->client = client;
  t->stats.max = max;
  t->idle_ms = idle_s * 1000;
  t->nbuckets = 64;
  while (t->nbuckets < max && t->nbuckets < (1u << 20)) t->nbuckets *= 2;
  struct timeval every = {SWEEP_MS / 1000, (SWEEP_MS % 1000) * 1000};
  if (!(t->bucket = calloc(t->nbuckets, sizeof *t->bucket)) ||
      !(t->sweep = event_new(base, -1, EV_PERSIST, on_sweep, t)) || evtimer_add(t->sweep, &every)) {
    agent_keys_free(t);
    return NULL;
  }
  return t;
}

void agent_rule_sem_options(const agent_rule *r, sluice_sem_options *o) {
  sluice_sem_options_init(o);
  o->permits = r->permits;
  o->ttl_ms = r->lease_ms;
  o->auto_renew = 0; /* the lease is the longest a request may hold it */
  o->op_timeout_ms = r->timeout_ms;
  o->fail_fast = 1;
}

int agent_keys_fit(const agent_rule *rule, const char *key) {
  return strlen(rule->name) + strlen(key) + 2 <= SLUICE_NAME_MAX;
}

static agent_key_sem *find(agent_keys *t, const agent_rule *r, const char *name, unsigned h) {
  for (agent_key_sem *ks = t->bucket[h & (t->nbuckets - 1)]; ks; ks = ks->next)
    if (ks->hash == h && ks->permits == r->permits && ks->lease_ms == r->lease_ms &&
        ks->timeout_ms == r->timeout_ms && strcmp(ks->name, name) == 0)
      return ks;
  return NULL;
}

/* A place for one more handle: free, or the longest idle one's. */
static int make_room(agent_keys *t) {
  if (t->stats.live < t->stats.max) return 1;
  if (!t->idle_head) return 0;
  destroy(t->idle_head);
  t->stats.evicted++;
  return 1;
}

static agent_key_sem *create(agent_keys *t, const agent_rule *r, const char *name, unsigned h) {
  size_t len = strlen(name);
  agent_key_sem *ks = calloc(1, sizeof *ks + len + 1);
  if (!ks) return NULL;
  memcpy(ks->name, name, len + 1);
  sluice_sem_options o;
  agent_rule_sem_options(r, &o);
  if (sluice_sem_new(t->client, name, &o, &ks->sem) != SLUICE_OK) {
    free(ks);
    return NULL;
  }
  ks->t = t;
  ks->hash = h;
  ks->permits = r->permits;
  ks->lease_ms = r->lease_ms;
  ks->timeout_ms = r->timeout_ms;
  agent_key_sem **head = &t->bucket[h & (t->nbuckets - 1)];
  ks->next = *head;
  *head = ks;
  t->stats.live++;
  return ks;
}

agent_key_sem *agent_keys_get(agent_keys *t, const agent_rule *rule, const char *key) {
  char name[SLUICE_NAME_MAX + 1];
  int n = snprintf(name, sizeof name, "[%s]%s", rule->name, key);
  if (n < 0 || (size_t)n > SLUICE_NAME_MAX) return NULL;
  unsigned h = hash_of(name, rule);
  agent_key_sem *ks = find(t, rule, name, h);
  if (!ks) {
    if (!make_room(t)) {
      t->stats.refused++;
      return NULL;
    }
    if (!(ks = create(t, rule, name, h))) return NULL;
  } else if (!ks->uses) {
    idle_remove(t, ks);
  }
  ks->uses++;
  return ks;
}

sluice_sem *agent_key_sem_handle(const agent_key_sem *ks) { return ks->sem; }

void agent_key_sem_put(agent_key_sem *ks) {
  if (ks && --ks->uses == 0) idle_push(ks->t, ks);
}

void agent_keys_get_stats(const agent_keys *t, agent_keys_stats *out) {
  memset(out, 0, sizeof *out);
  if (!t) return;
  *out = t->stats;
  sluice_client_health health;
  sluice_client_get_health(t->client, &health);
  out->connected = health.command_up == 1;
}

void agent_keys_free(agent_keys *t) {
  if (!t) return;
  for (unsigned b = 0; t->bucket && b < t->nbuckets; b++)
    while (t->bucket[b]) destroy(t->bucket[b]);
  if (t->sweep) event_free(t->sweep);
  free(t->bucket);
  free(t);
}
