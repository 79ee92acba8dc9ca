/* Parsing of redis:// and unix:// URLs into client options. */
#ifndef SLUICE_URL_H
#define SLUICE_URL_H

/* Owned copies of what a URL names. */
typedef struct sluice__endpoint {
  char *host;
  int port;
  char *unix_path;
  char *username;
  char *password;
  int db;
} sluice__endpoint;

/* Parse "redis://[[user]:password@]host[:port][/db]" or
 * "unix:///path[?db=N]" (also "unix:/path", "/path"). Returns 0 or
 * SLUICE_EINVAL / SLUICE_ENOMEM; on error *ep holds nothing to free. */
int sluice__parse_url(const char *url, sluice__endpoint *ep);
void sluice__endpoint_clear(sluice__endpoint *ep);

#endif
