/*
 * The record of unreplicated writes: every write Redis acknowledged that a
 * failover or a restart could still undo, kept until Redis says a replica
 * has it, and sent again to the node that now serves its route when that
 * node is another one than the node that acknowledged it.
 *
 *  - What is kept: the steps the primitives name as they are answered
 *    (sluice__record_answered, engine.h): releases, pushes (with absolute
 *    due times), settlements, cancels. Grants and renewals are not: the
 *    permits a client holds are re-asserted by their semaphores instead;
 *    nor are a delay-queue message's extensions, renewed at once on the
 *    new node by their consumer (dq/dq_lease.c).
 *  - Each entry carries its route and the node (conn.h's node_id) and
 *    handshake it was acknowledged on, in one list oldest first and in its
 *    node's list.
 *  - Replication is learnt with `INFO replication`: it never blocks, and
 *    answers the master's offset (which every entry answered before the
 *    question precedes: a mark) and each online replica's acknowledged
 *    offset (a replica past a mark has the entries before it). Asked at
 *    most every POLL_MS per node while it has entries. A node once seen
 *    with a replica online keeps its entries while it has none (cut off,
 *    it may be replaced by one). A node never seen with one (or where INFO
 *    is refused) keeps a time window instead: an entry goes once the node
 *    has answered anything window_ms after it (appendfsync everysec writes
 *    it to disk within about a second).
 *  - Bounded in entries and bytes, pushes in flight counted: past either
 *    bound new pushes are refused (sluice__record_room: SLUICE_EFULL) and
 *    nothing kept falls out; releases, settlements and cancels, never
 *    refused, stop being kept at twice the bounds, counted (metrics:
 *    record_dropped).
 *  - When the node behind routes changes (the topology's node_changed),
 *    the entries of those routes are sent again, in the order they were
 *    answered, before anything new goes there; each is kept again under the
 *    node that answered its replay. A write answered by a node that had
 *    already stopped serving its route is sent again at once.
 *  - A replay that fails where it may succeed later (no answer, a timeout,
 *    or a node not ready yet: LOADING, BUSY, READONLY, ...) goes again when
 *    its route's connection completes a handshake or, while it stays up,
 *    after a bounded backoff, as long as it stays within the bounds. One
 *    the node refuses for good is dropped and counted (record_dropped).
 */
#ifndef SLUICE_RECORD_H
#define SLUICE_RECORD_H

#include <stddef.h>
#include <stdint.h>

#include "base/list.h"

/* The documented defaults (sluice_client_options). */
#define SLUICE_REPLAY_WINDOW_MS 3000
#define SLUICE_REPLAY_MAX_ENTRIES 400000
#define SLUICE_REPLAY_MAX_BYTES ((size_t)128 << 20)
/* Write kinds (engine.h) whose replays the record counts, at most. */
#define SLUICE__RECORD_KINDS_MAX 8

struct event;
struct sluice__conn;
typedef struct rec_node rec_node;

typedef struct sluice__record {
  int on; /* replay_off not set */
  unsigned window_ms;
  size_t max_entries, max_bytes;
  sluice__list all;     /* entries, oldest first */
  sluice__list pending; /* entries to send again once their route's node is up */
  size_t n, bytes;      /* in all */
  size_t pushes_sent;   /* push requests sent, not finished: an entry each, to come */
  uint64_t seq;         /* of the newest entry */
  rec_node *nodes;      /* per node with entries */
  size_t nnodes, capnodes;
  struct event *poll;
  struct event *retry; /* pending entries whose backoff ended go again */
  unsigned replaying;  /* replays in flight */
  int info_refused_logged;
  uint64_t full_logged_ms; /* when a full record was last logged */
  /* counters (metrics) */
  struct {
    const struct sluice__write_kind *kind;
    uint64_t n;
  } replayed[SLUICE__RECORD_KINDS_MAX]; /* items sent again and answered, by kind */
  uint64_t restored;                    /* of them, writes the new node was missing */
  uint64_t dropped;                     /* entries that fell out past the bounds */
  uint64_t permits_restored, permits_lost;
} sluice__record;

/* What the engine knows of a step it is answering (engine.c). */
typedef struct sluice__answered {
  const struct sluice__script *script;
  int nkeys, argc; /* KEYS then ARGV, after EVALSHA sha nkeys */
  const char *const *argv;
  const size_t *lens;
  int route;
  struct sluice__conn *conn; /* where it ran */
  uint64_t node_id;          /* conn's node when it was sent */
  unsigned long ups;         /* conn's handshakes then */
  uint64_t route_node;       /* the node its route named when it was sent */
  int replicated;            /* wait_replicas: 1 enough replicas had it */
} sluice__answered;

struct sluice_client;
int sluice__record_init(struct sluice_client *c);
void sluice__record_clear(struct sluice_client *c);
/* The node behind routes lo..hi (-1: all) is another one: send their
 * entries again now. */
void sluice__record_replay(struct sluice_client *c, int lo, int hi);
/* The client closes: entries go, the poll stops. */
void sluice__record_close(struct sluice_client *c);
/* The record's part of sluice_client_get_metrics. */
struct sluice_client_metrics;
void sluice__record_metrics(const struct sluice_client *c, struct sluice_client_metrics *out);
/* conn finished a handshake: entries whose replay failed go again if it
 * serves their route. */
void sluice__record_conn_up(struct sluice_client *c, const struct sluice__conn *conn);

#endif
