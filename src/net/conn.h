/*
 * One Redis connection with its own life cycle: connect (TCP, TLS over TCP,
 * or unix), the handshake (AUTH, SELECT, SCRIPT LOAD, ROLE for a Sentinel's
 * master, INFO server for the node's run_id), connect timeout, and reconnect with exponential
 * backoff, jittered, after any failure. Its users: the topologies'
 * data connections (net/topo_single.c, net/topo_sentinel.c, and through
 * net/cluster.c one per master), the Sentinel link's own (net/sentinel.c)
 * and the blocking connections (core/blocker.c).
 *
 * hiredis 0.14 rules this file keeps (each one a crash on 0.14 otherwise):
 * never free or disconnect a context from inside a hiredis callback (we
 * defer to our own event), forget the context as soon as hiredis says it is
 * gone, and tolerate callbacks that run synchronously inside redisAsyncFree.
 */
#ifndef SLUICE_CONN_H
#define SLUICE_CONN_H

#include <stdint.h>

#include <event2/event.h>
#include <hiredis/async.h>

#include "net/reply_bounds.h"
#include "net/url.h"

enum sluice__conn_state {
  SLUICE_CONN_IDLE,       /* not started, or shut down */
  SLUICE_CONN_CONNECTING, /* TCP/unix connect or handshake in progress */
  SLUICE_CONN_UP,         /* handshake done: commands flow */
  SLUICE_CONN_WAITING,    /* lost; a reconnect is scheduled */
  SLUICE_CONN_RESOLVING   /* waiting for the address (ready said not yet) */
};

typedef struct sluice__conn sluice__conn;

/* Where and how a client's connections connect: one template, copied into
 * every connection, the topology and the Sentinel link. */
typedef struct sluice__net_config {
  const sluice__endpoint *endpoint; /* borrowed; outlives the conn */
  unsigned connect_timeout_ms;
  unsigned reconnect_min_ms;
  unsigned reconnect_max_ms;
} sluice__net_config;

typedef struct sluice__conn_config {
  sluice__net_config net;
  /* Scripts to SCRIPT LOAD in the handshake (NULL-terminated, or NULL), so
   * that EVALSHA never meets NOSCRIPT on a fresh connection: a NOSCRIPT
   * fallback re-sends the script later than commands pipelined after it,
   * which would break the in-order guarantee callers rely on. */
  const struct sluice__script *const *scripts;
  /* Called from the loop when the handshake completes / the connection is
   * lost or an attempt failed (status < 0). */
  void (*on_up)(sluice__conn *conn, void *userdata);
  void (*on_down)(sluice__conn *conn, int status, void *userdata);
  /* Optional: 1 when the endpoint's address may be used now; 0 to wait
   * (RESOLVING) until sluice__conn_start is called again. */
  int (*ready)(sluice__conn *conn, void *userdata);
  /* Optional: a context exists and the handshake is queued on it; commands
   * sent now follow the handshake. */
  void (*on_context)(sluice__conn *conn, void *userdata);
  /* A data connection: its handshake also asks how many replicas are
   * online (WAIT 0 0 before any write counts every replica in sync). */
  int count_replicas;
  /* Watch the link while answers are due (net/link_watch.h): a data
   * connection, whose silence stalls operations. */
  int watch_link;
  void *userdata;
} sluice__conn_config;

