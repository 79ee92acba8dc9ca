/*
 * sluice_client: the connections to one Redis, a Sentinel-managed master or
 * a Redis Cluster, attached to the caller's libevent event_base. Every
 * primitive (semaphore, limiter, delay queue) is created on a client and
 * shares its connections:
 *  - one command connection per node (one Redis or the master: one; a
 *    cluster: one per master in use) carrying all nonblocking scripts,
 *    pipelined;
 *  - blocking connections, opened on first use, on which a single BRPOP per
 *    node (a cluster: per hash slot waited on) waits for every wake-up list
 *    the client's primitives listen to.
 *
 * Connection loss: pending operations complete with SLUICE_EINDOUBT (sent,
 * may have run) or SLUICE_ECONNECTION (never sent), and the client reconnects
 * with exponential backoff and jitter; when it is back, every object resumes
 * at once (parked releases first, then waiters and consumers). A connection that
 * has returned nothing for a whole op_timeout_ms while an operation timed
 * out is presumed dead (a host gone without a reset) and replaced the same
 * way; TCP connections also use keepalive. Operations started
 * before the first connection is up wait for it (up to their deadline);
 * operations started after the connection was lost fail at once with
 * SLUICE_ECONNECTION (from the loop), so callers never wait out a reconnect.
 *
 * SIGPIPE: hiredis writes to its sockets without MSG_NOSIGNAL, so a write to a
 * connection Redis just closed raises SIGPIPE. Like any program that talks to
 * network peers, ignore it (signal(SIGPIPE, SIG_IGN)); the client then sees an
 * error, reconnects and goes on.
 *
 * Timer precision: every deadline, lease, renewal, wake-up bound and due time
 * is a libevent timer on your event_base, so the base's clock decides how
 * late they fire. On Linux, event_base_new() reads CLOCK_MONOTONIC_COARSE
 * (about 4 ms resolution): a 1 ms timer fires after ~4 ms (measured p50
 * 4.3 ms, 1.0 ms with the precise clock), and a gateway's 1-2 ms budgets
 * become 4 ms. Create the base with the precise clock:
 *
 *   struct event_config *cfg = event_config_new();
 *   event_config_set_flag(cfg, EVENT_BASE_FLAG_PRECISE_TIMER);
 *   struct event_base *base = event_base_new_with_config(cfg);
 *   event_config_free(cfg);
 *
 * Deadlines: the defaults suit background jobs (a worker that may wait
 * seconds for Redis). On a request path, where a client waits for the
 * answer, use deadlines of the request's own scale, for example:
 *
 *   option               background (default)   request path (e.g. HTTP)
 *   op_timeout_ms        5000                   50..200
 *   connect_timeout_ms   2000                   200..500
 *   reconnect_max_ms     2000                   200..500
 *
 * and pair them with the primitives' Redis-down choices (a limiter's
 * on_redis_down, a semaphore's fail_fast and a short acquire timeout);
 * examples/gateway.c uses 100 ms.
 */
#ifndef SLUICE_CLIENT_H
#define SLUICE_CLIENT_H

#include <stddef.h>
#include <stdint.h>
#include <sluice/common.h>
#include <sluice/types.h>

