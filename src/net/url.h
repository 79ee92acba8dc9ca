/* Parsing of redis://, rediss:// and unix:// URLs into client options. */
#ifndef SLUICE_URL_H
#define SLUICE_URL_H

struct sluice_client_options;

/* Owned copies of what a URL (and the client options) name. */
typedef struct sluice__endpoint {
  char *host;
  int port;
  char *unix_path;
  char *username;
  char *password;
  int db;
  /* TLS (rediss://, or options.tls): its settings, and the OpenSSL context
   * built from them once (sluice__tls_prepare), shared by the client's
   * connections so that certificates are read and checked only once. */
  int tls;
  int tls_skip_verify;
  char *tls_ca_file;
  char *tls_ca_dir;
  char *tls_cert_file;
  char *tls_key_file;
  char *tls_server_name;
  void *tls_ctx;
  /* redis+sentinel://: the master's name and the sentinels to ask for its
   * address; host and port above are then that address, filled in (and
   * changed on failover) by the client's sentinel link. */
  char *master_name;
  char **sentinel_hosts;
  int *sentinel_ports;
  int nsentinels;
  char *sentinel_username;
  char *sentinel_password;
  /* redis+cluster://: the seed nodes the slot map is first asked of; host
   * and port above are unused, each node has its own copy of this endpoint
   * with its address (cluster.c). */
  int cluster;
  char **seed_hosts;
  int *seed_ports;
  int nseeds;
} sluice__endpoint;

/* Parse "redis://[[user]:password@]host[:port][/db][?query]",
 * "redis+sentinel://[[user]:password@]host:port[,host:port...]/NAME[/db]
 * [?sentinel_username=U&sentinel_password=P]" (the credentials are the data
 * nodes'; the sentinels' have their own parameters),
 * "redis+cluster://[[user]:password@]host:port[,host:port...][/][?query]"
 * (seed nodes of a Redis Cluster; "rediss+cluster://" with TLS),
 * "rediss://..." (TLS; the query may hold ca=, ca_dir=, cert=, key=, sni=,
 * verify=0|1) or "unix:///path[?db=N]" (also "unix:/path", "/path").
 * Returns 0 or SLUICE_EINVAL / SLUICE_ENOMEM; on error *ep holds nothing to
 * free and sluice__endpoint_error() says why. */
int sluice__parse_url(const char *url, sluice__endpoint *ep);
/* Complete ep with the password in opts->password_file (refused when a
 * password was given too) and the TLS fields of opts (what the URL's query
 * set wins), check them and prepare the TLS context. Returns 0, or SLUICE_EINVAL (also
 * for TLS in a build without it) / SLUICE_ENOMEM with ep cleared and
 * sluice__endpoint_error() saying why. */
int sluice__endpoint_finish(sluice__endpoint *ep, const struct sluice_client_options *opts);
void sluice__endpoint_clear(sluice__endpoint *ep);
/* The sentinel fields of the client options (no URL): "host:port,...". */
int sluice__endpoint_sentinels(sluice__endpoint *ep, const char *master_name, const char *list,
                               const char *username, const char *password);
/* The cluster fields of the client options (no URL): seeds "host:port,...". */
int sluice__endpoint_cluster(sluice__endpoint *ep, const char *seeds);
/* The one-line password in the file at path into *out (malloc'd): 0, or
 * SLUICE_EINVAL (unreadable, empty, several lines, over 4 KB) with
 * sluice__endpoint_error() naming the file, never its content, or
 * SLUICE_ENOMEM. */
int sluice__read_secret_file(const char *path, char **out);
/* Why the last parse or finish on this thread failed ("" after a success). */
const char *sluice__endpoint_error(void);
void sluice__endpoint_set_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

#endif
