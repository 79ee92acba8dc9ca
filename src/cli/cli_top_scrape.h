/* `sluice top --scrape URL`: each application's own counters (its record
 * of unreplicated writes, what it replayed after a failover, its local
 * queues), read from the Prometheus text it serves over HTTP, for the
 * PROCESSES section (cli_top_scrape.c). Redis cannot show them: they live
 * in each process. */
#ifndef SLUICE_CLI_TOP_SCRAPE_H
#define SLUICE_CLI_TOP_SCRAPE_H

#include <stddef.h>
#include <stdio.h>

struct event_base;

#define TOP_SCRAPE_MAX 16             /* URLs: a view of a few processes */
#define TOP_SCRAPE_BODY_MAX (1 << 20) /* bytes; a larger reply is refused */

typedef struct top_scrape top_scrape;

/* 0 when url is an http:// URL top can fetch; else prints why (the URL
 * shown without its credentials) and returns -1. */
int top_scrape_check_url(const char *url);
/* The n URLs (checked, kept by reference: they must outlive it); NULL on
 * OOM. */
top_scrape *top_scrape_new(struct event_base *base, const char *const *urls, size_t n);
void top_scrape_free(top_scrape *s);
/* Ask every URL at once; the answers arrive while the loop runs. */
void top_scrape_start(top_scrape *s, unsigned timeout_ms);
/* Run the loop until every URL answered or failed (at most about
 * timeout_ms after the start), then print the PROCESSES section. */
void top_scrape_finish(top_scrape *s, FILE *out);

#endif
