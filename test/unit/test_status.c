/* The status table (include/sluice/common.h) without Redis: every code has
 * its own name and message, unknown codes get a fixed answer, never NULL. */
#include <limits.h>
#include <string.h>

#include <sluice/sluice.h>

#include "harness.h"

typedef struct row {
  const char *name;
  int value;
  const char *msg;
} row;

/* Written out by hand, not expanded from SLUICE_STATUS_MAP: a code renamed,
 * renumbered or reworded in the header fails here. */
static const row table[] = {
    {"SLUICE_OK", 0, "success"},
    {"SLUICE_EINVAL", -1, "invalid argument"},
    {"SLUICE_ENOMEM", -2, "out of memory"},
    {"SLUICE_ETIMEDOUT", -3, "operation timed out"},
    {"SLUICE_ECONNECTION", -4, "not connected to Redis"},
    {"SLUICE_EREDIS", -5, "Redis returned an error"},
    {"SLUICE_EPROTOCOL", -6, "unexpected reply from Redis"},
    {"SLUICE_ECANCELED", -7, "operation cancelled"},
    {"SLUICE_ECLOSED", -8, "object is closed"},
    {"SLUICE_EBUSY", -9, "no permit available"},
    {"SLUICE_EFULL", -12, "queue is full"},
    {"SLUICE_ENOTFOUND", -13, "no such item"},
    {"SLUICE_ETOOBIG", -14, "value too large"},
    {"SLUICE_ELATE", -15, "deadline already passed"},
    {"SLUICE_EEXIST", -16, "item already exists"},
    {"SLUICE_EINDOUBT", -17, "sent to Redis, but the connection was lost before the answer"},
    {"SLUICE_ENOREPLICA", -18, "no replica acknowledged the write in time"},
};
/* The header's table, counted: a code added there needs a row above. */
#define COUNT_(name, value, msg) +1
enum { MAP_ROWS = 0 SLUICE_STATUS_MAP(COUNT_) };
#undef COUNT_
enum { NROWS = sizeof table / sizeof table[0] };

static void test_every_code(void) {
  TH_ASSERT_EQ(NROWS, 17);
  TH_ASSERT_EQ(MAP_ROWS, NROWS);
  for (int i = 0; i < NROWS; i++) {
    const row *r = &table[i];
    /* 0 and small negative codes, in order, never reused (-10 and -11 went
     * with ELOST and EDENIED). */
    TH_ASSERT_CMP(r->value, <=, 0);
    TH_ASSERT_CMP(r->value, >=, -18);
    if (i) TH_ASSERT_CMP(r->value, <, table[i - 1].value);
    TH_ASSERT_STR_EQ(sluice_err_name(r->value), r->name);
    TH_ASSERT_STR_EQ(sluice_strerror(r->value), r->msg);
    TH_ASSERT_CMP(strlen(r->msg), >, 0);
    for (int j = 0; j < i; j++) {
      if (strcmp(sluice_strerror(r->value), sluice_strerror(table[j].value)) == 0 ||
          strcmp(sluice_err_name(r->value), sluice_err_name(table[j].value)) == 0)
        th_fail(__FILE__, __LINE__, "%s and %s share a message or name", r->name, table[j].name);
    }
  }
  TH_ASSERT_STR_EQ(sluice_err_name(SLUICE_OK), "SLUICE_OK");
  TH_ASSERT_STR_EQ(sluice_err_name(SLUICE_ETIMEDOUT), "SLUICE_ETIMEDOUT");
  TH_ASSERT_STR_EQ(sluice_strerror(SLUICE_EFULL), "queue is full");
}

static void test_unknown_codes(void) {
  /* -10 and -11 were codes once: values are never reused. */
  static const int unknown[] = {1, 2, -10, -11, -19, -100, 1000, INT_MIN, INT_MAX};
  for (size_t i = 0; i < sizeof unknown / sizeof unknown[0]; i++) {
    TH_ASSERT_STR_EQ(sluice_strerror(unknown[i]), "unknown status");
    TH_ASSERT_STR_EQ(sluice_err_name(unknown[i]), "SLUICE_UNKNOWN");
  }
  /* No known code answers like an unknown one. */
  for (int i = 0; i < NROWS; i++) {
    TH_ASSERT(strcmp(sluice_strerror(table[i].value), "unknown status") != 0);
    TH_ASSERT(strcmp(sluice_err_name(table[i].value), "SLUICE_UNKNOWN") != 0);
  }
}

static void test_version(void) {
  /* The header's version is the project's (meson.build's). */
  TH_ASSERT_STR_EQ(sluice_version(), TH_PROJECT_VERSION);
  TH_ASSERT_STR_EQ(SLUICE_VERSION_STRING, TH_PROJECT_VERSION);
  char want[32];
  snprintf(want, sizeof want, "%d.%d.%d", SLUICE_VERSION_MAJOR, SLUICE_VERSION_MINOR,
           SLUICE_VERSION_PATCH);
  TH_ASSERT_STR_EQ(sluice_version(), want);
}

static const th_case cases[] = {
    TH_CASE(every_code, 10),
    TH_CASE(unknown_codes, 10),
    TH_CASE(version, 10),
};
TH_MAIN_LOCAL(cases)
