/*
 * sluice_client: the connection to one Redis server, attached to the caller's
 * libevent event_base. Every primitive (semaphore, limiter, delay queue) is
 * created on a client and shares its connections:
 *  - one command connection carrying all nonblocking scripts, pipelined;
 *  - one blocking connection, opened on first use, on which a single BRPOP
 *    waits for every wake-up list the client's primitives listen to.
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
 * on_redis_down, a short acquire timeout); examples/gateway.c uses 100 ms.
 */
#ifndef SLUICE_CLIENT_H
#define SLUICE_CLIENT_H

#include <stdint.h>
#include <sluice/sluice.h>
#include <sluice/types.h>

#ifdef __cplusplus
extern "C" {
#endif

struct event_base;

typedef struct sluice_client_options {
  /* "redis://[[user]:password@]host[:port][/db]", "rediss://..." (TLS, with
   * an optional ?query, see tls below), "redis+sentinel://..." (see
   * master_name below) or "unix:///path/to/sock[?db=N]".
   * When set it overrides host, port, unix_path, username, password and db. */
  const char *url;
  const char *host;           /* default "127.0.0.1" */
  int port;                   /* default 6379 */
  const char *unix_path;      /* a unix socket instead of TCP */
  const char *username;       /* ACL user (Redis 6+); NULL for AUTH password */
  const char *password;       /* NULL: no AUTH */
  int db;                     /* SELECT on every (re)connect when non-zero */
  const char *key_prefix;     /* prepended to every key; default "sluice:" */
  unsigned connect_timeout_ms;  /* default 2000 (request path: 200..500) */
  unsigned op_timeout_ms;       /* default deadline of each operation; 5000
                                   (request path: 50..200, see above) */
  unsigned reconnect_min_ms;    /* first reconnect delay; default 50 */
  unsigned reconnect_max_ms;    /* backoff cap; default 2000 */
  /* TLS, for a sluice built against hiredis >= 1.0 with libhiredis_ssl (else
   * sluice_client_new refuses it with SLUICE_EINVAL). A "rediss://" url turns
   * it on too, and its query (?ca=&ca_dir=&cert=&key=&sni=&verify=0|1)
   * overrides the fields below. With TLS off the fields below are ignored. */
  int tls;                      /* 1: TLS to host:port */
  const char *tls_ca_file;      /* PEM file of trusted CAs; with tls_ca_dir NULL
                                   too, the system's CAs */
  const char *tls_ca_dir;       /* directory of trusted CAs (OpenSSL hashed names) */
  const char *tls_cert_file;    /* client certificate (PEM chain), for servers
                                   that require one; needs tls_key_file */
  const char *tls_key_file;     /* its private key (PEM, unencrypted) */
  const char *tls_server_name;  /* sent as SNI and required in the server's
                                   certificate; default: the host */
  int tls_skip_verify;          /* 1: accept any server certificate (tests only) */
  /* Redis Sentinel, as "redis+sentinel://[[user]:password@]host:port[,host:port
   * ...]/MASTER_NAME[/db][?sentinel_username=U&sentinel_password=P]" does:
   * with master_name set (and no url), the client asks these sentinels for
   * the master's address, verifies it with ROLE, and follows failovers;
   * host and port are ignored, username, password and db are the master's. */
  const char *master_name;
  const char *sentinels;          /* "host:port[,host:port...]" */
  const char *sentinel_username;  /* the sentinels' own ACL user, if any */
  const char *sentinel_password;  /* the sentinels' own password, if any */
} sluice_client_options;

/* Fill *opts with the defaults. */
SLUICE_EXPORT void sluice_client_options_init(sluice_client_options *opts);

/* Create a client on base and start connecting. opts may be NULL (defaults).
 * Returns SLUICE_EINVAL for a bad URL/option (including TLS in a build
 * without it, and TLS files that cannot be loaded), SLUICE_ENOMEM; then
 * sluice_client_last_error(NULL) says why. */
SLUICE_EXPORT int sluice_client_new(struct event_base *base,
                                    const sluice_client_options *opts,
                                    sluice_client **out);

/* Called from the loop when the command connection comes up (connected = 1,
 * status 0) or goes down (connected = 0, status < 0 says why). */
typedef void sluice_client_state_cb(sluice_client *client, int connected,
                                    int status, void *userdata);
SLUICE_EXPORT void sluice_client_set_state_cb(sluice_client *client,
                                              sluice_client_state_cb *cb,
                                              void *userdata);

/* 1 when the command connection is up. */
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
 * is up, or not needed (-1: nothing listens). */
typedef struct sluice_client_health {
  int command_up;
  int blocking_up;
} sluice_client_health;
SLUICE_EXPORT void sluice_client_get_health(const sluice_client *client,
                                            sluice_client_health *out);

typedef struct sluice_client_stats {
  uint64_t ops_started;       /* scripts and commands sent */
  uint64_t ops_timed_out;
  uint64_t reconnects;        /* successful connections after the first */
  uint64_t noscript_reloads;  /* NOSCRIPT answers recovered with EVAL */
  unsigned ops_in_flight;
  /* Permit releases that could not reach Redis before the client closed
   * (their leases expire by themselves; see sluice_client_close). */
  uint64_t releases_abandoned;
} sluice_client_stats;
SLUICE_EXPORT void sluice_client_get_stats(const sluice_client *client,
                                           sluice_client_stats *out);

typedef void sluice_close_cb(void *userdata);

/* Close the client. Pending operations of the client and of every object
 * created on it complete with SLUICE_ECANCELED, from the loop; then close_cb
 * (may be NULL) runs and the client's memory is released once every object
 * created on it has been freed. Objects still alive answer SLUICE_ECLOSED.
 * Keep running the loop until close_cb: the loop exits by itself when nothing
 * else is pending. NULL is a no-op; closing twice is a no-op. */
SLUICE_EXPORT void sluice_client_close(sluice_client *client,
                                       sluice_close_cb *close_cb,
                                       void *userdata);
/* sluice_client_close(client, NULL, NULL). */
SLUICE_EXPORT void sluice_client_free(sluice_client *client);

#ifdef __cplusplus
}
#endif

#endif /* SLUICE_CLIENT_H */
