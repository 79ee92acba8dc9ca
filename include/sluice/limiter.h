#ifndef SLUICE_LIMITER_H
#define SLUICE_LIMITER_H
#include <sluice/sluice.h>
#endif
