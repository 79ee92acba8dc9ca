/* Small helpers shared by every module: clocks, randomness, reply decoding. */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include <event2/event.h>

#include "base/util.h"

long sluice__live_objects;

void *sluice__calloc(size_t n, size_t size) {
  void *p = calloc(n, size);
  if (p) sluice__live_objects++;
  return p;
}

void sluice__free(void *p) {
  if (!p) return;
  sluice__live_objects--;
  free(p);
}

uint64_t sluice__mono_us(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000u + (uint64_t)ts.tv_nsec / 1000u;
}

uint64_t sluice__mono_ms(void) { return sluice__mono_us() / 1000u; }

static void fill_random(unsigned char *buf, size_t len) {
  size_t got = 0;
  while (got < len) {
    ssize_t n = getrandom(buf + got, len - got, 0);
    if (n < 0) {
      if (errno == EINTR) continue;
      break;
    }
    got += (size_t)n;
  }
  /* getrandom cannot fail on Linux >= 3.17 once the pool is seeded; if it
   * ever does, mix clock and pid rather than hand out a constant id. */
  for (size_t i = got; i < len; i++)
    buf[i] = (unsigned char)((sluice__mono_us() >> (i % 8)) ^ (unsigned)getpid() ^ i);
}

/* Ids (permits, waiters, pushes) must be unique across every process that
 * shares a Redis and not guessable from earlier ones: 128 bits from the
 * kernel's generator each. Asking the kernel once per id made getrandom most
 * of the client's system-call time, so bytes come in blocks of POOL_BYTES
 * (one getrandom per 256 ids), still straight from the kernel: no seeded
 * generator of our own whose state could repeat. Each thread has its own
 * block, and a forked child drops the one it inherited (pthread_atfork), so
 * a parent and its child never hand out the same bytes. */
#define POOL_BYTES 4096
static _Thread_local struct {
  unsigned char buf[POOL_BYTES];
  size_t left; /* unused bytes, at the end of buf */
} pool;
static pthread_once_t pool_once = PTHREAD_ONCE_INIT;

static void pool_forget(void) { pool.left = 0; }
static void pool_register(void) { pthread_atfork(NULL, NULL, pool_forget); }

static void take_random(unsigned char *out, size_t len) {
  pthread_once(&pool_once, pool_register);
  if (pool.left < len) {
    fill_random(pool.buf, sizeof pool.buf);
    pool.left = sizeof pool.buf;
  }
  unsigned char *p = pool.buf + sizeof pool.buf - pool.left;
  memcpy(out, p, len);
  memset(p, 0, len); /* handed out: not kept where a later leak could show it */
  pool.left -= len;
}

void sluice__random_hex(char out[33]) {
  static const char hex[] = "0123456789abcdef";
  unsigned char raw[16];
  take_random(raw, sizeof raw);
  for (int i = 0; i < 16; i++) {
    out[2 * i] = hex[raw[i] >> 4];
    out[2 * i + 1] = hex[raw[i] & 15];
  }
  out[32] = '\0';
}

uint32_t sluice__random_below(uint32_t n) {
  uint32_t v;
  if (n == 0) return 0;
  take_random((unsigned char *)&v, sizeof v);
  return v % n;
}

/* Clients that back off together (a restart or a failover drops them all
 * at once) then spread out, while each still waits at least half its
 * step: the backoff keeps its pace. */
uint32_t sluice__jittered(uint32_t d) { return d / 2 + sluice__random_below(d - d / 2 + 1); }

int sluice__valid_name(const char *name) {
  if (!name) return 0;
  size_t len = strnlen(name, SLUICE_NAME_MAX + 1);
  return len >= 1 && len <= SLUICE_NAME_MAX;
}

/* Two digits per division: numbers are formatted for every argument of
 * every step (and every RESP header), so this is on the hot path. */
static const char digit_pairs[201] =
    "00010203040506070809101112131415161718192021222324252627282930313233343536373839"
    "40414243444546474849505152535455565758596061626364656667686970717273747576777879"
    "8081828384858687888990919293949596979899";

size_t sluice__fmt_u64(char *buf, uint64_t v) {
  size_t n = 1; /* digits: 10^19 is the last power of ten a uint64_t holds */
  for (uint64_t ten = 10; n < 20 && v >= ten; ten *= 10) n++;
  char *p = buf + n;
  *p = '\0';
  while (v >= 100) {
    const char *d = digit_pairs + (v % 100) * 2;
    v /= 100;
    *--p = d[1];
    *--p = d[0];
  }
  if (v >= 10) {
    *--p = digit_pairs[v * 2 + 1];
    *--p = digit_pairs[v * 2];
  } else {
    *--p = (char)('0' + v);
  }
  return n;
}

size_t sluice__fmt_i64(char *buf, int64_t v) {
  if (v >= 0) return sluice__fmt_u64(buf, (uint64_t)v);
  buf[0] = '-';
  return 1 + sluice__fmt_u64(buf + 1, (uint64_t)0 - (uint64_t)v);
}

int sluice__reply_i64(const redisReply *r, int64_t *out) {
  if (!r) return SLUICE_EPROTOCOL;
  if (r->type == REDIS_REPLY_INTEGER) {
    *out = (int64_t)r->integer;
    return SLUICE_OK;
  }
  if (r->type == REDIS_REPLY_STRING && r->len > 0 && r->len < 24) {
    char buf[24], *end;
    memcpy(buf, r->str, r->len);
    buf[r->len] = '\0';
    errno = 0;
    long long v = strtoll(buf, &end, 10);
    if (errno == 0 && *end == '\0') {
      *out = (int64_t)v;
      return SLUICE_OK;
    }
  }
  return SLUICE_EPROTOCOL;
}

const redisReply *sluice__reply_at(const redisReply *r, size_t i) {
  if (!r || r->type != REDIS_REPLY_ARRAY || i >= r->elements) return NULL;
  return r->element[i];
}

void sluice__timer_in(struct event *ev, uint64_t ms) {
  struct timeval tv = {(time_t)(ms / 1000), (suseconds_t)((ms % 1000) * 1000)};
  evtimer_add(ev, &tv);
}

void sluice__timer_every(struct event *ev, uint64_t ms) {
  if (!evtimer_pending(ev, NULL)) sluice__timer_in(ev, ms);
}

/* Replies are freed by hiredis after their callback; an answer held until
 * a later one (the WAIT after a script) is copied. NULL on OOM. */
redisReply *sluice__reply_dup(const redisReply *r) {
  redisReply *c = calloc(1, sizeof *c);
  if (!c) return NULL;
  c->type = r->type;
  c->integer = r->integer;
  c->len = r->len;
  if (r->str) {
    if (!(c->str = malloc(r->len + 1))) goto oom;
    memcpy(c->str, r->str, r->len);
    c->str[r->len] = '\0';
  }
  if (r->type == REDIS_REPLY_ARRAY && r->elements) {
    if (!(c->element = calloc(r->elements, sizeof *c->element))) goto oom;
    c->elements = r->elements;
    for (size_t i = 0; i < r->elements; i++)
      if (!(c->element[i] = sluice__reply_dup(r->element[i]))) goto oom;
  }
  return c;
oom:
  sluice__reply_free(c);
  return NULL;
}

void sluice__reply_free(redisReply *r) {
  if (!r) return;
  for (size_t i = 0; i < r->elements; i++) sluice__reply_free(r->element[i]);
  free(r->element);
  free(r->str);
  free(r);
}
