/*
 * hiredis on libevent: the event hooks of a redisAsyncContext (ac->ev),
 * in place of hiredis's own adapters/libevent.h, shaped for many commands
 * a loop turn on each of several connections:
 *  - the read event is persistent and stays armed while the context
 *    lives: no event change per reply;
 *  - a command only marks the connection for a flush, and one flush a loop
 *    turn (an event made active, run after the callbacks already due)
 *    writes everything queued in that turn with one write(2). A write
 *    event is armed only while the socket is full or the connect (TCP, and
 *    TLS's handshake under hiredis 1.x) is in progress: hiredis learns
 *    that a nonblocking connect completed from its first write event.
 * hiredis's command and connect timeouts (1.x's scheduleTimer) are not
 * hooked: sluice keeps its own timers (net/conn.c, core/engine.c).
 * Works with hiredis 0.14 and 1.x; net/reply_bounds.c wraps these hooks.
 */
#ifndef SLUICE_EVLOOP_H
#define SLUICE_EVLOOP_H

#include <event2/event.h>
#include <hiredis/async.h>

/* Attach ac to base: REDIS_OK, or REDIS_ERR (something is attached
 * already, or out of memory; ac unchanged). Freeing ac detaches. */
int sluice__evloop_attach(redisAsyncContext *ac, struct event_base *base);

#endif
