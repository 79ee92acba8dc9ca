/* Prometheus text format pieces; see promtext.h. */
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/promtext.h"

/* Room for n more bytes and the NUL. */
static int reserve(sluice__text *t, size_t n) {
  if (t->oom) return 0;
  if (n < t->cap - t->len) return 1;
  size_t cap = t->cap ? t->cap : 4096;
  while (cap - t->len <= n) {
    if (cap > SIZE_MAX / 2) return t->oom = 1, 0;
    cap *= 2;
  }
  char *s = realloc(t->s, cap);
  if (!s) return t->oom = 1, 0;
  t->s = s;
  t->cap = cap;
  return 1;
}

void sluice__text_put(sluice__text *t, const char *s, size_t n) {
  if (!reserve(t, n)) return;
  memcpy(t->s + t->len, s, n);
  t->len += n;
  t->s[t->len] = '\0';
}

void sluice__text_puts(sluice__text *t, const char *s) { sluice__text_put(t, s, strlen(s)); }

void sluice__text_printf(sluice__text *t, const char *fmt, ...) {
  char small[256];
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(small, sizeof small, fmt, ap);
  va_end(ap);
  if (n < 0) {
    t->oom = 1;
    return;
  }
  if ((size_t)n < sizeof small) {
    sluice__text_put(t, small, (size_t)n);
    return;
  }
  if (!reserve(t, (size_t)n)) return;
  va_start(ap, fmt);
  vsnprintf(t->s + t->len, (size_t)n + 1, fmt, ap);
  va_end(ap);
  t->len += (size_t)n;
}

void sluice__text_reset(sluice__text *t) {
  free(t->s);
  memset(t, 0, sizeof *t);
}

/* Length of the well-formed UTF-8 sequence starting at p (Unicode's table
 * 3-7: no overlong forms, no surrogates, nothing past U+10FFFF), 0 if
 * none. Stops at the first byte that does not fit, so never reads past a
 * NUL. */
static size_t utf8_seq(const unsigned char *p) {
  unsigned char lo = 0x80, hi = 0xBF;
  size_t n;
  if (p[0] < 0x80) return 1;
  if (p[0] < 0xC2) return 0;
  if (p[0] < 0xE0) {
    n = 2;
  } else if (p[0] < 0xF0) {
    n = 3;
    if (p[0] == 0xE0) lo = 0xA0;
    if (p[0] == 0xED) hi = 0x9F;
  } else if (p[0] < 0xF5) {
    n = 4;
    if (p[0] == 0xF0) lo = 0x90;
    if (p[0] == 0xF4) hi = 0x8F;
  } else {
    return 0;
  }
  if (p[1] < lo || p[1] > hi) return 0;
  for (size_t i = 2; i < n; i++)
    if ((p[i] & 0xC0) != 0x80) return 0;
  return n;
}

size_t sluice__prom_escape(const char *value, char *buf, size_t size) {
  const unsigned char *p = (const unsigned char *)value;
  size_t len = 0;
  while (*p) {
    size_t n = utf8_seq(p);
    const char *out = (const char *)p;
    size_t nout = n;
    if (n == 0) out = "\xEF\xBF\xBD", nout = 3, n = 1;
    else if (*p == '\\') out = "\\\\", nout = 2;
    else if (*p == '"') out = "\\\"", nout = 2;
    else if (*p == '\n') out = "\\n", nout = 2;
    for (size_t i = 0; i < nout; i++, len++)
      if (len + 1 < size) buf[len] = out[i];
    p += n;
  }
  if (size) buf[len < size ? len : size - 1] = '\0';
  return len;
}

void sluice__prom_label_value(sluice__text *t, const char *value) {
  size_t n = sluice__prom_escape(value, NULL, 0);
  if (!reserve(t, n)) return;
  sluice__prom_escape(value, t->s + t->len, n + 1);
  t->len += n;
}

void sluice__prom_seconds(char out[SLUICE__PROM_SECONDS_MAX], uint64_t us) {
  snprintf(out, SLUICE__PROM_SECONDS_MAX, "%" PRIu64 ".%06" PRIu64, us / 1000000, us % 1000000);
}
