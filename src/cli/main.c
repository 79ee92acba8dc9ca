/* `sluice`: semaphores, rate limits and delay queues from the shell. */
#include <signal.h>
#include <stdio.h>
#include <string.h>

#include "cli.h"

static void usage(FILE *out) {
  fputs(
      "usage: sluice [--version] [--help] COMMAND ...\n"
      "\n"
      "  sluice sem run NAME -n PERMITS --ttl MS [--wait MS | --no-wait] [--fair] -- CMD [ARGS]\n"
      "  sluice sem status NAME\n"
      "  sluice sem release NAME ID\n"
      "  sluice rl check NAME KEY --algo fixed|sliding-log|sliding-counter|gcra\n"
      "                 --limit N --period MS [--burst N] [--cost N]\n"
      "  sluice rl wait  NAME KEY ... [--timeout MS]\n"
      "  sluice dq push QUEUE [--delay MS | --at UNIX_MS] [--id ID] [--priority N]\n"
      "                 [--replace | --postpone] [PAYLOAD | -]\n"
      "  sluice dq consume QUEUE [--concurrency N] [--visibility MS] [--max-attempts N]\n"
      "                  [--retry-delay MS] [--count N] -- CMD [ARGS]\n"
      "  sluice dq status QUEUE\n"
      "  sluice top [NAME...] [--once | --prometheus] [--interval MS]\n"
      "  sluice acl [--prefix P] [--sentinel | --cluster] [--db] [--wait] [--scan] [sem rl dq]\n"
      "  sluice agent --config FILE  (rate limits for nginx auth_request)\n"
      "\n"
      "Every command takes --redis URL (redis://[user:pass@]host:port/db,\n"
      "rediss://... (TLS), redis+sentinel://host:port[,host:port...]/MASTER,\n"
      "redis+cluster://host:port[,host:port...] or unix:///path; default\n"
      "$SLUICE_REDIS or " CLI_DEFAULT_REDIS
      "),\n"
      "--redis-password-file FILE (the password, kept out of the URL; default\n"
      "$SLUICE_REDIS_PASSWORD_FILE) and --prefix PREFIX (key prefix, default\n"
      "\"sluice:\"). A password given in --redis is scrubbed from the tool's\n"
      "command line, and the commands run by sem run and dq consume get\n"
      "$SLUICE_REDIS without its credentials. `sluice COMMAND --help`\n"
      "describes each command.\n"
      "\n"
      "Exit status (the same for every command):\n"
      "  0    success (sem run: CMD's own status)\n"
      "  1    a negative answer: rate-limited (rl check), duplicate --id (dq push),\n"
      "       no such schedule (dq schedule remove), permit not held (sem release)\n"
      "  64   bad arguments\n"
      "  69   Redis unreachable or failing (its own error is printed); a push whose\n"
      "       answer was lost says it may have been queued\n"
      "  70   internal error\n"
      "  75   no permit / not allowed within --wait, --no-wait, --timeout\n"
      "  76   sem run: the permit was lost while CMD ran (CMD got SIGTERM)\n"
      "  126, 127  sem run, dq consume: CMD not executable / not found\n",
      out);
}

int main(int argc, char **argv) {
  /* hiredis writes to sockets without MSG_NOSIGNAL: a connection Redis
   * closed must be an error to handle (the client reconnects), not a signal
   * that kills the tool. Commands the tool runs get the default back. */
  signal(SIGPIPE, SIG_IGN);
  cli_secrets_init();
  if (argc < 2) {
    usage(stderr);
    return CLI_EXIT_USAGE;
  }
  const char *cmd = argv[1];
  if (strcmp(cmd, "--help") == 0 || strcmp(cmd, "-h") == 0 || strcmp(cmd, "help") == 0) {
    usage(stdout);
    return CLI_EXIT_OK;
  }
  if (strcmp(cmd, "--version") == 0) {
    printf("sluice %s\n", sluice_version());
    return CLI_EXIT_OK;
  }
  if (strcmp(cmd, "sem") == 0) return cli_sem_main(argc - 1, argv + 1);
  if (strcmp(cmd, "rl") == 0) return cli_rl_main(argc - 1, argv + 1);
  if (strcmp(cmd, "dq") == 0) return cli_dq_main(argc - 1, argv + 1);
  if (strcmp(cmd, "top") == 0) return cli_top_main(argc - 1, argv + 1);
  if (strcmp(cmd, "acl") == 0) return cli_acl_main(argc - 1, argv + 1);
  if (strcmp(cmd, "agent") == 0) return cli_agent_main(argc - 1, argv + 1);
  cli_error("unknown command '%s' (try: sluice --help)", cli_echo(cmd));
  return CLI_EXIT_USAGE;
}
