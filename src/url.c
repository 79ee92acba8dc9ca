/* redis:// and unix:// URL parsing. Percent-escapes are decoded in the user
 * and password parts so passwords may hold ':' or '@'. */
#include <ctype.h>
#include <stdlib.h>
#include <string.h>

#include <sluice/sluice.h>

#include "url.h"

static int hexval(int ch) {
  if (ch >= '0' && ch <= '9') return ch - '0';
  ch = tolower(ch);
  if (ch >= 'a' && ch <= 'f') return ch - 'a' + 10;
  return -1;
}

/* Decoded copy of s[0..len). */
static char *dup_decoded(const char *s, size_t len) {
  char *out = malloc(len + 1);
  size_t o = 0;
  if (!out) return NULL;
  for (size_t i = 0; i < len; i++) {
    if (s[i] == '%' && i + 2 < len && hexval((unsigned char)s[i + 1]) >= 0 &&
        hexval((unsigned char)s[i + 2]) >= 0) {
      out[o++] = (char)(hexval((unsigned char)s[i + 1]) * 16 + hexval((unsigned char)s[i + 2]));
      i += 2;
    } else {
      out[o++] = s[i];
    }
  }
  out[o] = '\0';
  return out;
}

static int parse_int(const char *s, size_t len, int min, int max, int *out) {
  long v = 0;
  if (len == 0 || len > 9) return SLUICE_EINVAL;
  for (size_t i = 0; i < len; i++) {
    if (!isdigit((unsigned char)s[i])) return SLUICE_EINVAL;
    v = v * 10 + (s[i] - '0');
  }
  if (v < min || v > max) return SLUICE_EINVAL;
  *out = (int)v;
  return SLUICE_OK;
}

void sluice__endpoint_clear(sluice__endpoint *ep) {
  free(ep->host);
  free(ep->unix_path);
  free(ep->username);
  free(ep->password);
  memset(ep, 0, sizeof *ep);
}

static int parse_unix(const char *path, sluice__endpoint *ep) {
  const char *q = strchr(path, '?');
  size_t plen = q ? (size_t)(q - path) : strlen(path);
  if (plen == 0 || path[0] != '/') return SLUICE_EINVAL;
  if (q) {
    if (strncmp(q, "?db=", 4) != 0) return SLUICE_EINVAL;
    if (parse_int(q + 4, strlen(q + 4), 0, 1 << 20, &ep->db) != 0) return SLUICE_EINVAL;
  }
  ep->unix_path = dup_decoded(path, plen);
  return ep->unix_path ? SLUICE_OK : SLUICE_ENOMEM;
}

static int parse_redis(const char *rest, sluice__endpoint *ep) {
  const char *at = strrchr(rest, '@');
  const char *hostpart = rest;
  int rc;
  if (at) {
    const char *colon = memchr(rest, ':', (size_t)(at - rest));
    if (colon) {
      if (colon > rest && !(ep->username = dup_decoded(rest, (size_t)(colon - rest))))
        return SLUICE_ENOMEM;
      if (!(ep->password = dup_decoded(colon + 1, (size_t)(at - colon - 1))))
        return SLUICE_ENOMEM;
    } else if (at > rest) {
      /* "redis://secret@host" is commonly meant as a password. */
      if (!(ep->password = dup_decoded(rest, (size_t)(at - rest)))) return SLUICE_ENOMEM;
    }
    hostpart = at + 1;
  }
  const char *slash = strchr(hostpart, '/');
  size_t hplen = slash ? (size_t)(slash - hostpart) : strlen(hostpart);
  const char *hend = hostpart + hplen;
  const char *portsep = NULL;
  const char *hstart = hostpart;
  if (hplen > 0 && hostpart[0] == '[') { /* [::1]:6379 */
    const char *close = memchr(hostpart, ']', hplen);
    if (!close) return SLUICE_EINVAL;
    hstart = hostpart + 1;
    portsep = (close + 1 < hend && close[1] == ':') ? close + 1 : NULL;
    hend = close;
  } else {
    portsep = memchr(hostpart, ':', hplen);
    if (portsep) hend = portsep;
  }
  if (hend == hstart) {
    ep->host = strdup("127.0.0.1");
  } else {
    ep->host = dup_decoded(hstart, (size_t)(hend - hstart));
  }
  if (!ep->host) return SLUICE_ENOMEM;
  ep->port = 6379;
  if (portsep) {
    const char *pend = hostpart + hplen;
    rc = parse_int(portsep + 1, (size_t)(pend - portsep - 1), 1, 65535, &ep->port);
    if (rc) return rc;
  }
  if (slash && slash[1] != '\0') {
    rc = parse_int(slash + 1, strlen(slash + 1), 0, 1 << 20, &ep->db);
    if (rc) return rc;
  }
  return SLUICE_OK;
}

int sluice__parse_url(const char *url, sluice__endpoint *ep) {
  int rc;
  memset(ep, 0, sizeof *ep);
  if (!url || !*url) return SLUICE_EINVAL;
  if (strncmp(url, "redis://", 8) == 0)
    rc = parse_redis(url + 8, ep);
  else if (strncmp(url, "unix://", 7) == 0)
    rc = parse_unix(url + 7, ep);
  else if (strncmp(url, "unix:", 5) == 0)
    rc = parse_unix(url + 5, ep);
  else if (url[0] == '/')
    rc = parse_unix(url, ep);
  else
    rc = SLUICE_EINVAL;
  if (rc) sluice__endpoint_clear(ep);
  return rc;
}
