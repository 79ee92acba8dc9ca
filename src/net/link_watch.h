/*
 * Watching a data connection's link (conn.h's watch_link). TCP hides a
 * partition from both ends: the socket stays open, and once it heals the
 * bytes held back come only when the doubling retransmission timer fires
 * again, seconds later. So while a connection waits for answers that do
 * not come, and its socket has had to send segments again or its timer backs
 * off (the network lost them, or a firewall on this host refused them: a
 * slow script or a WAIT loses none), a probe connection to
 * the same address tries every LINK_PROBE_EVERY_MS; when one completes a
 * handshake while the watched connection is still silent, the path works
 * again and the watched connection is replaced at once, instead of after
 * the operation timeout or the next retransmission. A replacement, or a
 * silence of LINK_HELD_MS, sets conn->link_trouble: the client restarts
 * the blocking connections to the node once the link answers again.
 */
#ifndef SLUICE_LINK_WATCH_H
#define SLUICE_LINK_WATCH_H

typedef struct sluice__link_watch sluice__link_watch;
struct sluice__conn;

sluice__link_watch *sluice__link_watch_new(struct sluice__conn *conn);
void sluice__link_watch_free(sluice__link_watch *w);
/* A command went out on the watched connection. */
void sluice__link_watch_sent(sluice__link_watch *w);

#endif
