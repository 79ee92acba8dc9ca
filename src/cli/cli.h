/* The `sluice` command-line tool: shared plumbing for its subcommands. It is
 * built only on the public API (include/sluice/). */
#ifndef SLUICE_CLI_H
#define SLUICE_CLI_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <sluice/sluice.h>

struct event_base;

/* Exit statuses, documented in `sluice --help` and docs/tool.md. */
enum {
  CLI_EXIT_OK = 0,
  CLI_EXIT_NO = 1,           /* a negative answer: rate-limited (rl check),
                               duplicate id (dq push), not held (sem release) */
  CLI_EXIT_FAILURE = 70,     /* EX_SOFTWARE: unexpected failure */
  CLI_EXIT_USAGE = 64,       /* EX_USAGE: bad arguments */
  CLI_EXIT_UNAVAILABLE = 69, /* EX_UNAVAILABLE: Redis unreachable or failing */
  CLI_EXIT_TIMEOUT = 75,     /* EX_TEMPFAIL: no permit / not allowed in time */
  CLI_EXIT_LOST = 76         /* sem run: the permit was lost while CMD ran */
};

#define CLI_DEFAULT_REDIS "redis://127.0.0.1:6379"

typedef struct cli_ctx {
  struct event_base *base;
  sluice_client *client;
  const char *url;           /* --redis (a private copy: argv's is scrubbed) */
  const char *password_file; /* --redis-password-file */
  char *shown_url;           /* the URL used, its secrets masked: for messages */
  const char *prefix;        /* --prefix, or NULL for the library default */
  /* Redis's own words for the last failed operation, copied in its callback
   * (sluice_client_last_error() is valid only until the next loop turn). */
  char why[512];
  int why_status; /* the status why belongs to */
} cli_ctx;

/* The subcommand being run ("sem run"): every message is prefixed with it. */
void cli_set_command(const char *name);

/* Secrets: called first by main. The tool's own copy of $SLUICE_REDIS is
 * kept; the environment (which the commands run by `sem run` and `dq
 * consume` inherit) gets it without credentials, and the original bytes,
 * which /proc/PID/environ shows, are scrubbed. */
void cli_secrets_init(void);

/* The Redis URL to use: --redis, else $SLUICE_REDIS as the tool started
 * with it (its credentials kept), else CLI_DEFAULT_REDIS. */
const char *cli_redis_url(const cli_ctx *ctx);

/* Create the loop and client and wait (up to timeout_ms) for the connection;
 * on failure prints "sluice: CMD: cannot reach Redis at URL: why" (the URL
 * with its secrets masked; Redis's own answer when it gave one, e.g.
 * "AUTH: WRONGPASS ...") and returns CLI_EXIT_UNAVAILABLE. */
int cli_connect(cli_ctx *ctx, unsigned timeout_ms);
/* Close the client, run the loop until everything is released, free the loop. */
void cli_close(cli_ctx *ctx);

/* The one mapping from a sluice status to the tool's exit status (docs/tool.md's
 * table). own_deadline: the operation ran under the command's own --wait or
 * --timeout, so SLUICE_ETIMEDOUT means that passed (75), not that Redis was
 * too slow to answer one step (69). */
int cli_exit_status(int status, int own_deadline);

/* From an operation's callback when status is not SLUICE_OK: keep Redis's
 * words (or why the connection went) for cli_fail. */
void cli_capture(cli_ctx *ctx, int status);

/* Print "sluice: CMD: <what>: <why>" to stderr, why being Redis's own
 * words when captured, and return cli_exit_status(status, own_deadline).
 * Like cli_error, control characters in the message are escaped. */
