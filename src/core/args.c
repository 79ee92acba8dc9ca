/* Script argument builder: see args.h. */
#include <stdlib.h>
#include <string.h>

#include "core/args.h"
#include "base/util.h"

#define NUM_SIZE 24 /* a 64-bit integer in decimal, sign and NUL included */

int sluice__args_init(sluice__args *a, int cap, int nnums) {
  a->nkeys = a->argc = a->failed = 0;
  a->cap = cap;
  a->nums_used = 0;
  a->nums_cap = (size_t)nnums * NUM_SIZE;
  int small = (size_t)cap <= sizeof a->argv_small / sizeof a->argv_small[0];
  a->argv = small ? a->argv_small : malloc((size_t)cap * sizeof *a->argv);
  a->lens = small ? a->lens_small : malloc((size_t)cap * sizeof *a->lens);
  a->nums = a->nums_cap <= sizeof a->nums_small ? a->nums_small : malloc(a->nums_cap);
  if (!a->argv || !a->lens || !a->nums) {
    sluice__args_clear(a);
    a->failed = 1;
    return SLUICE_ENOMEM;
  }
  return SLUICE_OK;
}

void sluice__args_clear(sluice__args *a) {
  if (a->argv != a->argv_small) free(a->argv);
  if (a->lens != a->lens_small) free(a->lens);
  if (a->nums != a->nums_small) free(a->nums);
  a->argv = NULL;
  a->lens = NULL;
  a->nums = NULL;
  a->cap = 0;
}

void sluice__args_bin(sluice__args *a, const void *p, size_t len) {
  if (a->argc >= a->cap) {
    a->failed = 1;
    return;
  }
  a->argv[a->argc] = p;
  a->lens[a->argc] = len;
  a->argc++;
}

void sluice__args_str(sluice__args *a, const char *s) { sluice__args_bin(a, s, strlen(s)); }

void sluice__args_key(sluice__args *a, const char *key) {
  if (a->nkeys != a->argc) a->failed = 1; /* a key after an argument */
  sluice__args_str(a, key);
  if (!a->failed) a->nkeys++;
}

static char *num_slot(sluice__args *a) {
  if (a->nums_used + NUM_SIZE > a->nums_cap) {
    a->failed = 1;
    return NULL;
  }
  char *p = a->nums + a->nums_used;
  a->nums_used += NUM_SIZE;
  return p;
}

void sluice__args_u64(sluice__args *a, uint64_t v) {
  char *p = num_slot(a);
  if (p) sluice__args_bin(a, p, sluice__fmt_u64(p, v));
}

void sluice__args_i64(sluice__args *a, int64_t v) {
  char *p = num_slot(a);
  if (p) sluice__args_bin(a, p, sluice__fmt_i64(p, v));
}

static size_t str_len(const sluice__strs *s, int i) {
  return s->lens ? s->lens[i] : strlen(s->v[i]);
}

void *sluice__argv_pack(size_t fixed, sluice__strs a, sluice__strs b, sluice__packed_argv *out) {
  const sluice__strs *parts[2] = {&a, &b};
  int argc = a.n + b.n;
  size_t bytes = fixed + (size_t)argc * (sizeof(char *) + sizeof(size_t));
  for (int k = 0; k < 2; k++)
    for (int i = 0; i < parts[k]->n; i++) bytes += str_len(parts[k], i) + 1;
  char *block = sluice__calloc(1, bytes);
  if (!block) return NULL;
  out->argc = argc;
  out->argv = (const char **)(block + fixed);
  out->lens = (size_t *)(out->argv + argc);
  out->bytes = bytes;
  char *p = (char *)(out->lens + argc);
  for (int k = 0, at = 0; k < 2; k++)
    for (int i = 0; i < parts[k]->n; i++, at++) {
      size_t n = str_len(parts[k], i);
      memcpy(p, parts[k]->v[i], n);
      p[n] = '\0';
      out->argv[at] = p;
      out->lens[at] = n;
      p += n + 1;
    }
  return block;
}
