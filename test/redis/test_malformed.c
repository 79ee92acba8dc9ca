/* Unexpected replies from a fake server: every primitive step must answer
 * SLUICE_EPROTOCOL (or a connection error for bytes that are not RESP at
 * all), never crash, hang or leak. The fake server speaks just enough RESP:
 * the handshake (PING, SCRIPT LOAD, INFO, WAIT) and the clock probe (TIME)
 * get proper answers, every other command gets the reply under test. */
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <string.h>
#include <sys/socket.h>
#include <netinet/in.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness.h"
#include "sem_util.h"

typedef struct fake {
  pid_t pid;
  char path[200];
  int port; /* a TCP fake (cluster cases): its port on 127.0.0.1 */
} fake;

/* What a TCP fake answers to CLUSTER (SLOTS): every slot is its own. */
static char cluster_slots[128];

/* After its reply, a streaming fake sends chunk again and again (total
 * bytes in all, gap_us between chunks) before it reads on: a reply too
 * large, too deep or too slow. */
static struct {
  const char *chunk;
  size_t len, total;
  unsigned gap_us;
} stream;

static void stream_out(int fd) {
  for (size_t sent = 0; stream.chunk && sent < stream.total; sent += stream.len) {
    if (write(fd, stream.chunk, stream.len) != (ssize_t)stream.len) return; /* closed */
    if (stream.gap_us) usleep(stream.gap_us);
  }
}

/* Length of one complete RESP command at buf, or 0 if incomplete. Sets
 * *first to the first argument's start/length. */
static size_t parse_command(const char *buf, size_t len, const char **first, size_t *flen) {
  const char *p = buf, *end = buf + len;
  if (len < 4 || *p != '*') return 0;
  int n = atoi(p + 1);
  p = memchr(p, '\n', (size_t)(end - p));
  if (!p) return 0;
  p++;
  for (int i = 0; i < n; i++) {
    if (p >= end || *p != '$') return 0;
    int l = atoi(p + 1);
    const char *nl = memchr(p, '\n', (size_t)(end - p));
    if (!nl || nl + 1 + l + 2 > end) return 0;
    if (i == 0) {
      *first = nl + 1;
      *flen = (size_t)l;
    }
    p = nl + 1 + l + 2;
  }
  return (size_t)(p - buf);
}

static void serve(int lfd, const char *reply) {
  struct pollfd fds[9];
  char bufs[8][65536];
  size_t used[8] = {0};
  int n = 1;
  fds[0].fd = lfd;
  fds[0].events = POLLIN;
  for (;;) {
    if (poll(fds, (nfds_t)n, -1) < 0) continue;
    if ((fds[0].revents & POLLIN) && n < 9) {
      fds[n].fd = accept(lfd, NULL, NULL);
      fds[n].events = POLLIN;
      used[n - 1] = 0;
      n++;
    }
    for (int i = 1; i < n; i++) {
      if (!(fds[i].revents & (POLLIN | POLLHUP))) continue;
      char *b = bufs[i - 1];
      ssize_t r = read(fds[i].fd, b + used[i - 1], sizeof bufs[0] - used[i - 1]);
      if (r <= 0) {
        close(fds[i].fd);
        fds[i] = fds[n - 1];
        memcpy(bufs[i - 1], bufs[n - 2], used[n - 2]);
        used[i - 1] = used[n - 2];
        n--;
        i--;
        continue;
      }
      used[i - 1] += (size_t)r;
      const char *first = NULL;
      size_t flen = 0, clen;
      while ((clen = parse_command(b, used[i - 1], &first, &flen)) > 0) {
        const char *out = reply;
        if (flen == 4 && strncasecmp(first, "PING", 4) == 0) out = "+PONG\r\n";
        else if (flen == 4 && strncasecmp(first, "TIME", 4) == 0)
          out = "*2\r\n$10\r\n1700000000\r\n$1\r\n0\r\n";
        else if (flen == 7 && strncasecmp(first, "CLUSTER", 7) == 0 && cluster_slots[0])
          out = cluster_slots;
        else if (flen == 6 && strncasecmp(first, "SCRIPT", 6) == 0)
          out = "$40\r\n0000000000000000000000000000000000000000\r\n";
        else if (flen == 4 && strncasecmp(first, "INFO", 4) == 0)
          out = "$17\r\nrun_id:0123456789\r\n";
        else if (flen == 4 && strncasecmp(first, "WAIT", 4) == 0) out = ":0\r\n";
        if (write(fds[i].fd, out, strlen(out)) < 0) break;
        if (out == reply) stream_out(fds[i].fd);
        memmove(b, b + clen, used[i - 1] - clen);
        used[i - 1] -= clen;
      }
    }
  }
}

