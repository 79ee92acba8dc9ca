/* The agent's rule file. It is INI, read with inih (Debian's libinih-dev):
 * a small, stable C parser that hands over one key at a time and reports
 * the line of the first error, which is all a flat list of rules needs
 * (YAML's nesting and types would only add ways to get it wrong). */
#include <ini.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "agent.h"
#include "../cli.h"

typedef struct parse_state {
  agent_rules *rules;
  agent_rule *cur; /* the [rule NAME] being read, NULL in [agent] */
  int in_agent;    /* in the [agent] section */
  char why[256];   /* the first error's reason */
  const char *path;
} parse_state;

static int fail(parse_state *st, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int fail(parse_state *st, const char *fmt, ...) {
  if (!st->why[0]) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(st->why, sizeof st->why, fmt, ap);
    va_end(ap);
  }
  return 0; /* inih: an error on this line */
}

static int copy_text(parse_state *st, char *dst, const char *name, const char *value) {
  size_t n = strlen(value);
  if (n >= AGENT_TEXT_MAX) return fail(st, "%s is longer than %d bytes", name, AGENT_TEXT_MAX - 1);
  memcpy(dst, value, n + 1);
  return 1;
}

static int number(parse_state *st, const char *name, const char *value, uint64_t min, uint64_t max,
                  unsigned *out) {
  uint64_t v;
  if (cli_parse_u64(value, max, &v) || v < min)
    return fail(st, "%s must be a number %llu..%llu, got '%s'", name, (unsigned long long)min,
                (unsigned long long)max, cli_echo(value));
  *out = (unsigned)v;
  return 1;
}

/* "addr", "addr/24", "header:NAME", "host", "path", "method", "listener". */
static int key_part(parse_state *st, agent_key_part *p, const char *word) {
  memset(p, 0, sizeof *p);
  p->prefix_bits = -1;
  if (strncmp(word, "addr", 4) == 0 && (word[4] == 0 || word[4] == '/')) {
    p->kind = AGENT_KEY_ADDR;
    unsigned bits = 0;
    if (word[4] == '/' && !number(st, "addr's prefix", word + 5, 0, 128, &bits)) return 0;
    if (word[4] == '/') p->prefix_bits = (int)bits;
    return 1;
  }
  if (strncmp(word, "header:", 7) == 0) {
    p->kind = AGENT_KEY_HEADER;
    if (!word[7]) return fail(st, "key part 'header:' needs a header name");
    return copy_text(st, p->header, "a header name", word + 7);
  }
  static const struct {
    const char *word;
    agent_key_kind kind;
  } plain[] = {{"host", AGENT_KEY_HOST},
               {"path", AGENT_KEY_PATH},
               {"method", AGENT_KEY_METHOD},
               {"listener", AGENT_KEY_LISTENER}};
  for (size_t i = 0; i < sizeof plain / sizeof plain[0]; i++)
    if (strcmp(word, plain[i].word) == 0) {
      p->kind = plain[i].kind;
      return 1;
    }
  return fail(st,
              "unknown key part '%s' (addr, addr/BITS, header:NAME, host, path, method, "
              "listener)",
              cli_echo(word));
}

/* key = part [+ part ...] */
static int parse_key(parse_state *st, agent_rule *r, const char *value) {
  char buf[512];
  if (strlen(value) >= sizeof buf) return fail(st, "key is too long");
  strcpy(buf, value);
  r->nkey = 0;
  for (char *save = NULL, *w = strtok_r(buf, "+ \t", &save); w; w = strtok_r(NULL, "+ \t", &save)) {
    if (r->nkey == AGENT_KEY_PARTS_MAX)
      return fail(st, "key has more than %d parts", AGENT_KEY_PARTS_MAX);
    if (!key_part(st, &r->key[r->nkey++], w)) return 0;
  }
  if (!r->nkey) return fail(st, "key is empty");
  return 1;
}

