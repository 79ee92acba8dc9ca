/* `sluice rl check|wait`: one rate-limit decision from the shell. */
#include <stdio.h>
#include <string.h>

#include <event2/event.h>

#include "cli.h"

#define CONNECT_TIMEOUT_MS 2000

static void usage(FILE *out) {
  fputs(
      "usage: sluice rl check NAME KEY --algo ALGO --limit N --period MS [--burst N] [--cost N]\n"
      "       sluice rl wait  NAME KEY --algo ALGO --limit N --period MS [--burst N] [--cost N]\n"
      "                       [--timeout MS]\n"
      "\n"
      "Take --cost units (default 1) for KEY from rate limiter NAME, which allows\n"
      "--limit units per --period milliseconds. ALGO is one of:\n"
      "  fixed            windows of --period aligned to Redis's clock\n"
      "  sliding-log      never more than --limit in any span of --period (exact)\n"
      "  sliding-counter  two windows weighted (O(1) memory, approximate)\n"
      "  gcra             token bucket of --burst units (default --limit) refilled\n"
      "                   at --limit per --period\n"
      "Processes using the same NAME, KEY and ALGO share the limit.\n"
      "\n"
      "check decides at once; wait retries at retry_after until allowed or until\n"
      "--timeout MS passes (default: no limit). Both print the decision as\n"
      "name=value lines: allowed, limit, remaining, retry_after_ms, reset_after_ms.\n"
      "--limit and --burst are 1..1000000000, --period 1..2000000000 ms.\n"
      "\n"
      "Options: --redis URL, --prefix PREFIX (see `sluice --help`).\n"
      "Exit status: 0 allowed; 1 rate-limited (check); 75 not allowed within\n"
      "--timeout (wait); 64 bad arguments; 69 Redis unreachable or failing.\n",
      out);
}

typedef struct rl_args {
  const char *name, *key;
  sluice_limiter_options opts;
  unsigned cost;
  unsigned timeout_ms;
  int wait;
} rl_args;

/* Parse "--opt VALUE", VALUE in min..max; 1 consumed, 0 not ours, -1 error. */
static int number_option(int argc, char **argv, int *i, const char *opt, unsigned min, unsigned max,
                         const char *unit, unsigned *out) {
  if (strcmp(argv[*i], opt) != 0) return 0;
  if (cli_number_u(opt, *i + 1 < argc ? argv[*i + 1] : NULL, min, max, unit, out)) return -1;
  (*i)++;
  return 1;
}

static int parse_option(cli_ctx *ctx, rl_args *a, int argc, char **argv, int *i) {
  int rc = cli_common_option(ctx, argc, argv, i);
  if (rc) return rc;
  if (strcmp(argv[*i], "--algo") == 0) {
    if (*i + 1 >= argc || sluice_rl_algo_parse(argv[*i + 1], &a->opts.algo) != 0) {
      cli_error("--algo needs one of fixed, sliding-log, sliding-counter, gcra");
      return -1;
    }
    (*i)++;
    return 1;
  }
  if ((rc = number_option(argc, argv, i, "--limit", 1, SLUICE_RL_LIMIT_MAX, "", &a->opts.limit)))
    return rc;
  if ((rc = number_option(argc, argv, i, "--period", 1, SLUICE_RL_PERIOD_MAX, "ms",
                          &a->opts.period_ms)))
    return rc;
  if ((rc = number_option(argc, argv, i, "--burst", 1, SLUICE_RL_LIMIT_MAX, "", &a->opts.burst)))
    return rc;
  /* The cost's real bound, the capacity, is checked once all is parsed. */
  if ((rc = number_option(argc, argv, i, "--cost", 1, SLUICE_RL_LIMIT_MAX, "", &a->cost)))
    return rc;
  if (a->wait &&
      (rc = number_option(argc, argv, i, "--timeout", 0, UINT32_MAX, "ms", &a->timeout_ms)))
    return rc;
  return 0;
}

