/* redis://, rediss://, redis+sentinel://, redis+cluster:// and unix:// URL
 * parsing. Percent-escapes are decoded
 * in the user and password parts so passwords may hold ':' or '@', and in
 * query values (file paths). */
#include <ctype.h>
#include <stddef.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <sluice/client.h>

#include "net/tls.h"
#include "net/url.h"

/* sluice_client_new has no client to hang a failure's text on when it
 * refuses its options, so the text waits here for
 * sluice_client_last_error(NULL); per thread, as sluice is used from the
 * loop's thread. */
static _Thread_local char endpoint_err[256];

const char *sluice__endpoint_error(void) { return endpoint_err; }

void sluice__endpoint_set_error(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(endpoint_err, sizeof endpoint_err, fmt, ap);
  va_end(ap);
}

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
  for (int i = 0; i < ep->nsentinels; i++) free(ep->sentinel_hosts[i]);
  for (int i = 0; i < ep->nseeds; i++) free(ep->seed_hosts[i]);
  free(ep->seed_hosts);
  free(ep->seed_ports);
  free(ep->sentinel_hosts);
  free(ep->sentinel_ports);
  free(ep->master_name);
  free(ep->sentinel_username);
  free(ep->sentinel_password);
  free(ep->host);
  free(ep->unix_path);
  free(ep->username);
  free(ep->password);
  free(ep->tls_ca_file);
  free(ep->tls_ca_dir);
  free(ep->tls_cert_file);
  free(ep->tls_key_file);
  free(ep->tls_server_name);
  sluice__tls_free_ctx(ep->tls_ctx);
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

/* One "key=value" of a redis:// or rediss:// query. */
static int parse_param(const char *kv, size_t len, sluice__endpoint *ep) {
  const char *eq = memchr(kv, '=', len);
  size_t klen = eq ? (size_t)(eq - kv) : len;
  char **dst = NULL;
  static const struct { const char *key; size_t off; } fields[] = {
    {"ca", offsetof(sluice__endpoint, tls_ca_file)},
    {"ca_dir", offsetof(sluice__endpoint, tls_ca_dir)},
    {"cert", offsetof(sluice__endpoint, tls_cert_file)},
    {"key", offsetof(sluice__endpoint, tls_key_file)},
    {"sni", offsetof(sluice__endpoint, tls_server_name)},
  };
  if (len == 0) return SLUICE_OK; /* "?a=1&&b=2" */
  if (ep->master_name) { /* redis+sentinel:// takes only the sentinels' credentials */
    char **sdst = klen == 17 && memcmp(kv, "sentinel_password", 17) == 0   ? &ep->sentinel_password
                  : klen == 17 && memcmp(kv, "sentinel_username", 17) == 0 ? &ep->sentinel_username
                                                                           : NULL;
    if (!sdst || !eq) {
      sluice__endpoint_set_error("unknown URL parameter '%.*s' (redis+sentinel:// knows "
                                 "sentinel_username, sentinel_password)",
                                 (int)(klen > 40 ? 40 : klen), kv);
      return SLUICE_EINVAL;
    }
    free(*sdst);
    *sdst = dup_decoded(eq + 1, (size_t)(kv + len - eq - 1));
    return *sdst ? SLUICE_OK : SLUICE_ENOMEM;
  }
  int known = klen == 6 && memcmp(kv, "verify", 6) == 0;
  for (size_t i = 0; i < sizeof fields / sizeof fields[0] && !known && !dst; i++)
    if (strlen(fields[i].key) == klen && memcmp(kv, fields[i].key, klen) == 0)
      dst = (char **)((char *)ep + fields[i].off);
  if (!known && !dst) {
    sluice__endpoint_set_error("unknown URL parameter '%.*s' (known: ca, ca_dir, cert, key, "
                               "sni, verify)", (int)(klen > 40 ? 40 : klen), kv);
    return SLUICE_EINVAL;
  }
  if (!ep->tls) {
    sluice__endpoint_set_error("URL parameter '%.*s' is for TLS: use a rediss:// URL",
                               (int)klen, kv);
    return SLUICE_EINVAL;
  }
  if (!eq || eq + 1 == kv + len) {
    sluice__endpoint_set_error("URL parameter '%.*s' needs a value", (int)klen, kv);
    return SLUICE_EINVAL;
  }
  const char *v = eq + 1;
  size_t vlen = (size_t)(kv + len - v);
  if (known) { /* verify */
    if (vlen == 1 && (*v == '0' || *v == '1')) {
      /* -1 records an explicit "verify", which options cannot override. */
      ep->tls_skip_verify = *v == '0' ? 1 : -1;
      return SLUICE_OK;
    }
    sluice__endpoint_set_error("URL parameter 'verify' takes 0 or 1");
    return SLUICE_EINVAL;
  }
  free(*dst);
  *dst = dup_decoded(v, vlen);
  return *dst ? SLUICE_OK : SLUICE_ENOMEM;
}

