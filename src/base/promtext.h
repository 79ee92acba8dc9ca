/*
 * Writing the Prometheus text exposition format (version 0.0.4): a growing
 * buffer, label values made safe, and durations in seconds.
 *
 * The buffer remembers running out of memory, so a writer appends without
 * checking every step and looks once at the end (oom).
 */
#ifndef SLUICE_PROMTEXT_H
#define SLUICE_PROMTEXT_H

#include <stddef.h>
#include <stdint.h>

typedef struct sluice__text {
  char *s; /* NUL-terminated once anything was added; malloc'd */
  size_t len;
  size_t cap;
  int oom; /* an append failed: the text is incomplete */
} sluice__text;

void sluice__text_put(sluice__text *t, const char *s, size_t n);
void sluice__text_puts(sluice__text *t, const char *s);
void sluice__text_printf(sluice__text *t, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
/* Release the buffer and start empty. */
void sluice__text_reset(sluice__text *t);

/* A label value between its quotes: backslash, double quote and line feed
 * escaped as the format asks (\\ \" \n), and every byte that does not
 * belong to a well-formed UTF-8 sequence written as U+FFFD, since a
 * scraper refuses the whole exposition over one invalid label value. */
void sluice__prom_label_value(sluice__text *t, const char *value);
/* The same into buf (size bytes, NUL-terminated when size > 0), cut short
 * if it does not fit; returns the whole escaped length, like snprintf. */
size_t sluice__prom_escape(const char *value, char *buf, size_t size);
/* us microseconds as seconds, exactly ("0.000064", "12.500000"). */
#define SLUICE__PROM_SECONDS_MAX 32
void sluice__prom_seconds(char out[SLUICE__PROM_SECONDS_MAX], uint64_t us);

#endif
