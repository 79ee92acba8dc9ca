/*
 * Reply bounds; see reply_bounds.h. Two hooks, both public hiredis API:
 *  - the reader's object functions (reader->fn), wrapped: each object is
 *    counted against the reply's bounds before hiredis's own function
 *    allocates it; returning NULL makes hiredis fail the read ("out of
 *    memory") and drop the connection;
 *  - the event library's addRead hook (ac->ev), wrapped: hiredis calls it
 *    right after it fed a read into the reader and before it parses (0.14
 *    and 1.x, TLS included), so the bytes waiting there are checked once
 *    per read; past the bound the reader is put in error, which hiredis
 *    turns into a dropped connection at once.
 * The wrapped hooks are put back before the event library's cleanup, so
 * nothing of ours is called after it.
 */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <hiredis/hiredis.h>

#include <sluice/common.h>

#include "net/reply_bounds.h"

/* A context's event library hooks (ac->ev), as one value. */
typedef struct ev_hooks {
  void *data;
  void (*add_read)(void *);
  void (*del_read)(void *);
  void (*add_write)(void *);
  void (*del_write)(void *);
  void (*cleanup)(void *);
#if HIREDIS_MAJOR >= 1
  void (*schedule_timer)(void *, struct timeval);
#endif
} ev_hooks;

static ev_hooks hooks_of(const redisAsyncContext *ac) {
  ev_hooks h = {.data = ac->ev.data,
                .add_read = ac->ev.addRead,
                .del_read = ac->ev.delRead,
                .add_write = ac->ev.addWrite,
                .del_write = ac->ev.delWrite,
                .cleanup = ac->ev.cleanup};
#if HIREDIS_MAJOR >= 1
  h.schedule_timer = ac->ev.scheduleTimer;
#endif
  return h;
}

static void hooks_set(redisAsyncContext *ac, const ev_hooks *h) {
  ac->ev.data = h->data;
  ac->ev.addRead = h->add_read;
  ac->ev.delRead = h->del_read;
  ac->ev.addWrite = h->add_write;
  ac->ev.delWrite = h->del_write;
  ac->ev.cleanup = h->cleanup;
#if HIREDIS_MAJOR >= 1
  ac->ev.scheduleTimer = h->schedule_timer;
#endif
}

typedef struct bounds {
  redisAsyncContext *ac;
  sluice__reply_refusal *out;
  redisReplyObjectFunctions *fn; /* hiredis's own */
  ev_hooks lib;                  /* the event library's */
  size_t elements, bytes;        /* of the reply being read */
} bounds;

/* Record the refusal (the first of this context) for the command whose
 * reply is being read: the head of hiredis's callback queue. */
static void refuse(bounds *b, const char *fmt, unsigned long long got, unsigned long long max) {
  if (b->out->refused) return;
  b->out->refused = 1;
  b->out->privdata = b->ac->replies.head ? b->ac->replies.head->privdata : NULL;
  char what[64];
  snprintf(what, sizeof what, fmt, got);
  snprintf(b->out->why, sizeof b->out->why, "reply refused: %s (at most %llu)", what, max);
}

/* ---- the reader's objects ------------------------------------------------- */

/* Count one object of the reply at task (claiming elements children and
 * holding bytes); 0 when it is past a bound. A task without a parent
 * starts a new reply. */
static int admit(const redisReadTask *task, unsigned long long elements, size_t bytes) {
  bounds *b = task->privdata;
  unsigned long long level = 1;
  for (const redisReadTask *p = task->parent; p; p = p->parent) level++;
  if (!task->parent) b->elements = 1, b->bytes = 0;
  if (level > SLUICE__REPLY_DEPTH_MAX) {
    refuse(b, "nested %llu levels deep", level, SLUICE__REPLY_DEPTH_MAX);
  } else if (elements > SLUICE__REPLY_ELEMENTS_MAX) {
    refuse(b, "an array of %llu elements", elements, SLUICE__REPLY_ELEMENTS_MAX);
  } else if (b->elements + elements > SLUICE__REPLY_ELEMENTS_MAX) {
    refuse(b, "%llu elements", b->elements + elements, SLUICE__REPLY_ELEMENTS_MAX);
  } else if (bytes > SLUICE__REPLY_STRING_MAX) {
    refuse(b, "a string of %llu bytes", bytes, SLUICE__REPLY_STRING_MAX);
  } else if (b->bytes + bytes > SLUICE__REPLY_BYTES_MAX) {
    refuse(b, "strings of %llu bytes", b->bytes + bytes, SLUICE__REPLY_BYTES_MAX);
  } else {
    b->elements += elements;
    b->bytes += bytes;
    return 1;
  }
  return 0;
}

