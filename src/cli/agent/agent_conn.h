/* The agent's listeners and connections, shared by its two fronts (SPOP,
 * HTTP): at most conns_max connections at once (one more is closed at
 * once), an idle timeout, a bounded input buffer, and a close that waits
 * for the last answer to be written. */
#ifndef SLUICE_CLI_AGENT_CONN_H
#define SLUICE_CLI_AGENT_CONN_H

#include <stddef.h>

struct event;
struct event_base;
struct bufferevent;

typedef struct agent_conn agent_conn;
typedef struct agent_listener agent_listener;

typedef struct agent_proto {
  /* A new connection: 0, or -1 to close it (out of memory). */
  int (*on_open)(agent_conn *c);
  /* Input arrived (c->bev's input buffer). */
  void (*on_read)(agent_conn *c);
  /* c is about to be freed: end what refers to it. */
  void (*on_close)(agent_conn *c);
  size_t read_max; /* input buffered at most, until the protocol changes it */
} agent_proto;

struct agent_conn {
  agent_listener *lis;
  struct bufferevent *bev;
  agent_conn *prev, *next;
  int closing;          /* no more input is handled; freed once its output is written */
  int lingering;        /* written: input is discarded until EOF or a second passes */
  struct event *closer; /* closes it from the loop when nothing is left to write */
  void *data;           /* the protocol's */
};

/* Listen on addr ("HOST:PORT", "[V6]:PORT"). NULL with why filled. */
agent_listener *agent_listen(struct event_base *base, const char *addr, const agent_proto *proto,
                             void *ud, unsigned conns_max, unsigned idle_timeout_s, char *why,
                             size_t why_size);
/* Close every connection (on_close first) and stop listening. */
void agent_listener_free(agent_listener *l);
/* The ud given to agent_listen, and its loop. */
void *agent_listener_ud(const agent_listener *l);
struct event_base *agent_listener_base(const agent_listener *l);

/* Write len bytes of data (may be 0), then close c: from the loop, never
 * inside this call, so the caller may still look at c. */
void agent_conn_close_after(agent_conn *c, const void *data, size_t len);

#endif
