/*
 * Delay queue: messages delivered at (or soon after) a due time, at least
 * once, to consumers running on the caller's event_base.
 *
 * A producer (sluice_dq) pushes binary-safe payloads with a delay or an
 * absolute due time on Redis's clock. A consumer (sluice_dq_consumer) takes
 * due messages in batches; each delivered message is "in flight" until the
 * handler acknowledges it (sluice_dq_ack) or asks for another try later
 * (sluice_dq_retry) — both may happen long after the handler returned. A
 * message not settled within the visibility timeout is delivered again (to
 * any consumer) with its attempt number increased; after max_attempts it
 * moves to the queue's dead letters, which can be listed and requeued.
 *
 * Messages with the same due time are delivered in push order. A consumer
 * arms a libevent timer for the earliest time anything becomes takeable (the
 * next due time or in-flight visibility deadline) and is woken early
 * through Redis (BRPOP on the client's shared blocking connection, on a wake
 * list of its own) when a push, retry, requeue or another consumer's take
 * makes that time earlier, so it never busy-polls: an idle consumer costs
 * Redis one cheap script call per max_poll_ms plus the blocking call.
 *
 * Liveness: whatever happens to other consumers (killed, stopped, full at
 * max_in_flight, disconnected), a due message is taken by a live consumer
 * with room as soon as its timer or wake-up fires (milliseconds), and a
 * message whose visibility deadline passed is taken again as soon as the
 * deadline passed; wake-ups go to every idle consumer's own list (up to
 * 100 per queue at once), so none is spent on a consumer that cannot use it.
 *
 * Ids and de-duplication: every message has an id, random (32 hex
 * characters) unless the producer gives one. A push whose id is still in the
 * queue (delayed, in flight or dead) is refused with SLUICE_EEXIST and leaves
 * the existing message untouched; once a message is acknowledged or
 * cancelled its id may be used again.
 *
 * Keys: every key of a queue expires RETENTION after the latest due time or
 * visibility deadline it holds (plus up to an eighth of RETENTION), so an
 * abandoned queue vanishes while pending messages are never dropped.
 */
#ifndef SLUICE_DQ_H
#define SLUICE_DQ_H

#include <stddef.h>
#include <stdint.h>
#include <sluice/common.h>
#include <sluice/types.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Largest payload in bytes (SLUICE_ETOOBIG beyond). */
#define SLUICE_DQ_PAYLOAD_MAX (1024u * 1024u)
/* Longest caller-given message id in bytes. */
#define SLUICE_DQ_ID_MAX 128
/* Most messages in one sluice_dq_push_batch call. */
#define SLUICE_DQ_BATCH_MAX 10000
/* Largest delay, and largest absolute due time (unix ms): about year 2109. */
#define SLUICE_DQ_TIME_MAX ((int64_t)1 << 42)

typedef struct sluice_dq_options {
  unsigned op_timeout_ms; /* deadline of each Redis step; 0 = client default */
  uint64_t retention_ms;  /* keep an idle queue this long; default 7 days */
} sluice_dq_options;

SLUICE_EXPORT void sluice_dq_options_init(sluice_dq_options *opts);

/* Create a handle on queue NAME (1..SLUICE_NAME_MAX bytes) for pushing,
 * cancelling and inspecting. opts may be NULL. SLUICE_EINVAL for a bad name,
 * SLUICE_ECLOSED when the client is closed. */
SLUICE_EXPORT int sluice_dq_new(sluice_client *client, const char *name,
                                const sluice_dq_options *opts, sluice_dq **out);

/* Free the handle. As for every sluice object (see sluice.h):
 * operations still pending complete with SLUICE_ECANCELED from the loop,
 * never inside this call; no other callback of it runs afterwards; freeing
 * inside any of its own callbacks is safe; NULL is a no-op.
 * What a cancelled operation did in Redis may still happen. */
SLUICE_EXPORT void sluice_dq_free(sluice_dq *dq);

SLUICE_EXPORT const char *sluice_dq_name(const sluice_dq *dq);

/* One message to push. Zero-initialise, then set what you need. */
typedef struct sluice_dq_item {
  const void *payload; /* any bytes, NUL included; may be NULL when len is 0 */
  size_t len;          /* <= SLUICE_DQ_PAYLOAD_MAX */
  int64_t delay_ms;    /* due this long after Redis's "now"; 0..SLUICE_DQ_TIME_MAX */
  int64_t at_ms;       /* > 0: absolute due time, unix ms on Redis's clock
                           (a past time means due now); overrides delay_ms */
  const char *id;      /* NULL: a random id; else 1..SLUICE_DQ_ID_MAX bytes */
} sluice_dq_item;

