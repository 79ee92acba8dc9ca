/*
 * libFuzzer target: the agent's SPOP frame decoder (src/cli/agent/
 * spop_frame.c), fed whole frames as HAProxy's length prefix delimits them.
 *
 * For every input: the frame, a HELLO's and a NOTIFY's payload parse or are
 * refused, never read past the input (ASan watches), and what they accept
 * stays in range: a payload inside the frame, at most SPOP_ARGS_MAX
 * arguments, each a terminated string. Varints the encoder writes decode to
 * the same value.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/agent/spop_frame.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check(int ok, const char *what) {
  if (ok) return;
  fprintf(stderr, "fuzz_spop: %s\n", what);
  abort();
}

/* The value the encoder writes for v, read back by the decoder (through a
 * frame's stream id). */
static void check_varint(uint64_t v) {
  uint8_t buf[32];
  spop_out o = {buf, sizeof buf, 0, 0};
  spop_out_begin(&o, SPOP_ACK, v, 7);
  size_t n = spop_out_end(&o);
  spop_frame f;
  check(n > 4 && spop_frame_parse(buf + 4, n - 4, &f) == 0, "an encoded frame does not parse");
  check(f.stream_id == v && f.frame_id == 7 && f.payload_len == 0, "a varint changed");
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  spop_frame f;
  if (size >= 8) {
    uint64_t v;
    memcpy(&v, data, 8);
    check_varint(v);
  }
  if (spop_frame_parse(data, size, &f) != 0) return 0;
  check(f.payload >= data && f.payload + f.payload_len == data + size, "payload outside the frame");
  spop_hello h;
  if (spop_hello_parse(f.payload, f.payload_len, &h) == 0)
    check(!h.version_2 || h.has_versions, "a version without supported-versions");
  spop_notify *n = malloc(sizeof *n);
  if (!n) return 0;
  if (spop_notify_parse(f.payload, f.payload_len, n) == 0) {
    check(n->nargs >= 0 && n->nargs <= SPOP_ARGS_MAX, "too many arguments kept");
    for (int i = 0; i < n->nargs; i++)
      check(memchr(n->arg[i].name, 0, sizeof n->arg[i].name) &&
                memchr(n->arg[i].value, 0, sizeof n->arg[i].value),
            "an argument is not terminated");
    if (n->nargs) check(spop_notify_arg(n, n->arg[0].name) != NULL, "an argument is lost");
  }
  free(n);
  return 0;
}
