/*
 * Forward declarations of sluice's opaque handle types, in one place.
 *
 * Every public header includes this file instead of repeating the typedefs:
 * C99 (and -std=c99 -pedantic) forbids declaring the same typedef twice,
 * which happened as soon as a program included two sluice headers.
 */
#ifndef SLUICE_TYPES_H
#define SLUICE_TYPES_H

typedef struct sluice_client sluice_client;

typedef struct sluice_sem sluice_sem;
typedef struct sluice_permit sluice_permit;
typedef struct sluice_acquire sluice_acquire;

typedef struct sluice_limiter sluice_limiter;
typedef struct sluice_rl_waiter sluice_rl_waiter;

typedef struct sluice_dq sluice_dq;
typedef struct sluice_dq_consumer sluice_dq_consumer;
typedef struct sluice_dq_msg sluice_dq_msg;

#endif /* SLUICE_TYPES_H */
