/* `sluice top --prometheus`: a frame's state collected, then written in
 * the Prometheus text format (cli_top_prom.c). */
#ifndef SLUICE_CLI_TOP_H
#define SLUICE_CLI_TOP_H

#include <stdio.h>
#include <sluice/sluice.h>

typedef struct top_prom top_prom;

/* NULL on OOM. */
top_prom *top_prom_new(void);
void top_prom_free(top_prom *p);
/* One object read by the frame (name is copied, escaped). */
void top_prom_sem(top_prom *p, const char *name, const sluice_sem_info *info);
void top_prom_dq(top_prom *p, const char *name, const sluice_dq_info *info);
/* The gauges, family by family, then client's own exposition. 0 or
 * SLUICE_ENOMEM (nothing written then). */
int top_prom_write(const top_prom *p, const sluice_client *client, FILE *out);

#endif
