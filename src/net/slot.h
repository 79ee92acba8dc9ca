/*
 * Redis Cluster hash slots: which of the 16384 slots a key lives in. The
 * slot is CRC16 (XMODEM: polynomial 0x1021, initial value 0) of the key's
 * hash tag — the bytes between its first '{' and the next '}' when there
 * are any — or of the whole key, modulo 16384. Every key of one primitive
 * carries the same tag, so its steps always run on one node.
 */
#ifndef SLUICE_SLOT_H
#define SLUICE_SLOT_H

#include <stddef.h>
#include <stdint.h>

#define SLUICE__SLOTS 16384

uint16_t sluice__crc16(const void *buf, size_t len);
unsigned sluice__keyslot(const void *key, size_t len);
/* The part of key that is hashed: its tag, or the whole key. */
void sluice__hashed_part(const char *key, size_t len, const char **part, size_t *plen);

#endif
