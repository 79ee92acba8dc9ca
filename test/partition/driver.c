/* A client process of the partition harness, on sluice's public API only,
 * with default client options, as a user would run it:
 *
 *   partition_driver --url URL --name NAME --log FILE --fence FILE
 *                    --modes sem[,push][,consume] --seconds S
 *
 * sem: a 1-permit semaphore (lease 3 s, renewal on) in a loop: acquire,
 *   write the permit's fencing token to the fenced file, hold 100 ms,
 *   write again, release. push: a message every 10 ms, ids NAME-SEQ.
 *   consume: consume and acknowledge.
 * Every event goes to the log (event_log.h); test/partition/check.py reads
 * the logs of all processes. It stops by itself after S seconds. */
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <event2/event.h>
#include <sluice/sluice.h>

#include "event_log.h"
#include "fenced_file.h"

#define SEM_NAME "partition"
#define QUEUE_NAME "partition"
#define LEASE_MS 3000
#define HOLD_MS 100
#define PUSH_EVERY_MS 10
#define ACQUIRE_TIMEOUT_MS 10000
#define RETRY_MS 50

typedef struct driver {
  struct event_base *base;
  sluice_client *client;
  const char *name, *fence_path;
  sluice_sem *sem;
  sluice_permit *permit; /* held now, or NULL */
  struct event *hold_timer, *retry_timer, *push_timer, *stop_timer, *sigterm;
  sluice_dq *dq;
  sluice_dq_consumer *consumer;
  uint64_t push_seq;
  int stopping;
} driver;

static struct timeval ms_tv(unsigned ms) {
  return (struct timeval){(time_t)(ms / 1000), (suseconds_t)(ms % 1000) * 1000};
}

static void arm(struct event *ev, unsigned ms) {
  struct timeval tv = ms_tv(ms);
  evtimer_add(ev, &tv);
}

/* ---- sem: acquire, fenced write, hold, fenced write, release ---- */

static void acquire(driver *d);

static void on_lost(sluice_permit *permit, int reason, void *userdata) {
  event_log("lost %s %d", sluice_permit_id(permit), reason);
}

static void fence(driver *d) {
  if (sluice_permit_lost(d->permit)) return; /* a holder that knows it lost writes nothing */
  if (fenced_write(d->fence_path, sluice_permit_id(d->permit), sluice_permit_fence(d->permit)) < 0)
    event_log("fence_error %s", sluice_permit_id(d->permit));
}

static void on_released(sluice_sem *sem, int status, void *userdata) {
  event_log("released %s", sluice_strerror(status));
}

static void end_hold(evutil_socket_t fd, short what, void *arg) {
  driver *d = arg;
  fence(d);
  sluice_permit *p = d->permit;
  d->permit = NULL;
  event_log("release %s", sluice_permit_id(p));
  int rc = sluice_permit_release(p, on_released, d);
  if (rc != SLUICE_OK) event_log("released %s", sluice_strerror(rc));
  if (!d->stopping) acquire(d);
}

static void on_acquired(sluice_sem *sem, int status, sluice_permit *permit, void *userdata) {
  driver *d = userdata;
  if (status != SLUICE_OK) {
    event_log("acq_fail %s", sluice_strerror(status));
    if (!d->stopping) arm(d->retry_timer, RETRY_MS);
    return;
  }
  d->permit = permit;
  /* The lease left shows a grant answered after its lease ran out. */
  event_log("grant %s %" PRIu64 " %" PRId64, sluice_permit_id(permit), sluice_permit_fence(permit),
            sluice_permit_remaining_ms(permit));
  sluice_permit_set_lost_cb(permit, on_lost, d);
  fence(d);
  arm(d->hold_timer, HOLD_MS);
}

static void acquire(driver *d) {
  event_log("want");
  int rc = sluice_sem_acquire(d->sem, ACQUIRE_TIMEOUT_MS, on_acquired, d, NULL);
  if (rc != SLUICE_OK) on_acquired(d->sem, rc, NULL, d); /* then it won't be called */
}

