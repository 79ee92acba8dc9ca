/* placeholder until the sem subcommand lands */
#include "cli.h"
int cli_sem_main(int argc, char **argv) {
  cli_error("'%s' is not available in this build", argv[0]);
  return CLI_EXIT_USAGE;
}