/* status: SLUICE_OK (queued, due at due_ms on Redis's clock), SLUICE_EEXIST
 * (a message with this id is already queued; nothing changed, due_ms is -1),
 * SLUICE_ECONNECTION (not sent: not queued), or SLUICE_EINDOUBT /
 * SLUICE_ETIMEDOUT (it may have been queued and may be delivered: push it
 * again under the same id, which is refused with SLUICE_EEXIST if it was).
 * id is borrowed (the given or generated id). */
typedef void sluice_dq_push_cb(sluice_dq *dq, int status, const char *id, int64_t due_ms,
                               void *userdata);

/* Push one message. cb may be NULL. The payload and id are copied.
 * SLUICE_EINVAL (bad id, negative or too large delay), SLUICE_ETOOBIG,
 * SLUICE_EFULL (the client already has max_pending_pushes messages in
 * flight, or its record of unreplicated writes is full: no replica has
 * caught up; see sluice_client_options). */
SLUICE_EXPORT int sluice_dq_push(sluice_dq *dq, const sluice_dq_item *item, sluice_dq_push_cb *cb,
                                 void *userdata);

/* Highest message priority (sluice_dq_push_ex); the default is 0. */
#define SLUICE_DQ_PRIORITY_MAX 9

/* What sluice_dq_push_ex does when a message with the item's id is
 * already in the queue. */
typedef enum sluice_dq_if_exists {
  /* Refuse the push: SLUICE_EEXIST, nothing changes (sluice_dq_push). */
  SLUICE_DQ_REFUSE = 0,
  /* Replace the waiting message, atomically: its payload, due time and
   * priority become this push's, and it counts as pushed now (for the
   * order among equal due times). Debounce: push with a delay and this. */
  SLUICE_DQ_REPLACE = 1,
  /* Move the waiting message's due time to this push's if that is later;
   * its payload and priority stay. */
  SLUICE_DQ_POSTPONE = 2
} sluice_dq_if_exists;

/* sluice_dq_push with a priority (0..SLUICE_DQ_PRIORITY_MAX): among due
 * messages a higher priority is taken first, then the earlier due time,
 * then the earlier push; retries, redeliveries and dead-letter requeues
 * keep it. if_exists says what happens to a queued message of the same id
 * (SLUICE_DQ_REFUSE is sluice_dq_push's behaviour); with SLUICE_DQ_REPLACE
 * or SLUICE_DQ_POSTPONE a message that is in flight (taken) or dead is
 * left as it is and cb gets SLUICE_EBUSY; a missing one is pushed. cb's
 * due_ms is the message's due time afterwards (a postponed message keeps a
 * later one it had). SLUICE_EINVAL also for a priority or if_exists out of
 * range. */
SLUICE_EXPORT int sluice_dq_push_ex(sluice_dq *dq, const sluice_dq_item *item, unsigned priority,
                                    int if_exists, sluice_dq_push_cb *cb, void *userdata);

typedef struct sluice_dq_push_result {
  const char *id;
  int status;     /* SLUICE_OK or SLUICE_EEXIST */
  int64_t due_ms; /* -1 unless status is SLUICE_OK */
} sluice_dq_push_result;

/* status is SLUICE_OK when Redis ran the batch; then results[i] says what
 * happened to items[i]. Otherwise results is NULL and nothing was queued
 * (SLUICE_ECONNECTION), or possibly everything (SLUICE_EINDOUBT,
 * SLUICE_ETIMEDOUT). */
typedef void sluice_dq_batch_cb(sluice_dq *dq, int status, const sluice_dq_push_result *results,
                                size_t n, void *userdata);

/* Push 1..SLUICE_DQ_BATCH_MAX messages atomically in one Redis call. If any
 * item is invalid, nothing is sent and its error is returned; SLUICE_EFULL
 * if the n messages would pass the client's max_pending_pushes or fill its
 * record of unreplicated writes. */
SLUICE_EXPORT int sluice_dq_push_batch(sluice_dq *dq, const sluice_dq_item *items, size_t n,
                                       sluice_dq_batch_cb *cb, void *userdata);

/* status: SLUICE_OK (removed wherever it was: delayed, in flight — whose
 * consumer's ack will then get SLUICE_ENOTFOUND — or dead), SLUICE_ENOTFOUND,
 * or a transport error. */
