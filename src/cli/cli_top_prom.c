/*
 * `sluice top --prometheus`: what one frame of top read from Redis, as
 * gauges in the Prometheus text format, then the tool's own client metrics
 * (sluice_client_prometheus: its connection and the latency of each step
 * it ran). The state is Redis's, the same whichever process asks, so one
 * scheduled run (a textfile collector, a cron job) covers every process
 * that shares the prefix; each process's own counters come from its
 * sluice_client_prometheus.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli_top.h"

enum { KIND_SEM, KIND_DQ, KINDS };

typedef struct row {
  char *labels; /* name="..." */
  uint64_t v[8];
} row;

struct top_prom {
  row *rows[KINDS];
  size_t n[KINDS];
  int oom;
};

/* Consecutive entries of one name are one family (one HELP and TYPE). */
static const struct family {
  int kind;
  const char *name, *help;
  const char *state; /* value of a state label, or NULL */
  int index;         /* into row.v */
  int ms;            /* the value is in ms, written as seconds */
} families[] = {
    {KIND_SEM, "sluice_sem_permits", "Permits, as last declared by an acquirer (0: unknown).", NULL,
     0, 0},
    {KIND_SEM, "sluice_sem_holders", "Permits held now.", NULL, 1, 0},
    {KIND_SEM, "sluice_sem_waiters", "Blocking acquirers queued now.", NULL, 2, 0},
    {KIND_DQ, "sluice_dq_messages",
     "Messages by state: due (not yet taken), later, in_flight (taken, not acknowledged), "
     "dead.",
     "due", 0, 0},
    {KIND_DQ, "sluice_dq_messages", NULL, "later", 1, 0},
    {KIND_DQ, "sluice_dq_messages", NULL, "in_flight", 2, 0},
    {KIND_DQ, "sluice_dq_messages", NULL, "dead", 3, 0},
    {KIND_DQ, "sluice_dq_oldest_due_seconds",
     "How long the oldest due message has waited to be taken (0: none due).", NULL, 4, 1},
    {KIND_DQ, "sluice_dq_schedules", "Repeating schedules of the queue.", NULL, 5, 0},
    {KIND_DQ, "sluice_dq_schedule_next_seconds",
     "Time until the queue's earliest scheduled occurrence (0: none, or due).", NULL, 6, 1},
    {KIND_DQ, "sluice_dq_next_priority",
     "Priority (0..9) of the message a take gets next (0 too when none is queued).", NULL, 7, 0},
};

top_prom *top_prom_new(void) { return calloc(1, sizeof(top_prom)); }

void top_prom_free(top_prom *p) {
  if (!p) return;
  for (int k = 0; k < KINDS; k++) {
    for (size_t i = 0; i < p->n[k]; i++) free(p->rows[k][i].labels);
    free(p->rows[k]);
  }
  free(p);
}

static row *add_row(top_prom *p, int kind, const char *name) {
  size_t n = sluice_prometheus_escape(name, NULL, 0);
  char *labels = malloc(n + sizeof "name=\"\"");
  row *grown = realloc(p->rows[kind], (p->n[kind] + 1) * sizeof *grown);
  if (grown) p->rows[kind] = grown;
  if (!labels || !grown) {
    free(labels);
    p->oom = 1;
    return NULL;
  }
  memcpy(labels, "name=\"", 6);
  sluice_prometheus_escape(name, labels + 6, n + 1);
  memcpy(labels + 6 + n, "\"", 2);
  row *r = &p->rows[kind][p->n[kind]++];
  memset(r, 0, sizeof *r);
  r->labels = labels;
  return r;
}

void top_prom_sem(top_prom *p, const char *name, const sluice_sem_info *info) {
  row *r = add_row(p, KIND_SEM, name);
  if (!r) return;
  r->v[0] = info->permits;
  r->v[1] = info->nholders;
  r->v[2] = info->nwaiters;
}

void top_prom_dq(top_prom *p, const char *name, const sluice_dq_info *info,
                 unsigned next_priority) {
  row *r = add_row(p, KIND_DQ, name);
  if (!r) return;
  r->v[7] = next_priority;
  r->v[0] = info->ready;
  r->v[1] = info->delayed - info->ready;
  r->v[2] = info->in_flight;
  r->v[3] = info->dead;
  /* The earliest delayed message is the oldest due one when any is due. */
  if (info->ready && info->next_due_ms >= 0 && info->now_ms > info->next_due_ms)
    r->v[4] = (uint64_t)(info->now_ms - info->next_due_ms);
}

void top_prom_dq_schedules(top_prom *p, size_t count, int64_t next_in_ms) {
  if (!p->n[KIND_DQ]) return;
  row *r = &p->rows[KIND_DQ][p->n[KIND_DQ] - 1];
  r->v[5] = count;
  r->v[6] = next_in_ms > 0 ? (uint64_t)next_in_ms : 0;
}

static void write_family(const top_prom *p, const struct family *f, FILE *out) {
  for (size_t i = 0; i < p->n[f->kind]; i++) {
    const row *r = &p->rows[f->kind][i];
    fprintf(out, "%s{%s", f->name, r->labels);
    if (f->state) fprintf(out, ",state=\"%s\"", f->state);
    uint64_t v = r->v[f->index];
    if (f->ms)
      fprintf(out, "} %llu.%03llu\n", (unsigned long long)(v / 1000),
              (unsigned long long)(v % 1000));
    else fprintf(out, "} %llu\n", (unsigned long long)v);
  }
}

int top_prom_write(const top_prom *p, const sluice_client *client, FILE *out) {
  char *text;
  size_t len;
  if (p->oom) return SLUICE_ENOMEM;
  int rc = sluice_client_prometheus(client, &text, &len);
  if (rc) return rc;
  for (size_t i = 0; i < sizeof families / sizeof families[0]; i++) {
    const struct family *f = &families[i];
    if (!p->n[f->kind]) continue;
    if (f->help) fprintf(out, "# HELP %s %s\n# TYPE %s gauge\n", f->name, f->help, f->name);
    write_family(p, f, out);
  }
  fwrite(text, 1, len, out);
  sluice_prometheus_free(text);
  return SLUICE_OK;
}
