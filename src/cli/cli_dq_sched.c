/* `sluice dq schedule`: create, update, list and remove a queue's repeating
 * schedules, preview a spec's occurrences, and run schedules (--run). */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <event2/event.h>

#include "cli.h"

void cli_dq_schedule_usage(FILE *out) {
  fputs(
      "       sluice dq schedule set QUEUE NAME SPEC [--payload TEXT] [--run]\n"
      "       sluice dq schedule list QUEUE\n"
      "       sluice dq schedule remove QUEUE NAME\n"
      "       sluice dq schedule next SPEC [--after UNIX_MS] [--count N]\n",
      out);
}

void cli_dq_schedule_help(FILE *out) {
  fputs(
      "schedule set: create schedule NAME on QUEUE, or update it, and print the\n"
      "  occurrence whose message is queued. SPEC is \"every DURATION\" (ms, s, m, h, d;\n"
      "  at least 100 ms), \"every DURATION from UNIX_MS\", a five-field cron expression\n"
      "  in UTC, or @yearly, @monthly, @weekly, @daily, @hourly. Each occurrence pushes\n"
      "  one message, id NAME@OCCURRENCE_MS, payload --payload TEXT (default empty),\n"
      "  however many processes declare the schedule. Schedules fire while a process\n"
      "  declares one of the queue's: --run keeps this one declaring and firing until\n"
      "  SIGINT or SIGTERM. A schedule nobody declared for 7 days is removed.\n"
      "schedule list: the queue's schedules, the next queued occurrence first.\n"
      "schedule remove: remove NAME and its queued message; exit 1 if there is none.\n"
      "schedule next: the next --count N (default 5, at most 20) occurrences of SPEC\n"
      "  after --after UNIX_MS (default: now on Redis's clock).\n",
      out);
}

typedef struct sched_args {
  const char *words[3]; /* positional: QUEUE NAME SPEC, QUEUE, QUEUE NAME, SPEC */
  int nwords;
  const char *payload;
  uint64_t after, count;
  int run;
} sched_args;

/* The common options, --payload, --after, --count, --run and `want`
 * positional words; -1 after printing why. */
static int parse_args(cli_ctx *ctx, int argc, char **argv, int want, sched_args *a) {
  a->count = 5;
  for (int i = 1; i < argc; i++) {
    int c = cli_common_option(ctx, argc, argv, &i);
    if (c < 0) return -1;
    if (c) continue;
    const char *s = argv[i];
    if (!strcmp(s, "--run")) {
      a->run = 1;
    } else if (!strcmp(s, "--payload") || !strcmp(s, "--after") || !strcmp(s, "--count")) {
      const char *v = i + 1 < argc ? argv[++i] : NULL;
      if (!strcmp(s, "--payload")) {
        if (!v) {
          cli_error("--payload needs a value");
          return -1;
        }
        a->payload = v;
      } else if (!strcmp(s, "--after")) {
        if (cli_number(s, v, 0, (uint64_t)SLUICE_DQ_TIME_MAX, "ms", &a->after)) return -1;
      } else if (cli_number(s, v, 1, 20, "", &a->count)) {
        return -1;
      }
    } else if (s[0] == '-' && s[1]) {
      cli_error("unknown option '%s' (try: sluice dq --help)", cli_echo(s));
      return -1;
    } else if (a->nwords == want) {
      cli_error("unexpected argument '%s'", cli_echo(s));
      return -1;
    } else {
      a->words[a->nwords++] = s;
    }
  }
  if (a->nwords < want) {
    cli_error("missing arguments (try: sluice dq --help)");
    return -1;
  }
  return 0;
}

typedef struct sched_call {
  cli_call call;
  int64_t next;
} sched_call;

static void on_set(sluice_dq *dq, int status, const char *name, int64_t next, void *ud) {
  sched_call *c = ud;
  c->next = next;
  cli_call_done(&c->call, status);
}

static void on_removed(sluice_dq *dq, int status, void *ud) { cli_call_done(ud, status); }

static void on_list(sluice_dq *dq, int status, int64_t now, size_t total,
                    const sluice_dq_schedule_entry *e, size_t n, void *ud) {
  cli_call_done(ud, status);
  if (status != SLUICE_OK) return;
  if (total > n) printf("# %zu schedules, the first %zu shown\n", total, n);
  for (size_t i = 0; i < n; i++)
    printf("%s\t%s\tnext %lld (in %lld ms)\n", cli_clean(e[i].name), cli_clean(e[i].spec),
           (long long)e[i].next_ms, (long long)(e[i].next_ms - now));
}