struct sluice__conn {
  sluice__conn_config cfg;
  struct event_base *base;
  redisAsyncContext *ac; /* NULL when no context exists */
  void *ssl;             /* ac's TLS object (owned by hiredis) or NULL */
  enum sluice__conn_state state;
  int failed;           /* lost or failed since last UP */
  int draining;         /* graceful close in progress */
  int down_pending;     /* report a failed start from the loop */
  int handshake_failed; /* a step of this attempt failed */
  void (*drained)(sluice__conn *conn, void *userdata);
  unsigned attempts; /* consecutive failed attempts */
  unsigned retry_ms; /* the delay of the reconnect scheduled last */
  unsigned long ups; /* handshakes completed */
  int was_up;        /* in on_down: it had been up (lost, not failed) */
  int retried_early; /* sluice__conn_retry_early ran since the last up */
  /* Who answers: the server's run_id (INFO server, in the handshake; ""
   * when it could not be read, e.g. NOPERM) and address at the last up. In
   * on_up, new_node says the node is another one than at the previous up
   * (another address, or another run_id: a restart); never at the first. */
  char run_id[41];
  char up_addr[280];
  int new_node;
  char info_run_id[41]; /* this attempt's, until it is up */
  /* The node it talks to, unique in the process: a new id at the first up
   * and whenever new_node is set, so whoever noted it can tell later
   * whether this connection still reaches the same data. */
  uint64_t node_id;
  /* Replicas online at the last handshake (count_replicas; -1 unknown:
   * WAIT refused, or a replica answered). */
  int replicas_online;
  int info_replicas; /* this attempt's, until it is up */
  /* The node (node_id) was seen with a replica online, by the handshake
   * or by whoever learnt it since (a WAIT, INFO replication): cut off from
   * its replicas it may be replaced by one, so its writes wait for one. */
  int had_replicas;
  /* Redis's words when the handshake's INFO or WAIT was refused (an ACL
   * rule without them): "" when answered. Neither fails the handshake. */
  char info_refused[160];
  char wait_refused[160];
  uint64_t last_reply_ms; /* monotonic: last reply (the client's steps) */
  /* watch_link: the watch (net/link_watch.h); and whether the link failed
   * since the last reply: silent while losing packets (the watch), or
   * presumed dead (the engine). The next reply, or the next handshake,
   * clears it and tells the blocking side (core/engine.h). */
  struct sluice__link_watch *watch;
  int link_trouble;
  /* The client's wait_replicas state for this connection (client.c). */
  struct wait_batch *wait_open; /* writes sent this turn, for one WAIT */
  int replicas_short;           /* the last WAIT counted too few replicas */
  uint64_t wait_probe_ms;       /* when a WAIT last had a longer timeout */
  /* The client's calls across slots (core/batcher.c): refused while ups
   * is this (0: never), i.e. until the next handshake. */
  unsigned long spread_refused_ups;
  struct event *timer;           /* connect timeout, or reconnect delay */
  struct event *drop_ev;         /* deferred drop out of hiredis frames */
  char errstr[256];              /* "<what>: <detail>", truncated to fit */
  sluice__reply_refusal refusal; /* a reply too large for its bounds, on ac */
};

int sluice__conn_init(sluice__conn *conn, struct event_base *base, const sluice__conn_config *cfg);
/* Start connecting now (no-op unless IDLE or WAITING). */
void sluice__conn_start(sluice__conn *conn);
/* The node to reach changed: the failed attempts counted so far were the
 * old node's, so a reconnect waiting out their backoff (or the address)
 * starts now; any other state is left as it is. */
void sluice__conn_retry_now(sluice__conn *conn);
/* Another connection to the same node finished its handshake: the node is
 * back, so a reconnect waiting out a backoff starts now, its failed
 * attempts forgotten. At most once per backoff episode (from a loss to the
 * next up), so a sibling that comes up and goes down again and again
 * cannot make this one spin; any other state is left as it is. */
void sluice__conn_retry_early(sluice__conn *conn);
/* The node refused what the connection is for (its ACL rule): a reconnect
 * waiting out the backoff waits its cap instead, jittered (reconnecting
 * at once would be refused again, many times a second, until an operator
 * changes the rule); any other state is left as it is. */
void sluice__conn_retry_slowly(sluice__conn *conn);
/* 1 when a and b connect to the same address now (socket path, or host
 * and port). */
int sluice__conn_same_node(const sluice__conn *a, const sluice__conn *b);
/* Signs that the socket's segments are lost (a slow node loses none):
 * *resent, the segments sent again since it connected; *timed_out, 1 while
 * its retransmission or probe timer has fired with nothing acknowledged
 * since (this also counts sends a firewall on this host refused, which
 * are never counted as resent). 0, or -1 (a unix socket, no context, or
 * the kernel does not say). */
int sluice__conn_tcp_loss(const sluice__conn *conn, uint32_t *resent, int *timed_out);
/* Drop the connection from the loop (safe inside hiredis callbacks) and
 * reconnect after backoff; reason goes to errstr. */
void sluice__conn_fail(sluice__conn *conn, const char *reason);
/* Close gracefully: stop reconnecting, let hiredis write what is buffered
 * and read the replies still due (so fire-and-forget steps such as releases
 * reach Redis), then call drained from the loop. After timeout_ms, or at
 * once when not connected, the context is dropped instead. */
void sluice__conn_drain(sluice__conn *conn, unsigned timeout_ms,
                        void (*drained)(sluice__conn *conn, void *userdata));
/* Free the context and timers; no callbacks of this conn run afterwards
 * (pending hiredis callbacks still run, with NULL, inside this call). */
void sluice__conn_shutdown(sluice__conn *conn);
/* Send a command on the context (UP or CONNECTING). REDIS_OK/REDIS_ERR. */
int sluice__conn_send(sluice__conn *conn, redisCallbackFn *fn, void *privdata, int argc,
                      const char **argv, const size_t *lens);

#endif
