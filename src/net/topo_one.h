/*
 * The backends with one data node at a time: one Redis (topo_single.c) and
 * the master Sentinel names (topo_sentinel.c). Both keep one command
 * connection; the Sentinel backend adds where it connects to.
 */
#ifndef SLUICE_TOPO_ONE_H
#define SLUICE_TOPO_ONE_H

#include "net/topo.h"

typedef struct sluice__topo_one {
  sluice__topo t;
  sluice__conn conn;
  void (*drained)(void *ud); /* sluice__topo_one_drain's */
  void *drained_ud;
} sluice__topo_one;

/* Set up o's connection (its `ready` hook may be NULL: always ready);
 * not started. 0, or -1 on OOM. */
int sluice__topo_one_init(sluice__topo_one *o, struct event_base *base,
                          const sluice__topo_config *cfg,
                          int (*ready)(sluice__conn *conn, void *userdata));
/* The operations both backends share (topo.h says what each does). */
void sluice__topo_one_start(sluice__topo *t);
void sluice__topo_one_drain(sluice__topo *t, unsigned timeout_ms, void (*done)(void *ud), void *ud);
int sluice__topo_one_routing(const sluice__topo *t);
int sluice__topo_one_up(const sluice__topo *t);
int sluice__topo_one_route_of(const sluice__topo *t, const char *key, size_t len);
sluice__conn *sluice__topo_one_conn(sluice__topo *t, int route);
sluice__conn *sluice__topo_one_conn_at(sluice__topo *t, const char *addr, size_t len,
                                       const sluice__conn *like);
void sluice__topo_one_decide(sluice__topo *t, sluice__conn *from, const redisReply *err,
                             sluice__topo_decision *d);
int sluice__topo_one_node_route(const sluice__topo *t, unsigned i);
void sluice__topo_one_where(const sluice__topo *t, char *buf, size_t size);

/* err starts with word. */
int sluice__topo_says(const redisReply *err, const char *word);
/* READONLY, LOADING, MASTERDOWN: the node is not a writable master now. */
int sluice__topo_not_master(const redisReply *err);

#endif