static void on_preview(sluice_dq *dq, int status, const int64_t *at, size_t n, void *ud) {
  cli_call_done(ud, status);
  for (size_t i = 0; status == SLUICE_OK && i < n; i++) printf("%lld\n", (long long)at[i]);
}

static void on_time(sluice_dq *dq, int status, const sluice_dq_info *in, void *ud) {
  sched_call *c = ud;
  if (status == SLUICE_OK) c->next = in->now_ms;
  cli_call_done(&c->call, status);
}

static void on_stop(evutil_socket_t sig, short what, void *arg) { event_base_loopbreak(arg); }

/* Declare and fire until SIGINT or SIGTERM. */
static void run_until_signal(cli_ctx *ctx) {
  struct event *sigint = evsignal_new(ctx->base, SIGINT, on_stop, ctx->base);
  struct event *sigterm = evsignal_new(ctx->base, SIGTERM, on_stop, ctx->base);
  if (sigint && sigterm) {
    event_add(sigint, NULL);
    event_add(sigterm, NULL);
    event_base_dispatch(ctx->base);
  }
  if (sigint) event_free(sigint);
  if (sigterm) event_free(sigterm);
}

int cli_dq_schedule_main(int argc, char **argv) {
  static const struct {
    const char *cmd;
    int words;
  } cmds[] = {{"set", 3}, {"list", 1}, {"remove", 2}, {"next", 1}};
  cli_ctx ctx = {0};
  sched_args a = {0};
  int which = -1;
  for (int i = 0; argc > 1 && i < 4; i++)
    if (!strcmp(argv[1], cmds[i].cmd)) which = i;
  if (which < 0) {
    cli_error("expected set, list, remove or next (try: sluice dq --help)");
    return CLI_EXIT_USAGE;
  }
  if (parse_args(&ctx, argc - 1, argv + 1, cmds[which].words, &a)) return CLI_EXIT_USAGE;
  const char *queue = which == 3 ? "schedule-preview" : a.words[0];
  if (cli_check_len("QUEUE", queue, SLUICE_NAME_MAX) ||
      (a.nwords > 1 && which != 3 &&
       cli_check_len("NAME", a.words[1], SLUICE_DQ_SCHEDULE_NAME_MAX)))
    return CLI_EXIT_USAGE;
  int rc = cli_connect(&ctx, 2000);
  if (rc != CLI_EXIT_OK) return rc;
  sluice_dq *dq = NULL;
  sched_call c = {{&ctx, 0, 0}, -1};
  const char *payload = a.payload ? a.payload : "";
  rc = sluice_dq_new(ctx.client, queue, NULL, &dq);
  if (rc == SLUICE_OK && which == 0)
    rc = sluice_dq_schedule_set(dq, a.words[1], a.words[2], payload, strlen(payload), on_set, &c);
  else if (rc == SLUICE_OK && which == 1)
    rc = sluice_dq_schedule_list(dq, 0, 100, on_list, &c.call);
  else if (rc == SLUICE_OK && which == 2)
    rc = sluice_dq_schedule_remove(dq, a.words[1], on_removed, &c.call);
  else if (rc == SLUICE_OK && !a.after && (rc = sluice_dq_inspect(dq, on_time, &c)) == SLUICE_OK &&
           (rc = cli_call_wait(&c.call)) == SLUICE_OK)
    a.after = (uint64_t)c.next, c.call.done = 0;
  if (rc == SLUICE_OK && which == 3)
    rc = sluice_dq_schedule_preview(dq, a.words[0], (int64_t)a.after, (size_t)a.count, on_preview,
                                    &c.call);
  if (rc == SLUICE_EINVAL && (which == 0 || which == 3)) {
    cli_error("bad SPEC '%s' (try: sluice dq --help)", cli_echo(a.words[which ? 0 : 2]));
    rc = CLI_EXIT_USAGE;
  } else {
    if (rc == SLUICE_OK) rc = cli_call_wait(&c.call);
    if (rc == SLUICE_OK && which == 0) printf("next %lld\n", (long long)c.next);
    if (rc == SLUICE_OK && which == 0 && a.run) {
      fflush(stdout);
      run_until_signal(&ctx);
    }
    if (rc == SLUICE_ENOTFOUND) rc = CLI_EXIT_NO;
    else if (rc != SLUICE_OK) rc = cli_fail(&ctx, rc, 0, "cannot %s", cmds[which].cmd);
  }
  sluice_dq_free(dq);
  cli_close(&ctx);
  return rc;
}
