/* hiredis's event hooks on libevent; see evloop.h. */
#include <stdlib.h>

#include <hiredis/hiredis.h>

#include "net/evloop.h"

typedef struct evloop {
  redisAsyncContext *ac;
  struct event *rd;    /* persistent; armed from hiredis's first addRead on */
  struct event *wr;    /* persistent; armed only while waiting to write */
  struct event *flush; /* no fd: made active when commands are queued */
  unsigned reading : 1, waiting : 1, queued : 1;
  unsigned flushing : 1; /* inside flush_cb's call into hiredis */
  unsigned gone : 1;     /* cleaned up meanwhile: flush_cb frees */
} evloop;

static void read_cb(evutil_socket_t fd, short what, void *arg) {
  (void)fd, (void)what;
  evloop *e = arg;
  redisAsyncHandleRead(e->ac); /* may free e: nothing after */
}

static void write_cb(evutil_socket_t fd, short what, void *arg) {
  (void)fd, (void)what;
  evloop *e = arg;
  redisAsyncHandleWrite(e->ac); /* may free e: nothing after */
}

/* The turn's flush: hiredis writes its whole buffer at once. An addWrite
 * while it does means the socket took only part: wait for the write event
 * (a flush again at once would spin until the peer reads). */
static void flush_cb(evutil_socket_t fd, short what, void *arg) {
  (void)fd, (void)what;
  evloop *e = arg;
  e->queued = 0;
  e->flushing = 1;
  redisAsyncHandleWrite(e->ac);
  if (e->gone) {
    free(e);
    return;
  }
  e->flushing = 0;
}

static void add_read(void *data) {
  evloop *e = data;
  if (e->reading) return;
  e->reading = 1;
  event_add(e->rd, NULL);
}

static void del_read(void *data) {
  evloop *e = data;
  if (!e->reading) return;
  e->reading = 0;
  event_del(e->rd);
}

/* hiredis asks after every command, and while a write is unfinished. */
static void add_write(void *data) {
  evloop *e = data;
  if (e->waiting) return; /* the write event flushes it all */
  if (e->flushing || !(e->ac->c.flags & REDIS_CONNECTED)) {
    e->waiting = 1;
    event_add(e->wr, NULL);
  } else if (!e->queued) {
    e->queued = 1;
    event_active(e->flush, EV_WRITE, 0);
  }
}

/* Everything is written (or TLS must read first): nothing to flush. */
static void del_write(void *data) {
  evloop *e = data;
  if (e->queued) {
    e->queued = 0;
    event_del(e->flush);
  }
  if (!e->waiting) return;
  e->waiting = 0;
  event_del(e->wr);
}

/* The context is going; maybe from inside one of our callbacks. */
static void cleanup(void *data) {
  evloop *e = data;
  event_free(e->rd);
  event_free(e->wr);
  event_free(e->flush);
  if (e->flushing) e->gone = 1;
  else free(e);
}

int sluice__evloop_attach(redisAsyncContext *ac, struct event_base *base) {
  if (ac->ev.data) return REDIS_ERR;
  evloop *e = calloc(1, sizeof *e);
  if (!e) return REDIS_ERR;
  e->ac = ac;
  e->rd = event_new(base, ac->c.fd, EV_READ | EV_PERSIST, read_cb, e);
  e->wr = event_new(base, ac->c.fd, EV_WRITE | EV_PERSIST, write_cb, e);
  e->flush = event_new(base, -1, 0, flush_cb, e);
  if (!e->rd || !e->wr || !e->flush) {
    if (e->rd) event_free(e->rd);
    if (e->wr) event_free(e->wr);
    if (e->flush) event_free(e->flush);
    free(e);
    return REDIS_ERR;
  }
  ac->ev.data = e;
  ac->ev.addRead = add_read;
  ac->ev.delRead = del_read;
  ac->ev.addWrite = add_write;
  ac->ev.delWrite = del_write;
  ac->ev.cleanup = cleanup;
  return REDIS_OK;
}
