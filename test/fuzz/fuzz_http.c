/*
 * libFuzzer target: the agent's HTTP request head parser (src/cli/agent/
 * http_parse.c), fed a head as the agent cuts it from its input: up to and
 * including the first empty line.
 *
 * For every input: the parser accepts or refuses it, never reads or writes
 * past it (ASan watches), and what it accepts holds together: a method of
 * token characters, a target without spaces or control bytes, at most
 * HTTP_FIELDS_MAX fields whose names are found again by http_field_get.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/agent/http_parse.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check(int ok, const char *what) {
  if (ok) return;
  fprintf(stderr, "fuzz_http: %s\n", what);
  abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  /* The agent hands over a head ending with its empty line. */
  const uint8_t *end = size >= 4 ? memmem(data, size, "\r\n\r\n", 4) : NULL;
  size_t len = end ? (size_t)(end - data) + 4 : size;
  char *head = malloc(len + 1);
  if (!head) return 0;
  memcpy(head, data, len);
  head[len] = 0;
  http_request r;
  if (http_parse(head, len, &r) == 0) {
    check(r.method && *r.method && strcspn(r.method, " \r\n:") == strlen(r.method), "method");
    check(r.target && *r.target, "target");
    for (const char *t = r.target; *t; t++) check((unsigned char)*t > ' ', "target byte");
    check(r.minor >= 0 && r.minor <= 9, "version");
    check(r.nfields >= 0 && r.nfields <= HTTP_FIELDS_MAX, "field count");
    for (int i = 0; i < r.nfields; i++) {
      check(*r.field[i].name && !strchr(r.field[i].value, '\r') && !strchr(r.field[i].value, '\n'),
            "field");
      check(http_field_get(&r, r.field[i].name) != NULL, "a field is not found again");
    }
    check(r.keep_alive == 0 || r.keep_alive == 1, "keep_alive");
  }
  free(head);
  return 0;
}
