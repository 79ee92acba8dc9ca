/* `sluice top`: the duration format its sections share, and for
 * --prometheus a frame's state collected, then written in the Prometheus
 * text format (cli_top_prom.c). */
#ifndef SLUICE_CLI_TOP_H
#define SLUICE_CLI_TOP_H

#include <stdio.h>
#include <sluice/sluice.h>

/* ms as "250ms", "12.5s", "3.0m"; "-" when negative (none). */
void top_fmt_ms(char *buf, size_t size, int64_t ms);

typedef struct top_prom top_prom;

/* NULL on OOM. */
top_prom *top_prom_new(void);
void top_prom_free(top_prom *p);
/* One object read by the frame (name is copied, escaped). */
void top_prom_sem(top_prom *p, const char *name, const sluice_sem_info *info);
void top_prom_dq(top_prom *p, const char *name, const sluice_dq_info *info, unsigned next_priority);
/* The repeating schedules of the queue top_prom_dq added last: how many,
 * and how long until the earliest occurrence queued (ms; -1: none). */
void top_prom_dq_schedules(top_prom *p, size_t count, int64_t next_in_ms);
/* The gauges, family by family, then client's own exposition. 0 or
 * SLUICE_ENOMEM (nothing written then). */
int top_prom_write(const top_prom *p, const sluice_client *client, FILE *out);

#endif
