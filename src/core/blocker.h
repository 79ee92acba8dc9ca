/*
 * The blocking side (blocker.c): BRPOP connections over the lists the
 * client's primitives wait on. It is given what it needs of its client once
 * and asks the topology (net/topo.h) where a route's node is; it never reads
 * the client, and the client's events reach it through the calls below.
 */
#ifndef SLUICE_BLOCKER_H
#define SLUICE_BLOCKER_H

#include "core/engine.h"
#include "net/topo.h"

typedef struct sluice__blocker sluice__blocker;

typedef struct sluice__blocker_env {
  sluice_client *c; /* only for sluice__eval, sluice__key and sluice__log */
  struct event_base *base;
  sluice__topo *topo;
  sluice__net_config net; /* its endpoint: credentials and TLS to share */
  const char *id;         /* the client's id, in control keys */
} sluice__blocker_env;

sluice__blocker *sluice__blocker_new(const sluice__blocker_env *env);
void sluice__blocker_free(sluice__blocker *b);
/* sluice__listen's work, once the client has a blocker. */
int sluice__blocker_listen(sluice__blocker *b, const char *key, sluice__wake_fn *fn, void *ud,
                           sluice__listener **out);
/* The command connection `data` is back: connections to the same node
 * waiting out a backoff reconnect now (once per backoff episode), so the
 * waiting side never lags. */
void sluice__blocker_kick(sluice__blocker *b, const sluice__conn *data);
/* The link to data's node held traffic back (client.c): the blocking
 * connections to that node reconnect, since the node may sit on a BRPOP's
 * answer until its retransmission timer fires, and their listeners
 * re-check once they are up. */
void sluice__blocker_restart(sluice__blocker *b, const sluice__conn *data);
/* Every route's node was replaced: drop the blocking connections now. */
void sluice__blocker_moved(sluice__blocker *b);
/* Routes changed: connections waiting for an address connect, those whose
 * route moved to another node reconnect there. */
void sluice__blocker_remap(sluice__blocker *b);
/* 1 up, 0 down, -1 nothing listens. */
int sluice__blocker_up(const sluice__blocker *b);

#endif