typedef void sluice_dq_status_cb(sluice_dq *dq, int status, void *userdata);

/* Remove message ID. cb may be NULL. */
SLUICE_EXPORT int sluice_dq_cancel(sluice_dq *dq, const char *id, sluice_dq_status_cb *cb,
                                   void *userdata);

typedef struct sluice_dq_info {
  int64_t now_ms;      /* Redis's clock when counted */
  uint64_t delayed;    /* waiting for their due time, or due but not taken */
  uint64_t ready;      /* of those, already due */
  uint64_t in_flight;  /* taken, not yet acknowledged */
  uint64_t expired;    /* of those, past their visibility deadline */
  uint64_t dead;       /* dead letters */
  const char *next_id; /* the earliest delayed message, or NULL if none */
  int64_t next_due_ms; /* its due time, -1 if none */
} sluice_dq_info;

typedef void sluice_dq_info_cb(sluice_dq *dq, int status, const sluice_dq_info *info,
                               void *userdata);

/* Count messages by state and peek at the next due one. */
SLUICE_EXPORT int sluice_dq_inspect(sluice_dq *dq, sluice_dq_info_cb *cb, void *userdata);

/* sluice_dq_inspect, with the priority of info->next_id (0 if none). */
typedef void sluice_dq_info_ex_cb(sluice_dq *dq, int status, const sluice_dq_info *info,
                                  unsigned next_priority, void *userdata);
SLUICE_EXPORT int sluice_dq_inspect_ex(sluice_dq *dq, sluice_dq_info_ex_cb *cb, void *userdata);

typedef struct sluice_dq_dead_entry {
  const char *id;
  int64_t died_ms;   /* when it was dead-lettered, Redis's clock */
  unsigned attempts; /* deliveries it had */
  const void *payload;
  size_t len;
} sluice_dq_dead_entry;

/* total is the number of dead letters; entries are the requested slice,
 * oldest first. */
typedef void sluice_dq_dead_cb(sluice_dq *dq, int status, size_t total,
                               const sluice_dq_dead_entry *entries, size_t n, void *userdata);

/* List up to limit (1..1000) dead letters starting at offset. */
SLUICE_EXPORT int sluice_dq_dead_list(sluice_dq *dq, size_t offset, size_t limit,
                                      sluice_dq_dead_cb *cb, void *userdata);

/* count: messages moved back to the queue (due now, attempt count reset). */
typedef void sluice_dq_count_cb(sluice_dq *dq, int status, uint64_t count, void *userdata);

/* Requeue dead letter ID, or when id is NULL the oldest up to 1000 of them
 * (call again while count is 1000). A missing id gives count 0. */
SLUICE_EXPORT int sluice_dq_dead_requeue(sluice_dq *dq, const char *id, sluice_dq_count_cb *cb,
                                         void *userdata);

/* ---- consuming ----------------------------------------------------------- */

typedef struct sluice_dq_consumer_options {
  unsigned batch;         /* most messages per take; 1..1000, default 16 */
  unsigned visibility_ms; /* time to settle a message; >= 10, default 30000 */
  unsigned max_in_flight; /* unsettled messages held at once; default 256 */
  unsigned max_attempts;  /* deliveries before dead-lettering; 0 = no limit;
                              default 5 */
  unsigned max_poll_ms;   /* longest sleep between takes when idle; >= 10,
                            * default 60000. Only a safety net (for wake-ups
                            * lost with evicted keys): due times, deadlines
                            * and other consumers' failures never wait for it. */
  unsigned op_timeout_ms; /* deadline of each Redis step; 0 = client default */
  uint64_t retention_ms;  /* as in sluice_dq_options; default 7 days */
} sluice_dq_consumer_options;

SLUICE_EXPORT void sluice_dq_consumer_options_init(sluice_dq_consumer_options *opts);

/* A delivered message. Settle it exactly once, with sluice_dq_ack or
 * sluice_dq_retry, from the handler or any time later; the handle is valid
 * until then (even after the consumer was freed). */
typedef void sluice_dq_handler(sluice_dq_consumer *consumer, sluice_dq_msg *msg, void *userdata);

/* Start consuming queue NAME: the handler runs from the loop for each message.
 * SLUICE_EINVAL for a bad name, options or NULL handler. */
SLUICE_EXPORT int sluice_dq_consumer_new(sluice_client *client, const char *name,
                                         const sluice_dq_consumer_options *opts,
                                         sluice_dq_handler *handler, void *userdata,
                                         sluice_dq_consumer **out);

