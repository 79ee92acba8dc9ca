/*
 * examples/gateway as a child process of a test case (path in
 * $SLUICE_GATEWAY; $SLUICE_GATEWAY_WRAPPER, e.g. a valgrind command line,
 * goes in front of it), on th_server, and GET on a loopback port.
 */
#ifndef SLUICE_TEST_GATEWAY_PROC_H
#define SLUICE_TEST_GATEWAY_PROC_H

#include <sys/types.h>

typedef struct gateway {
  pid_t pid;
  int port;
  int wrapped; /* under a wrapper (valgrind): slow, RSS meaningless */
} gateway;

/* Start the gateway (extra: one more option, or NULL) on a port it picks
 * and read "gateway listening on 127.0.0.1:PORT" from it; fails the case if
 * it does not start. It dies with the case. */
void gateway_start(gateway *gw, const char *extra);
/* SIGTERM, then its exit status (128 + signal if killed, -1 if it had to
 * be killed after its time). */
int gateway_stop(gateway *gw);

/* GET path from 127.0.0.1:port on a fresh connection: the body of a 200
 * answer (malloc'd), or NULL. */
char *th_http_get(int port, const char *path);
/* th_http_get every 50 ms until the body contains needle; that body, or
 * NULL after timeout_ms. For servers that signal nothing (Prometheus). */
char *th_http_wait(int port, const char *path, const char *needle, unsigned timeout_ms);

#endif
