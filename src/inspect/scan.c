/*
 * SCAN over the primitives' keys (sluice_client_scan, used by `sluice top`):
 * it finds each kind by a part its keys always have, named by the primitive
 * itself, so the two cannot drift apart.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/client.h"
#include "dq/dq_args.h"
#include "sem/sem_args.h"

typedef struct scan_req {
  sluice_client *c;
  sluice_scan_cb *cb;
  void *ud;
  unsigned node; /* cluster: which master (by its lowest slot) */
} scan_req;

/* On a cluster the cursor names the master too: SCAN visits one node's
 * keys, so the scan goes through the masters one after another, the
 * master's index in the bits above NODE_CURSOR_BITS. */
#define NODE_CURSOR_BITS 40
#define NODE_CURSOR_MASK ((UINT64_C(1) << NODE_CURSOR_BITS) - 1)

static void scan_done(void *ud, int status, const redisReply *r) {
  scan_req *q = ud;
  sluice_scan_entry *e = NULL;
  size_t n = 0;
  uint64_t next = 0;
  const redisReply *cur = sluice__reply_at(r, 0);
  if (status == SLUICE_OK) {
    if (!cur || cur->type != REDIS_REPLY_STRING || (r->elements - 1) % 5) status = SLUICE_EPROTOCOL;
    else next = strtoull(cur->str, NULL, 10);
  }
  if (status == SLUICE_OK) {
    n = (r->elements - 1) / 5;
    e = calloc(n + 1, sizeof *e);
    if (!e) status = SLUICE_ENOMEM, n = 0;
  }
  for (size_t i = 0; status == SLUICE_OK && i < n; i++) {
    redisReply *const *f = r->element + 1 + 5 * i;
    int64_t ttl;
    for (int j = 0; j < 4; j++)
      if (f[j]->type != REDIS_REPLY_STRING) status = SLUICE_EPROTOCOL;
    if (status != SLUICE_OK || sluice__reply_i64(f[4], &ttl)) {
      status = SLUICE_EPROTOCOL;
      break;
    }
    e[i].name = f[0]->str;
    e[i].key = f[1]->len ? f[1]->str : NULL;
    e[i].algo = f[2]->len ? f[2]->str : NULL;
    e[i].state = f[3]->len ? f[3]->str : NULL;
    e[i].ttl_ms = ttl;
  }
  if (status != SLUICE_OK) n = 0, next = 0;
  if (status == SLUICE_OK && q->c->topo->ops->many) {
    if (next > NODE_CURSOR_MASK) status = SLUICE_EPROTOCOL, n = 0, next = 0;
    else if (next) next |= (uint64_t)q->node << NODE_CURSOR_BITS;
    else if (sluice__topo_node_route(q->c->topo, q->node + 1) >= 0)
      next = (uint64_t)(q->node + 1) << NODE_CURSOR_BITS;
  }
  q->cb(q->c, status, next, status == SLUICE_OK ? e : NULL, n, q->ud);
  free(e);
  sluice__free(q);
}

/* The part SCAN matches, one key per primitive: a semaphore's meta, a
 * queue's hash, any of a limiter's (it has one, named by its algorithm). */
static const char *scan_part(const char *kind) {
  if (strcmp(kind, "sem") == 0) return sluice__sem_parts[SEM_KEY_META];
  if (strcmp(kind, "dq") == 0) return sluice__dq_parts[DQ_KEY_HASH];
  if (strcmp(kind, "rl") == 0) return "*";
  return NULL;
}

/* s with the glob characters of SCAN's MATCH escaped, appended to out. */
static size_t glob_escape(char *out, const char *s) {
  size_t n = 0;
  for (; *s; s++) {
    if (strchr("*?[]\\", *s)) out[n++] = '\\';
    out[n++] = *s;
  }
  return n;
}

int sluice_client_scan(sluice_client *c, const char *kind, const char *match, uint64_t cursor,
                       sluice_scan_cb *cb, void *ud) {
  char tail[16];
  if (!c || !kind || !cb) return SLUICE_EINVAL;
  if (c->closing) return SLUICE_ECLOSED;
  const char *part = scan_part(kind);
  if (!part) return SLUICE_EINVAL;
  snprintf(tail, sizeof tail, "}:%s", part);
  if (!match || !*match) match = "*";
  size_t plen = strlen(c->key_prefix), mlen = strlen(match);
  char *head = malloc(plen + 8), *pat = malloc(2 * plen + 2 * mlen + 48);
  if (!head || !pat) {
    free(head);
    free(pat);
    return SLUICE_ENOMEM;
  }
  snprintf(head, plen + 8, "%s%s:{", c->key_prefix, kind);
  size_t n = glob_escape(pat, c->key_prefix);
  n += (size_t)sprintf(pat + n, "%s:{", kind);
  /* A limiter's tag is "<name length>:<name>:<key>": a plain name pins its
   * length; a glob cannot, so it may also match inside the key. */
  if (strcmp(kind, "rl") == 0 && !strpbrk(match, "*?[\\"))
    n += (size_t)sprintf(pat + n, "%zu:%s:*", mlen, match);
  else if (strcmp(kind, "rl") == 0 && strcmp(match, "*") != 0)
    n += (size_t)sprintf(pat + n, "*:%s:*", match);
  else n += (size_t)sprintf(pat + n, "%s", match);
  sprintf(pat + n, "%s", tail);
  char cur[24];
  int slot = -1;
  unsigned node = 0;
  if (c->topo->ops->many) {
    node = (unsigned)(cursor >> NODE_CURSOR_BITS);
    cursor &= NODE_CURSOR_MASK;
    slot = sluice__topo_node_route(c->topo, node);
    if (slot < 0 && node > 0) { /* the map changed under the scan: it ends */
      free(head);
      free(pat);
      return SLUICE_EINVAL;
    }
  }
  sluice__fmt_u64(cur, cursor);
  const char *argv[5] = {cur, pat, "200", kind, head};
  scan_req *q = sluice__calloc(1, sizeof *q);
  int rc = SLUICE_ENOMEM;
  if (q) {
    q->c = c;
    q->cb = cb;
    q->ud = ud;
    q->node = node;
    rc = sluice__eval_at(c, slot, &sluice__lua_top_scan, 0, 5, argv, NULL, 0, scan_done, q, NULL);
    if (rc != SLUICE_OK) sluice__free(q);
  }
  free(head);
  free(pat);
  return rc;
}
