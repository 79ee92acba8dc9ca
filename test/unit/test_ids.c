/* Randomness without Redis: ids well formed, never repeated, and a forked
 * child never hands out the ids its parent hands out next; jittered waits
 * (the reconnect backoff's, the Sentinel link's asking again) within their
 * bounds and spread over them. */
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base/util.h"
#include "harness.h"
#include "net/sentinel.h"

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

/* n draws of sluice__jittered(d): all in [d/2, d], and both ends drawn
 * (51 values at d = 100: an end missed in 10,000 draws has odds e^-196). */
static void jittered_spread(uint32_t d, int n) {
  uint32_t lo = UINT32_MAX, hi = 0;
  for (int i = 0; i < n; i++) {
    uint32_t w = sluice__jittered(d);
    TH_ASSERT_CMP(w, >=, d / 2);
    TH_ASSERT_CMP(w, <=, d);
    lo = w < lo ? w : lo;
    hi = w > hi ? w : hi;
  }
  TH_ASSERT_EQ(lo, d / 2);
  TH_ASSERT_EQ(hi, d);
}

static void test_jittered(void) {
  TH_ASSERT_EQ(sluice__jittered(0), 0);
  jittered_spread(1, 1000);
  jittered_spread(3, 1000);
  jittered_spread(100, 10000);
  for (int i = 0; i < 1000; i++) TH_ASSERT_CMP(sluice__jittered(UINT32_MAX), >=, UINT32_MAX / 2);
}

/* A sentinel that says to wait is asked again after 100 ms, 200, 400, 800,
 * then every 1 s (the step), each wait drawn within [step/2, step]; a
 * crowd's first waits spread over 50-100 ms rather than all at 100. */
static void test_sentinel_again(void) {
  static const unsigned steps[] = {100, 200, 400, 800, 1000, 1000, 1000};
  unsigned step = 0;
  for (size_t i = 0; i < sizeof steps / sizeof steps[0]; i++) {
    unsigned wait = sluice__sentinel_again_ms(&step);
    TH_ASSERT_EQ(step, steps[i]);
    TH_ASSERT_CMP(wait, >=, step / 2);
    TH_ASSERT_CMP(wait, <=, step);
  }
  int seen[101] = {0}, distinct = 0;
  for (int client = 0; client < 1000; client++) {
    step = 0;
    unsigned wait = sluice__sentinel_again_ms(&step);
    TH_ASSERT(wait >= 50 && wait <= 100);
    distinct += !seen[wait]++;
  }
  th_note("first waits of 1000 clients: %d distinct values in 50-100 ms\n", distinct);
  TH_ASSERT_CMP(distinct, >=, 40);
}

static const th_case cases[] = {
    TH_CASE(unique_and_hex, 10), TH_CASE(fork_does_not_repeat, 10), TH_CASE(below, 10),
    TH_CASE(jittered, 10),       TH_CASE(sentinel_again, 10),
};
TH_MAIN_LOCAL(cases)