static void retry_acquire(evutil_socket_t fd, short what, void *arg) { acquire(arg); }

static int start_sem(driver *d) {
  sluice_sem_options o;
  sluice_sem_options_init(&o);
  o.permits = 1;
  o.ttl_ms = LEASE_MS;
  o.auto_renew = 1;
  if (sluice_sem_new(d->client, SEM_NAME, &o, &d->sem) != SLUICE_OK) return -1;
  acquire(d);
  return 0;
}

/* ---- push: one message every 10 ms ---- */

static void on_pushed(sluice_dq *dq, int status, const char *id, int64_t due_ms, void *userdata) {
  if (status == SLUICE_OK) event_log("push_ok %s", id);
  else event_log("push_fail %s %s", id, sluice_strerror(status));
}

static void push_one(evutil_socket_t fd, short what, void *arg) {
  driver *d = arg;
  char id[64];
  snprintf(id, sizeof id, "%s-%" PRIu64, d->name, ++d->push_seq);
  sluice_dq_item item = {.payload = id, .len = strlen(id), .id = id};
  int rc = sluice_dq_push(d->dq, &item, on_pushed, d);
  if (rc != SLUICE_OK) event_log("push_fail %s %s", id, sluice_strerror(rc));
  if (!d->stopping) arm(d->push_timer, PUSH_EVERY_MS);
}

/* ---- consume: deliver, acknowledge ---- */

static void on_acked(sluice_dq_consumer *c, int status, const char *id, void *userdata) {
  if (status != SLUICE_OK) event_log("ack_fail %s %s", id, sluice_strerror(status));
}

static void on_message(sluice_dq_consumer *c, sluice_dq_msg *msg, void *userdata) {
  event_log("deliver %s %u", sluice_dq_msg_id(msg), sluice_dq_msg_attempt(msg));
  sluice_dq_ack(msg, on_acked, userdata);
}

static void on_consumer_error(sluice_dq_consumer *c, int status, void *userdata) {
  event_log("take_fail %s", sluice_strerror(status));
}

static int start_queue(driver *d, int push, int consume) {
  sluice_dq_options o;
  sluice_dq_options_init(&o);
  if (push) {
    if (sluice_dq_new(d->client, QUEUE_NAME, &o, &d->dq) != SLUICE_OK) return -1;
    arm(d->push_timer, PUSH_EVERY_MS);
  }
  if (consume) {
    sluice_dq_consumer_options co;
    sluice_dq_consumer_options_init(&co);
    if (sluice_dq_consumer_new(d->client, QUEUE_NAME, &co, on_message, d, &d->consumer) !=
        SLUICE_OK)
      return -1;
    sluice_dq_consumer_set_error_cb(d->consumer, on_consumer_error, d);
  }
  return 0;
}

/* ---- the process ---- */

static void on_log(sluice_client *client, int level, const char *msg, void *userdata) {
  event_log("lib %s %s", sluice_log_level_name(level), msg);
}

static void on_closed(void *arg) { event_base_loopexit(((driver *)arg)->base, NULL); }

static void stop(evutil_socket_t fd, short what, void *arg) {
  driver *d = arg;
  if (d->stopping) return;
  d->stopping = 1;
  sluice_client_metrics m;
  sluice_client_get_metrics(d->client, &m);
  event_log("stop record_dropped=%" PRIu64 " record_entries=%zu", m.record_dropped,
            m.record_entries);
  if (d->consumer) {
    sluice_dq_consumer_metrics cm;
    sluice_dq_consumer_get_metrics(d->consumer, &cm);
    event_log("consumer delivered=%" PRIu64 " acked=%" PRIu64 " take_errors=%" PRIu64
              " in_flight=%u",
              cm.delivered, cm.acked, cm.take_errors, sluice_dq_consumer_in_flight(d->consumer));
  }
  event_del(d->hold_timer);
  event_del(d->retry_timer);
  event_del(d->push_timer);
  event_del(d->sigterm);
  if (d->permit) {
    event_log("release %s", sluice_permit_id(d->permit));
    sluice_permit_release(d->permit, NULL, NULL);
    d->permit = NULL;
  }
  sluice_dq_consumer_free(d->consumer);
  sluice_dq_free(d->dq);
  sluice_sem_free(d->sem);
  sluice_client_close(d->client, on_closed, d);
}