static int parse_query(const char *q, sluice__endpoint *ep) {
  while (*q) {
    const char *amp = strchr(q, '&');
    size_t len = amp ? (size_t)(amp - q) : strlen(q);
    int rc = parse_param(q, len, ep);
    if (rc) return rc;
    q += len + (amp ? 1 : 0);
  }
  return SLUICE_OK;
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
  /* The query starts at the first '?' after the user part ('@' inside a
   * query value must be written %40). */
  const char *query = strchr(hostpart, '?');
  size_t restlen = query ? (size_t)(query - hostpart) : strlen(hostpart);
  const char *slash = memchr(hostpart, '/', restlen);
  size_t hplen = slash ? (size_t)(slash - hostpart) : restlen;
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
  if (slash && slash + 1 < hostpart + restlen) {
    rc = parse_int(slash + 1, (size_t)(hostpart + restlen - slash - 1), 0, 1 << 20, &ep->db);
    if (rc) return rc;
  }
  return query ? parse_query(query + 1, ep) : SLUICE_OK;
}

/* "host:port[,host:port...]" of s[0..len) into a list of addresses (the
 * sentinels, or a cluster's seed nodes). */
static int parse_hostlist(const char *s, size_t len, char ***hosts_out, int **ports_out,
                          int *count) {
  int n = 1;
  for (size_t i = 0; i < len; i++) n += s[i] == ',';
  if (n > 64) return SLUICE_EINVAL;
  char **hosts = *hosts_out = calloc((size_t)n, sizeof *hosts);
  int *ports = *ports_out = calloc((size_t)n, sizeof *ports);
  if (!hosts || !ports) return SLUICE_ENOMEM;
  while (*count < n) {
    const char *comma = memchr(s, ',', len);
    size_t one = comma ? (size_t)(comma - s) : len;
    const char *colon = NULL;
    for (size_t i = one; i > 0; i--)
      if (s[i - 1] == ':') { colon = s + i - 1; break; }
    if (!colon || colon == s) return SLUICE_EINVAL; /* each needs host and port */
    int port;
    if (parse_int(colon + 1, (size_t)(s + one - colon - 1), 1, 65535, &port)) return SLUICE_EINVAL;
    const char *h = s, *hend = colon;
    if (*h == '[' && hend[-1] == ']') h++, hend--; /* [::1]:26379 */
    if (hend == h) return SLUICE_EINVAL;
    char *host = dup_decoded(h, (size_t)(hend - h));
    if (!host) return SLUICE_ENOMEM;
    hosts[*count] = host;
    ports[(*count)++] = port;
    if (!comma) break;
    len -= one + 1;
    s = comma + 1;
  }
  return *count == n ? SLUICE_OK : SLUICE_EINVAL;
}

static int parse_sentinels(const char *s, size_t len, sluice__endpoint *ep) {
  return parse_hostlist(s, len, &ep->sentinel_hosts, &ep->sentinel_ports, &ep->nsentinels);
}

/* "[[user]:password@]" at the start of rest[0..restlen) into ep; returns
 * where the hosts start, or NULL on OOM. */
static const char *parse_userinfo(const char *rest, size_t restlen, sluice__endpoint *ep) {
  const char *at = NULL;
  for (size_t i = restlen; i > 0; i--)
    if (rest[i - 1] == '@') { at = rest + i - 1; break; }
  if (!at) return rest;
  const char *colon = memchr(rest, ':', (size_t)(at - rest));
  if (colon) {
    if (colon > rest && !(ep->username = dup_decoded(rest, (size_t)(colon - rest)))) return NULL;
    if (!(ep->password = dup_decoded(colon + 1, (size_t)(at - colon - 1)))) return NULL;
  } else if (at > rest && !(ep->password = dup_decoded(rest, (size_t)(at - rest)))) {
    return NULL;
  }
  return at + 1;
}

