/* Key names: "<prefix><kind>:{<name>}:<part>" (keys.h). */
#include <stdlib.h>
#include <string.h>

#include "core/client.h"
#include "core/keys.h"

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
