/*
 * The client's link to Redis Sentinel (redis+sentinel:// URLs): it finds
 * the master's address and follows it through failovers, as Redis documents
 * for clients.
 *
 *  - A query connection to one sentinel at a time asks
 *    SENTINEL get-master-addr-by-name; a sentinel that fails (connect,
 *    timeout, no answer) gives way to the next one in the list, and the one
 *    that answers stays in use.
 *  - A second connection subscribes to +switch-master: when the master of
 *    our name moves, the data connections are dropped at once, since the
 *    old master may accept writes for seconds after the switch and lose
 *    them.
 *  - The data connections ask for the address before every (re)connect
 *    (sluice__sentinel_address); they verify with ROLE in their handshake
 *    that it is a master, and a failed or lost connection asks again.
 */
#ifndef SLUICE_SENTINEL_H
#define SLUICE_SENTINEL_H

#include "url.h"

struct event_base;
typedef struct sluice__sentinel sluice__sentinel;

typedef struct sluice__sentinel_config {
  sluice__endpoint *data;         /* the data nodes' endpoint: its host/port are set here */
  unsigned connect_timeout_ms;
  unsigned reconnect_min_ms, reconnect_max_ms;
  /* The master's address changed (or its old connections must go): drop
   * and reconnect the data connections. */
  void (*moved)(void *userdata);
  /* A fresh address is known: data connections waiting for one may start. */
  void (*known)(void *userdata);
  void *userdata;
} sluice__sentinel_config;

sluice__sentinel *sluice__sentinel_new(struct event_base *base, const sluice__sentinel_config *cfg);
void sluice__sentinel_free(sluice__sentinel *s);
/* 1 when a fresh address is in the data endpoint (a data connection may
 * connect now); 0 when one was asked for: `known` follows. */
int sluice__sentinel_address(sluice__sentinel *s);
/* A data connection failed or found no master there: ask again before the
 * next connect. */
void sluice__sentinel_stale(sluice__sentinel *s);
/* The last sentinel error ("" if none). */
const char *sluice__sentinel_error(const sluice__sentinel *s);

#endif