#ifdef __cplusplus
extern "C" {
#endif

struct event_base;

typedef struct sluice_client_options {
  /* "redis://[[user]:password@]host[:port][/db]", "rediss://..." (TLS, with
   * an optional ?query, see tls below), "redis+sentinel://..." (see
   * master_name below), "redis+cluster://..." (see cluster_seeds below) or
   * "unix:///path/to/sock[?db=N]".
   * When set it overrides host, port, unix_path, username, password and db. */
  const char *url;
  const char *host;            /* default "127.0.0.1" */
  int port;                    /* default 6379 */
  const char *unix_path;       /* a unix socket instead of TCP */
  const char *username;        /* ACL user (Redis 6+); NULL for AUTH password */
  const char *password;        /* NULL: no AUTH */
  int db;                      /* SELECT on every (re)connect when non-zero */
  const char *key_prefix;      /* prepended to every key; default "sluice:" */
  unsigned connect_timeout_ms; /* default 2000 (request path: 200..500) */
  unsigned op_timeout_ms;      /* default deadline of each operation; 5000
                                   (request path: 50..200, see above) */
  unsigned reconnect_min_ms;   /* first reconnect delay; default 50 */
  unsigned reconnect_max_ms;   /* backoff cap; default 2000 */
  /* TLS, for a sluice built against hiredis >= 1.0 with libhiredis_ssl (else
   * sluice_client_new refuses it with SLUICE_EINVAL). A "rediss://" url turns
   * it on too, and its query (?ca=&ca_dir=&cert=&key=&sni=&verify=0|1)
   * overrides the fields below. With TLS off the fields below are ignored. */
  int tls;                     /* 1: TLS to host:port */
  const char *tls_ca_file;     /* PEM file of trusted CAs; with tls_ca_dir NULL
                                   too, the system's CAs */
  const char *tls_ca_dir;      /* directory of trusted CAs (OpenSSL hashed names) */
  const char *tls_cert_file;   /* client certificate (PEM chain), for servers
                                   that require one; needs tls_key_file */
  const char *tls_key_file;    /* its private key (PEM, unencrypted) */
  const char *tls_server_name; /* sent as SNI and required in the server's
                                   certificate; default: the host */
  int tls_skip_verify;         /* 1: accept any server certificate (tests only) */
  /* Redis Sentinel, as "redis+sentinel://[[user]:password@]host:port[,host:port
   * ...]/MASTER_NAME[/db][?sentinel_username=U&sentinel_password=P]" does:
   * with master_name set (and no url), the client asks these sentinels for
   * the master's address, verifies it with ROLE, and follows failovers;
   * host and port are ignored, username, password and db are the master's. */
  const char *master_name;
  const char *sentinels;         /* "host:port[,host:port...]" */
  const char *sentinel_username; /* the sentinels' own ACL user, if any */
  const char *sentinel_password; /* the sentinels' own password, if any */
  /* Replica acknowledgement: after every script that writes (grants,
   * renewals, releases, pushes, acks, limiter checks), WAIT on the same
   * connection for wait_replicas replicas, at most wait_timeout_ms (default
   * 100, kept below op_timeout_ms). A write that fewer replicas acknowledged
   * in time still happened: it is reported, not failed
   * (sluice_permit_replicated(), stats.writes_not_replicated). 0: no WAIT. */
  unsigned wait_replicas;
  unsigned wait_timeout_ms;
  /* Redis Cluster, as "redis+cluster://[[user]:password@]host:port[,host:port
   * ...]" ("rediss+cluster://" with TLS) does: with cluster_seeds set (and no
   * url), the client asks these nodes for the slot map, connects to each
   * master it names on demand, and follows MOVED/ASK redirects, resharding
   * and failovers; host, port and db are ignored (a cluster has only db 0),
   * username and password are every node's. */
  const char *cluster_seeds; /* "host:port[,host:port...]" */
  /* A file holding the password (the one of password above, or of the
   * URL's user part, "redis://USER:@host"; on Sentinel the data nodes'),
   * read once by sluice_client_new: its one line, without the line break.
   * This keeps the secret out of URLs, argv and the environment; make the
   * file readable only by the program's user. A password given here and
   * in the URL or password too is refused (SLUICE_EINVAL), as is an
   * unreadable, empty or multi-line file; sluice_client_last_error(NULL)
   * names the file, never its content. */
  const char *password_file;
  /* Semaphore acquires (try and blocking) pending at once across all the
   * client's handles; past it they fail at once with SLUICE_EFULL (about
   * 0.7 KB each). 0: 250000. See also sluice_sem_options.max_pending. */
  unsigned sem_pending_max;
  /* Local queues: sluice_limiter_wait calls pending at once over all of
   * this client's limiters (each key also has its limiter's
   * wait_queue_max); one more returns SLUICE_EFULL at once. 0: 100000. */
  unsigned limiter_waits_max;
  /* Messages pushed to delay queues (sluice_dq_push, sluice_dq_push_batch)
   * and not yet answered, over all of this client's queues: a push that
   * would pass it fails at once with SLUICE_EFULL, so a stalled Redis or a
   * runaway producer cannot grow the client without bound. 0: the default,
   * 100000 (a server pushing 20,000 a second reaches it only if Redis stops
   * answering for the whole 5 s op_timeout_ms). */
  unsigned max_pending_pushes;
  /* The record of unreplicated writes (on by default): every release,
   * push, settlement (ack, retry) and cancel Redis acknowledged is kept
   * until a replica has it (INFO replication says how far the replicas
   * are, asked at most every 100 ms while there are any) or, on a node never
   * seen with a replica online, until the node has answered for
   * replay_window_ms since. When the
   * node behind a key changes (a failover, a restart), what the record holds
   * for it is sent again to the new node before anything else, the permits
   * the client holds there are re-asserted (restored, or reported lost at
   * once) and waiters and consumers look again. See docs/failures.md. */
  int replay_off;            /* 1: no record, nothing replayed */
  unsigned replay_window_ms; /* never seen with a replica: kept this long;
                                 default 3000 */
  /* Bounds, counting pushes in flight: past either, a push fails at once
   * with SLUICE_EFULL until a replica has caught up (nothing kept is
   * dropped for a new write; see docs/failures.md). */
  size_t replay_max_entries; /* steps kept at most; default 400000 */
  size_t replay_max_bytes;   /* bytes kept at most; default 128 MiB */
} sluice_client_options;

/* Fill *opts with the defaults. */
SLUICE_EXPORT void sluice_client_options_init(sluice_client_options *opts);

/* Create a client on base and start connecting. opts may be NULL (defaults).
 * Returns SLUICE_EINVAL for a bad URL/option (including TLS in a build
 * without it, and TLS files that cannot be loaded), SLUICE_ENOMEM; then
 * sluice_client_last_error(NULL) says why. */
SLUICE_EXPORT int sluice_client_new(struct event_base *base, const sluice_client_options *opts,
                                    sluice_client **out);

/* Called from the loop when the command connection comes up (connected = 1,
 * status 0) or goes down (connected = 0, status < 0 says why). On a cluster:
 * connected = 1 once the slot map is known and every master in use is
 * connected; connected = 0 whenever one of them goes down. */
typedef void sluice_client_state_cb(sluice_client *client, int connected, int status,
                                    void *userdata);
SLUICE_EXPORT void sluice_client_set_state_cb(sluice_client *client, sluice_client_state_cb *cb,
                                              void *userdata);

/* Leases a promoted replica honours, on by default: on a master seen with a
 * replica online, a semaphore's grant is answered only once a replica has
 * it (WAIT after the step, up to wait_timeout_ms when set, else 1000 ms; a
 * grant no replica had is given back: SLUICE_ENOREPLICA for a try_acquire,
 * another attempt for a wait), and a renewal extends the holder's lease
 * only once a replica has it, so a holder cut off with its master hears
 * its lost callback before another master can grant its permit. The WAIT
 * holds up what follows it on the connection. A master never seen with a
 * replica is not asked. on = 0: grants and renewals started from now on
 * are answered without a replica, as before (see docs/failures.md,
 * "Partitions"). SLUICE_EINVAL for NULL. */
SLUICE_EXPORT int sluice_client_set_replica_ack(sluice_client *client, int on);

/* 1 when the command connection is up (on a cluster: the slot map is known
 * and every master in use is connected). */
SLUICE_EXPORT int sluice_client_is_connected(const sluice_client *client);

/* The text of the last error: why the connection failed (the first failing
 * handshake step with Redis's answer, e.g. "AUTH: WRONGPASS ..."), or the
 * last error reply Redis sent to an operation ("Redis: OOM ...", "Redis:
 * NOPERM ..."; the operation got SLUICE_EREDIS). "" if none; valid until the
 * next loop turn. With NULL: why the last sluice_client_new of this thread
 * refused its URL or TLS options ("" if it did not). */
SLUICE_EXPORT const char *sluice_client_last_error(const sluice_client *client);

/* Both connections at a glance: whether the command connection is up, and
 * whether the blocking connection (on which waiters and consumers are woken)
 * is up, or not needed (-1: nothing listens). On a cluster each counts as up
 * when all of its kind in use are (one per master; one per slot waited on). */
typedef struct sluice_client_health {
  int command_up;
  int blocking_up;
} sluice_client_health;
SLUICE_EXPORT void sluice_client_get_health(const sluice_client *client, sluice_client_health *out);

typedef struct sluice_client_stats {
  uint64_t ops_started; /* scripts and commands sent */
  uint64_t ops_timed_out;
  uint64_t reconnects;       /* successful connections after the first */
  uint64_t noscript_reloads; /* NOSCRIPT answers recovered with EVAL */
  unsigned ops_in_flight;
  /* Permit releases that could not reach Redis before the client closed
   * (their leases expire by themselves; see sluice_client_close). */
  uint64_t releases_abandoned;
  /* Writes that fewer than wait_replicas replicas acknowledged in time. */
  uint64_t writes_not_replicated;
} sluice_client_stats;
SLUICE_EXPORT void sluice_client_get_stats(const sluice_client *client, sluice_client_stats *out);

/* ---- metrics --------------------------------------------------------------
 *
 * Always on: counters and fixed-size latency histograms updated where things
 * happen (no allocation, no lock, a clock read per operation), read by
 * copying them out. Percentiles come from log-linear buckets: within 12.5%
 * of the true value and never below it. Per-primitive metrics are read on
 * each handle (sluice_sem_get_metrics, sluice_limiter_get_metrics,
 * sluice_dq_get_metrics, sluice_dq_consumer_get_metrics). */

/* One kind of Redis step: a script by name ("sem_acquire", "rl_gcra", ...)
 * or "command" for plain commands. Latency runs from the call to its
 * completion (every status, including timeouts). */
typedef struct sluice_op_metrics {
  const char *name; /* static string */
  uint64_t ops;     /* completed */
  uint64_t errors;  /* completed with a status other than SLUICE_OK */
  sluice_latency latency;
} sluice_op_metrics;

#define SLUICE_METRICS_MAX_KINDS 32
#define SLUICE_METRICS_STATUSES 32

typedef struct sluice_client_metrics {
  uint64_t evals;    /* script calls started (EVALSHA) */
  uint64_t commands; /* plain commands started */
  /* Completions by status: by_status[-status], so [0] is SLUICE_OK and
   * [-SLUICE_ETIMEDOUT] the timeouts; statuses past the table count in
   * the last entry. */
  uint64_t by_status[SLUICE_METRICS_STATUSES];
  uint64_t reconnects;       /* successful connections after the first */
  uint64_t connect_failures; /* connection attempts that failed (connect or handshake) */
  uint64_t disconnects;      /* established connections lost */
  uint64_t noscript_reloads;
  uint64_t queued_connecting; /* operations started before the first connection was up */
  unsigned in_flight;         /* operations not yet completed */
  unsigned waiting_connect;   /* of those, waiting for the connection now */
  uint64_t releases_abandoned;
  size_t nkinds; /* entries of kinds[] in use: the kinds seen */
  sluice_op_metrics kinds[SLUICE_METRICS_MAX_KINDS];
  unsigned limiter_waits; /* sluice_limiter_wait calls pending now (all limiters) */
  /* The record of unreplicated writes (replay_off above). Writes sent again
   * to a new node and answered there, by kind (permit releases, pushed
   * messages, acks and retries, cancels), and of them the ones that node
   * was missing (it acted on them: a permit released, a message queued). */
  uint64_t replay_releases;
  uint64_t replay_pushes;
  uint64_t replay_settlements;
  uint64_t replay_cancels;
  uint64_t replay_restored;
  /* Held permits re-asserted on a new node that were missing there: put
   * back (with their id, fencing token and the rest of their lease), or lost because
   * the semaphore was full there (lost callback, SLUICE_LOST_DEFINITE). */
  uint64_t permits_restored;
  uint64_t permits_lost;
  /* Steps that fell out past its bounds unconfirmed, or that a new node
   * refused for good when sent again (a refusal for now, such as LOADING
   * or BUSY, goes again). */
  uint64_t record_dropped;
  size_t record_entries; /* steps it holds now */
  size_t record_bytes;
  uint64_t record_oldest_ms; /* age of the oldest (0: empty) */
} sluice_client_metrics;

/* Copy the client's metrics into *out (about 2 KB; a fresh copy each call). */
SLUICE_EXPORT void sluice_client_get_metrics(const sluice_client *client,
                                             sluice_client_metrics *out);

/**
 * sluice_client_prometheus() - The client's metrics as Prometheus text
 * @client: the client (not after sluice_client_close)
 * @text: set to a newly allocated NUL-terminated text, which must later be
 *        freed with sluice_prometheus_free(); NULL on error
 * @len: set to its length without the NUL (may be NULL)
 *
 * Writes the Prometheus text exposition format, version 0.0.4 (serve it as
 * "text/plain; version=0.0.4"): the client's metrics, its connections'
 * health, and the metrics of every semaphore, limiter, delay-queue handle
 * and consumer alive on it, found by the client itself (freed handles are
 * gone). Counters end in _total, latencies are histograms in seconds.
 * Labels: name (the primitive's name), algorithm (limiters), step (the
 * Redis step), status, connection, kind. Handles that share a name (and
 * algorithm) are summed into one series. Names are escaped as the format
 * asks (backslash, double quote, line feed), and each byte of a name that
 * is not valid UTF-8 becomes U+FFFD. Synchronous: no Redis call; call it
 * from the loop's thread. The metric names are listed in docs/metrics.md.
 *
 * Return: 0, SLUICE_EINVAL (client or text NULL) or SLUICE_ENOMEM.
 */
SLUICE_EXPORT int sluice_client_prometheus(const sluice_client *client, char **text, size_t *len);
/* Release a text of sluice_client_prometheus(). NULL is a no-op. */
SLUICE_EXPORT void sluice_prometheus_free(char *text);

/**
 * sluice_prometheus_escape() - A label value as the Prometheus text writes it
 * @value: NUL-terminated bytes, such as a primitive's name (NULL: "")
 * @buf: where the escaped value and a NUL go (may be NULL when size is 0)
 * @size: bytes available at buf
 *
 * For programs that add series of their own next to sluice's, labelled
 * with the same names: the escaping of sluice_client_prometheus()
 * (backslash, double quote and line feed escaped, each byte that is not
 * valid UTF-8 replaced by U+FFFD), without the quotes around it. Cut short
 * when it does not fit, like snprintf.
 *
 * Return: the length of the whole escaped value, without the NUL; it was
 * cut short when this is >= size.
 */
SLUICE_EXPORT size_t sluice_prometheus_escape(const char *value, char *buf, size_t size);

/* ---- log hook -------------------------------------------------------------
 *
 * What a user would otherwise never see: connection attempts, the
 * connection coming up and going down (with the reason, Redis's own words
 * for a failed handshake), reconnects scheduled (with the delay), permit
 * releases parked while Redis is unreachable or abandoned at close, and a
 * coarse event_base clock (see the timer-precision note above; checked
 * once, by comparing the base's cached time with CLOCK_MONOTONIC over the
 * first loop turns, warned once if its steps are 2 ms or more).
 *
 * Off by default. The callback runs from the loop, never inside a hiredis
 * callback: messages are queued and delivered from the client's own event
 * (a bounded queue; when it overflows the oldest are dropped and one WARN
 * says how many). msg is valid during the call only. The callback may call
 * any sluice function, including sluice_client_close. */
typedef enum sluice_log_level {
  SLUICE_LOG_ERROR = 0,
  SLUICE_LOG_WARN = 1,
  SLUICE_LOG_INFO = 2,
  SLUICE_LOG_DEBUG = 3
} sluice_log_level;

typedef void sluice_log_cb(sluice_client *client, int level, const char *msg, void *userdata);
/* cb NULL turns logging off (queued messages are dropped). */
SLUICE_EXPORT void sluice_client_set_log_cb(sluice_client *client, sluice_log_cb *cb,
                                            void *userdata);
/* "ERROR", "WARN", "INFO", "DEBUG" ("?" otherwise). */
SLUICE_EXPORT const char *sluice_log_level_name(int level);

/* ---- discovery (for monitors such as `sluice top`) -----------------------
 *
 * Find the objects stored under the client's key prefix, one page per call:
 * a read-only script runs one SCAN step (cursor, MATCH) on a single Redis.
 * kind is "sem", "dq" or "rl"; cursor 0 starts, and the callback's
 * next_cursor 0 means the scan is complete (a name may repeat across
 * pages, as SCAN promises no more). For "rl" every entry is one limited
 * key: name is the limiter's name, key the limited key, algo its algorithm
 * and state a short text of the stored state ("tat +12.5ms", "n=3 in
 * window 123", "cur=3 prev=7", "entries=5"); for "sem" and "dq" only name
 * is set. Entries are valid during the callback only. */
typedef struct sluice_scan_entry {
  const char *name;
  const char *key;   /* rl only, else NULL */
  const char *algo;  /* rl only, else NULL */
  const char *state; /* rl only, else NULL */
  int64_t ttl_ms;    /* rl: the key's time to live, -1 none */
} sluice_scan_entry;

typedef void sluice_scan_cb(sluice_client *client, int status, uint64_t next_cursor,
                            const sluice_scan_entry *entries, size_t n, void *userdata);
/* match_name: a glob on the object's name (NULL: "*"). SLUICE_EINVAL for an
 * unknown kind, SLUICE_ECLOSED after close. */
SLUICE_EXPORT int sluice_client_scan(sluice_client *client, const char *kind,
                                     const char *match_name, uint64_t cursor, sluice_scan_cb *cb,
                                     void *userdata);

typedef void sluice_close_cb(void *userdata);

/* Close the client. Pending operations of the client and of every object
 * created on it complete with SLUICE_ECANCELED, from the loop; then close_cb
 * (may be NULL) runs and the client's memory is released once every object
 * created on it has been freed. Objects still alive answer SLUICE_ECLOSED.
 * Keep running the loop until close_cb: the loop exits by itself when nothing
 * else is pending. NULL is a no-op; closing twice is a no-op. */
SLUICE_EXPORT void sluice_client_close(sluice_client *client, sluice_close_cb *close_cb,
                                       void *userdata);
/* sluice_client_close(client, NULL, NULL). */
SLUICE_EXPORT void sluice_client_free(sluice_client *client);

#ifdef __cplusplus
}
#endif

#endif /* SLUICE_CLIENT_H */
