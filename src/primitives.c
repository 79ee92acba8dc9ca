/*
 * What the primitives give the client as a whole, listed once, outside
 * core/: core/ keeps the counts and reads the options through these
 * descriptors (core/engine.h) without naming a primitive. A new primitive
 * with a client-wide cap adds its line here and nothing in core/.
 */
#include "core/engine.h"
#include "sem/sem.h"
#include "limiter/limiter.h"
#include "dq/dq.h"

const sluice__cap_def *const sluice__caps[] = {
    &sluice__sem_pending_cap,
    &sluice__rl_waits_cap,
    &sluice__dq_pushes_cap,
    NULL,
};

_Static_assert(sizeof sluice__caps / sizeof *sluice__caps - 1 <= SLUICE__CAPS_MAX,
               "a client keeps at most SLUICE__CAPS_MAX caps (core/engine.h)");
