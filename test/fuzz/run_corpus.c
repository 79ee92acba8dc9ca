/* Runs a libFuzzer target over files, for compilers without libFuzzer:
 * the seed corpus as a regression test (every case one input). TAP. */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int run_file(const char *path) {
  FILE *f = fopen(path, "rb");
  if (!f) return -1;
  uint8_t *buf = malloc(1 << 16);
  size_t n = buf ? fread(buf, 1, 1 << 16, f) : 0;
  fclose(f);
  if (!buf) return -1;
  LLVMFuzzerTestOneInput(buf, n); /* aborts on a broken invariant */
  free(buf);
  return 0;
}

int main(int argc, char **argv) {
  int n = 0, failed = 0;
  for (int i = 1; i < argc; i++) {
    DIR *d = opendir(argv[i]);
    struct dirent *e;
    if (!d) {
      printf("not ok %d - %s: cannot open\n", ++n, argv[i]);
      failed++;
      continue;
    }
    while ((e = readdir(d)) != NULL) {
      char path[4096];
      if (e->d_name[0] == '.') continue;
      snprintf(path, sizeof path, "%s/%s", argv[i], e->d_name);
      int rc = run_file(path);
      printf("%s %d - %s\n", rc ? "not ok" : "ok", ++n, e->d_name);
      failed += rc != 0;
    }
    closedir(d);
  }
  printf("1..%d\n", n);
  return failed ? 1 : 0;
}
