/* placeholder until the rl subcommand lands */
#include "cli.h"
int cli_rl_main(int argc, char **argv) {
  cli_error("'%s' is not available in this build", argv[0]);
  return CLI_EXIT_USAGE;
}
