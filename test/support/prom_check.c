/* Checks of a Prometheus text exposition; see prom_check.h. */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "harness.h"
#include "prom_check.h"

#define MAX_SEEN 4096

typedef struct checker {
  const char *line; /* the line being read, for messages */
  int lineno;
  char family[256];
  char type[64];
  char *families[MAX_SEEN], *series[MAX_SEEN];
  size_t nfamilies, nseries;
  char hist_labels[2048]; /* the histogram series being read (without le) */
  double last_bucket, inf;
  int have_inf;
} checker;

static void bad(const checker *k, const char *why) {
  int n = (int)strcspn(k->line, "\n");
  th_fail(__FILE__, __LINE__, "exposition line %d: %s: '%.*s'", k->lineno, why, n > 200 ? 200 : n,
          k->line);
}

static void remember(const checker *k, char **list, size_t *n, const char *s, size_t len) {
  for (size_t i = 0; i < *n; i++)
    if (strlen(list[i]) == len && memcmp(list[i], s, len) == 0) bad(k, "seen before");
  if (*n == MAX_SEEN) bad(k, "too many to check");
  list[(*n)++] = strndup(s, len);
}

static void on_comment(checker *k, const char *p) {
  char name[256], rest[64];
  if (sscanf(p, "# HELP %255s", name) == 1) {
    remember(k, k->families, &k->nfamilies, name, strlen(name));
    snprintf(k->family, sizeof k->family, "%s", name);
    k->type[0] = '\0';
  } else if (sscanf(p, "# TYPE %255s %63s", name, rest) == 2) {
    if (strcmp(name, k->family) != 0 || k->type[0]) bad(k, "TYPE without its HELP");
    if (strcmp(rest, "counter") && strcmp(rest, "gauge") && strcmp(rest, "histogram"))
      bad(k, "unexpected type");
    snprintf(k->type, sizeof k->type, "%s", rest);
  } else {
    bad(k, "unexpected comment");
  }
}

/* End of the label set starting at p ('{'): after its '}', or NULL. */
static const char *labels_end(const char *p) {
  int quoted = 0;
  for (p++; *p && *p != '\n'; p++) {
    if (quoted && *p == '\\') {
      if (p[1] != '\\' && p[1] != '"' && p[1] != 'n') return NULL;
      p++;
    } else if (*p == '"') {
      quoted = !quoted;
    } else if (!quoted && *p == '}') {
      return p + 1;
    }
  }
  return NULL;
}

/* Histogram rules for one sample: buckets of a series never decrease and
 * end at +Inf, which _count repeats. */
static void on_hist_sample(checker *k, const char *suffix, const char *labels, size_t len,
                           double v) {
  const char *le = strstr(labels, "le=\"");
  if (strcmp(suffix, "_bucket") == 0) {
    if (!le || le >= labels + len) bad(k, "bucket without le");
    size_t base = (size_t)(le - labels);
    if (strlen(k->hist_labels) != base || strncmp(k->hist_labels, labels, base) != 0) {
      snprintf(k->hist_labels, sizeof k->hist_labels, "%.*s", (int)base, labels);
      k->last_bucket = 0;
      k->have_inf = 0;
    }
    if (v < k->last_bucket) bad(k, "bucket below the previous one");
    if (k->have_inf) bad(k, "bucket after +Inf");
    k->last_bucket = v;
    if (strncmp(le, "le=\"+Inf\"", 9) == 0) k->have_inf = 1, k->inf = v;
  } else if (strcmp(suffix, "_count") == 0) {
    if (!k->have_inf || v != k->inf) bad(k, "_count is not the +Inf bucket");
  } else if (strcmp(suffix, "_sum") != 0) {
    bad(k, "not a histogram sample");
  }
}

static void on_sample(checker *k, const char *p) {
  size_t nlen = strcspn(p, "{ \n");
  const char *after = p + nlen, *labels = "";
  size_t llen = 0;
  if (!k->type[0]) bad(k, "sample before HELP and TYPE");
  if (*after == '{') {
    const char *end = labels_end(after);
    if (!end) bad(k, "bad label set");
    labels = after + 1;
    llen = (size_t)(end - 1 - labels);
    after = end;
  }
  char *num_end;
  double v = strtod(after, &num_end);
  if (*after != ' ' || num_end == after + 1 || (*num_end && *num_end != '\n')) bad(k, "bad value");
  size_t flen = strlen(k->family);
  if (nlen < flen || strncmp(p, k->family, flen) != 0) bad(k, "sample outside its family");
  remember(k, k->series, &k->nseries, p, (size_t)(after - p));
  if (strcmp(k->type, "histogram") == 0) {
    char suffix[16];
    snprintf(suffix, sizeof suffix, "%.*s", (int)(nlen - flen), p + flen);
    on_hist_sample(k, suffix, labels, llen, v);
  } else if (nlen != flen) {
    bad(k, "sample name is not its family's");
  }
}

void prom_check_text(const char *text) {
  static checker k;
  memset(&k, 0, sizeof k);
  TH_ASSERT(text != NULL && *text);
  for (const char *p = text; *p;) {
    k.line = p;
    k.lineno++;
    if (*p == '#') on_comment(&k, p);
    else on_sample(&k, p);
    const char *nl = strchr(p, '\n');
    if (!nl) bad(&k, "no line feed at the end");
    p = nl + 1;
  }
  for (size_t i = 0; i < k.nfamilies; i++) free(k.families[i]);
  for (size_t i = 0; i < k.nseries; i++) free(k.series[i]);
}

int prom_check_promtool(const char *text) {
  if (system("command -v promtool >/dev/null 2>&1") != 0) {
    const char *ci = getenv("CI");
    if (ci && strcmp(ci, "true") == 0) th_fail(__FILE__, __LINE__, "promtool not found (CI)");
    th_note("promtool not found: not checked with it\n");
    return 0;
  }
  char dir[256], path[300];
  TH_ASSERT_EQ(th_mkdtemp(dir, sizeof dir, "prom"), 0);
  snprintf(path, sizeof path, "%s/metrics.txt", dir);
  int fd = open(path, O_WRONLY | O_CREAT | O_EXCL, 0600);
  TH_ASSERT(fd >= 0);
  size_t len = strlen(text);
  TH_ASSERT_EQ(write(fd, text, len), (long long)len);
  close(fd);
  char cmd[400], out[4096];
  snprintf(cmd, sizeof cmd, "promtool check metrics < %s 2>&1", path);
  FILE *f = popen(cmd, "r");
  TH_ASSERT(f != NULL);
  size_t n = fread(out, 1, sizeof out - 1, f);
  out[n] = '\0';
  int st = pclose(f);
  unlink(path);
  rmdir(dir);
  if (n) th_note("promtool: %s\n", out);
  TH_ASSERT_EQ(st, 0);
  return 1;
}

long long prom_value(const char *text, const char *series) {
  size_t n = strlen(series);
  for (const char *p = text; p && *p; p = strchr(p, '\n') ? strchr(p, '\n') + 1 : NULL)
    if (strncmp(p, series, n) == 0 && p[n] == ' ') return atoll(p + n + 1);
  return -1;
}