/* The parts every multi-host URL starts with: "[[user]:password@]HOSTS
 * [/...][?query]"; credentials go into ep. */
typedef struct url_parts {
  const char *query;  /* after '?', or NULL */
  const char *hosts;  /* after the credentials */
  const char *end;    /* of the part before the query */
  const char *slash;  /* the first '/' after hosts, or NULL */
} url_parts;

static int split_url(const char *rest, sluice__endpoint *ep, url_parts *u) {
  u->query = strchr(rest, '?');
  size_t restlen = u->query ? (size_t)(u->query - rest) : strlen(rest);
  if (!(u->hosts = parse_userinfo(rest, restlen, ep))) return -1;
  u->end = rest + restlen;
  u->slash = memchr(u->hosts, '/', (size_t)(u->end - u->hosts));
  return 0;
}

/* "[[user]:password@]host:port[,host:port...][/][?query]": seed nodes of a
 * cluster, which has only database 0. */
static int parse_cluster(const char *rest, sluice__endpoint *ep) {
  url_parts u;
  if (split_url(rest, ep, &u) != 0) return SLUICE_ENOMEM;
  const char *query = u.query, *hosts = u.hosts, *end = u.end, *slash = u.slash;
  if (slash && !(slash + 1 == end || (slash + 2 == end && slash[1] == '0'))) {
    sluice__endpoint_set_error("a Redis Cluster has only database 0: nothing may follow the "
                               "seed nodes but \"/\" or \"/0\"");
    return SLUICE_EINVAL;
  }
  size_t hlen = (size_t)((slash ? slash : end) - hosts);
  if (hlen == 0 || parse_hostlist(hosts, hlen, &ep->seed_hosts, &ep->seed_ports, &ep->nseeds)) {
    sluice__endpoint_set_error("redis+cluster:// needs seed nodes as host:port[,host:port...]");
    return SLUICE_EINVAL;
  }
  ep->cluster = 1;
  return query ? parse_query(query + 1, ep) : SLUICE_OK;
}

/* "[[user]:password@]sentinels/NAME[/db][?query]". */
static int parse_sentinel(const char *rest, sluice__endpoint *ep) {
  url_parts u;
  if (split_url(rest, ep, &u) != 0) return SLUICE_ENOMEM;
  const char *query = u.query, *hosts = u.hosts, *end = u.end, *slash = u.slash;
  if (!slash || slash == hosts) {
    sluice__endpoint_set_error("redis+sentinel:// needs host:port[,host:port...]/MASTER_NAME");
    return SLUICE_EINVAL;
  }
  int rc = parse_sentinels(hosts, (size_t)(slash - hosts), ep);
  if (rc) return rc;
  const char *name = slash + 1;
  const char *slash2 = memchr(name, '/', (size_t)(end - name));
  size_t nlen = slash2 ? (size_t)(slash2 - name) : (size_t)(end - name);
  if (nlen == 0 || nlen > 256) {
    sluice__endpoint_set_error("redis+sentinel:// needs the master's name after the sentinels");
    return SLUICE_EINVAL;
  }
  if (!(ep->master_name = dup_decoded(name, nlen))) return SLUICE_ENOMEM;
  if (slash2 && slash2 + 1 < end &&
      parse_int(slash2 + 1, (size_t)(end - slash2 - 1), 0, 1 << 20, &ep->db))
    return SLUICE_EINVAL;
  return query ? parse_query(query + 1, ep) : SLUICE_OK;
}

