/* The client's metrics (sluice_client_get_metrics), counted by the engine
 * and the connection events. */
#include <string.h>

#include "core/client.h"

static void latency_of(const sluice__hist *h, sluice_latency *out) {
  out->count = h->count;
  out->p50_us = sluice__hist_quantile(h, 0.50);
  out->p99_us = sluice__hist_quantile(h, 0.99);
  out->max_us = h->max;
}

void sluice__latency_of(const sluice__hist *h, sluice_latency *out) { latency_of(h, out); }

static const char *step_name(unsigned k) {
  return k < SLUICE__LUA_COUNT ? sluice__lua_all[k]->name : "command";
}

const sluice__hist *sluice__client_step_hist(const sluice_client *c, const char *step) {
  for (unsigned k = 0; k <= SLUICE__LUA_COUNT; k++)
    if (strcmp(step_name(k), step) == 0) return &c->m.latency[k];
  return NULL;
}

const sluice__guard_home *sluice__client_objects(const sluice_client *c) { return &c->home; }

void sluice_client_get_metrics(const sluice_client *c, sluice_client_metrics *out) {
  if (!out) return;
  memset(out, 0, sizeof *out);
  if (!c) return;
  out->evals = c->m.evals;
  out->commands = c->m.commands;
  memcpy(out->by_status, c->m.by_status, sizeof out->by_status);
  out->reconnects = c->stats.reconnects;
  out->connect_failures = c->m.connect_failures;
  out->disconnects = c->m.disconnects;
  out->noscript_reloads = c->stats.noscript_reloads;
  out->queued_connecting = c->m.queued_connecting;
  out->in_flight = c->stats.ops_in_flight;
  out->releases_abandoned = c->stats.releases_abandoned;
  for (size_t i = 0; sluice__caps[i]; i++) /* the caps that report their count */
    if (sluice__caps[i]->metric)
      *(unsigned *)(void *)((char *)out + sluice__caps[i]->metric) = c->used[i];
  sluice__record_metrics(c, out);
  if (!sluice__topo_up(c->topo)) out->waiting_connect = sluice__engine_waiting_connect(c);
  for (unsigned k = 0; k <= SLUICE__LUA_COUNT && out->nkinds < SLUICE_METRICS_MAX_KINDS; k++) {
    if (!c->m.ops[k]) continue;
    sluice_op_metrics *m = &out->kinds[out->nkinds++];
    m->name = step_name(k);
    m->ops = c->m.ops[k];
    m->errors = c->m.errors[k];
    latency_of(&c->m.latency[k], &m->latency);
  }
}
