/* redis://, rediss://, redis+sentinel://, redis+cluster:// and unix:// URL
 * parsing. Percent-escapes are decoded in every part, so passwords may hold
 * ':' or '@' and query values (file paths) anything. Strict: a URL that
 * could mean two things is refused with the reason, never guessed at (a
 * parameter given twice, junk after "[v6]", an empty port, a control
 * byte, raw or escaped). */
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

static int is_control(unsigned char ch) { return ch < 0x20 || ch == 0x7f; }

/* The decoded copy of s[0..len) into *out; what names the part for errors
 * ("the password"). A control byte written as an escape is refused: %00
 * would cut the text short where the URL goes on, %0a split a log line. */
static int dup_part(const char *what, const char *s, size_t len, char **out) {
  char *d = malloc(len + 1);
  size_t o = 0;
  *out = NULL;
  if (!d) return SLUICE_ENOMEM;
  for (size_t i = 0; i < len; i++) {
    if (s[i] == '%' && i + 2 < len && hexval((unsigned char)s[i + 1]) >= 0 &&
        hexval((unsigned char)s[i + 2]) >= 0) {
      d[o++] = (char)(hexval((unsigned char)s[i + 1]) * 16 + hexval((unsigned char)s[i + 2]));
      i += 2;
      if (is_control((unsigned char)d[o - 1])) {
        sluice__endpoint_set_error("%%%02X in %s: control characters are refused in URLs",
                                   (unsigned char)d[o - 1], what);
        free(d);
        return SLUICE_EINVAL;
      }
    } else {
      d[o++] = s[i];
    }
  }
  d[o] = '\0';
  *out = d;
  return SLUICE_OK;
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

/* The port after a ':' (s[0..len)). */
static int parse_port(const char *s, size_t len, int *port) {
  if (len == 0) {
    sluice__endpoint_set_error("empty port after ':' (a port is 1..65535)");
    return SLUICE_EINVAL;
  }
  if (parse_int(s, len, 1, 65535, port) == SLUICE_OK) return SLUICE_OK;
  sluice__endpoint_set_error("port '%.*s' is not a number in 1..65535", (int)(len > 20 ? 20 : len),
                             s);
  return SLUICE_EINVAL;
}

#define DB_MAX (1 << 20)

static int parse_db(const char *s, size_t len, int *db) {
  if (parse_int(s, len, 0, DB_MAX, db) == SLUICE_OK) return SLUICE_OK;
  sluice__endpoint_set_error("database '%.*s' is not a number in 0..%d", (int)(len > 20 ? 20 : len),
                             s, DB_MAX);
  return SLUICE_EINVAL;
}

/* "host", "host:port", "[v6]" or "[v6]:port" of s[0..len) into *host and
 * *port. need_port: a list entry, where both are required; else an empty
 * host is loopback and no port 6379. */
static int parse_hostport(const char *s, size_t len, int need_port, char **host, int *port) {
  const char *end = s + len, *hstart = s, *hend, *portsep;
  if (len > 0 && s[0] == '[') {
    const char *close = memchr(s, ']', len);
    if (!close) {
      sluice__endpoint_set_error("'[' opens an IPv6 address that no ']' closes");
      return SLUICE_EINVAL;
    }
    if (close + 1 < end && close[1] != ':') {
      sluice__endpoint_set_error(
          "junk after the IPv6 address '%.*s': only ':PORT' may follow "
          "']'",
          (int)(close + 1 - s > 48 ? 48 : close + 1 - s), s);
      return SLUICE_EINVAL;
    }
    hstart = s + 1;
    hend = close;
    portsep = close + 1 < end ? close + 1 : NULL;
  } else {
    portsep = memchr(s, ':', len);
    hend = portsep ? portsep : end;
    if (memchr(s, '[', (size_t)(hend - s)) || memchr(s, ']', (size_t)(hend - s)) ||
        (portsep && memchr(portsep + 1, ':', (size_t)(end - portsep - 1)))) {
      sluice__endpoint_set_error(
          "a host may not hold '[', ']' or ':' (an IPv6 address is "
          "written in brackets: [::1]:6379)");
      return SLUICE_EINVAL;
    }
  }
  if (need_port && (hend == hstart || !portsep)) {
    sluice__endpoint_set_error("'%.*s' must be host:port", (int)(len > 48 ? 48 : len), s);
    return SLUICE_EINVAL;
  }
  if (portsep) {
    int rc = parse_port(portsep + 1, (size_t)(end - portsep - 1), port);
    if (rc) return rc;
  } else {
    *port = 6379;
  }
  if (hend == hstart) return (*host = strdup("127.0.0.1")) ? SLUICE_OK : SLUICE_ENOMEM;
  return dup_part("the host", hstart, (size_t)(hend - hstart), host);
}

static void wipe(char *s) {
  if (s) explicit_bzero(s, strlen(s));
  free(s);
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
  wipe(ep->sentinel_password);
  free(ep->host);
  free(ep->unix_path);
  free(ep->username);
  wipe(ep->password);
  free(ep->tls_ca_file);
  free(ep->tls_ca_dir);
  free(ep->tls_cert_file);
  free(ep->tls_key_file);
  free(ep->tls_server_name);
  sluice__tls_free_ctx(ep->tls_ctx);
  memset(ep, 0, sizeof *ep);
}

/* The query parameters, and which URLs take them. */
enum { FOR_TLS, FOR_SENTINEL, FOR_UNIX };
#define FIELD(f) offsetof(sluice__endpoint, f)
static const struct url_param {
  const char *key;
  int url_kind;
  size_t off; /* of the char * it fills; 0: verify or db, parsed here */
} url_params[] = {
    {"ca", FOR_TLS, FIELD(tls_ca_file)},
    {"ca_dir", FOR_TLS, FIELD(tls_ca_dir)},
    {"cert", FOR_TLS, FIELD(tls_cert_file)},
    {"key", FOR_TLS, FIELD(tls_key_file)},
    {"sni", FOR_TLS, FIELD(tls_server_name)},
    {"verify", FOR_TLS, 0},
    {"sentinel_username", FOR_SENTINEL, FIELD(sentinel_username)},
    {"sentinel_password", FOR_SENTINEL, FIELD(sentinel_password)},
    {"db", FOR_UNIX, 0},
};
#undef FIELD
#define NPARAMS (sizeof url_params / sizeof url_params[0])

static const char *const known_params[] = {
    [FOR_TLS] = "known: ca, ca_dir, cert, key, sni, verify",
    [FOR_SENTINEL] = "redis+sentinel:// knows sentinel_username, sentinel_password",
    [FOR_UNIX] = "unix:// knows db",
};

static const struct url_param *find_param(const char *k, size_t klen, int kind) {
  for (size_t i = 0; i < NPARAMS; i++)
    if (url_params[i].url_kind == kind && strlen(url_params[i].key) == klen &&
        memcmp(url_params[i].key, k, klen) == 0)
      return &url_params[i];
  return NULL;
}

/* The value v[0..vlen) of p (known, given once) into ep. */
static int param_value(const struct url_param *p, const char *v, size_t vlen,
                       sluice__endpoint *ep) {
  if (p->off) {
    char **dst = (char **)((char *)ep + p->off);
    char what[48];
    snprintf(what, sizeof what, "URL parameter '%s'", p->key);
    return dup_part(what, v, vlen, dst);
  }
  if (p->url_kind == FOR_UNIX) return parse_db(v, vlen, &ep->db);
  if (vlen == 1 && (*v == '0' || *v == '1')) {
    /* -1 records an explicit "verify", which options cannot override. */
    ep->tls_skip_verify = *v == '0' ? 1 : -1;
    return SLUICE_OK;
  }
  sluice__endpoint_set_error("URL parameter 'verify' takes 0 or 1");
  return SLUICE_EINVAL;
}

/* One "key=value" of a query; *seen marks the parameters given so far. */
static int parse_param(const char *kv, size_t len, int kind, unsigned *seen, sluice__endpoint *ep) {
  const char *eq = memchr(kv, '=', len);
  size_t klen = eq ? (size_t)(eq - kv) : len;
  if (len == 0) return SLUICE_OK; /* "?a=1&&b=2" */
  const struct url_param *p = find_param(kv, klen, kind);
  if (!p) {
    sluice__endpoint_set_error("unknown URL parameter '%.*s' (%s)", (int)(klen > 40 ? 40 : klen),
                               kv, known_params[kind]);
    return SLUICE_EINVAL;
  }
  if (kind == FOR_TLS && !ep->tls) {
    sluice__endpoint_set_error("URL parameter '%s' is for TLS: use a rediss:// URL", p->key);
    return SLUICE_EINVAL;
  }
  unsigned bit = 1u << (p - url_params);
  if (*seen & bit) {
    /* Which one was meant? "?verify=1&verify=0" must not quietly turn
     * verification off. */
    sluice__endpoint_set_error("URL parameter '%s' is given twice", p->key);
    return SLUICE_EINVAL;
  }
  *seen |= bit;
  if (!eq || eq + 1 == kv + len) {
    sluice__endpoint_set_error("URL parameter '%s' needs a value", p->key);
    return SLUICE_EINVAL;
  }
  return param_value(p, eq + 1, (size_t)(kv + len - eq - 1), ep);
}

static int parse_query(const char *q, int kind, sluice__endpoint *ep) {
  unsigned seen = 0;
  while (*q) {
    const char *amp = strchr(q, '&');
    size_t len = amp ? (size_t)(amp - q) : strlen(q);
    int rc = parse_param(q, len, kind, &seen, ep);
    if (rc) return rc;
    q += len + (amp ? 1 : 0);
  }
  return SLUICE_OK;
}

static int parse_unix(const char *path, sluice__endpoint *ep) {
  const char *q = strchr(path, '?');
  size_t plen = q ? (size_t)(q - path) : strlen(path);
  if (plen == 0 || path[0] != '/') {
    sluice__endpoint_set_error("a unix socket URL needs an absolute path: unix:///path[?db=N]");
    return SLUICE_EINVAL;
  }
  int rc = dup_part("the socket path", path, plen, &ep->unix_path);
  return rc || !q ? rc : parse_query(q + 1, FOR_UNIX, ep);
}

/* "[user][:password]" of s[0..len) ("secret" alone is a password). */
static int parse_credentials(const char *s, size_t len, sluice__endpoint *ep) {
  const char *colon = memchr(s, ':', len);
  int rc = SLUICE_OK;
  if (colon) {
    if (colon > s) rc = dup_part("the user name", s, (size_t)(colon - s), &ep->username);
    if (!rc) rc = dup_part("the password", colon + 1, (size_t)(s + len - colon - 1), &ep->password);
  } else if (len > 0) {
    /* "redis://secret@host" is commonly meant as a password. */
    rc = dup_part("the password", s, len, &ep->password);
  }
  return rc;
}

static int parse_redis(const char *rest, sluice__endpoint *ep) {
  const char *at = strrchr(rest, '@');
  const char *hostpart = rest;
  int rc;
  if (at) {
    if ((rc = parse_credentials(rest, (size_t)(at - rest), ep))) return rc;
    hostpart = at + 1;
  }
  /* The query starts at the first '?' after the user part ('@' inside a
   * query value must be written %40). */
  const char *query = strchr(hostpart, '?');
  size_t restlen = query ? (size_t)(query - hostpart) : strlen(hostpart);
  const char *slash = memchr(hostpart, '/', restlen);
  size_t hplen = slash ? (size_t)(slash - hostpart) : restlen;
  if ((rc = parse_hostport(hostpart, hplen, 0, &ep->host, &ep->port))) return rc;
  if (slash && slash + 1 < hostpart + restlen &&
      (rc = parse_db(slash + 1, (size_t)(hostpart + restlen - slash - 1), &ep->db)))
    return rc;
  return query ? parse_query(query + 1, FOR_TLS, ep) : SLUICE_OK;
}

#define HOSTLIST_MAX 64

/* "host:port[,host:port...]" of s[0..len) into a list of addresses (the
 * sentinels, or a cluster's seed nodes). */
static int parse_hostlist(const char *s, size_t len, char ***hosts_out, int **ports_out,
                          int *count) {
  int n = 1;
  for (size_t i = 0; i < len; i++) n += s[i] == ',';
  if (n > HOSTLIST_MAX) {
    sluice__endpoint_set_error("more than %d addresses in a list", HOSTLIST_MAX);
    return SLUICE_EINVAL;
  }
  char **hosts = *hosts_out = calloc((size_t)n, sizeof *hosts);
  int *ports = *ports_out = calloc((size_t)n, sizeof *ports);
  if (!hosts || !ports) return SLUICE_ENOMEM;
  while (*count < n) {
    const char *comma = memchr(s, ',', len);
    size_t one = comma ? (size_t)(comma - s) : len;
    int rc = parse_hostport(s, one, 1, &hosts[*count], &ports[*count]);
    if (rc) return rc;
    (*count)++;
    if (!comma) break;
    len -= one + 1;
    s = comma + 1;
  }
  return SLUICE_OK;
}

static int parse_sentinels(const char *s, size_t len, sluice__endpoint *ep) {
  return parse_hostlist(s, len, &ep->sentinel_hosts, &ep->sentinel_ports, &ep->nsentinels);
}

/* "[[user]:password@]" at the start of rest[0..restlen) into ep; *hosts
 * is where the hosts start. */
static int parse_userinfo(const char *rest, size_t restlen, sluice__endpoint *ep,
                          const char **hosts) {
  const char *at = NULL;
  for (size_t i = restlen; i > 0; i--)
    if (rest[i - 1] == '@') {
      at = rest + i - 1;
      break;
    }
  *hosts = at ? at + 1 : rest;
  return at ? parse_credentials(rest, (size_t)(at - rest), ep) : SLUICE_OK;
}

/* What follows the scheme of a URL naming several hosts, cut at its
 * first '/' and its '?'. */
typedef struct host_list_url {
  const char *hosts; /* after the credentials */
  const char *slash; /* the first '/' after hosts, or NULL */
  const char *end;   /* where the query starts, or the string ends */
  const char *query; /* the '?', or NULL */
} host_list_url;

/* "[[user]:password@]hosts[/path][?query]": the credentials into ep, the
 * rest cut into *u. */
static int split_host_list_url(const char *rest, sluice__endpoint *ep, host_list_url *u) {
  u->query = strchr(rest, '?');
  size_t restlen = u->query ? (size_t)(u->query - rest) : strlen(rest);
  int rc = parse_userinfo(rest, restlen, ep, &u->hosts);
  u->end = rest + restlen;
  u->slash = memchr(u->hosts, '/', (size_t)(u->end - u->hosts));
  return rc;
}

/* "[[user]:password@]host:port[,host:port...][/][?query]": seed nodes of a
 * cluster, which has only database 0. */
static int parse_cluster(const char *rest, sluice__endpoint *ep) {
  host_list_url u;
  int rc = split_host_list_url(rest, ep, &u);
  if (rc) return rc;
  if (u.slash && !(u.slash + 1 == u.end || (u.slash + 2 == u.end && u.slash[1] == '0'))) {
    sluice__endpoint_set_error(
        "a Redis Cluster has only database 0: nothing may follow the "
        "seed nodes but \"/\" or \"/0\"");
    return SLUICE_EINVAL;
  }
  size_t hlen = (size_t)((u.slash ? u.slash : u.end) - u.hosts);
  if (hlen == 0) {
    sluice__endpoint_set_error("redis+cluster:// needs seed nodes as host:port[,host:port...]");
    return SLUICE_EINVAL;
  }
  if ((rc = parse_hostlist(u.hosts, hlen, &ep->seed_hosts, &ep->seed_ports, &ep->nseeds)))
    return rc;
  ep->cluster = 1;
  return u.query ? parse_query(u.query + 1, FOR_TLS, ep) : SLUICE_OK;
}

/* "[[user]:password@]sentinels/NAME[/db][?query]". */
static int parse_sentinel(const char *rest, sluice__endpoint *ep) {
  host_list_url u;
  int rc = split_host_list_url(rest, ep, &u);
  if (rc) return rc;
  if (!u.slash || u.slash == u.hosts) {
    sluice__endpoint_set_error("redis+sentinel:// needs host:port[,host:port...]/MASTER_NAME");
    return SLUICE_EINVAL;
  }
  if ((rc = parse_sentinels(u.hosts, (size_t)(u.slash - u.hosts), ep))) return rc;
  const char *name = u.slash + 1;
  const char *slash2 = memchr(name, '/', (size_t)(u.end - name));
  size_t nlen = slash2 ? (size_t)(slash2 - name) : (size_t)(u.end - name);
  if (nlen == 0 || nlen > 256) {
    sluice__endpoint_set_error(
        "redis+sentinel:// needs the master's name (1..256 bytes) after "
        "the sentinels");
    return SLUICE_EINVAL;
  }
  if ((rc = dup_part("the master name", name, nlen, &ep->master_name))) return rc;
  if (slash2 && slash2 + 1 < u.end &&
      (rc = parse_db(slash2 + 1, (size_t)(u.end - slash2 - 1), &ep->db)))
    return rc;
  return u.query ? parse_query(u.query + 1, FOR_SENTINEL, ep) : SLUICE_OK;
}

/* A raw control byte anywhere: refused (a NUL cannot be in a C string). */
static int check_bytes(const char *url) {
  for (const char *p = url; *p; p++) {
    if (!is_control((unsigned char)*p)) continue;
    sluice__endpoint_set_error("control character 0x%02X at byte %zu of the URL: refused",
                               (unsigned char)*p, (size_t)(p - url));
    return SLUICE_EINVAL;
  }
  return SLUICE_OK;
}

static int parse_scheme(const char *url, sluice__endpoint *ep) {
  static const struct {
    const char *scheme;
    int tls;
    int (*parse)(const char *, sluice__endpoint *);
  } schemes[] = {
      {"redis://", 0, parse_redis},
      {"rediss://", 1, parse_redis},
      {"redis+cluster://", 0, parse_cluster},
      {"rediss+cluster://", 1, parse_cluster},
      {"redis+sentinel://", 0, parse_sentinel},
      {"unix://", 0, parse_unix},
      {"unix:", 0, parse_unix},
  };
  for (size_t i = 0; i < sizeof schemes / sizeof schemes[0]; i++) {
    size_t n = strlen(schemes[i].scheme);
    if (strncmp(url, schemes[i].scheme, n) != 0) continue;
    ep->tls = schemes[i].tls;
    return schemes[i].parse(url + n, ep);
  }
  return url[0] == '/' ? parse_unix(url, ep) : SLUICE_EINVAL;
}

int sluice__parse_url(const char *url, sluice__endpoint *ep) {
  memset(ep, 0, sizeof *ep);
  endpoint_err[0] = '\0';
  int rc = !url || !*url ? SLUICE_EINVAL : check_bytes(url);
  if (!rc) rc = parse_scheme(url, ep);
  if (rc) {
    sluice__endpoint_clear(ep);
    if (rc == SLUICE_EINVAL && !endpoint_err[0])
      sluice__endpoint_set_error(
          "invalid Redis URL: expected redis://[[user]:password@]host"
          "[:port][/db][?query], rediss://..., redis+sentinel://..., "
          "redis+cluster://... or unix:///path[?db=N]");
  }
  return rc;
}

/* An option's address list: its own words for what is wrong with it. */
static int parse_option_list(const char *option, const char *list, char ***hosts, int **ports,
                             int *count) {
  int rc = *list ? parse_hostlist(list, strlen(list), hosts, ports, count) : SLUICE_EINVAL;
  if (rc == SLUICE_EINVAL) {
    char why[sizeof endpoint_err];
    snprintf(why, sizeof why, "%s", *list ? endpoint_err : "it is empty");
    sluice__endpoint_set_error("%s must be \"host:port[,host:port...]\": %s", option, why);
  }
  return rc;
}

int sluice__endpoint_sentinels(sluice__endpoint *ep, const char *master_name, const char *list,
                               const char *username, const char *password) {
  endpoint_err[0] = '\0';
  if (!*master_name || strlen(master_name) > 256) {
    sluice__endpoint_set_error("master_name must be 1..256 bytes");
    return SLUICE_EINVAL;
  }
  int rc = parse_option_list("sentinels", list ? list : "", &ep->sentinel_hosts,
                             &ep->sentinel_ports, &ep->nsentinels);
  if (rc) return rc;
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
  int rc = parse_option_list("cluster_seeds", seeds, &ep->seed_hosts, &ep->seed_ports, &ep->nseeds);
  if (rc) return rc;
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

/* "redis://user:@host" names the user and leaves the password to the file. */
static int password_from_file(sluice__endpoint *ep, const char *path) {
  if (ep->password && *ep->password) {
    sluice__endpoint_set_error(
        "a password is given twice: in password_file and in the URL or "
        "the options");
    return SLUICE_EINVAL;
  }
  free(ep->password);
  ep->password = NULL;
  return sluice__read_secret_file(path, &ep->password);
}

int sluice__endpoint_finish(sluice__endpoint *ep, const sluice_client_options *o) {
  int rc = SLUICE_OK;
  endpoint_err[0] = '\0';
  if (o->password_file && (rc = password_from_file(ep, o->password_file)) != SLUICE_OK) {
    sluice__endpoint_clear(ep);
    return rc;
  }
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
    sluice__endpoint_set_error(
        "a TLS client certificate needs its private key, and a key its "
        "certificate");
    rc = SLUICE_EINVAL;
  } else {
    rc = sluice__tls_prepare(ep);
  }
  if (rc) sluice__endpoint_clear(ep);
  return rc;
}
