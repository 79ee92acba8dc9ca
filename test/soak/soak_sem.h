/*
 * The soak's semaphore client processes (test/soak/soak.c runs them beside its
 * workers): a few processes that only wait for and hold a fair semaphore,
 * which the soak kills (SIGKILL, then starts again) and stops (SIGSTOP,
 * SIGCONT) at random while Redis is hurt too. The monitor, in the soak's
 * parent loop, checks two liveness invariants from outside:
 *  - no permit stays free more than about a second while a live (running,
 *    not stopped) process waits for it, Redis having been quiet meanwhile;
 *  - no permit is granted to an attempt whose caller gave up: every holder
 *    Redis lists is a permit some live process received, or one a killed
 *    process held (until its lease ends); a holder nobody received that
 *    outlives a heartbeat, with no client process killed or stopped
 *    around it, is an orphan.
 */
#ifndef SLUICE_SOAK_SEM_H
#define SLUICE_SOAK_SEM_H

#include <stdint.h>

struct event_base;

/* Maps the shared page and forks the processes (url, key prefix). With
 * sabotage a process now and then keeps a permit without saying so, or
 * says it waits while it does not ask: both checks must then fire. 0 or
 * -1. */
int soak_sem_start(const char *url, const char *prefix, uint64_t seed, int sabotage);
/* In the parent's loop: process faults every 0.8-2.5 s and a monitor
 * every 100 ms, on its own client. redis_quiet_since() returns the
 * monotonic ns since which Redis has not been hurt (0: being hurt now). */
int soak_sem_attach(struct event_base *base, uint64_t (*redis_quiet_since)(void));
/* No more faults; the processes close and exit; the monitor closes. */
void soak_sem_stop(void);
/* Once stopped: 1 when every process has exited and the monitor closed. */
int soak_sem_done(void);
/* Prints the section of the report; returns its violations. */
uint64_t soak_sem_report(void);

#endif
