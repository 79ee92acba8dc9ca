/* Running the `sluice` tool ($SLUICE_BIN) as a separate process and
 * collecting all it writes, stdout and stderr apart, for tests that look
 * at every byte of its output. */
#ifndef SLUICE_TEST_TOOL_RUN_H
#define SLUICE_TEST_TOOL_RUN_H

typedef struct th_run {
  int status;  /* exit status; -1 if it did not exit */
  char *out;   /* all of stdout (with stderr when joined), NUL-terminated */
  char *err;   /* all of stderr, NUL-terminated ("" when joined) */
} th_run;

/* Run `$SLUICE_BIN ARGS...` (args NULL-terminated) with stdin from
 * /dev/null and only fds 0-2 open. env (NULL-terminated, may be NULL)
 * changes its environment: "NAME=VALUE" sets, "NAME" unsets. join: stderr
 * goes to the stdout pipe too (the order they were written). Fails the
 * case without SLUICE_BIN. Free with th_run_free. */
th_run th_run_tool(const char *const *args, const char *const *env, int join);
void th_run_free(th_run *r);

#endif
