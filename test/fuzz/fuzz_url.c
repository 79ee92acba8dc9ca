/*
 * libFuzzer target: the URL parser (src/net/url.c), and the tool's URL
 * masking (src/cli/cli_url.c) checked against it.
 *
 * For every input: the parser returns OK or SLUICE_EINVAL (never crashes,
 * never leaks: ASan watches), a refusal says why and leaves nothing set,
 * and what it accepts holds no control byte and stays in range. For every
 * accepted URL with a secret: the masked, scrubbed and credential-free
 * copies the tool makes parse to the same address, with "***", '*'s and
 * no credentials where the secrets were; so the tool hides exactly what
 * the library would use as a password.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <sluice/common.h>

#include "cli/cli_url.h"
#include "net/url.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check(int ok, const char *what, const char *url) {
  if (ok) return;
  fprintf(stderr, "fuzz_url: %s for \"%s\"\n", what, url);
  abort();
}

static int clean_text(const char *s) {
  for (; s && *s; s++)
    if ((unsigned char)*s < 0x20 || *s == 0x7f) return 0;
  return 1;
}

static int same(const char *a, const char *b) { return (!a && !b) || (a && b && !strcmp(a, b)); }

static void check_accepted(const char *url, const sluice__endpoint *ep) {
  const char *const texts[] = {
      ep->host,           ep->unix_path,         ep->username,          ep->password,
      ep->master_name,    ep->sentinel_username, ep->sentinel_password, ep->tls_ca_file,
      ep->tls_server_name};
  for (size_t i = 0; i < sizeof texts / sizeof texts[0]; i++)
    check(clean_text(texts[i]), "a control byte accepted", url);
  check(ep->db >= 0 && ep->db <= (1 << 20), "db out of range", url);
  check(!ep->host || (ep->port >= 1 && ep->port <= 65535), "port out of range", url);
  check(ep->unix_path || ep->host || ep->master_name || ep->cluster, "no address", url);
  for (int i = 0; i < ep->nsentinels; i++)
    check(ep->sentinel_ports[i] >= 1 && clean_text(ep->sentinel_hosts[i]), "bad sentinel", url);
  for (int i = 0; i < ep->nseeds; i++)
    check(ep->seed_ports[i] >= 1 && clean_text(ep->seed_hosts[i]), "bad seed", url);
}

static int all_stars(const char *s) { return s && *s && strspn(s, "*") == strlen(s); }

/* The tool's copies of url parse as the original, secrets hidden. */
static void check_masking(const char *url, const sluice__endpoint *ep) {
  sluice__endpoint m;
  char *masked = cli_url_masked(url), *bare = cli_url_without_credentials(url),
       *scrubbed = strdup(url);
  if (!masked || !bare || !scrubbed) abort();
  cli_url_scrub(scrubbed);
  check(sluice__parse_url(masked, &m) == SLUICE_OK, "masked copy refused", url);
  check(same(m.host, ep->host) && m.port == ep->port && m.db == ep->db, "masked: moved", url);
  check(!ep->password || !*ep->password || same(m.password, "***"), "password shown", url);
  check(!ep->sentinel_password || !*ep->sentinel_password || same(m.sentinel_password, "***"),
        "sentinel_password shown", url);
  sluice__endpoint_clear(&m);
  check(sluice__parse_url(scrubbed, &m) == SLUICE_OK, "scrubbed copy refused", url);
  check(!ep->password || !*ep->password || all_stars(m.password), "password left in argv", url);
  check(!ep->sentinel_password || !*ep->sentinel_password || all_stars(m.sentinel_password),
        "sentinel_password left in argv", url);
  sluice__endpoint_clear(&m);
  check(sluice__parse_url(bare, &m) == SLUICE_OK, "credential-free copy refused", url);
  check(same(m.host, ep->host) && m.port == ep->port && m.db == ep->db, "bare: moved", url);
  check(!m.username && !m.password && !m.sentinel_username && !m.sentinel_password,
        "credentials passed on", url);
  sluice__endpoint_clear(&m);
  free(masked);
  free(bare);
  free(scrubbed);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  char *url = malloc(size + 1);
  sluice__endpoint ep;
  if (!url) return 0;
  memcpy(url, data, size);
  url[size] = '\0'; /* an embedded NUL ends the C string, as in real use */
  int rc = sluice__parse_url(url, &ep);
  check(rc == SLUICE_OK || rc == SLUICE_EINVAL, "unexpected status", url);
  if (rc == SLUICE_OK) {
    check_accepted(url, &ep);
    check_masking(url, &ep);
    sluice__endpoint_clear(&ep);
  } else {
    check(*sluice__endpoint_error() != '\0', "refused without a reason", url);
    check(!ep.host && !ep.password && !ep.unix_path && !ep.master_name, "refused, not cleared",
          url);
  }
  free(url);
  return 0;
}
