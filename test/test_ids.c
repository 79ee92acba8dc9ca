/* Random ids without Redis: well formed, never repeated, and a forked
 * child never hands out the ids its parent hands out next. */
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base/util.h"
#include "harness.h"

static int by_text(const void *a, const void *b) { return memcmp(a, b, 33); }

static void test_unique_and_hex(void) {
  enum { N = 100000 };
  char(*ids)[33] = malloc(N * sizeof *ids);
  TH_ASSERT(ids != NULL);
  for (int i = 0; i < N; i++) sluice__random_hex(ids[i]);
  for (int i = 0; i < N; i++) {
    TH_ASSERT_EQ(strlen(ids[i]), 32);
    TH_ASSERT_EQ(strspn(ids[i], "0123456789abcdef"), 32);
  }
  qsort(ids, N, sizeof *ids, by_text);
  for (int i = 1; i < N; i++) TH_ASSERT(strcmp(ids[i - 1], ids[i]) != 0);
  free(ids);
}

/* The parent's block of random bytes is not the child's. */
static void test_fork_does_not_repeat(void) {
  char first[33], parent[33], child[33];
  sluice__random_hex(first); /* a block is in use now */
  int fds[2];
  TH_ASSERT_EQ(pipe(fds), 0);
  pid_t pid = fork();
  TH_ASSERT(pid >= 0);
  if (pid == 0) {
    sluice__random_hex(child);
    _exit(write(fds[1], child, sizeof child) == (ssize_t)sizeof child ? 0 : 1);
  }
  sluice__random_hex(parent);
  TH_ASSERT_EQ(read(fds[0], child, sizeof child), (ssize_t)sizeof child);
  int st;
  TH_ASSERT_EQ(waitpid(pid, &st, 0), pid);
  TH_ASSERT(WIFEXITED(st) && WEXITSTATUS(st) == 0);
  close(fds[0]);
  close(fds[1]);
  TH_ASSERT(strcmp(parent, child) != 0);
  TH_ASSERT(strcmp(first, child) != 0);
}

static void test_below(void) {
  TH_ASSERT_EQ(sluice__random_below(0), 0);
  TH_ASSERT_EQ(sluice__random_below(1), 0);
  for (int i = 0; i < 10000; i++) TH_ASSERT_CMP(sluice__random_below(7), <, 7);
}

static const th_case cases[] = {
    TH_CASE(unique_and_hex, 10),
    TH_CASE(fork_does_not_repeat, 10),
    TH_CASE(below, 10),
};
TH_MAIN_LOCAL(cases)
