#ifndef SLUICE_DQ_H
#define SLUICE_DQ_H
#include <sluice/sluice.h>
#endif
