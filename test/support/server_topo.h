/*
 * The binary's server as a cluster or a sentinel set (TH_TOPOLOGY), for
 * harness.c: starting and stopping it, and reaching its masters. The cases
 * use the th_redis_* helpers of harness.h, which call these.
 */
#ifndef SLUICE_TEST_SERVER_TOPO_H
#define SLUICE_TEST_SERVER_TOPO_H

#include <stdarg.h>

#include "harness.h"

/* TH_TOPOLOGY read into *out; -1 (printed) for a value it does not know. */
int th__server_topo_parse(th_topo *out);
/* Starts the topology and sets th_server.url: 0, -1 (printed) or -2 (a
 * program is missing). */
int th__server_topo_start(th_topo kind);
void th__server_topo_stop(void);
/* A sync connection to master i of the topology, NULL if it cannot. */
redisContext *th__server_topo_master(int i);
int th__server_topo_masters(void);
/* The pid of the master serving key (cluster), or of the master (sentinel). */
pid_t th__server_topo_pid(const char *key);
/* One formatted command, sent where its key lives (MOVED and ASK
 * followed); NULL if no node answered. */
redisReply *th__server_topo_command(const char *cmd, size_t len);

#endif