static void fake_start(fake *f, const char *reply) {
  snprintf(f->path, sizeof f->path, "%s/fake.sock", th_server.dir);
  unlink(f->path);
  int lfd = socket(AF_UNIX, SOCK_STREAM, 0);
  struct sockaddr_un sa = {0};
  sa.sun_family = AF_UNIX;
  TH_ASSERT(strlen(f->path) < sizeof sa.sun_path);
  memcpy(sa.sun_path, f->path, strlen(f->path) + 1);
  TH_ASSERT_EQ(bind(lfd, (struct sockaddr *)&sa, sizeof sa), 0);
  TH_ASSERT_EQ(listen(lfd, 8), 0);
  f->pid = fork();
  TH_ASSERT(f->pid >= 0);
  if (f->pid == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL); /* never outlive a failed case */
    signal(SIGPIPE, SIG_IGN);         /* a client that hangs up ends a stream */
    serve(lfd, reply);
    _exit(0);
  }
  close(lfd);
}

/* A fake on a TCP port of 127.0.0.1 that calls itself a one-node cluster
 * (CLUSTER SLOTS: every slot here) and answers everything else `reply`. */
static char tcp_reply[128];

/* reply may hold one %d: the fake's own port. */
static void fake_start_tcp(fake *f, const char *reply, const char *slots) {
  int lfd = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in sa = {0};
  socklen_t len = sizeof sa;
  sa.sin_family = AF_INET;
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  TH_ASSERT_EQ(bind(lfd, (struct sockaddr *)&sa, sizeof sa), 0); /* any free port */
  TH_ASSERT_EQ(getsockname(lfd, (struct sockaddr *)&sa, &len), 0);
  TH_ASSERT_EQ(listen(lfd, 8), 0);
  f->port = ntohs(sa.sin_port);
  f->path[0] = '\0';
  if (slots) snprintf(cluster_slots, sizeof cluster_slots, "%s", slots);
  else
    snprintf(cluster_slots, sizeof cluster_slots,
             "*1\r\n*3\r\n:0\r\n:16383\r\n*3\r\n$9\r\n127.0.0.1\r\n:%d\r\n$3\r\nfak\r\n", f->port);
  f->pid = fork();
  TH_ASSERT(f->pid >= 0);
  if (f->pid == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    snprintf(tcp_reply, sizeof tcp_reply, reply, f->port);
    serve(lfd, tcp_reply);
    _exit(0);
  }
  close(lfd);
}

static void fake_stop(fake *f) {
  kill(f->pid, SIGKILL);
  waitpid(f->pid, NULL, 0);
  if (f->path[0]) unlink(f->path);
}

static sluice_client *fake_client(struct event_base *base, const fake *f) {
  sluice_client_options o;
  th_client_options(&o, NULL);
  o.unix_path = f->path;
  o.op_timeout_ms = 1000;
  return th_client_with(base, &o);
}

/* A client of a TCP fake through a redis+cluster:// URL. */
static sluice_client *fake_cluster_client(struct event_base *base, const fake *f,
                                          unsigned op_timeout_ms) {
  char url[64];
  snprintf(url, sizeof url, "redis+cluster://127.0.0.1:%d", f->port);
  sluice_client_options o;
  th_client_options(&o, url);
  o.op_timeout_ms = op_timeout_ms;
  return th_client_with(base, &o);
}

/* The end of a case against a fake: its semaphore, client and loop freed
 * (the loop drained first), then the fake stopped. */
static void fake_case_done(fake *f, struct event_base *base, sluice_client *c, sluice_sem *s) {
  sluice_sem_free(s);
  th_free_client_and_loop(base, c, 5000);
  fake_stop(f);
}

/* One case against a fake: its server, loop, client and semaphore "m". */
typedef struct fake_case {
  fake f;
  struct event_base *base;
  sluice_client *c;
  sluice_sem *s;
} fake_case;

/* A fake answering reply, and a client of it with "m" (a ttl_ms lease). */
static void fake_case_open(fake_case *k, const char *reply, unsigned ttl_ms) {
  fake_start(&k->f, reply);
  k->base = event_base_new();
  k->c = fake_client(k->base, &k->f);
  k->s = sem_test_new(k->c, "m", 1, ttl_ms, 0);
}

static void fake_case_close(fake_case *k) { fake_case_done(&k->f, k->base, k->c, k->s); }

typedef struct info_r {
  int done, status;
} info_r;
static void info_cb(sluice_sem *s, int status, const sluice_sem_info *info, void *ud) {
  info_r *r = ud;
  r->done++;
  r->status = status;
  TH_ASSERT((info != NULL) == (status == SLUICE_OK));
}

