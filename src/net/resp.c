/* RESP commands; see resp.h. */
#include <stdint.h>
#include <string.h>

#include "net/resp.h"
#include "base/util.h"

static size_t digits(size_t v) {
  size_t n = 1;
  while (v >= 10) v /= 10, n++;
  return n;
}

static size_t arg_len(const char *const *argv, const size_t *lens, int i) {
  return lens ? lens[i] : strlen(argv[i]);
}

size_t sluice__resp_size(int argc, const char *const *argv, const size_t *lens) {
  size_t n = 1 + digits((size_t)argc) + 2;
  for (int i = 0; i < argc; i++) {
    size_t len = arg_len(argv, lens, i);
    n += 1 + digits(len) + 2 + len + 2;
  }
  return n;
}

/* "<mark><v>\r\n" at p; returns the end. */
static char *header(char *p, char mark, size_t v) {
  *p++ = mark;
  p += sluice__fmt_u64(p, (uint64_t)v);
  *p++ = '\r';
  *p++ = '\n';
  return p;
}

void sluice__resp_write(char *out, int argc, const char *const *argv, const size_t *lens) {
  char *p = header(out, '*', (size_t)argc);
  for (int i = 0; i < argc; i++) {
    size_t len = arg_len(argv, lens, i);
    p = header(p, '$', len);
    memcpy(p, argv[i], len);
    p += len;
    *p++ = '\r';
    *p++ = '\n';
  }
  *p = '\0';
}
