/*
 * Key names, in one place: how every primitive's keys are built
 * ("<prefix><kind>:{<name>}:<part>", the hash tag keeping one primitive in
 * one slot), the parts each kind has, and SCAN (sluice_client_scan, used by
 * `sluice top`), which finds the primitives by those same names.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/client.h"
#include "core/keys.h"

const char *const sluice__sem_parts[SEM_NKEYS] = {"holders", "queue", "beats", "meta"};
const char *const sluice__dq_parts[DQ_NKEYS] = {"z", "f", "d", "h", "c"};

char *sluice__key(const sluice_client *c, const char *kind, const char *name, const char *part) {
  size_t plen = strlen(c->key_prefix), klen = strlen(kind), nlen = strlen(name);
  size_t tlen = part ? strlen(part) + 1 : 0;
  char *k = malloc(plen + klen + nlen + tlen + 5);
  if (!k) return NULL;
  char *p = k;
  memcpy(p, c->key_prefix, plen), p += plen;
  memcpy(p, kind, klen), p += klen;
  *p++ = ':';
  *p++ = '{';
  memcpy(p, name, nlen), p += nlen;
  *p++ = '}';
  if (part) {
    *p++ = ':';
    memcpy(p, part, tlen - 1), p += tlen - 1;
  }
  *p = '\0';
  return k;
}

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

/* ---- SCAN ---------------------------------------------------------------- */

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
