/*
 * sluice — distributed semaphores, rate limiters and delay queues on Redis
 * for programs built around a libevent loop.
 *
 * The umbrella header: include this one. <sluice/common.h> has the status
 * codes and the conventions every header follows; each primitive has its
 * own header.
 */
#ifndef SLUICE_SLUICE_H
#define SLUICE_SLUICE_H

#include <sluice/common.h>
#include <sluice/types.h>
#include <sluice/client.h>
#include <sluice/sem.h>
#include <sluice/limiter.h>
#include <sluice/dq.h>
#include <sluice/dq_schedule.h>

#endif /* SLUICE_SLUICE_H */
