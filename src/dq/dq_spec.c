/*
 * Schedule specs: "every DURATION [from UNIX_MS]" and a subset of Vixie
 * cron (five fields: lists, ranges, steps, names of months and days;
 * @yearly, @monthly, @weekly, @daily, @hourly), read into the canonical
 * text of dq_spec.h. Written here rather than taken from a library: Debian
 * 12 packages no C cron library (docs/delay-queue.md says which were
 * looked at), and the next occurrence is computed by the scripts anyway,
 * on Redis's clock, so only parsing belongs in C.
 */
#include <ctype.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include <sluice/dq.h>

#include "dq/dq_spec.h"

typedef struct field_def {
  int lo, hi;
  const char *const *names; /* names[i] is value lo_name + i, or NULL */
  int lo_name;
} field_def;

static const char *const month_names[] = {"jan", "feb", "mar", "apr", "may", "jun", "jul",
                                          "aug", "sep", "oct", "nov", "dec", NULL};
static const char *const day_names[] = {"sun", "mon", "tue", "wed", "thu", "fri", "sat", NULL};

/* Minutes, hours, days of month, months, days of week (7 is Sunday too). */
static const field_def fields[5] = {{0, 59, NULL, 0},
                                    {0, 23, NULL, 0},
                                    {1, 31, NULL, 0},
                                    {1, 12, month_names, 1},
                                    {0, 7, day_names, 0}};

/* One value of field f at *p: digits or a name; -1 if none. */
static int read_value(const char **p, const field_def *f) {
  const char *s = *p;
  if (isdigit((unsigned char)*s)) {
    int v = 0;
    while (isdigit((unsigned char)*s) && v < 1000) v = v * 10 + (*s++ - '0');
    *p = s;
    return v;
  }
  for (int i = 0; f->names && f->names[i]; i++)
    if (strncasecmp(s, f->names[i], 3) == 0 && !isalpha((unsigned char)s[3])) {
      *p = s + 3;
      return f->lo_name + i;
    }
  return -1;
}

/* Field text s (len bytes, no spaces) into bits; -1 on error. */
static int parse_field(const char *s, size_t len, const field_def *f, uint64_t *bits) {
  char buf[128];
  if (len == 0 || len >= sizeof buf) return -1;
  memcpy(buf, s, len);
  buf[len] = '\0';
  *bits = 0;
  const char *p = buf;
  for (;;) {
    int lo, hi, step = 1, range = 0;
    if (*p == '*') {
      lo = f->lo, hi = f->hi, range = 1, p++;
    } else {
      if ((lo = read_value(&p, f)) < 0) return -1;
      hi = lo;
      if (*p == '-') {
        p++;
        if ((hi = read_value(&p, f)) < 0) return -1;
        range = 1;
      }
    }
    if (*p == '/') {
      p++;
      if (!range || !isdigit((unsigned char)*p)) return -1; /* "5/10": not Vixie's */
      step = 0;
      while (isdigit((unsigned char)*p) && step < 1000) step = step * 10 + (*p++ - '0');
    }
    if (lo < f->lo || hi > f->hi || lo > hi || step < 1) return -1;
    for (int v = lo; v <= hi; v += step) *bits |= UINT64_C(1) << v;
    if (*p == '\0') return 0;
    if (*p++ != ',') return -1;
  }
}

/* Whether some allowed month has an allowed day of month (February has a
 * 29th in leap years): what a day must match when the days of week do not
 * widen it. */
