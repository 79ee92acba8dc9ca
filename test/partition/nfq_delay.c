/* Delay and loss on a link without sch_netem (kernels built without it):
 * takes the packets iptables sends to an NFQUEUE, drops a share of them and
 * lets the rest through after a fixed delay.
 *
 *   nfq_delay --queue N --delay-ms D --loss-pct P --seconds S
 *
 * Run it inside the namespace whose rules name the queue (netns.sh slow).
 * Memory is bounded: at most HELD_MAX packets wait at once (the kernel
 * keeps their bytes; we keep ids); one more is dropped. It stops by itself
 * after S seconds (or on SIGTERM/SIGINT), letting what it holds through. */
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <arpa/inet.h>
#include <sys/socket.h>
#include <linux/netfilter.h>
#include <libnetfilter_queue/libnetfilter_queue.h>

#define HELD_MAX 4096 /* packets waiting at once */

typedef struct held {
  uint32_t id;
  int64_t due_us;
} held;

typedef struct shaper {
  struct nfq_q_handle *qh;
  held ring[HELD_MAX]; /* FIFO: one delay for all, so due times ascend */
  size_t head, count;
  int64_t delay_us;
  unsigned loss_pct;
  unsigned long passed, lost, overflow;
} shaper;

static volatile sig_atomic_t stop;

static void on_signal(int sig) { stop = sig; }

static int64_t now_us(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

static void verdict(shaper *s, uint32_t id, unsigned v) { nfq_set_verdict(s->qh, id, v, 0, NULL); }

static int on_packet(struct nfq_q_handle *qh, struct nfgenmsg *msg, struct nfq_data *nfa,
                     void *data) {
  shaper *s = data;
  struct nfqnl_msg_packet_hdr *ph = nfq_get_msg_packet_hdr(nfa);
  if (!ph) return 0;
  uint32_t id = ntohl(ph->packet_id);
  if ((unsigned)(random() % 100) < s->loss_pct) {
    s->lost++;
    verdict(s, id, NF_DROP);
  } else if (s->count == HELD_MAX) {
    s->overflow++;
    verdict(s, id, NF_DROP);
  } else {
    s->ring[(s->head + s->count++) % HELD_MAX] = (held){id, now_us() + s->delay_us};
  }
  return 0;
}

/* Let through every packet due by now (all of them when all is set). */
static void release_due(shaper *s, int all) {
  int64_t now = now_us();
  while (s->count > 0 && (all || s->ring[s->head].due_us <= now)) {
    verdict(s, s->ring[s->head].id, NF_ACCEPT);
    s->passed++;
    s->head = (s->head + 1) % HELD_MAX;
    s->count--;
  }
}

static int wait_ms(const shaper *s, int64_t end_us) {
  int64_t now = now_us(), until = end_us;
  if (s->count > 0 && s->ring[s->head].due_us < until) until = s->ring[s->head].due_us;
  return until <= now ? 0 : (int)((until - now + 999) / 1000);
}

static int parse_args(int argc, char **argv, unsigned *queue, shaper *s, unsigned *seconds) {
  for (int i = 1; i + 1 < argc; i += 2) {
    unsigned long v = strtoul(argv[i + 1], NULL, 10);
    if (strcmp(argv[i], "--queue") == 0) *queue = (unsigned)v;
    else if (strcmp(argv[i], "--delay-ms") == 0 && v <= 60000) s->delay_us = (int64_t)v * 1000;
    else if (strcmp(argv[i], "--loss-pct") == 0 && v <= 100) s->loss_pct = (unsigned)v;
    else if (strcmp(argv[i], "--seconds") == 0 && v > 0 && v <= 3600) *seconds = (unsigned)v;
    else return -1;
  }
  return argc % 2 == 1 && *seconds > 0 ? 0 : -1;
}

int main(int argc, char **argv) {
  static shaper s;
  unsigned queue = 0, seconds = 0;
  if (parse_args(argc, argv, &queue, &s, &seconds) != 0) {
    fprintf(stderr, "usage: nfq_delay --queue N --delay-ms D --loss-pct P --seconds S\n");
    return 2;
  }
  srandom((unsigned)now_us());
  signal(SIGTERM, on_signal);
  signal(SIGINT, on_signal);
  struct nfq_handle *h = nfq_open();
  if (!h) {
    perror("nfq_open");
    return 1;
  }
  s.qh = nfq_create_queue(h, (uint16_t)queue, on_packet, &s);
  if (!s.qh || nfq_set_mode(s.qh, NFQNL_COPY_META, 0) < 0) {
    perror("nfq_create_queue");
    nfq_close(h);
    return 1;
  }
  nfq_set_queue_maxlen(s.qh, HELD_MAX + 64);
  int fd = nfq_fd(h);
  char buf[65536];
  int64_t end_us = now_us() + (int64_t)seconds * 1000000;
  while (!stop && now_us() < end_us) {
    struct pollfd p = {fd, POLLIN, 0};
    if (poll(&p, 1, wait_ms(&s, end_us)) > 0) {
      ssize_t n = recv(fd, buf, sizeof buf, MSG_DONTWAIT);
      if (n > 0) nfq_handle_packet(h, buf, (int)n);
      else if (n < 0 && errno == ENOBUFS) s.overflow++; /* the kernel's queue overran */
    }
    release_due(&s, 0);
  }
  release_due(&s, 1);
  nfq_destroy_queue(s.qh);
  nfq_close(h);
  printf("nfq_delay: queue %u: %lu passed, %lu dropped (loss), %lu dropped (full)\n", queue,
         s.passed, s.lost, s.overflow);
  return 0;
}