int cli_fail(const cli_ctx *ctx, int status, int own_deadline, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* Strict number parsing; 0 on success, -1 on junk, overflow or out of range. */
int cli_parse_u64(const char *s, uint64_t max, uint64_t *out);

/* The value of numeric option opt, s (NULL when missing), must be min..max
 * (unit, e.g. "ms", "" for none). On failure prints "sluice: CMD: --ttl must
 * be 10..86400000 ms, got 99999999999" and returns -1. */
int cli_number(const char *opt, const char *s, uint64_t min, uint64_t max, const char *unit,
               uint64_t *out);
int cli_number_u(const char *opt, const char *s, unsigned min, unsigned max, const char *unit,
                 unsigned *out);

/* s for the tool's output when it came from Redis or names a thing (a
 * semaphore, a holder, a key): s itself, or when it holds control
 * characters (ESC, BEL, newline...) a copy showing each as \xNN, so none
 * reaches the terminal or splits a line. A copy lives until the eighth
 * call after. */
const char *cli_clean(const char *s);

/* s for an error message: whole when short, else its first 64 bytes and
 * "… (N bytes)", control characters shown as '?'. The result lives in one
 * of a few static buffers, so a message may echo up to four strings. */
const char *cli_echo(const char *s);

/* 0 when name (what: "semaphore NAME", "QUEUE", ...) is 1..max bytes; else
 * prints why, with the limit, and returns -1. */
int cli_check_len(const char *what, const char *name, size_t max);

/* If argv[*i] is "--redis URL" / "--redis=URL", "--redis-password-file F"
 * or "--prefix P" (also "=F", "=P"), consume it (advancing *i) and return
 * 1; return -1 on a missing value; 0 otherwise. The URL's secrets are
 * scrubbed from argv (ps shows it) once copied. */
int cli_common_option(cli_ctx *ctx, int argc, char **argv, int *i);

/* The words a subcommand's messages use for its one positional NAME. */
typedef struct cli_name_words {
  const char *what;    /* "QUEUE": names it in cli_check_len's message */
  const char *missing; /* the whole message when it is missing */
  const char *hint;    /* after "unexpected argument 'X'": "" or " (try: ...)" */
} cli_name_words;

/* argv[first..] holds the common options (cli_common_option) and exactly
 * one NAME of 1..SLUICE_NAME_MAX bytes: *name is it, 0 returned; else
 * prints why (in w's words) and returns -1. */
int cli_parse_name_only(cli_ctx *ctx, int argc, char **argv, int first, const cli_name_words *w,
                        const char **name);

/* One library call the tool waits for: its callback calls cli_call_done. */
typedef struct cli_call {
  cli_ctx *ctx;
  int done;
  int status;
} cli_call;

/* From the call's callback: it is done with status (captured, cli_capture). */
void cli_call_done(cli_call *call, int status);
/* Run the loop until the call is done; its status (SLUICE_ECONNECTION when
 * the loop stopped first, which a pending call does not let it do). */
int cli_call_wait(cli_call *call);

/* Print "sluice: CMD: " + message to stderr, control characters escaped
 * (cli_clean). */
void cli_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* The fds the tool was started with, so that a child can be given those and
 * none of the tool's own (Redis connections, the loop's): a CMD's lingering
 * background child would otherwise hold them open, and a blocked BRPOP held
 * that way swallows wake-ups. */
typedef struct cli_fds {
  unsigned char *open; /* open[fd] != 0: open at start */
  int n;
} cli_fds;
/* Note the open fds (call before connecting). Without /proc, notes nothing
 * and children inherit everything, as before. */
void cli_fds_note(cli_fds *f);
/* In a forked child: close every fd above 2 not noted, except keep. */
void cli_fds_close_others(const cli_fds *f, int keep);
void cli_fds_free(cli_fds *f);

/* Subcommands: argv[0] is the subcommand word ("sem", "rl", "dq"). */
int cli_sem_main(int argc, char **argv);
int cli_rl_main(int argc, char **argv);
int cli_dq_main(int argc, char **argv);
int cli_top_main(int argc, char **argv);
int cli_acl_main(int argc, char **argv);
int cli_agent_main(int argc, char **argv); /* agent/agent_main.c */

/* `sluice dq schedule` (cli_dq_sched.c): its lines of `sluice dq --help`
 * (usage, then help) and the command itself (argv[0] is "schedule"). */
void cli_dq_schedule_usage(FILE *out);
void cli_dq_schedule_help(FILE *out);
int cli_dq_schedule_main(int argc, char **argv);

#endif
