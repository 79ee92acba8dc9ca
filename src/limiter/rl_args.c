/* KEYS/ARGV of the rate limiters' check scripts: see rl_args.h. */
#include <stdlib.h>
#include <string.h>

#include "base/util.h"
#include "core/keys.h"
#include "limiter/rl_args.h"

void sluice__rl_check_key(sluice__args *a, const char *key) { sluice__args_key(a, key); }

void sluice__rl_check_head(sluice__args *a, const sluice__rl_call *s) {
  sluice__args_u64(a, s->limit);
  sluice__args_u64(a, s->period_ms);
  sluice__args_u64(a, s->burst);
}

void sluice__rl_check_item(sluice__args *a, unsigned cost, int peek, int64_t deadline) {
  sluice__args_u64(a, cost);
  sluice__args_bin(a, peek ? "1" : "0", 1);
  sluice__args_i64(a, deadline);
}

/* ---- keys ---------------------------------------------------------------- */

/* A limiter's tag is "<name length>:<name>:<key>": the length keeps a name
 * and a key apart whatever they contain (SCAN relies on it). */
char *sluice__rl_key(const sluice_client *c, const char *name, const char *key,
                     const char *suffix) {
  char len[24];
  size_t nl = sluice__fmt_u64(len, strlen(name));
  size_t n = strlen(name), k = strlen(key);
  char *tag = malloc(nl + n + k + 3);
  if (!tag) return NULL;
  memcpy(tag, len, nl);
  tag[nl] = ':';
  memcpy(tag + nl + 1, name, n);
  tag[nl + 1 + n] = ':';
  memcpy(tag + nl + n + 2, key, k + 1);
  char *rkey = sluice__key(c, "rl", tag, suffix);
  free(tag);
  return rkey;
}

int sluice__rl_frame_init(sluice__rl_frame *f, const sluice_client *c, const char *name,
                          const char *suffix) {
  f->whole = sluice__rl_key(c, name, "", suffix);
  if (!f->whole) return SLUICE_ENOMEM;
  /* A caller's key ends the tag: it goes just before "}" and the part. */
  f->tail = 1 + (suffix ? 1 + strlen(suffix) : 0);
  f->head = strlen(f->whole) - f->tail;
  return SLUICE_OK;
}

void sluice__rl_frame_clear(sluice__rl_frame *f) {
  free(f->whole);
  f->whole = NULL;
}

void sluice__rl_frame_key(const sluice__rl_frame *f, const char *key, size_t klen, char *out) {
  memcpy(out, f->whole, f->head);
  memcpy(out + f->head, key, klen);
  memcpy(out + f->head + klen, f->whole + f->head, f->tail + 1);
}
