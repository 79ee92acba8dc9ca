/*
 * The client's log hook: messages queue in a small ring and leave from
 * c->log_ev, so the callback never runs inside a hiredis frame or a
 * caller's call; and the probe that measures the event_base's clock once
 * (a coarse clock makes every timer late).
 */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include <event2/event.h>

#include "core/client.h"

#define LOG_RING (sizeof((sluice_client *)0)->log_ring / sizeof((sluice_client *)0)->log_ring[0])

int sluice__log_enabled(const sluice_client *c) { return c && c->log_cb; }

void sluice__log(sluice_client *c, int level, const char *fmt, ...) {
  va_list ap;
  if (!c || !c->log_cb) return;
  if (c->log_len == LOG_RING) { /* keep the newest */
    c->log_head = (c->log_head + 1) % LOG_RING;
    c->log_len--;
    c->log_dropped++;
  }
  unsigned slot = (c->log_head + c->log_len++) % LOG_RING;
  c->log_ring[slot].level = level;
  va_start(ap, fmt);
  vsnprintf(c->log_ring[slot].msg, sizeof c->log_ring[slot].msg, fmt, ap);
  va_end(ap);
  event_active(c->log_ev, 0, 0);
}

/* From the loop: each message is copied out before the callback runs, which
 * may log again, change the hook or close the client. */
void sluice__log_deliver_cb(evutil_socket_t fd, short what, void *arg) {
  sluice_client *c = arg;
  char msg[sizeof c->log_ring[0].msg];
  if (c->log_dropped && c->log_cb) {
    snprintf(msg, sizeof msg, "%u log message(s) dropped (the queue holds %u)", c->log_dropped,
             (unsigned)LOG_RING);
    c->log_dropped = 0;
    c->log_cb(c, SLUICE_LOG_WARN, msg, c->log_ud);
  }
  while (c->log_len && c->log_cb) {
    int level = c->log_ring[c->log_head].level;
    memcpy(msg, c->log_ring[c->log_head].msg, sizeof msg);
    c->log_head = (c->log_head + 1) % LOG_RING;
    c->log_len--;
    c->log_cb(c, level, msg, c->log_ud);
  }
}

/* libevent offers no way to ask which clock a base reads, so measure it:
 * spin a few loop turns and look at the steps of the base's cached time.
 * A precise clock moves by microseconds between turns; CLOCK_MONOTONIC_COARSE
 * (what event_base_new() picks on Linux) only by whole ticks of 1-4 ms. */
#define CLOCK_CHECK_STEPS 3
#define CLOCK_CHECK_MAX_US 50000

void sluice__clock_check_cb(evutil_socket_t fd, short what, void *arg) {
  sluice_client *c = arg;
  struct timeval tv;
  if (c->clock_checked || c->closing || event_base_gettimeofday_cached(c->base, &tv) != 0) return;
  int64_t now = (int64_t)tv.tv_sec * 1000000 + tv.tv_usec;
  if (c->clock_turns++ == 0) {
    c->clock_start_us = sluice__mono_us();
  } else if (now != c->clock_last_us) {
    uint64_t step = (uint64_t)(now > c->clock_last_us ? now - c->clock_last_us
                                                      : c->clock_last_us - now);
    if (!c->clock_min_step_us || step < c->clock_min_step_us) c->clock_min_step_us = step;
    c->clock_steps++;
  }
  c->clock_last_us = now;
  uint64_t spent = sluice__mono_us() - c->clock_start_us;
  if (c->clock_steps < CLOCK_CHECK_STEPS && spent < CLOCK_CHECK_MAX_US) {
    /* A zero timer, not event_active: events activated from a callback run
     * in the same loop iteration, before the cached time is refreshed. */
    sluice__timer_in(c->clock_ev, 0);
    return;
  }
  c->clock_checked = 1;
  uint64_t res = c->clock_steps ? c->clock_min_step_us : spent;
  if (res >= 2000)
    sluice__log(c, SLUICE_LOG_WARN,
                "the event_base's clock moves in steps of %.1f ms (a coarse clock): every "
                "deadline, lease and retry timer may fire that late; create the base with "
                "EVENT_BASE_FLAG_PRECISE_TIMER (see sluice/client.h)",
                (double)res / 1000);
  else
    sluice__log(c, SLUICE_LOG_DEBUG, "event_base clock steps: %llu us (precise)",
                (unsigned long long)res);
}

void sluice_client_set_log_cb(sluice_client *c, sluice_log_cb *cb, void *ud) {
  if (!c) return;
  int was_on = c->log_cb != NULL;
  c->log_cb = cb;
  c->log_ud = ud;
  if (!cb) {
    c->log_len = c->log_dropped = 0;
    return;
  }
  if (!was_on && !sluice__topo_up(c->topo)) {
    char w[128];
    sluice__topo_where(c->topo, w, sizeof w);
    sluice__log(c, SLUICE_LOG_INFO, "connecting to %s", w);
  }
  if (!c->clock_checked && !c->clock_turns) sluice__timer_in(c->clock_ev, 0);
}

const char *sluice_log_level_name(int level) {
  switch (level) {
    case SLUICE_LOG_ERROR: return "ERROR";
    case SLUICE_LOG_WARN: return "WARN";
    case SLUICE_LOG_INFO: return "INFO";
    case SLUICE_LOG_DEBUG: return "DEBUG";
    default: return "?";
  }
}
