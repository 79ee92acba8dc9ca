/*
 * The client's layout, private to core/: the client (client.c: options,
 * new/close, accessors, connection events), the op engine (engine.c), the
 * blocker (blocker.c), the log hook (log.c), metrics (metrics.c) and key
 * names (keys.c). Where steps go is the topology's business
 * (net/topo.h): one Redis, a Sentinel-managed master or a cluster's slots,
 * each with its own connections.
 */
#ifndef SLUICE_CLIENT_PRIVATE_H
#define SLUICE_CLIENT_PRIVATE_H

#include <sluice/client.h>

#include <event2/util.h>

#include "base/histogram.h"
#include "core/blocker.h"
#include "core/engine.h"
#include "core/guard.h"
#include "core/rclock.h"
#include "core/record.h"
#include "net/topo.h"
#include "net/url.h"

struct sluice_client {
  struct event_base *base;
  sluice_client_options opts; /* strings below are owned copies */
  sluice__endpoint endpoint;
  sluice__net_config net; /* every connection's template (endpoint above) */
  char *key_prefix;
  char id[33]; /* random id of this client instance */

  sluice__topo *topo;       /* where steps go (net/topo.h) */
  uint64_t node_changes;    /* the topology's node_changed events */
  uint64_t up_since_ms;     /* monotonic: last handshake completed */
  sluice__list ops;         /* operations not yet completed */
  sluice__list unsent;      /* waiting for a route (first connection, first map) */
  sluice__list wait_open;   /* WAITs to send this turn (wait_replicas) */
  struct event *wait_ev;    /* sends them, after the turn's scripts */
  sluice__guard_home home;  /* every object created on the client */
  sluice__blocker *blocker; /* created on first listen */
  sluice__rclock rclock;    /* Redis's clock, from replies (rclock.h) */

  sluice_client_state_cb *state_cb;
  void *state_ud;
  sluice_close_cb *close_cb;
  void *close_ud;
  struct event *reaper; /* runs the close sequence from the loop */
  int closing;          /* close requested: public calls refused */
  int sealed;           /* objects cancelled: no new operations */
  int reaped;           /* close sequence done */
  sluice_client_stats stats;
  unsigned used[SLUICE__CAPS_MAX];  /* under each of sluice__caps now (engine.h) */
  unsigned cap[SLUICE__CAPS_MAX];   /* the caps, from the options */
  int replicas;                     /* see sluice__client_replicated */
  unsigned confirm_wait_ms;         /* a confirmation WAIT's timeout */
  int replica_ack_off;              /* sluice_client_set_replica_ack(c, 0) */
  sluice__record rec;               /* unreplicated writes (record.h) */
  const sluice__answered *answered; /* the step being answered, during its callback */
  char last_error[512];             /* a connection error or Redis's own words */

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
  struct event *clock_ev; /* measures the base's clock, once */
  unsigned log_head, log_len, log_dropped;
  struct {
    int level;
    char msg[240];
  } log_ring[16];
  unsigned clock_turns;
  uint64_t clock_start_us;    /* CLOCK_MONOTONIC when the check began */
  int64_t clock_last_us;      /* the base's cached time, last turn */
  uint64_t clock_min_step_us; /* smallest step seen in it */
  unsigned clock_steps;
  int clock_checked;
  int m_up;                                      /* the command connection was up */
  unsigned said_info_refused, said_wait_refused; /* logged once */
  unsigned m_fails;                              /* failed attempts since it last was */
  char m_last_down[256];                         /* the last failure logged */
};

/* The engine (engine.c), for the client's own events and close. */
/* Steps wait for a route (no connection or map yet) or for a connection's
 * handshake; the client's events let them go (send) or fail them as never
 * sent (fail, with the reason in last_error): every waiting step, those
 * waiting for conn's handshake, or those waiting for a route. */
enum { SLUICE__WAITERS_ALL, SLUICE__WAITERS_OF_CONN, SLUICE__WAITERS_FOR_ROUTE };
void sluice__engine_send_unsent(sluice_client *c, int which, const sluice__conn *conn);
void sluice__engine_fail_unsent(sluice_client *c, int which, const sluice__conn *conn);
/* Every pending step completes with ECANCELED (the close sequence). */
void sluice__engine_cancel_all(sluice_client *c);
/* Steps not handed over while a connection was up (metrics). */
unsigned sluice__engine_waiting_connect(const sluice_client *c);
/* Sends the turn's WAITs (wait_replicas): c->wait_ev's callback. */
void sluice__engine_wait_cb(evutil_socket_t fd, short what, void *arg);
/* sluice__eval on route (-1: KEYS[1]'s, or any node for a script without
 * keys): the scan's steps go to one node after another. */
int sluice__eval_at(sluice_client *c, int route, const sluice__script *s, int nkeys, int argc,
                    const char *const *argv, const size_t *lens, unsigned timeout_ms,
                    sluice__reply_fn *fn, void *ud, sluice__op **out);

/* The log hook's clock probe and delivery (log.c): c->log_ev, c->clock_ev. */
void sluice__log_deliver_cb(evutil_socket_t fd, short what, void *arg);
void sluice__clock_check_cb(evutil_socket_t fd, short what, void *arg);

#endif
