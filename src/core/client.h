/* The client's layout, shared by client.c and blocker.c only. */
#ifndef SLUICE_CLIENT_PRIVATE_H
#define SLUICE_CLIENT_PRIVATE_H

#include <sluice/client.h>

#include "net/cluster.h"
#include "net/conn.h"
#include "core/guard.h"
#include "base/histogram.h"
#include "net/sentinel.h"
#include "core/engine.h"
#include "net/url.h"

typedef struct sluice__blocker sluice__blocker;

struct sluice_client {
  struct event_base *base;
  sluice_client_options opts;     /* strings below are owned copies */
  sluice__endpoint endpoint;
  char *key_prefix;
  char id[33];                    /* random id of this client instance */

  sluice__conn cmd;               /* the command connection */
  uint64_t up_since_ms;           /* monotonic: last handshake completed */
  sluice__list ops;               /* operations not yet completed */
  sluice__list unsent;            /* waiting for the first connection's context */
  sluice__list wait_open;         /* WAITs to send this turn (wait_replicas) */
  struct event *wait_ev;          /* sends them, after the turn's scripts */
  sluice__sentinel *sentinel;     /* redis+sentinel://: finds the master */
  sluice__cluster *cluster;       /* redis+cluster://: the map and the masters */
  sluice__guard_home home;        /* every object created on the client */
  sluice__blocker *blocker;       /* created on first listen */

  sluice_client_state_cb *state_cb;
  void *state_ud;
  sluice_close_cb *close_cb;
  void *close_ud;
  struct event *reaper;           /* runs the close sequence from the loop */
  int closing;                    /* close requested: public calls refused */
  int sealed;                     /* objects cancelled: no new operations */
  int reaped;                     /* close sequence done */
  sluice_client_stats stats;
  unsigned pending_pushes;        /* delay-queue messages sent, not answered */
  int replicas;                   /* see sluice__client_replicated */
  char last_error[512];           /* a connection error or Redis's own words */

  /* Metrics (sluice_client_get_metrics): by script index, the last entry
   * for plain commands. */
  struct {
    uint64_t evals, commands, connect_failures, disconnects, queued_connecting;
    uint64_t by_status[SLUICE_METRICS_STATUSES];
    uint64_t ops[SLUICE__LUA_COUNT + 1], errors[SLUICE__LUA_COUNT + 1];
    sluice__hist latency[SLUICE__LUA_COUNT + 1];
  } m;

  /* The log hook: messages queue here and leave from log_ev, so the
   * callback never runs inside a hiredis frame or a caller's call. */
  sluice_log_cb *log_cb;
  void *log_ud;
  struct event *log_ev;
  struct event *clock_ev;         /* measures the base's clock, once */
  unsigned log_head, log_len, log_dropped;
  struct {
    int level;
    char msg[240];
  } log_ring[16];
  unsigned clock_turns;
  uint64_t clock_start_us;        /* CLOCK_MONOTONIC when the check began */
  int64_t clock_last_us;          /* the base's cached time, last turn */
  uint64_t clock_min_step_us;     /* smallest step seen in it */
  unsigned clock_steps;
  int clock_checked;
  int m_up;                       /* the command connection was up */
  unsigned m_fails;               /* failed attempts since it last was */
  char m_last_down[256];          /* the last failure logged */
};

sluice__blocker *sluice__blocker_new(sluice_client *c);
void sluice__blocker_free(sluice__blocker *b);
/* The command connection is back: reconnect now if waiting out a backoff,
 * so the waiting side never lags. */
void sluice__blocker_kick(sluice__blocker *b);
/* The master moved: drop the blocking connection now (it reconnects). */
void sluice__blocker_moved(sluice__blocker *b);
/* A cluster's map changed: blocking connections whose slot moved to
 * another node reconnect there; those waiting for an address connect. */
void sluice__blocker_remap(sluice__blocker *b);
/* Data connections may connect now (the sentinels named the master). */
int sluice__client_ready(sluice__conn *conn, void *ud);
/* A data connection failed: ask the sentinels again before reconnecting. */
void sluice__client_data_down(sluice_client *c);
/* 1 up, 0 down, -1 nothing listens. */
int sluice__blocker_up(const sluice__blocker *b);


#endif
