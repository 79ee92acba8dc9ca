/* Secrets in Redis URLs: found, masked, scrubbed, removed; see cli_url.h. */
#include <stdlib.h>
#include <string.h>

#include "cli_url.h"

static int query_bound(const char *url) {
  static const char *const schemes[] = {"redis+cluster://", "rediss+cluster://",
                                        "redis+sentinel://"};
  for (size_t i = 0; i < sizeof schemes / sizeof schemes[0]; i++)
    if (strncmp(url, schemes[i], strlen(schemes[i])) == 0) return 1;
  return 0;
}

/* Where the user part of url starts (after "://"). A URL the parser would
 * refuse (unknown scheme) is taken from its first ':' on, as its text may
 * still be echoed in an error. */
static const char *after_scheme(const char *url) {
  const char *p = strstr(url, "://");
  if (p) return p + 3;
  p = strchr(url, ':');
  return p ? p + 1 : url;
}

/* Where the library's parser ends the user part: at the last '@' of the
 * whole URL for redis:// and rediss:// (and what it would refuse), at the
 * last '@' before the query for the cluster and sentinel schemes. Sets
 * [*start, *at) and returns 1 when there is one. */
static int user_part(const char *url, size_t *start, size_t *at) {
  const char *p = after_scheme(url), *end = url + strlen(url), *a = NULL;
  if (strncmp(url, "unix:", 5) == 0 || url[0] == '/') return 0;
  if (query_bound(url) && strchr(p, '?')) end = strchr(p, '?');
  for (const char *q = p; q < end; q++)
    if (*q == '@') a = q;
  if (!a) return 0;
  *start = (size_t)(p - url);
  *at = (size_t)(a - url);
  return 1;
}

/* Where the parser starts the query: at the first '?' after the user part
 * (redis://), or the first '?' at all; strlen(url) when there is none. */
static size_t query_start(const char *url) {
  size_t start, at;
  const char *from = after_scheme(url);
  if (!query_bound(url) && user_part(url, &start, &at)) from = url + at + 1;
  const char *q = strchr(from, '?');
  return q ? (size_t)(q - url) : strlen(url);
}

/* The parameter key=... starting right after a '?' or '&' at url[i]. */
static int param_at(const char *url, size_t i, const char *key) {
  return i > 0 && (url[i - 1] == '?' || url[i - 1] == '&') &&
         strncmp(url + i, key, strlen(key)) == 0;
}

/* Marks secret[i] for every byte of url that is part of a secret. */
static void find_secrets(const char *url, unsigned char *secret) {
  size_t start, at;
  if (user_part(url, &start, &at)) {
    const char *colon = memchr(url + start, ':', at - start);
    size_t from = colon ? (size_t)(colon - url) + 1 : start; /* "secret@" alone: a password */
    memset(secret + from, 1, at - from);
  }
  for (size_t i = query_start(url); url[i]; i++) {
    if (!param_at(url, i, "sentinel_password=")) continue;
    size_t v = i + strlen("sentinel_password=");
    memset(secret + v, 1, strcspn(url + v, "&"));
  }
}

char *cli_url_masked(const char *url) {
  size_t len = strlen(url), o = 0;
  unsigned char *secret = calloc(len + 1, 1);
  char *out = malloc(len * 3 + 1); /* each byte may become "***" */
  if (!secret || !out) {
    free(secret);
    free(out);
    return NULL;
  }
  find_secrets(url, secret);
  for (size_t i = 0; i < len; i++) {
    if (!secret[i]) out[o++] = url[i];
    else if (i == 0 || !secret[i - 1]) memcpy(out + o, "***", 3), o += 3;
  }
  out[o] = '\0';
  free(secret);
  return out;
}

void cli_url_scrub(char *url) {
  size_t len = strlen(url);
  unsigned char *secret = calloc(len + 1, 1);
  if (!secret) { /* no memory to find them: hide it all rather than none */
    memset(url, '*', len);
    return;
  }
  find_secrets(url, secret);
  for (size_t i = 0; i < len; i++)
    if (secret[i]) url[i] = '*';
  free(secret);
}

char *cli_url_without_credentials(const char *url) {
  static const char *const keys[] = {"sentinel_username=", "sentinel_password="};
  size_t len = strlen(url), start, at, o = 0;
  unsigned char *drop = calloc(len + 1, 1);
  char *out = malloc(len + 1);
  if (!drop || !out) {
    free(drop);
    free(out);
    return NULL;
  }
  if (user_part(url, &start, &at)) memset(drop + start, 1, at + 1 - start);
  /* The parser takes "?&x=1" and a trailing '&': the separators may stay. */
  for (size_t i = query_start(url); url[i]; i++)
    for (size_t k = 0; k < sizeof keys / sizeof keys[0]; k++)
      if (param_at(url, i, keys[k])) memset(drop + i, 1, strcspn(url + i, "&"));
  for (size_t i = 0; i < len; i++)
    if (!drop[i]) out[o++] = url[i];
  out[o] = '\0';
  free(drop);
  return out;
}
