/*
 * sluice's base header: the export macro, the version, the status codes and
 * the conventions every other header follows. Each public header includes
 * it; programs include <sluice/sluice.h>, which brings in everything.
 *
 * Conventions shared by every header:
 *  - Functions return 0 (SLUICE_OK) or a negative sluice_status.
 *  - If a function that takes a callback returns an error, that callback is
 *    never called and the caller keeps ownership of its userdata.
 *  - Callbacks always run from the event loop, exactly once per operation, and
 *    never inside the call that started the operation.
 *  - Pointers handed to a callback are borrowed: valid only during the call.
 *  - Every object may be freed from inside its own callbacks.
 *  - One thread: call everything from the thread that runs the event_base.
 */
#ifndef SLUICE_COMMON_H
#define SLUICE_COMMON_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(SLUICE_BUILDING) && defined(__GNUC__)
#define SLUICE_EXPORT __attribute__((visibility("default")))
#else
#define SLUICE_EXPORT
#endif

#define SLUICE_VERSION_MAJOR 0
#define SLUICE_VERSION_MINOR 1
#define SLUICE_VERSION_PATCH 0
#define SLUICE_VERSION_STRING "0.1.0"

/* Longest name (semaphore, limiter, limiter key, queue) in bytes. Names are
 * C strings: any bytes but NUL, which ends them, so a name can never be cut
 * short by the library (a string that holds a NUL is a different, shorter
 * name to C itself); binary data belongs in payloads, which take a length. */
#define SLUICE_NAME_MAX 512

/*
 * Every call returns 0 or a negative sluice_status. If it returns an error
 * its callback never runs (and userdata stays yours); otherwise the callback
 * runs exactly once, from the loop, never inside the call that started it.
 *
 * Every object dies the same way (sluice_sem_free, sluice_permit_release,
 * sluice_limiter_free, sluice_dq_free, sluice_dq_consumer_free): operations
 * still pending complete with SLUICE_ECANCELED from the loop, never inside
 * the free call; no other callback of the object runs afterwards; freeing
 * inside any of its own callbacks is safe; NULL is a no-op. The memory goes
 * at once when nothing is pending, else from the loop: keep running the
 * loop until the callbacks owed have run. Closing the client cancels the
 * pending operations of every object created on it the same way; each
 * object is still freed by its own _free.
 */

/*
 * When Redis cannot be reached, an operation ends with one of three statuses,
 * and each says something different about what happened in Redis:
 *  - SLUICE_ECONNECTION: not sent (the client knew the connection was down);
 *    nothing happened.
 *  - SLUICE_EINDOUBT: sent, and the connection broke before the answer; it
 *    may have run.
 *  - SLUICE_ETIMEDOUT: its deadline passed; it may have run, or may still.
 * Each operation's header says which it returns and what to assume.
 */

/* X(name, value, message): the one table of status codes. Values are never
 * reused: a code that goes leaves a gap. */
#define SLUICE_STATUS_MAP(X)                                                       \
  X(OK, 0, "success")                                                              \
  X(EINVAL, -1, "invalid argument")                                                \
  X(ENOMEM, -2, "out of memory")                                                   \
  X(ETIMEDOUT, -3, "operation timed out")                                          \
  X(ECONNECTION, -4, "not connected to Redis")                                     \
  X(EREDIS, -5, "Redis returned an error")                                         \
  X(EPROTOCOL, -6, "unexpected reply from Redis")                                  \
  X(ECANCELED, -7, "operation cancelled")                                          \
  X(ECLOSED, -8, "object is closed")                                               \
  X(EBUSY, -9, "no permit available")                                              \
  X(EFULL, -12, "queue is full")                                                   \
  X(ENOTFOUND, -13, "no such item")                                                \
  X(ETOOBIG, -14, "value too large")                                               \
  X(ELATE, -15, "deadline already passed")                                         \
  X(EEXIST, -16, "item already exists")                                            \
  X(EINDOUBT, -17, "sent to Redis, but the connection was lost before the answer") \
  X(ENOREPLICA, -18, "no replica acknowledged the write in time")

typedef enum sluice_status {
#define SLUICE_STATUS_ENUM_(name, value, msg) SLUICE_##name = value,
  SLUICE_STATUS_MAP(SLUICE_STATUS_ENUM_)
#undef SLUICE_STATUS_ENUM_
} sluice_status;

/* Percentiles of a latency histogram, in every metrics struct (see
 * "metrics" in sluice/client.h). */
typedef struct sluice_latency {
  uint64_t count; /* values recorded */
  uint64_t p50_us;
  uint64_t p99_us;
  uint64_t max_us;
} sluice_latency;

/* Human-readable message for a status; never NULL. */
SLUICE_EXPORT const char *sluice_strerror(int status);
/* The status's name ("SLUICE_ETIMEDOUT"); never NULL. */
SLUICE_EXPORT const char *sluice_err_name(int status);
/* Library version as "MAJOR.MINOR.PATCH". */
SLUICE_EXPORT const char *sluice_version(void);

#ifdef __cplusplus
}
#endif

#endif /* SLUICE_COMMON_H */
