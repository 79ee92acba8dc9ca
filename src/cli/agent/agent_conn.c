/* The agent's listeners and connections (see agent_conn.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <event2/listener.h>
#include <sys/socket.h>

#include "agent_conn.h"

struct agent_listener {
  struct event_base *base;
  struct evconnlistener *lis;
  const agent_proto *proto;
  void *ud;
  agent_conn *all;
  unsigned conns, conns_max, idle_timeout_s;
};

static void conn_free(agent_conn *c) {
  agent_listener *l = c->lis;
  l->proto->on_close(c);
  bufferevent_free(c->bev);
  if (c->closer) event_free(c->closer);
  if (c->prev) c->prev->next = c->next;
  else l->all = c->next;
  if (c->next) c->next->prev = c->prev;
  l->conns--;
  free(c);
}

static void on_close_now(evutil_socket_t fd, short what, void *ud) {
  (void)fd, (void)what;
  conn_free(ud);
}

/* The last answer is written: say so (FIN) and read what the client still
 * sends, discarding it, for at most a second, so that a close with unread
 * input does not reset the connection before the client reads the answer. */
static void on_flushed(struct bufferevent *bev, void *ud) {
  static const struct timeval linger = {1, 0};
  agent_conn *c = ud;
  if (!c->closing || c->lingering) return;
  c->lingering = 1;
  if (!c->closer) c->closer = evtimer_new(c->lis->base, on_close_now, c);
  if (!c->closer || shutdown(bufferevent_getfd(bev), SHUT_WR) != 0) {
    conn_free(c);
    return;
  }
  evtimer_add(c->closer, &linger);
  evbuffer_drain(bufferevent_get_input(bev), evbuffer_get_length(bufferevent_get_input(bev)));
  bufferevent_enable(bev, EV_READ);
}

void agent_conn_close_after(agent_conn *c, const void *data, size_t len) {
  static const struct timeval now = {0, 0};
  if (c->closing) return;
  c->closing = 1;
  bufferevent_disable(c->bev, EV_READ);
  if (len) bufferevent_write(c->bev, data, len);
  if (evbuffer_get_length(bufferevent_get_output(c->bev)) > 0) return; /* on_flushed */
  if ((c->closer = evtimer_new(c->lis->base, on_close_now, c))) evtimer_add(c->closer, &now);
  else bufferevent_disable(c->bev, EV_WRITE); /* left to the idle timeout */
}

static void on_read(struct bufferevent *bev, void *ud) {
  agent_conn *c = ud;
  struct evbuffer *in = bufferevent_get_input(bev);
  if (c->lingering) evbuffer_drain(in, evbuffer_get_length(in));
  else if (!c->closing) c->lis->proto->on_read(c);
}

static void on_event(struct bufferevent *bev, short what, void *ud) {
  (void)bev, (void)what;
  conn_free(ud); /* EOF, an error or the idle timeout */
}

static void on_accept(struct evconnlistener *lis, evutil_socket_t fd, struct sockaddr *sa,
                      int socklen, void *ud) {
  (void)lis, (void)sa, (void)socklen;
  agent_listener *l = ud;
  agent_conn *c = NULL;
  if (l->conns >= l->conns_max || !(c = calloc(1, sizeof *c)) ||
      !(c->bev = bufferevent_socket_new(l->base, fd, BEV_OPT_CLOSE_ON_FREE))) {
    evutil_closesocket(fd);
    free(c);
    return;
  }
  c->lis = l;
  c->next = l->all;
  if (l->all) l->all->prev = c;
  l->all = c;
  l->conns++;
  if (l->proto->on_open(c) != 0) {
    c->closing = 1;
    conn_free(c);
    return;
  }
  struct timeval idle = {l->idle_timeout_s, 0};
  bufferevent_set_timeouts(c->bev, &idle, NULL);
  bufferevent_setwatermark(c->bev, EV_READ, 0, l->proto->read_max);
  bufferevent_setcb(c->bev, on_read, on_flushed, on_event, c);
  bufferevent_enable(c->bev, EV_READ | EV_WRITE);
}

agent_listener *agent_listen(struct event_base *base, const char *addr, const agent_proto *proto,
                             void *ud, unsigned conns_max, unsigned idle_timeout_s, char *why,
                             size_t why_size) {
  struct sockaddr_storage ss;
  int sslen = sizeof ss;
  if (evutil_parse_sockaddr_port(addr, (struct sockaddr *)&ss, &sslen) != 0) {
    snprintf(why, why_size, "'%s' is not HOST:PORT", addr);
    return NULL;
  }
  agent_listener *l = calloc(1, sizeof *l);
  if (!l) {
    snprintf(why, why_size, "out of memory");
    return NULL;
  }
  *l = (agent_listener){base, NULL, proto, ud, NULL, 0, conns_max, idle_timeout_s};
  l->lis = evconnlistener_new_bind(base, on_accept, l, LEV_OPT_CLOSE_ON_FREE | LEV_OPT_REUSEABLE,
                                   128, (struct sockaddr *)&ss, sslen);
  if (!l->lis) {
    snprintf(why, why_size, "cannot listen on %s", addr);
    free(l);
    return NULL;
  }
  return l;
}

void agent_listener_free(agent_listener *l) {
  if (!l) return;
  evconnlistener_free(l->lis);
  while (l->all) conn_free(l->all);
  free(l);
}

void *agent_listener_ud(const agent_listener *l) { return l->ud; }
struct event_base *agent_listener_base(const agent_listener *l) {
  return l->base;
}