static int parse_args(int argc, char **argv, sluice_client_options *co, driver *d, char **log,
                      char **modes, unsigned *seconds) {
  for (int i = 1; i + 1 < argc; i += 2) {
    char *v = argv[i + 1];
    if (strcmp(argv[i], "--url") == 0) co->url = v;
    else if (strcmp(argv[i], "--name") == 0) d->name = v;
    else if (strcmp(argv[i], "--log") == 0) *log = v;
    else if (strcmp(argv[i], "--fence") == 0) d->fence_path = v;
    else if (strcmp(argv[i], "--modes") == 0) *modes = v;
    else if (strcmp(argv[i], "--seconds") == 0) *seconds = (unsigned)strtoul(v, NULL, 10);
    else return -1;
  }
  return argc % 2 == 1 && co->url && d->name && *log && d->fence_path && *modes && *seconds > 0
             ? 0
             : -1;
}

static int has_mode(const char *modes, const char *mode) {
  size_t n = strlen(mode);
  for (const char *p = modes; p; p = strchr(p, ',') ? strchr(p, ',') + 1 : NULL)
    if (strncmp(p, mode, n) == 0 && (p[n] == ',' || p[n] == '\0')) return 1;
  return 0;
}

int main(int argc, char **argv) {
  static driver d;
  sluice_client_options co;
  sluice_client_options_init(&co); /* defaults: the point of the harness */
  char *log = NULL, *modes = NULL;
  unsigned seconds = 0;
  if (parse_args(argc, argv, &co, &d, &log, &modes, &seconds) != 0) {
    fprintf(stderr,
            "usage: partition_driver --url URL --name NAME --log FILE --fence FILE "
            "--modes sem[,push][,consume] --seconds S\n");
    return 2;
  }
  if (event_log_open(log, d.name) != 0) {
    perror(log);
    return 1;
  }
  signal(SIGPIPE, SIG_IGN);
  /* sluice's leases are libevent timers: ask for the precise clock (a plain
   * event_base_new() reads a coarse one, ~4 ms steps). */
  struct event_config *cfg = event_config_new();
  if (cfg && event_config_set_flag(cfg, EVENT_BASE_FLAG_PRECISE_TIMER) == 0)
    d.base = event_base_new_with_config(cfg);
  if (cfg) event_config_free(cfg);
  if (!d.base || sluice_client_new(d.base, &co, &d.client) != SLUICE_OK) {
    fprintf(stderr, "%s: client: %s\n", d.name, sluice_client_last_error(NULL));
    return 1;
  }
  sluice_client_set_log_cb(d.client, on_log, &d);
  d.hold_timer = evtimer_new(d.base, end_hold, &d);
  d.retry_timer = evtimer_new(d.base, retry_acquire, &d);
  d.push_timer = evtimer_new(d.base, push_one, &d);
  d.stop_timer = evtimer_new(d.base, stop, &d);
  d.sigterm = evsignal_new(d.base, SIGTERM, stop, &d);
  evsignal_add(d.sigterm, NULL);
  arm(d.stop_timer, seconds * 1000);
  event_log("start %s", modes);
  int failed = (has_mode(modes, "sem") && start_sem(&d) != 0) ||
               start_queue(&d, has_mode(modes, "push"), has_mode(modes, "consume")) != 0;
  if (failed) {
    fprintf(stderr, "%s: could not start %s\n", d.name, modes);
    stop(-1, 0, &d);
  }
  event_base_dispatch(d.base);
  event_log("exit");
  event_free(d.hold_timer);
  event_free(d.retry_timer);
  event_free(d.push_timer);
  event_free(d.stop_timer);
  event_free(d.sigterm);
  event_base_free(d.base);
  event_log_close();
  return failed;
}