static int dates_exist(uint64_t dom, uint64_t months) {
  static const int mdays[13] = {0, 31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
  for (int m = 1; m <= 12; m++)
    if (months >> m & 1)
      for (int d = 1; d <= mdays[m]; d++)
        if (dom >> d & 1) return 1;
  return 0;
}

/* Append field bits (lo..hi) as a comma list at *p. */
static char *put_list(char *p, uint64_t bits, int lo, int hi) {
  int first = 1;
  for (int v = lo; v <= hi; v++)
    if (bits >> v & 1) {
      p += sprintf(p, first ? " %d" : ",%d", v);
      first = 0;
    }
  return p;
}

/* Split s at white space into at most 5 words; their count, or -1 when
 * there are more. */
static int split_words(const char *s, const char *w[5], size_t len[5]) {
  int n = 0;
  for (;;) {
    while (isspace((unsigned char)*s)) s++;
    if (!*s) return n;
    if (n == 5) return -1;
    w[n] = s;
    len[n] = 0;
    while (s[len[n]] && !isspace((unsigned char)s[len[n]])) len[n]++;
    s += len[n++];
  }
}

/* The five fields w[0..4] into canon. */
static int parse_cron(const char *const *w, const size_t *len, char *canon) {
  uint64_t bits[5];
  int star[5];
  for (int i = 0; i < 5; i++) {
    star[i] = w[i][0] == '*';
    if (parse_field(w[i], len[i], &fields[i], &bits[i]) != 0) return SLUICE_EINVAL;
  }
  if (bits[4] >> 7 & 1) bits[4] = (bits[4] | 1) & ~(UINT64_C(1) << 7);
  /* Vixie cron: with both day fields restricted a day matches either;
   * otherwise both, so the dates alone must exist (not "0 0 30 2 *"). */
  if (!star[2] && star[4] && !dates_exist(bits[2], bits[3])) return SLUICE_EINVAL;
  char *q = canon + sprintf(canon, "c");
  for (int i = 0; i < 5; i++) q = put_list(q, bits[i], fields[i].lo, i == 4 ? 6 : fields[i].hi);
  sprintf(q, " %d %d", star[2], star[4]);
  return SLUICE_OK;
}

/* "@daily" and its kin, as the five fields they stand for. */
static int parse_macro(const char *s, size_t slen, char *canon) {
  static const struct {
    const char *name, *expr;
  } macros[] = {{"@yearly", "0 0 1 1 *"}, {"@annually", "0 0 1 1 *"}, {"@monthly", "0 0 1 * *"},
                {"@weekly", "0 0 * * 0"}, {"@daily", "0 0 * * *"},    {"@midnight", "0 0 * * *"},
                {"@hourly", "0 * * * *"}};
  for (size_t i = 0; i < sizeof macros / sizeof macros[0]; i++)
    if (strlen(macros[i].name) == slen && strncasecmp(s, macros[i].name, slen) == 0) {
      const char *w[5];
      size_t len[5];
      split_words(macros[i].expr, w, len);
      return parse_cron(w, len, canon);
    }
  return SLUICE_EINVAL;
}

/* "DURATION" (a positive integer and ms, s, m, h or d) into *ms. */
static int parse_duration(const char *s, int64_t *ms) {
  static const struct {
    const char *unit;
    int64_t ms;
  } units[] = {{"ms", 1}, {"s", 1000}, {"m", 60000}, {"h", 3600000}, {"d", 86400000}};
  int64_t v = 0;
  if (!isdigit((unsigned char)*s)) return -1;
  while (isdigit((unsigned char)*s)) {
    v = v * 10 + (*s++ - '0');
    if (v > SLUICE_DQ_TIME_MAX) return -1;
  }
  for (size_t i = 0; i < sizeof units / sizeof units[0]; i++)
    if (strcmp(s, units[i].unit) == 0) {
      if (v > SLUICE_DQ_TIME_MAX / units[i].ms) return -1;
      *ms = v * units[i].ms;
      return 0;
    }
  return -1;
}

/* "every DURATION [from UNIX_MS]" (words w[0..n-1]): at least 100 ms
 * apart, so a schedule cannot turn into a flood of script calls. */
static int parse_every(const char *const *w, const size_t *len, int n, char *canon) {
  char buf[32];
  int64_t every, at = 0;
  if (!(n == 2 || (n == 4 && len[2] == 4 && strncmp(w[2], "from", 4) == 0))) return SLUICE_EINVAL;
  if (len[1] >= sizeof buf) return SLUICE_EINVAL;
  memcpy(buf, w[1], len[1]);
  buf[len[1]] = '\0';
  if (parse_duration(buf, &every) != 0 || every < 100) return SLUICE_EINVAL;
  for (size_t i = 0; n == 4 && i < len[3]; i++) {
    if (!isdigit((unsigned char)w[3][i])) return SLUICE_EINVAL;
    at = at * 10 + (w[3][i] - '0');
    if (at > SLUICE_DQ_TIME_MAX) return SLUICE_EINVAL;
  }
  sprintf(canon, "i %lld %lld", (long long)every, (long long)at);
  return SLUICE_OK;
}

int sluice__dq_spec_parse(const char *spec, char *canon) {
  if (!spec || !canon || strnlen(spec, SLUICE__DQ_SPEC_MAX + 1) > SLUICE__DQ_SPEC_MAX)
    return SLUICE_EINVAL;
  const char *w[5];
  size_t len[5];
  int n = split_words(spec, w, len);
  if (n >= 1 && len[0] == 5 && strncmp(w[0], "every", 5) == 0) return parse_every(w, len, n, canon);
  if (n == 1) return parse_macro(w[0], len[0], canon);
  if (n != 5) return SLUICE_EINVAL;
  return parse_cron(w, len, canon);
}