/* 0, CLI_EXIT_USAGE, or -1 after printing help (exit 0). */
static int parse_args(cli_ctx *ctx, rl_args *a, int argc, char **argv) {
  int npos = 0, algo_set = 0;
  for (int i = 2; i < argc; i++) {
    if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) return -1;
    if (strcmp(argv[i], "--algo") == 0) algo_set = 1;
    int rc = parse_option(ctx, a, argc, argv, &i);
    if (rc < 0) return CLI_EXIT_USAGE;
    if (rc > 0) continue;
    if (argv[i][0] == '-' && argv[i][1]) {
      cli_error("unknown option '%s' (try: sluice rl --help)", cli_echo(argv[i]));
      return CLI_EXIT_USAGE;
    }
    if (npos == 0) a->name = argv[i];
    else if (npos == 1) a->key = argv[i];
    npos++;
  }
  unsigned cap = a->opts.algo == SLUICE_RL_GCRA && a->opts.burst ? a->opts.burst : a->opts.limit;
  unsigned least = a->opts.algo == SLUICE_RL_SLIDING_LOG /* a log holds that many entries */
                       ? (a->opts.limit + SLUICE_RL_LOG_ENTRIES_MAX - 1) / SLUICE_RL_LOG_ENTRIES_MAX
                       : 1;
  if (npos != 2) cli_error("needs NAME and KEY");
  else if (cli_check_len("NAME", a->name, SLUICE_NAME_MAX) ||
           cli_check_len("KEY", a->key, SLUICE_NAME_MAX))
    return CLI_EXIT_USAGE;
  else if (!algo_set) cli_error("--algo is required");
  else if (!a->opts.limit || !a->opts.period_ms) cli_error("--limit and --period are required");
  else if (a->cost < 1 || a->cost > cap)
    cli_error("--cost must be 1..%u, got %u: a cost above the %s can never pass", cap, a->cost,
              a->opts.algo == SLUICE_RL_GCRA ? "burst" : "limit");
  else if (a->cost < least)
    cli_error(
        "--cost must be at least %u with --limit %u: a sliding log keeps one entry per "
        "request, at most %u",
        least, a->opts.limit, SLUICE_RL_LOG_ENTRIES_MAX);
  else return 0;
  return CLI_EXIT_USAGE;
}

typedef struct rl_outcome {
  cli_call call;
  int has_res;
  sluice_rl_result res;
} rl_outcome;

static void on_decision(sluice_limiter *lim, int status, const sluice_rl_result *res, void *ud) {
  rl_outcome *o = ud;
  cli_call_done(&o->call, status);
  o->has_res = res != NULL;
  if (res) o->res = *res;
}

static void print_result(const sluice_rl_result *r) {
  printf("allowed=%d\nlimit=%lld\nremaining=%lld\nretry_after_ms=%lld\nreset_after_ms=%lld\n",
         r->allowed, (long long)r->limit, (long long)r->remaining, (long long)r->retry_after_ms,
         (long long)r->reset_after_ms);
}

static int exit_status(const rl_args *a, const rl_outcome *o) {
  if (o->has_res) print_result(&o->res);
  if (o->call.status == SLUICE_OK) return o->res.allowed ? CLI_EXIT_OK : CLI_EXIT_NO;
  /* A wait reports a step that timed out as SLUICE_ECONNECTION: its
   * SLUICE_ETIMEDOUT is its own --timeout. */
  if (a->wait && o->call.status == SLUICE_ETIMEDOUT) {
    cli_error("not allowed within %u ms", a->timeout_ms);
    return cli_exit_status(o->call.status, 1);
  }
  if (o->call.status == SLUICE_EINDOUBT)
    return cli_fail(o->call.ctx, o->call.status, 0,
                    "rate limiter '%s' (the units may have been taken)", cli_echo(a->name));
  return cli_fail(o->call.ctx, o->call.status, 0, "rate limiter '%s'", cli_echo(a->name));
}

static int run(cli_ctx *ctx, const rl_args *a) {
  sluice_limiter *lim = NULL;
  rl_outcome o = {{ctx, 0, 0}, 0, {0, 0, 0, 0, 0, 0}};
  int rc = sluice_limiter_new(ctx->client, a->name, &a->opts, &lim);
  if (rc == SLUICE_OK) {
    rc = a->wait ? sluice_limiter_wait(lim, a->key, a->cost, a->timeout_ms, on_decision, &o, NULL)
                 : sluice_limiter_check(lim, a->key, a->cost, on_decision, &o);
  }
  if (rc != SLUICE_OK) {
    /* EINVAL here: a GCRA --burst too large for its --limit and --period. */
    rc = cli_fail(ctx, rc, 0, "rate limiter '%s'", cli_echo(a->name));
    sluice_limiter_free(lim);
    return rc;
  }
  cli_call_wait(&o.call);
  sluice_limiter_free(lim);
  return exit_status(a, &o);
}

int cli_rl_main(int argc, char **argv) {
  cli_ctx ctx = {0};
  rl_args a;
  memset(&a, 0, sizeof a);
  sluice_limiter_options_init(&a.opts);
  a.cost = 1;
  if (argc < 2 || strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0) {
    usage(argc < 2 ? stderr : stdout);
    return argc < 2 ? CLI_EXIT_USAGE : CLI_EXIT_OK;
  }
  if (strcmp(argv[1], "wait") == 0) a.wait = 1;
  else if (strcmp(argv[1], "check") != 0) {
    cli_error("unknown rl command '%s' (try: sluice rl --help)", cli_echo(argv[1]));
    return CLI_EXIT_USAGE;
  }
  cli_set_command(a.wait ? "rl wait" : "rl check");
  int rc = parse_args(&ctx, &a, argc, argv);
  if (rc < 0) {
    usage(stdout);
    return CLI_EXIT_OK;
  }
  if (rc) return rc;
  rc = cli_connect(&ctx, CONNECT_TIMEOUT_MS);
  if (rc) return rc;
  rc = run(&ctx, &a);
  cli_close(&ctx);
  return rc;
}
