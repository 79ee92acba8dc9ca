/* Hash slots; see slot.h. */
#include <string.h>

#include "net/slot.h"

uint16_t sluice__crc16(const void *buf, size_t len) {
  const unsigned char *p = buf;
  unsigned crc = 0;
  while (len--) {
    crc ^= (unsigned)*p++ << 8;
    for (int bit = 0; bit < 8; bit++) crc = crc & 0x8000 ? (crc << 1) ^ 0x1021 : crc << 1;
  }
  return (uint16_t)crc;
}

void sluice__hashed_part(const char *key, size_t len, const char **part, size_t *plen) {
  const char *open = memchr(key, '{', len);
  if (open) {
    const char *close = memchr(open + 1, '}', len - (size_t)(open + 1 - key));
    if (close && close > open + 1) { /* "{}" hashes the whole key */
      *part = open + 1;
      *plen = (size_t)(close - open - 1);
      return;
    }
  }
  *part = key;
  *plen = len;
}

unsigned sluice__keyslot(const void *key, size_t len) {
  const char *part;
  size_t plen;
  sluice__hashed_part(key, len, &part, &plen);
  return sluice__crc16(part, plen) & (SLUICE__SLOTS - 1);
}
