/*
 * Bounds on every reply a connection reads, checked while hiredis reads it,
 * on hiredis 0.14 and 1.x alike: a reply larger, longer or deeper than the
 * largest one sluice can legitimately receive is refused before hiredis
 * allocates for it, hiredis drops the connection (its pending callbacks get
 * NULL, its memory is freed at once) and the refusal says whose reply it
 * was. So a hostile or broken server costs the client a bounded amount of
 * memory and time, never an allocation or a walk its header dictates.
 *
 * The limits, from the public maxima (sluice/dq.h, sluice/limiter.h, the
 * batch sizes in src/):
 *  - a string: SLUICE_DQ_PAYLOAD_MAX (1 MiB), a message's payload; every
 *    other string is a name, id, number or error text of at most a few KiB;
 *  - the bytes not yet parsed: a string and its header, plus one read
 *    (hiredis reads 16 KiB at a time): 1 MiB + 64 KiB. A bulk string that
 *    claims more is refused after that much arrived, whatever its length
 *    header says (hiredis buffers a bulk whole before handing it over);
 *  - the strings of one reply together: a take of the largest batch (1000
 *    messages) of the largest payloads, 1000 * (1 MiB + 1 KiB for its id
 *    and numbers);
 *  - elements of one reply (every array's length summed): 2^20. The
 *    largest script replies are far smaller (a push batch of
 *    SLUICE_DQ_BATCH_MAX: 10,000; a take of 1000: 4,003; a dead-letter page
 *    of 1000: 4,001; a semaphore inspected, SLUICE_SEM_INSPECT_MAX holders
 *    and waiters: 3,006; a limiter batch of 255: 1,020); CLUSTER SLOTS of a
 *    cluster whose 16,384 slots are all separate ranges, each served by 8
 *    nodes of 7 elements, is 950,272;
 *  - nesting: 6 levels. CLUSTER SLOTS on Redis 7 is the deepest reply (4:
 *    ranges, nodes, a node's metadata); hiredis 0.14 stops at 8 by itself,
 *    1.x never (a deep reply would overflow the stack when freed).
 */
#ifndef SLUICE_REPLY_BOUNDS_H
#define SLUICE_REPLY_BOUNDS_H

#include <stddef.h>

#include <hiredis/async.h>

#define SLUICE__REPLY_STRING_MAX ((size_t)1 << 20)
#define SLUICE__REPLY_PENDING_MAX (SLUICE__REPLY_STRING_MAX + ((size_t)64 << 10))
#define SLUICE__REPLY_BYTES_MAX ((size_t)1000 * (SLUICE__REPLY_STRING_MAX + 1024))
#define SLUICE__REPLY_ELEMENTS_MAX ((size_t)1 << 20)
#define SLUICE__REPLY_DEPTH_MAX 6

/* What the last refusal on a connection was. */
typedef struct sluice__reply_refusal {
  int refused;
  void *privdata; /* the privdata of the command whose reply it was */
  char why[120];
} sluice__reply_refusal;

/* Bound every reply read on ac, from now on. Call once, after the event
 * library is attached (the bounds ride on its read hook). *out is cleared,
 * and filled when a reply is refused; it must outlive ac. Returns 0, or
 * SLUICE_ENOMEM (ac unchanged). */
int sluice__reply_bounds_attach(redisAsyncContext *ac, sluice__reply_refusal *out);

#endif
