/* Permits of concurrency rules held for HAProxy's requests, by id: taken when
 * a request's NOTIFY allowed it, given back when its response's NOTIFY
 * names them (the message sluice-release), or at the latest when the lease
 * ends (a stream that ended without a response, a HAProxy that vanished):
 * the lease is not renewed, so Redis frees it then too. */
#include <stdlib.h>
#include <string.h>

#include <event2/event.h>

#include "agent.h"

#define BUCKETS 4096

typedef struct held {
  struct held *next; /* in its bucket */
  agent_permits *t;
  sluice_permit *permit;
  agent_rules *rules;   /* a reference: the semaphore lives as long */
  agent_key_sem *keyed; /* a use of the keyed semaphore it came from, or NULL */
  struct event *lease_end;
  char id[AGENT_PERMIT_ID_MAX];
} held;

struct agent_permits {
  struct event_base *base;
  held *bucket[BUCKETS];
  unsigned count, max;
};

static unsigned hash(const char *id) {
  unsigned h = 2166136261u;
  for (; *id; id++) h = (h ^ (unsigned char)*id) * 16777619u;
  return h % BUCKETS;
}

agent_permits *agent_permits_new(struct event_base *base, unsigned max) {
  agent_permits *t = calloc(1, sizeof *t);
  if (t) {
    t->base = base;
    t->max = max;
  }
  return t;
}

/* Unlink h and release its permit in Redis (harmless once expired). */
static void drop(held *h) {
  held **pp = &h->t->bucket[hash(h->id)];
  while (*pp != h) pp = &(*pp)->next;
  *pp = h->next;
  h->t->count--;
  sluice_permit_release(h->permit, NULL, NULL);
  agent_key_sem_put(h->keyed); /* after the release: it goes out even if freed */
  event_free(h->lease_end);
  agent_rules_unref(h->rules);
  free(h);
}

static void on_lease_end(evutil_socket_t fd, short what, void *ud) {
  (void)fd, (void)what;
  drop(ud);
}

int agent_permits_hold(agent_permits *t, agent_rules *rules, sluice_permit *permit,
                       unsigned lease_ms, agent_key_sem *keyed) {
  const char *id = sluice_permit_id(permit);
  held *h = NULL;
  if (t->count >= t->max || strlen(id) >= AGENT_PERMIT_ID_MAX || !(h = calloc(1, sizeof *h)) ||
      !(h->lease_end = evtimer_new(t->base, on_lease_end, h))) {
    free(h);
    sluice_permit_release(permit, NULL, NULL);
    agent_key_sem_put(keyed);
    return -1;
  }
  h->t = t;
  h->permit = permit;
  h->keyed = keyed;
  h->rules = rules;
  agent_rules_ref(rules);
  strcpy(h->id, id);
  unsigned b = hash(id);
  h->next = t->bucket[b];
  t->bucket[b] = h;
  t->count++;
  struct timeval tv = {lease_ms / 1000, (lease_ms % 1000) * 1000};
  evtimer_add(h->lease_end, &tv);
  return 0;
}

int agent_permits_release(agent_permits *t, const char *id) {
  for (held *h = t->bucket[hash(id)]; h; h = h->next)
    if (strcmp(h->id, id) == 0) {
      drop(h);
      return 0;
    }
  return -1;
}

unsigned agent_permits_count(const agent_permits *t) { return t ? t->count : 0; }

void agent_permits_free(agent_permits *t) {
  if (!t) return;
  for (unsigned b = 0; b < BUCKETS; b++)
    while (t->bucket[b]) drop(t->bucket[b]);
  free(t);
}
