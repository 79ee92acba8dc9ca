/*
 * The client's link to Redis Sentinel (redis+sentinel:// URLs): it finds
 * the master's address and follows it through failovers, as Redis documents
 * for clients.
 *
 *  - A query connection to one sentinel at a time asks
 *    SENTINEL get-master-addr-by-name and, in the same round trip,
 *    SENTINEL MASTER (its flags and config epoch); a sentinel that fails
 *    (connect, timeout, no answer) gives way to the next one in the list,
 *    and the one that answers stays in use and moves to the front of the
 *    list.
 *  - An answer is judged before it is taken (sentinel.c, judge): a
 *    sentinel that names the old master while failing it over, or sees it
 *    down, is asked again (after waits doubling, jittered so that a crowd
 *    of clients spreads out) until it names the new one; one whose config
 *    epoch is older than the newest seen (or not newer, after a switch was
 *    heard or a failover seen) is behind, and the next sentinel is asked.
 *    The old master can answer ROLE master for seconds after a switch
 *    (until a sentinel demotes it, or restarted empty), so the handshake's
 *    ROLE check alone cannot tell.
 *  - The list is the link's own: the configured sentinels, then those a
 *    sentinel that answered reports (SENTINEL sentinels, asked after each
 *    answer), without duplicates and at most 16 in all, so that the master
 *    is still found when every configured sentinel is gone.
 *  - Connections to up to five of them subscribe to +switch-master (each
 *    sentinel announces a switch, the leader first, the others when its
 *    hello messages reach them, seconds later): when the master of our name
 *    moves, the data connections are dropped at once, since the old master
 *    may accept writes for seconds after the switch and lose them. A
 *    client that heard only a late sentinel could meanwhile reach the old
 *    master restarted empty, which names itself master until a sentinel
 *    turns it into a replica. A sentinel whose ACL rule refuses the
 *    subscription is logged once (WARN) and retried slowly.
 *  - While the master does not confirm writes (a WAIT that no replica
 *    acknowledged: cut off from them, and perhaps from the majority of the
 *    sentinels with the one we ask), every known sentinel (up to five) is
 *    asked on a connection of its own with a short connect timeout: up to
 *    four times a second, less often while it keeps answering, and one
 *    that cannot be reached is connected to again every 125 ms. A partition leaves the watches' connections to the
 *    majority's sentinels silent until TCP's backoff sends their
 *    +switch-master again, seconds after the partition's end; a census
 *    hears the newer configuration within a round trip of it.
 *  - The data connections ask for the address before every (re)connect
 *    (sluice__sentinel_address); they verify with ROLE in their handshake
 *    that it is a master, and a failed or lost connection asks again.
 */
#ifndef SLUICE_SENTINEL_H
#define SLUICE_SENTINEL_H

#include "net/conn.h"
#include "net/url.h"

struct event_base;
typedef struct sluice__sentinel sluice__sentinel;

typedef struct sluice__sentinel_config {
  sluice__endpoint *data; /* the data nodes' endpoint: its host/port are set here */
  sluice__net_config net; /* timeouts and reconnect (its endpoint unused) */
  /* The master's address changed (or its old connections must go): drop
   * and reconnect the data connections. */
  void (*moved)(void *userdata);
  /* A fresh address is known: data connections waiting for one may start. */
  void (*known)(void *userdata);
  /* A line for the client's log, at a sluice_log_level: an answer not
   * taken and why (err's text, INFO); a refused SUBSCRIBE (WARN). */
  void (*note)(int level, const char *what, void *userdata);
  void *userdata;
} sluice__sentinel_config;

sluice__sentinel *sluice__sentinel_new(struct event_base *base, const sluice__sentinel_config *cfg);
void sluice__sentinel_free(sluice__sentinel *s);
/* 1 when a fresh address is in the data endpoint (a data connection may
 * connect now); 0 when one was asked for: `known` follows. */
int sluice__sentinel_address(sluice__sentinel *s);
/* A data connection failed or found no master there: ask again before the
 * next connect. Not for the drops a switch itself causes: until the next
 * connection attempt, the new address stands. */
void sluice__sentinel_stale(sluice__sentinel *s);
/* The master stopped confirming writes (on 1) or confirms them again (on
 * 0): while in doubt, every known sentinel is asked (see sentinel.c). */
void sluice__sentinel_doubt(sluice__sentinel *s, int on);
/* The last sentinel error ("" if none). */
const char *sluice__sentinel_error(const sluice__sentinel *s);

/* The list of sentinels (exposed for tests): add host:port unless it is
 * there already or the list is full (1 added, 0 not, -1 out of memory);
 * how many are known; the i-th (NULL past the end); and how many times a
 * sentinel named the master. */
int sluice__sentinel_learn(sluice__sentinel *s, const char *host, size_t hlen, int port);
int sluice__sentinel_count(const sluice__sentinel *s);
const char *sluice__sentinel_at(const sluice__sentinel *s, int i, int *port);
unsigned long sluice__sentinel_answers(const sluice__sentinel *s);
/* The census (sluice__sentinel_doubt), exposed for tests: its connections
 * now (0 once doubt ended), and in *asked (if not NULL) the questions it
 * sent since the link began. */
int sluice__sentinel_census(const sluice__sentinel *s, unsigned long *asked);
/* The wait before asking again a sentinel that said to wait (exposed for
 * tests): *step, 0 before the first, doubles from 100 ms up to 1 s; the
 * wait is drawn from [*step / 2, *step] (sluice__jittered). */
unsigned sluice__sentinel_again_ms(unsigned *step);

#endif
