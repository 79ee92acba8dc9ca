/* A repeating schedule's spec (see docs/delay-queue.md, "Repeating
 * schedules"): "every DURATION [from UNIX_MS]", a five-field cron expression
 * (UTC) or one of its @macros, read into the canonical text the scripts
 * evaluate (lua/_dq_sched.lua): the Lua side never parses user input. */
#ifndef SLUICE_DQ_SPEC_H
#define SLUICE_DQ_SPEC_H

#include <stddef.h>

#include <sluice/dq_schedule.h>

/* Longest spec text accepted, and longest canonical form written. */
#define SLUICE__DQ_SPEC_MAX SLUICE_DQ_SCHEDULE_SPEC_MAX
#define SLUICE__DQ_CANON_MAX 512

/* Read spec into canon (SLUICE__DQ_CANON_MAX bytes):
 *   "i <every ms> <start ms>"  occurrences start + k * every, k >= 0;
 *   "c <minutes> <hours> <days of month> <months> <days of week> <D> <W>"
 *     each list comma-separated ascending values (days of week 0..6,
 *     Sunday 0), D and W "1" when that field began with '*' (Vixie cron:
 *     then a day must match both day fields, else either).
 * 0, or SLUICE_EINVAL (bad syntax, a value out of range, or a cron
 * expression that never occurs, such as "0 0 30 2 *"). */
int sluice__dq_spec_parse(const char *spec, char *canon);

#endif
