/*
 * Building a script call's KEYS and ARGV. One builder per call: keys first,
 * then arguments; numbers are formatted into the builder's own storage. The
 * strings need only live until sluice__eval returns (it copies them).
 */
#ifndef SLUICE_ARGS_H
#define SLUICE_ARGS_H

#include <stddef.h>
#include <stdint.h>

typedef struct sluice__args {
  int nkeys; /* leading entries that are KEYS */
  int argc;
  int cap;
  const char **argv;
  size_t *lens;
  char *nums; /* storage for formatted numbers */
  size_t nums_used, nums_cap;
  int failed; /* out of room or memory: the call must not go */
  /* A call of one or a few requests fits here: no allocation. */
  const char *argv_small[16];
  size_t lens_small[16];
  char nums_small[8 * 24];
} sluice__args;

/* Room for up to cap entries, nnums of them numbers. 0 or SLUICE_ENOMEM. */
int sluice__args_init(sluice__args *a, int cap, int nnums);
void sluice__args_clear(sluice__args *a);

/* A key (counted in nkeys: keys must come before every argument). */
void sluice__args_key(sluice__args *a, const char *key);
void sluice__args_str(sluice__args *a, const char *s);
void sluice__args_bin(sluice__args *a, const void *p, size_t len);
void sluice__args_u64(sluice__args *a, uint64_t v);
void sluice__args_i64(sluice__args *a, int64_t v);

/* Strings to copy: v[0..n), their lengths (NULL: each up to its NUL). */
typedef struct sluice__strs {
  int n;
  const char *const *v;
  const size_t *lens;
} sluice__strs;

/* A command kept by sluice__argv_pack: its strings live in the block. */
typedef struct sluice__packed_argv {
  int argc;
  const char **argv;
  size_t *lens;
  size_t bytes; /* the whole block's size */
} sluice__packed_argv;

/* One zeroed allocation that keeps a command for later: `fixed` bytes for
 * the caller's struct, then a's strings and b's copied after it (argc
 * pointers, argc lengths, the bytes, each string NUL-terminated), so the
 * caller's buffers may go at once. *out describes the copy. NULL when out
 * of memory. */
void *sluice__argv_pack(size_t fixed, sluice__strs a, sluice__strs b, sluice__packed_argv *out);

#endif