/* Every semaphore step against a server answering `reply`. */
static void sem_steps_answer(const char *reply, int expected) {
  fake_case k;
  fake_case_open(&k, reply, 1000);
  acq_result t = sem_try(k.base, k.s);
  TH_ASSERT_EQ(t.status, expected);
  acq_result w = {0};
  TH_ASSERT_EQ(sluice_sem_acquire(k.s, 3000, acq_cb, &w, NULL), 0);
  TH_ASSERT(th_loop_until(k.base, &w.done, 2500)); /* fails, does not wait */
  TH_ASSERT_EQ(w.status, expected);
  info_r ir = {0};
  TH_ASSERT_EQ(sluice_sem_inspect(k.s, info_cb, &ir), 0);
  TH_ASSERT(th_loop_until(k.base, &ir.done, 2000));
  TH_ASSERT_EQ(ir.status, expected);
  fake_case_close(&k);
}

static void test_integer_instead_of_array(void) { sem_steps_answer(":7\r\n", SLUICE_EPROTOCOL); }
static void test_array_of_wrong_shape(void) { sem_steps_answer("*1\r\n+x\r\n", SLUICE_EPROTOCOL); }
static void test_nil(void) { sem_steps_answer("$-1\r\n", SLUICE_EPROTOCOL); }
static void test_error_reply(void) { sem_steps_answer("-ERR boom\r\n", SLUICE_EREDIS); }

/* Bytes that are not RESP: hiredis drops the connection; the attempt was
 * sent, so it fails as "in doubt" (the library releases whatever it may
 * have been granted) and nothing crashes. */
static void test_garbage_bytes(void) {
  fake_case k;
  fake_case_open(&k, "!!not resp!!\r\n", 1000);
  acq_result t = sem_try(k.base, k.s);
  TH_ASSERT_EQ(t.status, SLUICE_EINDOUBT);
  fake_case_close(&k);
}

/* A granted permit whose renewal gets nonsense: the permit is not renewed,
 * and is reported lost (UNCERTAIN) at its deadline rather than kept. */
static void test_renewal_nonsense(void) {
  /* Every command gets a grant-shaped reply: nonsense for a renewal. */
  fake_case k;
  /* {wait, now, beat, granted, fence, lease} */
  fake_case_open(&k, "*6\r\n:-1\r\n:1700000000000\r\n:0\r\n:1\r\n:42\r\n:300\r\n", 300);
  acq_result t = sem_hold(k.base, k.s);
  TH_ASSERT_EQ(sluice_permit_fence(t.permit), 42);
  lost_result lost = {0};
  sluice_permit_set_lost_cb(t.permit, lost_cb, &lost);
  TH_ASSERT(th_loop_until(k.base, &lost.done, 2000));
  TH_ASSERT_EQ(lost.reason, SLUICE_LOST_UNCERTAIN);
  sluice_permit_release(t.permit, NULL, NULL);
  fake_case_close(&k);
}

/* A cluster node that redirects every step to itself: the step follows a
 * bounded number of redirects, then fails with SLUICE_ECONNECTION and says
 * why; never a loop, never a hang. */
static void moved_forever(const char *moved, int expected) {
  fake f;
  fake_start_tcp(&f, moved, NULL);
  struct event_base *base = event_base_new();
  sluice_client *c = fake_cluster_client(base, &f, 3000);
  sluice_sem *s = sem_test_new(c, "m", 1, 1000, 0);
  uint64_t t0 = th_now_ms();
  acq_result r = sem_try(base, s);
  TH_ASSERT_EQ(r.status, expected);
  TH_ASSERT_CMP(th_now_ms() - t0, <, 3000); /* before the deadline */
  const char *err = sluice_client_last_error(c);
  if (expected == SLUICE_ECONNECTION && !strstr(err, "redirects"))
    th_fail(__FILE__, __LINE__, "unclear error: \"%s\"", err);
  fake_case_done(&f, base, c, s);
}

static void test_moved_to_itself(void) {
  moved_forever("-MOVED 7 127.0.0.1:%d\r\n", SLUICE_ECONNECTION);
}
/* An empty host means the node's own. */
static void test_moved_empty_host(void) { moved_forever("-MOVED 7 :%d\r\n", SLUICE_ECONNECTION); }

static void test_tryagain_forever(void) {
  moved_forever("-TRYAGAIN Multiple keys\r\n", SLUICE_ECONNECTION);
}
/* A redirect that does not read as one is an unexpected reply. */
static void test_moved_unreadable(void) { moved_forever("-MOVED x\r\n", SLUICE_EPROTOCOL); }

/* CLUSTER SLOTS answered with nonsense: steps fail with a clear status
 * within their deadline. */
static void test_slots_nonsense(void) {
  fake f;
  fake_start_tcp(&f, "+OK\r\n", ":7\r\n");
  struct event_base *base = event_base_new();
  sluice_client *c = fake_cluster_client(base, &f, 2000);
  sluice_sem *s = sem_test_new(c, "m", 1, 1000, 0);
  acq_result r = sem_try(base, s);
  TH_ASSERT_EQ(r.status, SLUICE_ECONNECTION);
  const char *err = sluice_client_last_error(c);
  if (!strstr(err, "CLUSTER SLOTS")) th_fail(__FILE__, __LINE__, "unclear error: \"%s\"", err);
  fake_case_done(&f, base, c, s);
}