static bounds *of(const redisReadTask *task) { return task->privdata; }

static void *create_string(const redisReadTask *task, char *str, size_t len) {
  return admit(task, 0, len) ? of(task)->fn->createString(task, str, len) : NULL;
}

#if HIREDIS_MAJOR >= 1
static void *create_array(const redisReadTask *task, size_t n) {
  return admit(task, n, 0) ? of(task)->fn->createArray(task, n) : NULL;
}

static void *create_double(const redisReadTask *task, double v, char *str, size_t len) {
  return admit(task, 0, len) ? of(task)->fn->createDouble(task, v, str, len) : NULL;
}

static void *create_bool(const redisReadTask *task, int v) {
  return admit(task, 0, 0) ? of(task)->fn->createBool(task, v) : NULL;
}
#else
static void *create_array(const redisReadTask *task, int n) {
  /* 0.14 passes the length as an int: a negative one is refused too. */
  unsigned long long claimed = n < 0 ? ULLONG_MAX : (unsigned long long)n;
  return admit(task, claimed, 0) ? of(task)->fn->createArray(task, n) : NULL;
}
#endif

static void *create_integer(const redisReadTask *task, long long v) {
  return admit(task, 0, 0) ? of(task)->fn->createInteger(task, v) : NULL;
}

static void *create_nil(const redisReadTask *task) {
  return admit(task, 0, 0) ? of(task)->fn->createNil(task) : NULL;
}

static redisReplyObjectFunctions bounded_fn = {
    .createString = create_string,
    .createArray = create_array,
    .createInteger = create_integer,
#if HIREDIS_MAJOR >= 1
    .createDouble = create_double,
    .createBool = create_bool,
#endif
    .createNil = create_nil,
    .freeObject = freeReplyObject,
};

/* ---- the event library's hooks -------------------------------------------- */

/* Called after every read, before hiredis parses it. */
static void add_read(void *data) {
  bounds *b = data;
  redisReader *r = b->ac->c.reader;
  if (r && !r->err && r->len - r->pos > SLUICE__REPLY_PENDING_MAX) {
    refuse(b, "%llu bytes pending", (unsigned long long)(r->len - r->pos),
           SLUICE__REPLY_PENDING_MAX);
    r->err = REDIS_ERR_PROTOCOL; /* hiredis now fails the parse: dropped */
    snprintf(r->errstr, sizeof r->errstr, "%s", b->out->why);
  }
  if (b->lib.add_read) b->lib.add_read(b->lib.data);
}

static void del_read(void *data) {
  bounds *b = data;
  if (b->lib.del_read) b->lib.del_read(b->lib.data);
}

static void add_write(void *data) {
  bounds *b = data;
  if (b->lib.add_write) b->lib.add_write(b->lib.data);
}

static void del_write(void *data) {
  bounds *b = data;
  if (b->lib.del_write) b->lib.del_write(b->lib.data);
}

#if HIREDIS_MAJOR >= 1
static void schedule_timer(void *data, struct timeval tv) {
  bounds *b = data;
  if (b->lib.schedule_timer) b->lib.schedule_timer(b->lib.data, tv);
}
#endif

/* The context is going: hiredis's own hooks and functions back in place,
 * then the event library's cleanup. */
static void cleanup(void *data) {
  bounds *b = data;
  redisAsyncContext *ac = b->ac;
  hooks_set(ac, &b->lib);
  if (ac->c.reader) {
    ac->c.reader->fn = b->fn;
    ac->c.reader->privdata = NULL;
  }
  void (*done)(void *) = b->lib.cleanup;
  void *ev_data = b->lib.data;
  free(b);
  if (done) done(ev_data);
}

int sluice__reply_bounds_attach(redisAsyncContext *ac, sluice__reply_refusal *out) {
  bounds *b = calloc(1, sizeof *b);
  if (!b) return SLUICE_ENOMEM;
  memset(out, 0, sizeof *out);
  b->ac = ac;
  b->out = out;
  b->fn = ac->c.reader->fn;
  b->lib = hooks_of(ac);
  ev_hooks ours = {.data = b,
                   .add_read = add_read,
                   .del_read = del_read,
                   .add_write = add_write,
                   .del_write = del_write,
                   .cleanup = cleanup};
#if HIREDIS_MAJOR >= 1
  ours.schedule_timer = schedule_timer;
#endif
  hooks_set(ac, &ours);
  ac->c.reader->fn = &bounded_fn;
  ac->c.reader->privdata = b;
  return SLUICE_OK;
}