static int rule_field(parse_state *st, agent_rule *r, const char *name, const char *value) {
  if (strcmp(name, "listener") == 0) return copy_text(st, r->listener, name, value);
  if (strcmp(name, "host") == 0) return copy_text(st, r->host, name, value);
  if (strcmp(name, "path_prefix") == 0) return copy_text(st, r->path_prefix, name, value);
  if (strcmp(name, "method") == 0) return copy_text(st, r->method, name, value);
  if (strcmp(name, "key") == 0) return parse_key(st, r, value);
  if (strcmp(name, "algo") == 0) {
    r->concurrency = strcmp(value, "concurrency") == 0;
    if (r->concurrency) r->opts.algo = SLUICE_RL_FIXED; /* (unused: marks algo as set) */
    else if (sluice_rl_algo_parse(value, &r->opts.algo))
      return fail(st,
                  "algo must be fixed, sliding-log, sliding-counter, gcra or concurrency, "
                  "got '%s'",
                  cli_echo(value));
    return 1;
  }
  if (strcmp(name, "permits") == 0) return number(st, name, value, 1, 1000000, &r->permits);
  if (strcmp(name, "lease_ms") == 0) return number(st, name, value, 100, 86400000, &r->lease_ms);
  if (strcmp(name, "limit") == 0)
    return number(st, name, value, 1, SLUICE_RL_LIMIT_MAX, &r->opts.limit);
  if (strcmp(name, "period_ms") == 0)
    return number(st, name, value, 1, SLUICE_RL_PERIOD_MAX, &r->opts.period_ms);
  if (strcmp(name, "burst") == 0)
    return number(st, name, value, 1, SLUICE_RL_LIMIT_MAX, &r->opts.burst);
  if (strcmp(name, "cost") == 0) return number(st, name, value, 1, SLUICE_RL_LIMIT_MAX, &r->cost);
  if (strcmp(name, "timeout_ms") == 0) return number(st, name, value, 1, 60000, &r->timeout_ms);
  if (strcmp(name, "on_redis_down") == 0) {
    if (strcmp(value, "allow") == 0) r->down = AGENT_DOWN_ALLOW;
    else if (strcmp(value, "deny") == 0) r->down = AGENT_DOWN_DENY;
    else if (strcmp(value, "local") == 0) r->down = AGENT_DOWN_LOCAL;
    else return fail(st, "on_redis_down must be allow, deny or local, got '%s'", cli_echo(value));
    return 1;
  }
  return fail(st, "unknown setting '%s' in a rule", cli_echo(name));
}

static int agent_field(parse_state *st, agent_settings *s, const char *name, const char *value) {
  if (strcmp(name, "http") == 0) return copy_text(st, s->http, name, value);
  if (strcmp(name, "spop") == 0) return copy_text(st, s->spop, name, value);
  if (strcmp(name, "max_connections") == 0)
    return number(st, name, value, 1, 1000000, &s->max_connections);
  if (strcmp(name, "max_header_bytes") == 0)
    return number(st, name, value, 512, 1 << 20, &s->max_header_bytes);
  if (strcmp(name, "idle_timeout_s") == 0)
    return number(st, name, value, 1, 3600, &s->idle_timeout_s);
  if (strcmp(name, "max_keys") == 0) return number(st, name, value, 1, 100000, &s->max_keys);
  if (strcmp(name, "key_idle_s") == 0) return number(st, name, value, 1, 3600, &s->key_idle_s);
  return fail(st, "unknown setting '%s' in [agent]", cli_echo(name));
}

static agent_rule *new_rule(parse_state *st, const char *name) {
  agent_rules *rs = st->rules;
  for (int i = 0; i < rs->n; i++)
    if (strcmp(rs->rule[i].name, name) == 0) {
      fail(st, "rule '%s' is defined twice", cli_echo(name));
      return NULL;
    }
  if (rs->n == AGENT_RULES_MAX) {
    fail(st, "more than %d rules", AGENT_RULES_MAX);
    return NULL;
  }
  agent_rule *r = &rs->rule[rs->n];
  memset(r, 0, sizeof *r);
  if (!*name || strlen(name) >= AGENT_TEXT_MAX) {
    fail(st, "a rule's name must be 1..%d bytes", AGENT_TEXT_MAX - 1);
    return NULL;
  }
  strcpy(r->name, name);
  sluice_limiter_options_init(&r->opts);
  r->opts.algo = 0; /* required */
  r->cost = 1;
  r->timeout_ms = 100;
  r->lease_ms = 0; /* concurrency: default 30000, set after parsing */
  rs->n++;
  return r;
}

/* inih calls this for each name = value; section is the last [header]. */
static int on_value(void *user, const char *section, const char *name, const char *value) {
  parse_state *st = user;
  if (st->why[0]) return 0; /* report the first error only */
  if (strcmp(section, "agent") == 0) return agent_field(st, &st->rules->settings, name, value);
  if (strncmp(section, "rule ", 5) != 0)
    return fail(st, "unknown section [%s] ([agent] or [rule NAME])", cli_echo(section));
  const char *rname = section + 5;
  if (!st->cur || strcmp(st->cur->name, rname) != 0) {
    /* inih joins repeated sections; a rule's keys must be together. */
    if (!(st->cur = new_rule(st, rname))) return 0;
  }
  return rule_field(st, st->cur, name, value);
}

/* The line of "[rule NAME]" in path (for errors found after parsing). */
static int section_line(const char *path, const char *name) {
  FILE *f = fopen(path, "r");
  if (!f) return 0;
  char want[AGENT_TEXT_MAX + 16], line[512];
  snprintf(want, sizeof want, "[rule %s]", name);
  int n = 0, found = 0;
  while (!found && fgets(line, sizeof line, f)) {
    n++;
    char *s = line;
    while (*s == ' ' || *s == '\t') s++;
    found = strncmp(s, want, strlen(want)) == 0;
  }
  fclose(f);
  return found ? n : 0;
}