/* ---- bounded replies (net/reply_bounds.h) ----------------------------------- */

static long status_kb(const char *field) {
  char line[256];
  long kb = -1;
  FILE *f = fopen("/proc/self/status", "r");
  while (f && fgets(line, sizeof line, f))
    if (strncmp(line, field, strlen(field)) == 0) kb = atol(line + strlen(field));
  if (f) fclose(f);
  return kb;
}

/* Reset the peak of the resident set (VmHWM); 0, or -1 where the kernel
 * does not let us. */
static int peak_reset(void) {
  FILE *f = fopen("/proc/self/clear_refs", "w");
  if (!f) return -1;
  int ok = fputs("5", f) >= 0;
  return fclose(f) == 0 && ok ? 0 : -1;
}

/* A try-acquire against a fake answering reply (then stream): it ends
 * with expected within the deadline (1000 ms; ETIMEDOUT at it), and the
 * process's resident set never grew by more than 64 MB meanwhile. */
static void bounded_answer(const char *reply, int expected) {
  fake_case k;
  fake_case_open(&k, reply, 1000);
  long rss = status_kb("VmRSS:");
  int peak = peak_reset() == 0;
  uint64_t t0 = th_now_ms();
  acq_result r = sem_try(k.base, k.s);
  uint64_t took = th_now_ms() - t0;
  long grew = status_kb("VmHWM:") - rss;
  th_note("%s after %llu ms (%s); resident set %s%ld KB; %s\n", sluice_err_name(r.status),
          (unsigned long long)took, sluice_client_last_error(k.c), peak ? "grew " : "(no peak) ",
          grew, sluice_client_is_connected(k.c) ? "connected" : "dropped");
  TH_ASSERT_EQ(r.status, expected);
  TH_ASSERT_CMP(took, <, expected == SLUICE_ETIMEDOUT ? 1500 : 1000);
  if (peak) TH_ASSERT_CMP(grew, <, 64 * 1024);
  if (expected == SLUICE_EPROTOCOL && !strstr(sluice_client_last_error(k.c), "reply refused"))
    th_fail(__FILE__, __LINE__, "unclear error: \"%s\"", sluice_client_last_error(k.c));
  memset(&stream, 0, sizeof stream);
  fake_case_close(&k);
}

/* 13 bytes claim 2^31 - 1 elements: refused before hiredis allocates. */
static void test_huge_array_header(void) { bounded_answer("*2147483647\r\n", SLUICE_EPROTOCOL); }

/* A million nested arrays: refused at the bound, no stack walk of them. */
static void test_deep_nesting(void) {
  stream.chunk = "*1\r\n";
  stream.len = 4;
  stream.total = 4000000;
  bounded_answer("*1\r\n", SLUICE_EPROTOCOL);
}

/* A bulk string claiming 1 GB, sent in chunks of chunk_len bytes gap_us
 * apart. */
static void gigabyte_bulk(size_t chunk_len, unsigned gap_us, int expected) {
  static char chunk[65536];
  memset(chunk, 'x', sizeof chunk);
  stream.chunk = chunk;
  stream.len = chunk_len;
  stream.total = (size_t)1 << 30;
  stream.gap_us = gap_us;
  bounded_answer("$1073741824\r\n", expected);
}

/* At full speed: refused once a payload's worth arrived, whatever the
 * header claims. */
static void test_gigabyte_bulk(void) { gigabyte_bulk(65536, 0, SLUICE_EPROTOCOL); }

/* Trickled (1 KB every 10 ms): the step times out at its deadline and the
 * silent connection is dropped with what it buffered. */
static void test_slow_trickle(void) { gigabyte_bulk(1024, 10000, SLUICE_ETIMEDOUT); }

static const th_case cases[] = {
    TH_CASE(integer_instead_of_array, 0),
    TH_CASE(array_of_wrong_shape, 0),
    TH_CASE(nil, 0),
    TH_CASE(error_reply, 0),
    TH_CASE(garbage_bytes, 0),
    TH_CASE(renewal_nonsense, 0),
    TH_CASE(moved_to_itself, 0),
    TH_CASE(tryagain_forever, 0),
    TH_CASE(moved_empty_host, 0),
    TH_CASE(moved_unreadable, 0),
    TH_CASE(slots_nonsense, 0),
    TH_CASE(huge_array_header, 0),
    TH_CASE(deep_nesting, 0),
    TH_CASE(gigabyte_bulk, 0),
    TH_CASE(slow_trickle, 0),
};
TH_MAIN(cases)
