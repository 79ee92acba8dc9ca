/* What goes on the wire, without Redis: commands in RESP as hiredis
 * formats them, numbers in decimal as printf writes them, and hash slots
 * as the cluster spec defines them. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <hiredis/hiredis.h>

#include "base/util.h"
#include "harness.h"
#include "net/resp.h"
#include "net/slot.h"
#include "topology.h"

/* Our bytes equal redisFormatCommandArgv's for the same arguments. */
static void same_as_hiredis(int argc, const char **argv, const size_t *lens) {
  char *want = NULL;
  long long wlen = redisFormatCommandArgv(&want, argc, argv, lens);
  TH_ASSERT(wlen > 0);
  size_t n = sluice__resp_size(argc, argv, lens);
  TH_ASSERT_EQ(n, (size_t)wlen);
  char *got = malloc(n + 1);
  TH_ASSERT(got != NULL);
  sluice__resp_write(got, argc, argv, lens);
  TH_ASSERT(memcmp(got, want, n) == 0);
  TH_ASSERT_EQ(got[n], '\0'); /* hiredis scans it with strchr */
  free(got);
  redisFreeCommand(want);
}

static void test_resp_like_hiredis(void) {
  const char *ping[1] = {"PING"};
  same_as_hiredis(1, ping, NULL);
  const char *sub[3] = {"SUBSCRIBE", "+switch-master", "+odown"};
  same_as_hiredis(3, sub, NULL);
  const char *empty[3] = {"SET", "k", ""};
  same_as_hiredis(3, empty, NULL);
  /* Binary bytes (a NUL, CR LF) and lengths across digit counts. */
  static char big[12345];
  memset(big, 'x', sizeof big);
  big[7] = '\0';
  big[100] = '\r';
  big[101] = '\n';
  const char *bin[5] = {"EVALSHA", big, big, big, big};
  size_t lens[5] = {7, 9, 10, 8, sizeof big};
  same_as_hiredis(5, bin, lens);
  enum { MANY = 12 }; /* argc of two digits */
  const char *many[MANY];
  for (int i = 0; i < MANY; i++) many[i] = "arg";
  same_as_hiredis(MANY, many, NULL);
}

/* Every digit count, both ends of each, and the extremes, as printf. */
static void test_decimal_like_printf(void) {
  char got[24], want[24];
  uint64_t p = 1;
  for (int d = 1; d <= 20; d++, p *= 10) {
    uint64_t vs[3] = {p, p - 1, p * 10 - 1};
    for (int i = 0; i < (d < 20 ? 3 : 1); i++) {
      snprintf(want, sizeof want, "%" PRIu64, vs[i]);
      TH_ASSERT_EQ(sluice__fmt_u64(got, vs[i]), strlen(want));
      TH_ASSERT_STR_EQ(got, want);
    }
  }
  snprintf(want, sizeof want, "%" PRIu64, UINT64_MAX);
  TH_ASSERT_EQ(sluice__fmt_u64(got, UINT64_MAX), strlen(want));
  TH_ASSERT_STR_EQ(got, want);
  snprintf(want, sizeof want, "%" PRId64, INT64_MIN);
  TH_ASSERT_EQ(sluice__fmt_i64(got, INT64_MIN), strlen(want));
  TH_ASSERT_STR_EQ(got, want);
}

/* The table-driven CRC16 against the bit-by-bit definition. */
static void test_crc16_like_spec(void) {
  TH_ASSERT_EQ(sluice__crc16("123456789", 9), 0x31c3); /* the spec's check value */
  unsigned char buf[300];
  for (size_t i = 0; i < sizeof buf; i++) buf[i] = (unsigned char)(i * 37 + 11);
  for (size_t len = 0; len <= sizeof buf; len++)
    TH_ASSERT_EQ(sluice__crc16(buf, len), th_crc16(buf, len));
  TH_ASSERT_EQ(sluice__keyslot("{user1000}.following", 21), th_keyslot("user1000", 8));
}

static const th_case cases[] = {
    TH_CASE(resp_like_hiredis, 10),
    TH_CASE(decimal_like_printf, 10),
    TH_CASE(crc16_like_spec, 10),
};
TH_MAIN_LOCAL(cases)