int sluice__parse_url(const char *url, sluice__endpoint *ep) {
  int rc;
  memset(ep, 0, sizeof *ep);
  endpoint_err[0] = '\0';
  if (!url || !*url) {
    rc = SLUICE_EINVAL;
  } else if (strncmp(url, "redis://", 8) == 0) {
    rc = parse_redis(url + 8, ep);
  } else if (strncmp(url, "rediss://", 9) == 0) {
    ep->tls = 1;
    rc = parse_redis(url + 9, ep);
  } else if (strncmp(url, "redis+cluster://", 16) == 0) {
    rc = parse_cluster(url + 16, ep);
  } else if (strncmp(url, "rediss+cluster://", 17) == 0) {
    ep->tls = 1;
    rc = parse_cluster(url + 17, ep);
  } else if (strncmp(url, "redis+sentinel://", 17) == 0) {
    rc = parse_sentinel(url + 17, ep);
  } else if (strncmp(url, "unix://", 7) == 0) {
    rc = parse_unix(url + 7, ep);
  } else if (strncmp(url, "unix:", 5) == 0) {
    rc = parse_unix(url + 5, ep);
  } else if (url[0] == '/') {
    rc = parse_unix(url, ep);
  } else {
    rc = SLUICE_EINVAL;
  }
  if (rc) {
    sluice__endpoint_clear(ep);
    if (rc == SLUICE_EINVAL && !endpoint_err[0])
      sluice__endpoint_set_error("invalid Redis URL: expected redis://[[user]:password@]host"
                                 "[:port][/db][?query], rediss://..., redis+sentinel://..., "
                                 "redis+cluster://... or unix:///path[?db=N]");
  }
  return rc;
}

int sluice__endpoint_sentinels(sluice__endpoint *ep, const char *master_name, const char *list,
                               const char *username, const char *password) {
  endpoint_err[0] = '\0';
  if (!list || !*list || !*master_name || strlen(master_name) > 256 ||
      parse_sentinels(list, strlen(list), ep) != SLUICE_OK) {
    sluice__endpoint_set_error("sentinels must be \"host:port[,host:port...]\" with a master name");
    return SLUICE_EINVAL;
  }
  free(ep->host);
  ep->host = NULL; /* the sentinels will say */
  ep->port = 0;
  if (!(ep->master_name = strdup(master_name)) ||
      (username && !(ep->sentinel_username = strdup(username))) ||
      (password && !(ep->sentinel_password = strdup(password))))
    return SLUICE_ENOMEM;
  return SLUICE_OK;
}

int sluice__endpoint_cluster(sluice__endpoint *ep, const char *seeds) {
  endpoint_err[0] = '\0';
  if (!*seeds ||
      parse_hostlist(seeds, strlen(seeds), &ep->seed_hosts, &ep->seed_ports, &ep->nseeds)) {
    sluice__endpoint_set_error("cluster_seeds must be \"host:port[,host:port...]\"");
    return SLUICE_EINVAL;
  }
  if (ep->db) {
    sluice__endpoint_set_error("a Redis Cluster has only database 0");
    return SLUICE_EINVAL;
  }
  ep->cluster = 1;
  return SLUICE_OK;
}

static int copy_opt(char **dst, const char *src) {
  if (*dst || !src) return SLUICE_OK; /* the URL's value wins */
  *dst = strdup(src);
  return *dst ? SLUICE_OK : SLUICE_ENOMEM;
}

int sluice__endpoint_finish(sluice__endpoint *ep, const sluice_client_options *o) {
  int rc = SLUICE_OK;
  endpoint_err[0] = '\0';
  if (o->tls) ep->tls = 1;
  if (!ep->tls) return SLUICE_OK; /* TLS fields of the options are ignored */
  if (ep->tls_skip_verify == 0 && o->tls_skip_verify) ep->tls_skip_verify = 1;
  ep->tls_skip_verify = ep->tls_skip_verify > 0;
  if (copy_opt(&ep->tls_ca_file, o->tls_ca_file) || copy_opt(&ep->tls_ca_dir, o->tls_ca_dir) ||
      copy_opt(&ep->tls_cert_file, o->tls_cert_file) ||
      copy_opt(&ep->tls_key_file, o->tls_key_file) ||
      copy_opt(&ep->tls_server_name, o->tls_server_name)) {
    rc = SLUICE_ENOMEM;
  } else if (ep->unix_path) {
    sluice__endpoint_set_error("TLS needs a TCP connection (host and port), not a unix socket");
    rc = SLUICE_EINVAL;
  } else if (!ep->tls_cert_file != !ep->tls_key_file) {
    sluice__endpoint_set_error("a TLS client certificate needs its private key, and a key its "
                               "certificate");
    rc = SLUICE_EINVAL;
  } else {
    rc = sluice__tls_prepare(ep);
  }
  if (rc) sluice__endpoint_clear(ep);
  return rc;
}
