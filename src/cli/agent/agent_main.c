/* `sluice agent --config FILE`: one loop serving the proxies' questions,
 * SIGHUP reloading the rules, SIGTERM/SIGINT ending it. */
#include <signal.h>
#include <stdio.h>
#include <string.h>

#include <event2/event.h>

#include "agent.h"
#include "../cli.h"

typedef struct agent {
  struct event_base *base;
  sluice_client *client;
  const char *config;
  agent_rules *rules; /* current; decisions in flight may hold older ones */
  agent_http *http;
  agent_spop *spop;
  agent_stats stats;
  agent_permits *permits; /* held for HAProxy's requests (concurrency rules) */
  agent_keys *keys;       /* keyed concurrency rules' semaphores */
  /* Theirs alone: a client lists every handle in its Prometheus text, and
   * thousands of them would stall the loop at each scrape of /metrics. */
  sluice_client *keys_client;
} agent;

static void usage(FILE *out) {
  fputs(
      "usage: sluice agent --config FILE [--redis URL] [--prefix PREFIX]\n"
      "\n"
      "Answer proxies' rate-limit questions (nginx auth_request: 2xx allows,\n"
      "429 denies) by the rules in FILE (docs/proxies.md). SIGHUP reloads FILE;\n"
      "a file with an error is refused (its line and why are printed) and the\n"
      "rules in use are kept. SIGTERM or SIGINT stops the agent.\n"
      "Exit status: 0 stopped by a signal; 64 bad arguments or a bad FILE;\n"
      "69 cannot listen; 70 internal error.\n",
      out);
}

static void on_reload(evutil_socket_t sig, short what, void *ud) {
  (void)sig, (void)what;
  agent *a = ud;
  char why[512];
  agent_rules *next = agent_rules_load(a->config, why, sizeof why);
  if (next && agent_rules_start(next, a->client, why, sizeof why) != 0) {
    agent_rules_unref(next);
    next = NULL;
  }
  if (!next) {
    a->stats.reloads_refused++;
    cli_error("reload refused, the rules in use are kept: %s", why);
    return;
  }
  a->stats.reloads_ok++;
  next->stats = &a->stats;
  next->permits = a->permits;
  next->keys = a->keys;
  agent_rules_keep_counts(next, a->rules);
  if (strcmp(next->settings.http, a->rules->settings.http) != 0 ||
      strcmp(next->settings.spop, a->rules->settings.spop) != 0)
    cli_error("reload: [agent] settings take effect at the next start only");
  next->settings = a->rules->settings;
  agent_rules_unref(a->rules);
  a->rules = next;
  fprintf(stderr, "sluice: agent: reloaded %s: %d rules\n", a->config, next->n);
}

static void on_closed(void *ud) { --*(int *)ud; }

static void on_stop(evutil_socket_t sig, short what, void *ud) {
  (void)sig, (void)what;
  event_base_loopbreak(ud);
}

static int run(agent *a, const cli_ctx *ctx) {
  char why[512];
  sluice_client_options o;
  sluice_client_options_init(&o);
  o.url = ctx->url;
  o.password_file = ctx->password_file;
  if (ctx->prefix) o.key_prefix = ctx->prefix;
  /* Reconnect soon: while Redis is away every rule runs on its policy. */
  o.connect_timeout_ms = 500;
  o.reconnect_max_ms = 1000;
  int rc = sluice_client_new(a->base, &o, &a->client);
  if (!rc) rc = sluice_client_new(a->base, &o, &a->keys_client);
  if (rc) {
    cli_error("cannot use the Redis URL: %s", sluice_strerror(rc));
    return CLI_EXIT_USAGE;
  }
  if (agent_rules_start(a->rules, a->client, why, sizeof why) != 0) {
    cli_error("%s", why);
    return CLI_EXIT_FAILURE;
  }
  const agent_settings *s = &a->rules->settings;
  if (!(a->keys = agent_keys_new(a->base, a->keys_client, s->max_keys, s->key_idle_s))) {
    cli_error("out of memory");
    return CLI_EXIT_FAILURE;
  }
  a->rules->keys = a->keys;
  if ((s->http[0] &&
       !(a->http = agent_http_new(a->base, s, &a->rules, a->client, why, sizeof why))) ||
      (s->spop[0] && !(a->spop = agent_spop_new(a->base, s, &a->rules, why, sizeof why)))) {
    cli_error("%s", why);
    return CLI_EXIT_UNAVAILABLE;
  }
  struct event *hup = evsignal_new(a->base, SIGHUP, on_reload, a);
  struct event *term = evsignal_new(a->base, SIGTERM, on_stop, a->base);
  struct event *intr = evsignal_new(a->base, SIGINT, on_stop, a->base);
  if (!hup || !term || !intr || evsignal_add(hup, NULL) || evsignal_add(term, NULL) ||
      evsignal_add(intr, NULL)) {
    cli_error("cannot watch signals");
    rc = CLI_EXIT_FAILURE;
  } else {
    fprintf(stderr, "sluice: agent: serving%s%s%s%s with %d rules\n", s->http[0] ? " http " : "",
            s->http, s->spop[0] ? " spop " : "", s->spop, a->rules->n);
    event_base_dispatch(a->base);
    rc = CLI_EXIT_OK;
  }
  if (hup) event_free(hup);
  if (term) event_free(term);
  if (intr) event_free(intr);
  return rc;
}

int cli_agent_main(int argc, char **argv) {
  cli_set_command("agent");
  cli_ctx ctx = {0};
  agent a = {0};
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
      usage(stdout);
      return CLI_EXIT_OK;
    }
    int rc = cli_common_option(&ctx, argc, argv, &i);
    if (rc < 0) return CLI_EXIT_USAGE;
    if (rc > 0) continue;
    if (strcmp(argv[i], "--config") == 0 && i + 1 < argc) {
      a.config = argv[++i];
      continue;
    }
    cli_error("unexpected argument '%s' (try: sluice agent --help)", cli_echo(argv[i]));
    return CLI_EXIT_USAGE;
  }
  if (!a.config) {
    cli_error("--config FILE is required");
    return CLI_EXIT_USAGE;
  }
  ctx.url = cli_redis_url(&ctx);
  char why[512];
  if (!(a.rules = agent_rules_load(a.config, why, sizeof why))) {
    cli_error("%s", why);
    return CLI_EXIT_USAGE;
  }
  a.rules->stats = &a.stats;
  if (!(a.base = event_base_new()) || !(a.permits = agent_permits_new(a.base, 100000))) {
    cli_error("cannot create event loop");
    agent_rules_unref(a.rules);
    if (a.base) event_base_free(a.base);
    return CLI_EXIT_FAILURE;
  }
  a.rules->permits = a.permits;
  int rc = run(&a, &ctx);
  /* Checks in flight end (cancelled) and their requests are answered while
   * the fronts still exist; only then do the fronts go. */
  agent_permits_free(a.permits); /* their releases go out first */
  int open = (a.client != NULL) + (a.keys_client != NULL);
  sluice_client_close(a.client, on_closed, &open);
  sluice_client_close(a.keys_client, on_closed, &open);
  while (open > 0 && event_base_loop(a.base, EVLOOP_ONCE) == 0) {}
  agent_keys_free(a.keys); /* unused now: permits dropped, acquires cancelled */
  agent_http_free(a.http);
  agent_spop_free(a.spop);
  agent_rules_unref(a.rules);
  event_base_loop(a.base, EVLOOP_NONBLOCK);
  event_base_free(a.base);
  return rc;
}
