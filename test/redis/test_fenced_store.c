/* examples/fenced_store, the fenced resource docs/failures.md describes,
 * run as a user runs it: each holder writes with a higher token, and a
 * holder whose token is below one the file accepted is refused (exit 3)
 * and leaves the file as it was. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness.h"

/* Run the example on th_server with file and text; its exit status. */
static int run_store(const char *file, const char *text) {
  const char *prog = getenv("SLUICE_FENCED_STORE");
  TH_ASSERT(prog != NULL);
  pid_t pid = fork();
  TH_ASSERT(pid >= 0);
  if (pid == 0) {
    execl(prog, prog, th_server.url, file, text, (char *)NULL);
    _exit(127);
  }
  return th_tool_wait(pid, 30000);
}

/* The file's token (first line) and text (second line) into text. */
static uint64_t read_store(const char *file, char *text, size_t size) {
  FILE *f = fopen(file, "r");
  TH_ASSERT(f != NULL);
  uint64_t token = 0;
  TH_ASSERT_EQ(fscanf(f, "%" SCNu64 "\n", &token), 1);
  TH_ASSERT(fgets(text, (int)size, f) != NULL);
  text[strcspn(text, "\n")] = '\0';
  fclose(f);
  return token;
}

static void test_tokens_rise_and_stale_is_refused(void) {
  char dir[256], file[300], text[64];
  TH_ASSERT_EQ(th_mkdtemp(dir, sizeof dir, "fenced"), 0);
  snprintf(file, sizeof file, "%s/store.txt", dir);
  TH_ASSERT_EQ(run_store(file, "one"), 0);
  uint64_t first = read_store(file, text, sizeof text);
  TH_ASSERT_STR_EQ(text, "one");
  TH_ASSERT_CMP(first, >, 0);
  TH_ASSERT_EQ(run_store(file, "two"), 0);
  uint64_t second = read_store(file, text, sizeof text);
  TH_ASSERT_STR_EQ(text, "two");
  TH_ASSERT_CMP(second, >, first);
  /* A newer holder (a new master's token, far above) wrote meanwhile: the
   * next grant of this master is stale there. */
  FILE *f = fopen(file, "w");
  TH_ASSERT(f != NULL);
  fprintf(f, "%" PRIu64 "\nnewer\n", second + ((uint64_t)1 << 40));
  fclose(f);
  TH_ASSERT_EQ(run_store(file, "three"), 3);
  TH_ASSERT_EQ(read_store(file, text, sizeof text), second + ((uint64_t)1 << 40));
  TH_ASSERT_STR_EQ(text, "newer");
  unlink(file);
  rmdir(dir);
}

static const th_case cases[] = {
    TH_CASE(tokens_rise_and_stale_is_refused, 60),
};
TH_MAIN(cases)