/* Stop consuming and free the handle. As for every sluice object (see
 * sluice.h):
 * operations still pending complete with SLUICE_ECANCELED from the loop,
 * never inside this call; no other callback of it runs afterwards; freeing
 * inside any of its own callbacks is safe; NULL is a no-op.
 * No handler runs afterwards; messages taken but not yet handed to the
 * handler are put back at once. Handles of messages already delivered stay
 * valid: settle them as usual (the settle callbacks still run, and with
 * auto-renewal their leases are renewed and losses reported until then),
 * and the consumer's memory goes once the last one is settled. */
SLUICE_EXPORT void sluice_dq_consumer_free(sluice_dq_consumer *consumer);

/* Called (from the loop) when a take fails, e.g. while Redis is unreachable;
 * the consumer keeps retrying with backoff. Informational only. */
typedef void sluice_dq_error_cb(sluice_dq_consumer *consumer, int status, void *userdata);
SLUICE_EXPORT void sluice_dq_consumer_set_error_cb(sluice_dq_consumer *consumer,
                                                   sluice_dq_error_cb *cb, void *userdata);

/* Messages delivered and not yet settled by this consumer. */
SLUICE_EXPORT unsigned sluice_dq_consumer_in_flight(const sluice_dq_consumer *consumer);

SLUICE_EXPORT const char *sluice_dq_msg_id(const sluice_dq_msg *msg);
/* The payload (borrowed, valid until the message is settled); *len its size.
 * A NUL byte always follows it, for convenience with text. */
SLUICE_EXPORT const void *sluice_dq_msg_payload(const sluice_dq_msg *msg, size_t *len);
/* 1 on first delivery, 2 on the first redelivery, ... */
SLUICE_EXPORT unsigned sluice_dq_msg_attempt(const sluice_dq_msg *msg);
/* The due time it was delivered for (unix ms, Redis's clock). */
SLUICE_EXPORT int64_t sluice_dq_msg_due_ms(const sluice_dq_msg *msg);
/* Its priority (sluice_dq_push_ex; 0 for NULL). */
SLUICE_EXPORT unsigned sluice_dq_msg_priority(const sluice_dq_msg *msg);
/* Local estimate of the visibility time left (0 once passed). */
SLUICE_EXPORT int64_t sluice_dq_msg_remaining_ms(const sluice_dq_msg *msg);

/* status: SLUICE_OK; SLUICE_ELATE (the visibility deadline had passed: the
 * message was or will be delivered again, so this settle did not count);
 * SLUICE_ENOTFOUND (the message is gone: cancelled, or acknowledged by
 * whoever got it after the deadline); or a transport error, after which the
 * message is redelivered when its deadline passes. id is borrowed. */
typedef void sluice_dq_settle_cb(sluice_dq_consumer *consumer, int status, const char *id,
                                 void *userdata);

/* Acknowledge: the message is done and removed. Releases msg (invalid after
 * the call, whatever it returns; cb runs only if it returns 0). cb may be
 * NULL. Settlements made in one loop turn share one Redis call. */
SLUICE_EXPORT int sluice_dq_ack(sluice_dq_msg *msg, sluice_dq_settle_cb *cb, void *userdata);

/* Deliver again no earlier than delay_ms (0..SLUICE_DQ_TIME_MAX) from now,
 * as a new attempt; if this was attempt max_attempts the message goes to the
 * dead letters instead (status still SLUICE_OK). Releases msg like
 * sluice_dq_ack. */
SLUICE_EXPORT int sluice_dq_retry(sluice_dq_msg *msg, int64_t delay_ms, sluice_dq_settle_cb *cb,
                                  void *userdata);

/* ---- leases ---------------------------------------------------------------
 * A taken message is invisible to other consumers until its visibility
 * deadline (visibility_ms after the take, on Redis's clock). A handler that
 * needs longer extends it, by hand (sluice_dq_msg_extend) or automatically
 * (sluice_dq_consumer_set_auto_renew): then visibility_ms is only how soon
 * a crashed consumer's messages come back, not a cap on a handler's run.
 * Each delivery carries a token larger than every earlier delivery's of the
 * same queue, so a side effect can be fenced with it as with a permit's
 * fence; an extension, ack or retry of a delivery that was overtaken (its
 * deadline passed, or the message was taken again since) is refused. */

