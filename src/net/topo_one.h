/*
 * The backends with one data node at a time share one implementation
 * (topo_single.c): one command connection, every route to it. What differs
 * is how the node's address is found: one Redis has it in its endpoint; the
 * Sentinel backend (topo_sentinel.c) asks the sentinels, through a finder.
 */
#ifndef SLUICE_TOPO_ONE_H
#define SLUICE_TOPO_ONE_H

#include "net/topo.h"

typedef struct sluice__topo_one sluice__topo_one;

/* Finds the node and writes its address into the endpoint. */
typedef struct sluice__topo_finder {
  int (*ready)(sluice__topo_one *o);               /* 1: the address may be used now */
  void (*stale)(sluice__topo_one *o);              /* a connection failed: look again */
  void (*doubt)(sluice__topo_one *o, int on);      /* sluice__topo_doubt */
  const char *(*error)(const sluice__topo_one *o); /* why none was found ("") */
  void (*stop)(sluice__topo_one *o);               /* before draining: no more lookups */
  void (*free)(sluice__topo_one *o);
} sluice__topo_finder;

struct sluice__topo_one {
  sluice__topo t;
  sluice__conn conn;
  const sluice__topo_finder *finder; /* NULL: the endpoint's own address */
  void (*drained)(void *ud);         /* sluice__topo_drain's */
  void *drained_ud;
};

/* A one-node topology of `size` bytes (at least sizeof(sluice__topo_one):
 * a finder's state may follow), not started; NULL on OOM. */
sluice__topo_one *sluice__topo_one_new(struct event_base *base, const sluice__topo_config *cfg,
                                       const sluice__topo_finder *finder, size_t size);
/* The topology's routes changed (a finder named the node): tell its user. */
void sluice__topo_one_routes(sluice__topo_one *o);

/* err starts with word. */
int sluice__topo_says(const redisReply *err, const char *word);
/* READONLY, LOADING, MASTERDOWN: the node is not a writable master now. */
int sluice__topo_not_master(const redisReply *err);

#endif
