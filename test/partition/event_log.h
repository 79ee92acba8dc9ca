/* The per-process event log of the partition harness: one line per event,
 * "<unix µs> <process> <event> <fields...>", the time from CLOCK_REALTIME,
 * which every process on the machine shares, so test/partition/check.py
 * can merge the logs of all processes into one timeline. */
#ifndef PARTITION_EVENT_LOG_H
#define PARTITION_EVENT_LOG_H

#include <stdint.h>

/* Open (append) path for this process, named name in every line; 0 or -1. */
int event_log_open(const char *path, const char *name);
void event_log_close(void);

/* One event: the line is written with one write(2), so a process killed
 * right after still leaves it, and lines of other writers never interleave. */
#if defined(__GNUC__)
__attribute__((format(printf, 1, 2)))
#endif
void event_log(const char *fmt, ...);

int64_t event_log_now_us(void);

#endif
