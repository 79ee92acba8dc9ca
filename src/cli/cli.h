/* The `sluice` command-line tool: shared plumbing for its subcommands. It is
 * built only on the public API (include/sluice/). */
#ifndef SLUICE_CLI_H
#define SLUICE_CLI_H

#include <stdint.h>
#include <sluice/sluice.h>

struct event_base;

/* Exit statuses, documented in `sluice --help` and README.md. */
enum {
  CLI_EXIT_OK = 0,
  CLI_EXIT_NO = 1,          /* a negative answer: rate-limited (rl check) */
  CLI_EXIT_FAILURE = 70,    /* EX_SOFTWARE: unexpected failure */
  CLI_EXIT_USAGE = 64,      /* EX_USAGE: bad arguments */
  CLI_EXIT_UNAVAILABLE = 69,/* EX_UNAVAILABLE: Redis unreachable or failing */
  CLI_EXIT_TIMEOUT = 75,    /* EX_TEMPFAIL: no permit / not allowed in time */
  CLI_EXIT_LOST = 76        /* sem run: the permit was lost while CMD ran */
};

#define CLI_DEFAULT_REDIS "redis://127.0.0.1:6379"

typedef struct cli_ctx {
  struct event_base *base;
  sluice_client *client;
  const char *url;
  const char *prefix;       /* --prefix, or NULL for the library default */
} cli_ctx;

/* Create the loop and client and wait (up to timeout_ms) for the connection;
 * on failure prints "sluice: cannot reach Redis at URL: why" and returns
 * CLI_EXIT_UNAVAILABLE. */
int cli_connect(cli_ctx *ctx, unsigned timeout_ms);
/* Close the client, run the loop until everything is released, free the loop. */
void cli_close(cli_ctx *ctx);

/* Strict number parsing; 0 on success, -1 on junk or out of range. */
int cli_parse_u64(const char *s, uint64_t max, uint64_t *out);
int cli_parse_unsigned(const char *s, unsigned *out);

/* If argv[*i] is "--redis URL" / "--redis=URL" or "--prefix P", consume it
 * (advancing *i) and return 1; return -1 on a missing value; 0 otherwise. */
int cli_common_option(cli_ctx *ctx, int argc, char **argv, int *i);

/* Print "sluice: " + message to stderr. */
void cli_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* Subcommands: argv[0] is the subcommand word ("sem", "rl", "dq"). */
int cli_sem_main(int argc, char **argv);
int cli_rl_main(int argc, char **argv);
int cli_dq_main(int argc, char **argv);
int cli_top_main(int argc, char **argv);

#endif
