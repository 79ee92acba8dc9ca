/* The repeating schedules a queue handle runs (dq_sched.c); dq.c calls
 * these from the handle's life cycle. Each takes NULL (no schedule yet). */
#ifndef SLUICE_DQ_SCHED_H
#define SLUICE_DQ_SCHED_H

#include "dq/dq.h"

/* Stop the timer: the handle is being freed or its client closed. */
void sluice__dq_sched_stop(sluice__dq_sched *s);
/* Fire now (the node behind the queue changed). */
void sluice__dq_sched_poke(sluice__dq_sched *s);
void sluice__dq_sched_free(sluice__dq_sched *s);

#endif
