/* Plumbing shared by the subcommands of the `sluice` tool. */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <event2/event.h>

#include "cli.h"

void cli_error(const char *fmt, ...) {
  va_list ap;
  fputs("sluice: ", stderr);
  va_start(ap, fmt);
  vfprintf(stderr, fmt, ap);
  va_end(ap);
  fputc('\n', stderr);
}

int cli_parse_u64(const char *s, uint64_t max, uint64_t *out) {
  char *end;
  if (!s || !*s || *s == '-' || *s == '+') return -1;
  errno = 0;
  unsigned long long v = strtoull(s, &end, 10);
  if (errno || *end || v > max) return -1;
  *out = v;
  return 0;
}

int cli_parse_unsigned(const char *s, unsigned *out) {
  uint64_t v;
  if (cli_parse_u64(s, 0xffffffffu, &v)) return -1;
  *out = (unsigned)v;
  return 0;
}

int cli_common_option(cli_ctx *ctx, int argc, char **argv, int *i) {
  const char *a = argv[*i];
  if (strncmp(a, "--redis=", 8) == 0) {
    ctx->url = a + 8;
    return 1;
  }
  if (strncmp(a, "--prefix=", 9) == 0) {
    ctx->prefix = a + 9;
    return 1;
  }
  if (strcmp(a, "--redis") == 0 || strcmp(a, "--prefix") == 0) {
    if (*i + 1 >= argc) {
      cli_error("%s needs a value", a);
      return -1;
    }
    if (a[2] == 'r') ctx->url = argv[*i + 1];
    else ctx->prefix = argv[*i + 1];
    (*i)++;
    return 1;
  }
  return 0;
}

typedef struct connect_wait {
  int done;
  int up;
} connect_wait;

static void on_state(sluice_client *c, int connected, int status, void *ud) {
  connect_wait *w = ud;
  w->done = 1;
  w->up = connected;
}

static void on_deadline(evutil_socket_t fd, short what, void *ud) {
  ((connect_wait *)ud)->done = 1;
}

int cli_connect(cli_ctx *ctx, unsigned timeout_ms) {
  sluice_client_options o;
  connect_wait w = {0, 0};
  if (!ctx->url) ctx->url = getenv("SLUICE_REDIS") ? getenv("SLUICE_REDIS") : CLI_DEFAULT_REDIS;
  sluice_client_options_init(&o);
  o.url = ctx->url;
  if (ctx->prefix) o.key_prefix = ctx->prefix;
  o.connect_timeout_ms = timeout_ms;
  ctx->base = event_base_new();
  if (!ctx->base) {
    cli_error("cannot create event loop");
    return CLI_EXIT_FAILURE;
  }
  int rc = sluice_client_new(ctx->base, &o, &ctx->client);
  if (rc) {
    const char *why = sluice_client_last_error(NULL);
    cli_error("cannot use --redis '%s': %s", ctx->url, *why ? why : sluice_strerror(rc));
    event_base_free(ctx->base);
    ctx->base = NULL;
    return CLI_EXIT_USAGE;
  }
  sluice_client_set_state_cb(ctx->client, on_state, &w);
  struct event *t = evtimer_new(ctx->base, on_deadline, &w);
  struct timeval tv = {timeout_ms / 1000, (timeout_ms % 1000) * 1000};
  evtimer_add(t, &tv);
  while (!w.done) event_base_loop(ctx->base, EVLOOP_ONCE);
  event_free(t);
  sluice_client_set_state_cb(ctx->client, NULL, NULL);
  if (!w.up) {
    const char *why = sluice_client_last_error(ctx->client);
    cli_error("cannot reach Redis at %s: %s", ctx->url, *why ? why : "timed out");
    cli_close(ctx);
    return CLI_EXIT_UNAVAILABLE;
  }
  return CLI_EXIT_OK;
}

void cli_close(cli_ctx *ctx) {
  if (ctx->client) {
    sluice_client_free(ctx->client);
    ctx->client = NULL;
  }
  if (ctx->base) {
    event_base_dispatch(ctx->base); /* returns once nothing is pending */
    event_base_free(ctx->base);
    ctx->base = NULL;
  }
}
