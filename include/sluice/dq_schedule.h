/*
 * Repeating schedules on a delay queue: named schedules, each pushing one
 * message per occurrence for the whole fleet, however many processes
 * declare it, on Redis's clock (docs/delay-queue.md, "Repeating schedules").
 *
 * A spec is "every DURATION" (DURATION: a whole number and ms, s, m, h or
 * d; at least 100 ms), "every DURATION from UNIX_MS" (occurrences at
 * UNIX_MS + k * DURATION; without "from" they count from the epoch, so
 * "every 1m" falls on whole minutes), or a five-field cron expression
 * evaluated in UTC ("*" "5" "1-5" "1,15" "*" "/" steps, month and day
 * names, Sunday 0 or 7, a day matching either day field when both are
 * restricted, as Vixie cron), or @yearly, @monthly, @weekly, @daily,
 * @hourly. An expression that never occurs ("0 0 30 2 *") is refused.
 *
 * Each occurrence's message has the id "<name>@<occurrence unix ms>" and
 * is due at the occurrence; it is queued one occurrence ahead, so it is
 * delivered as punctually as any delayed message. Missed occurrences (no
 * process ran the queue's schedules for longer than an interval): the one
 * already queued is delivered, the first missed one is delivered once as a
 * catch-up when a process runs them again, the others are skipped.
 *
 * A handle runs (fires) all of its queue's schedules while it declares at
 * least one, from its loop; a schedule that no handle declared for the
 * declaring handle's retention_ms (sluice_dq_options) is removed.
 */
#ifndef SLUICE_DQ_SCHEDULE_H
#define SLUICE_DQ_SCHEDULE_H

#include <stddef.h>
#include <stdint.h>
#include <sluice/common.h>
#include <sluice/types.h>
#include <sluice/dq.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Longest schedule name in bytes, longest spec, and most schedules one
 * handle declares. */
#define SLUICE_DQ_SCHEDULE_NAME_MAX 100
#define SLUICE_DQ_SCHEDULE_SPEC_MAX 256
#define SLUICE_DQ_SCHEDULE_MAX 64

/* status: SLUICE_OK (next_ms: the occurrence whose message is queued, unix
 * ms on Redis's clock), SLUICE_EREDIS (Redis refused it: the spec does not
 * occur within 50 years; the handle does not declare it), or a transport
 * error (the handle still declares it and sets it again on its next step).
 * name is borrowed. */
typedef void sluice_dq_schedule_cb(sluice_dq *dq, int status, const char *name, int64_t next_ms,
                                   void *userdata);

/* Create schedule NAME (1..SLUICE_DQ_SCHEDULE_NAME_MAX bytes) on the
 * queue, or update it: the same spec keeps its queued occurrence (a new
 * payload applies from the next one); another spec takes back the queued
 * message if no consumer took it and queues the new first occurrence.
 * The handle then declares the schedule and runs the queue's schedules
 * until sluice_dq_schedule_remove or sluice_dq_free. payload (len bytes,
 * <= SLUICE_DQ_PAYLOAD_MAX) is copied. cb may be NULL.
 * SLUICE_EINVAL (bad name or spec), SLUICE_ETOOBIG, SLUICE_EFULL (the
 * handle already declares SLUICE_DQ_SCHEDULE_MAX others). */
SLUICE_EXPORT int sluice_dq_schedule_set(sluice_dq *dq, const char *name, const char *spec,
                                         const void *payload, size_t len, sluice_dq_schedule_cb *cb,
                                         void *userdata);

/* Remove schedule NAME from the queue (whoever declared it) and take back
 * its queued message if no consumer took it; this handle stops declaring
 * it. status: SLUICE_OK, SLUICE_ENOTFOUND or a transport error. A process
 * that still declares it creates it again on its next step. */
SLUICE_EXPORT int sluice_dq_schedule_remove(sluice_dq *dq, const char *name,
                                            sluice_dq_status_cb *cb, void *userdata);

typedef struct sluice_dq_schedule_entry {
  const char *name;
  const char *spec; /* as it was set */
  int64_t next_ms;  /* the occurrence whose message is queued */
  int64_t until_ms; /* declared until (then removed if not declared again) */
  const void *payload;
  size_t len;
} sluice_dq_schedule_entry;

/* total: the queue's schedules; entries: the requested slice, earliest
 * next_ms first, borrowed for the callback. */
typedef void sluice_dq_schedule_list_cb(sluice_dq *dq, int status, int64_t now_ms, size_t total,
                                        const sluice_dq_schedule_entry *entries, size_t n,
                                        void *userdata);

/* List up to limit (1..100) of the queue's schedules from offset. */
SLUICE_EXPORT int sluice_dq_schedule_list(sluice_dq *dq, size_t offset, size_t limit,
                                          sluice_dq_schedule_list_cb *cb, void *userdata);

/* at: the occurrences (unix ms), n of them; fewer than asked when the
 * spec stops occurring within 50 years of the last. Borrowed. */
typedef void sluice_dq_schedule_preview_cb(sluice_dq *dq, int status, const int64_t *at, size_t n,
                                           void *userdata);

/* The first count (1..20) occurrences of spec after after_ms (unix ms;
 * 0..SLUICE_DQ_TIME_MAX), computed by Redis as a schedule would: to check
 * a spec before setting it. SLUICE_EINVAL for a bad spec or count. */
SLUICE_EXPORT int sluice_dq_schedule_preview(sluice_dq *dq, const char *spec, int64_t after_ms,
                                             size_t count, sluice_dq_schedule_preview_cb *cb,
                                             void *userdata);

#ifdef __cplusplus
}
#endif

#endif /* SLUICE_DQ_SCHEDULE_H */