static const char *check_rule(const agent_rule *r) {
  if (!r->opts.algo) return "algo is required";
  if (r->concurrency) {
    if (!r->permits) return "permits is required with algo = concurrency";
    if (r->opts.limit || r->opts.period_ms)
      return "algo = concurrency takes permits, lease_ms and key, not limit or period_ms";
    return NULL;
  }
  if (r->permits || r->lease_ms) return "permits and lease_ms are for algo = concurrency";
  if (!r->opts.limit || !r->opts.period_ms) return "limit and period_ms are required";
  if (!r->nkey) return "key is required";
  unsigned cap = r->opts.algo == SLUICE_RL_GCRA && r->opts.burst ? r->opts.burst : r->opts.limit;
  if (r->cost > cap) return "cost is above the capacity (limit, or burst for gcra)";
  if (r->opts.algo == SLUICE_RL_SLIDING_LOG &&
      (uint64_t)r->cost * SLUICE_RL_LOG_ENTRIES_MAX < r->opts.limit)
    return "cost is below limit / 100000: a sliding log keeps at most 100000 entries";
  return NULL;
}

agent_rules *agent_rules_load(const char *path, char *why, size_t why_size) {
  parse_state st = {0};
  st.path = path;
  if (!(st.rules = calloc(1, sizeof *st.rules))) {
    snprintf(why, why_size, "%s: out of memory", path);
    return NULL;
  }
  st.rules->refs = 1;
  st.rules->settings.max_header_bytes = 8192;
  st.rules->settings.idle_timeout_s = 60;
  st.rules->settings.max_connections = 1024;
  st.rules->settings.max_keys = 10000;
  st.rules->settings.key_idle_s = 60;
  int line = ini_parse(path, on_value, &st);
  if (line < 0) {
    snprintf(why, why_size, "%s: cannot read the file", path);
  } else if (line > 0) {
    snprintf(why, why_size, "%s:%d: %s", path, line, st.why[0] ? st.why : "not a valid line");
  } else if (!st.rules->settings.http[0] && !st.rules->settings.spop[0]) {
    snprintf(why, why_size, "%s: [agent] needs http = HOST:PORT or spop = HOST:PORT", path);
    line = -1;
  } else {
    for (int i = 0; i < st.rules->n && !line; i++) {
      agent_rule *r = &st.rules->rule[i];
      r->line = section_line(path, r->name);
      const char *bad = check_rule(r);
      if (bad) {
        snprintf(why, why_size, "%s:%d: rule '%s': %s", path, r->line, cli_echo(r->name), bad);
        line = -1;
      }
      r->opts.on_redis_down = r->down == AGENT_DOWN_ALLOW   ? SLUICE_RL_FAIL_OPEN
                              : r->down == AGENT_DOWN_LOCAL ? SLUICE_RL_FAIL_LOCAL
                                                            : SLUICE_RL_FAIL_CLOSED;
      r->opts.op_timeout_ms = r->timeout_ms;
      if (r->concurrency && !r->lease_ms) r->lease_ms = 30000;
    }
  }
  if (line) {
    free(st.rules);
    return NULL;
  }
  return st.rules;
}

int agent_rules_start(agent_rules *rules, sluice_client *client, char *why, size_t why_size) {
  for (int i = 0; i < rules->n; i++) {
    agent_rule *r = &rules->rule[i];
    sluice_sem_options o;
    int rc = 0;
    if (!r->concurrency) {
      rc = sluice_limiter_new(client, r->name, &r->opts, &r->lim);
    } else if (!r->nkey) {
      agent_rule_sem_options(r, &o);
      rc = sluice_sem_new(client, r->name, &o, &r->sem);
    } /* else one semaphore per key value, made on demand (agent_keys.c) */
    if (rc) {
      snprintf(why, why_size, "rule '%s': %s", cli_echo(r->name), sluice_strerror(rc));
      return -1;
    }
  }
  return 0;
}

void agent_rules_keep_counts(agent_rules *next, const agent_rules *old) {
  for (int i = 0; i < next->n; i++)
    for (int j = 0; j < old->n; j++)
      if (strcmp(next->rule[i].name, old->rule[j].name) == 0)
        next->rule[i].counts = old->rule[j].counts;
}

void agent_rules_ref(agent_rules *rules) { rules->refs++; }

void agent_rules_unref(agent_rules *rules) {
  if (!rules || --rules->refs > 0) return;
  for (int i = 0; i < rules->n; i++) {
    sluice_limiter_free(rules->rule[i].lim);
    sluice_sem_free(rules->rule[i].sem);
  }
  free(rules);
}
