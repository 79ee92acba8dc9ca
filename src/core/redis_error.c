/* See redis_error.h. */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/redis_error.h"

int sluice__refused_by_acl(const char *err) {
  return strncmp(err, "NOPERM", 6) == 0 || strstr(err, "can't run this command") ||
         strstr(err, "no permissions to run");
}

int sluice__transient_error(const char *err) {
  static const char *const words[] = {"LOADING",    "BUSY",     "TRYAGAIN",  "CLUSTERDOWN",
                                      "MASTERDOWN", "READONLY", "UNBLOCKED", "NOREPLICAS",
                                      "MISCONF",    "OOM"};
  for (size_t i = 0; i < sizeof words / sizeof words[0]; i++) {
    size_t n = strlen(words[i]);
    if (strncmp(err, words[i], n) == 0 && (err[n] == ' ' || err[n] == '\0')) return 1;
  }
  return 0;
}

int sluice__not_served_here(const char *err) {
  /* 5.0 on: "... attempted to access a non local key in a cluster node",
   * "... while the cluster is down"; later versions add the last two. */
  static const char *const words[] = {"non local key", "cluster is down", "slot not served",
                                      "rehashing of the slot"};
  for (size_t i = 0; i < sizeof words / sizeof words[0]; i++)
    if (strstr(err, words[i])) return 1;
  return 0;
}

/* The command Redis names: "... the 'zadd' command ...". */
static int named_command(const char *err, char *cmd, size_t size) {
  const char *q = strstr(err, "'"), *end = q ? strstr(q + 1, "' command") : NULL;
  if (!q || !end || end == q + 1 || (size_t)(end - q - 1) >= size) return 0;
  snprintf(cmd, size, "%.*s", (int)(end - q - 1), q + 1);
  return 1;
}

/* Appends "'cmd'" (lower case; " or " between) to out unless there. */
static void add_command(char *out, size_t size, const char *cmd, size_t len) {
  char q[64];
  if (len + 3 > sizeof q) return;
  q[0] = '\'';
  for (size_t i = 0; i < len; i++) q[i + 1] = (char)tolower((unsigned char)cmd[i]);
  q[len + 1] = '\'';
  q[len + 2] = '\0';
  size_t used = strlen(out);
  if (strstr(out, q) || used + len + 8 >= size) return;
  snprintf(out + used, size - used, "%s%s", used ? " or " : "", q);
}

/* Every literal command in text[0..end) (end NULL: all of it) after
 * opener, as in "call('ZADD'" or "call_in_slices('HSET'", added to out. */
static void literal_commands(const char *text, const char *end, const char *opener, char *out,
                             size_t size) {
  size_t olen = strlen(opener);
  for (const char *p = text; (p = strstr(p, opener)) != NULL && (!end || p < end); p++) {
    size_t len = strspn(p + olen, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz|");
    if (len > 0 && p[olen + len] == '\'') add_command(out, size, p + olen, len);
  }
}

/* The commands the script may have been running at line n of its body
 * (Redis names the line, not the call), quoted, " or " between: those the
 * line calls (redis.call('ZADD', ...), rcall('X'...)); for a line calling
 * a command given to its function ("local function f(cmd, ...)"), those
 * the function's callers give it. */
static int commands_on_line(const sluice__script *s, long n, char *out, size_t size) {
  const char *line = s->body;
  for (long i = 1; i < n && line; i++)
    if ((line = strchr(line, '\n')) != NULL) line++;
  if (!line) return 0;
  out[0] = '\0';
  literal_commands(line, strchr(line, '\n'), "call('", out, size);
  if (out[0]) return 1;
  const char *fn = NULL;
  for (const char *p = s->body; (p = strstr(p, "local function ")) != NULL && p < line; p++) fn = p;
  if (!fn) return 0;
  char opener[80];
  size_t len = strcspn(fn + 15, "( ");
  if (len + 3 > sizeof opener) return 0;
  snprintf(opener, sizeof opener, "%.*s('", (int)len, fn + 15);
  literal_commands(s->body, NULL, opener, out, size);
  return out[0] != '\0';
}

/* The command a refusal is about, quoted: named in the text, or on the
 * script's line Redis points at ("on @user_script:266."). */
static int refused_command(const sluice__script *s, const char *err, char *cmd, size_t size) {
  if (named_command(err, cmd + 1, size - 2)) {
    cmd[0] = '\'';
    strcat(cmd, "'");
    return 1;
  }
  const char *at = strstr(err, "@user_script:");
  return s && at && commands_on_line(s, strtol(at + 13, NULL, 10), cmd, size);
}

void sluice__error_text(char *out, size_t size, const sluice__script *script, const char *command,
                        const char *err) {
  char cmd[96];
  if (!sluice__refused_by_acl(err)) {
    snprintf(out, size, "Redis: %s", err);
  } else if (!script) {
    snprintf(out, size, "Redis: NOPERM: this ACL user may not run '%s' (%s)", command, err);
  } else if (refused_command(script, err, cmd, sizeof cmd)) {
    snprintf(out, size,
             "Redis: NOPERM: sluice step %s needs command %s, which this ACL user may not "
             "run (%s)",
             script->name, cmd, err);
  } else {
    /* The keys: the user's key patterns do not cover the prefix. */
    snprintf(out, size,
             "Redis: NOPERM: sluice step %s was refused; are its keys outside this "
             "ACL user's key patterns? (%s)",
             script->name, err);
  }
}
