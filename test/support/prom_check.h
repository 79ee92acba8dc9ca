/*
 * Checks of a Prometheus text exposition (format 0.0.4) that promtool
 * does not make (it accepts duplicate series and families split in two):
 * every sample follows its family's HELP and TYPE, each family appears
 * once, no series repeats, and each histogram series has buckets that never
 * decrease, ending at +Inf with its _count. Also runs `promtool check
 * metrics` on the text when promtool is installed.
 */
#ifndef SLUICE_TEST_PROM_CHECK_H
#define SLUICE_TEST_PROM_CHECK_H

#include <stddef.h>

/* Fails the case at the first problem, naming the line. */
void prom_check_text(const char *text);
/* 1 when promtool ran and passed the text; 0 when promtool is missing
 * (fails the case under CI=true, where it is required); fails the case
 * when promtool complains. */
int prom_check_promtool(const char *text);
/* The value of the sample written exactly as series (`name{labels}`), or
 * -1 if there is none. */
long long prom_value(const char *text, const char *series);

#endif