/* The delivery token: a per-queue counter, larger for every later delivery
 * of any message of the queue (so for every redelivery of this one); 0 for
 * NULL. */
SLUICE_EXPORT uint64_t sluice_dq_msg_delivery(const sluice_dq_msg *msg);

/* Move the message's visibility deadline to ms (1..SLUICE_DQ_TIME_MAX)
 * after now on Redis's clock; a later deadline stays. cb (may be NULL)
 * gets SLUICE_OK (sluice_dq_msg_remaining_ms then counts from the new
 * deadline), SLUICE_ELATE (the deadline had passed, or the message was
 * delivered again since: this delivery is lost and the consumer's lost
 * callback fires), SLUICE_ENOTFOUND (acknowledged or cancelled meanwhile;
 * lost too), or a transport error (the deadline may not have moved).
 * Returns SLUICE_EINVAL (NULL msg, ms out of range) or SLUICE_ECLOSED
 * without calling cb. Extensions made in one loop turn share one Redis
 * call. msg stays the caller's: settle it as usual. */
SLUICE_EXPORT int sluice_dq_msg_extend(sluice_dq_msg *msg, int64_t ms, sluice_dq_settle_cb *cb,
                                       void *userdata);

/* Extend every message this consumer delivers from now on automatically
 * while it is not settled: by visibility_ms, about a third of visibility_ms
 * after the take or the last confirmed extension; the renewals due close
 * together share one Redis call. on: 1 or 0. SLUICE_EINVAL for NULL or
 * another value. A message keeps being renewed after the consumer is freed,
 * until it is settled; closing the client stops renewal. */
SLUICE_EXPORT int sluice_dq_consumer_set_auto_renew(sluice_dq_consumer *consumer, int on);

/* Called once per delivery, from the loop, when the consumer knows it no
 * longer holds msg: reason SLUICE_ELATE or SLUICE_ENOTFOUND (an extension
 * was refused, as in sluice_dq_msg_extend) or SLUICE_ETIMEDOUT (auto-renewal
 * only: the deadline passed locally before a renewal was confirmed). msg
 * stays valid until settled (settling it inside the callback is fine);
 * its work may be done twice, so stop it. Like the settle callbacks it
 * still runs for messages delivered before the consumer was freed (never
 * after the client closed). */
typedef void sluice_dq_lost_cb(sluice_dq_consumer *consumer, sluice_dq_msg *msg, int reason,
                               void *userdata);
SLUICE_EXPORT void sluice_dq_consumer_set_lost_cb(sluice_dq_consumer *consumer,
                                                  sluice_dq_lost_cb *cb, void *userdata);

/* Counters since the handle was created (see "metrics" in
 * sluice/client.h). */
typedef struct sluice_dq_metrics {
  uint64_t pushed;     /* messages accepted */
  uint64_t duplicates; /* pushes refused with SLUICE_EEXIST */
  uint64_t errors;     /* pushes answered with another status */
  uint64_t in_flight;  /* messages pushed, not yet answered (now) */
  uint64_t full;       /* messages refused at once with SLUICE_EFULL: the
                           client's max_pending_pushes was reached, or
                           its record of unreplicated writes was full */
} sluice_dq_metrics;
SLUICE_EXPORT void sluice_dq_get_metrics(const sluice_dq *dq, sluice_dq_metrics *out);

/* lateness: from a message's due time to its delivery, on Redis's clock
 * (ms resolution). dead_lettered counts the retries this consumer sent past
 * max_attempts; messages dead-lettered because their visibility deadline
 * passed on their last attempt are counted by no consumer (see
 * sluice_dq_inspect's dead). */
typedef struct sluice_dq_consumer_metrics {
  uint64_t delivered;     /* messages handed to the handler */
  uint64_t redelivered;   /* of those, with attempt > 1 */
  uint64_t acked;         /* acknowledgements Redis confirmed */
  uint64_t retried;       /* retries Redis scheduled */
  uint64_t dead_lettered; /* retries past max_attempts: dead letters */
  uint64_t late_settles;  /* acks or retries answered SLUICE_ELATE */
  uint64_t take_errors;   /* take steps that failed (the consumer backs off) */
  sluice_latency lateness;
} sluice_dq_consumer_metrics;
SLUICE_EXPORT void sluice_dq_consumer_get_metrics(const sluice_dq_consumer *consumer,
                                                  sluice_dq_consumer_metrics *out);

#ifdef __cplusplus
}
#endif

#endif /* SLUICE_DQ_H */
