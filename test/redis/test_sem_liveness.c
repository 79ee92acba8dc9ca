/* Semaphore liveness when clients die or Redis stalls: a holder killed, a
 * waiter killed, a waiter that gave up during a Redis stall and exited.
 * Each time the next live waiter gets the permit promptly, and nobody is
 * granted a permit after its caller gave up. Clients are separate
 * processes, through the library and through `sluice sem run`; the cases
 * run on every topology (stalls there stay shorter than failure detection:
 * th_redis_stall_max_ms). */
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "sem_util.h"

/* ---- library clients in their own processes ------------------------------ */

/* What each child reports (a shared page). */
typedef struct report {
  atomic_int status;          /* 1 + -status once answered (1: SLUICE_OK) */
  atomic_uint_fast64_t at_ms; /* th_now_ms() then: one clock for all */
} report;

static report *rep;

static void reports_open(void) {
  rep = mmap(NULL, 16 * sizeof *rep, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  TH_ASSERT(rep != MAP_FAILED);
  memset(rep, 0, 16 * sizeof *rep);
}

static void reports_close(void) { munmap(rep, 16 * sizeof *rep); }

typedef struct child_opts {
  const char *name;
  int fair;
  unsigned ttl_ms, heartbeat_ms, timeout_ms;
  unsigned hold_ms; /* a grant is held this long, then released */
} child_opts;

/* The case's semaphore handle (in a child, a failure exits it with 1). */
static sluice_sem *case_sem(sluice_client *c, const child_opts *o) {
  sluice_sem_options so;
  sluice_sem_options_init(&so);
  so.ttl_ms = o->ttl_ms;
  so.fair = o->fair;
  so.heartbeat_ms = o->heartbeat_ms;
  return sem_test_new_opts(c, o->name, &so);
}

/* The child: acquire, report, hold, release, exit 0. A timeout ends the
 * process at once from the callback (SIGKILL: nothing runs after it, not
 * even valgrind's leak check), as a short-lived program's end does:
 * whatever it had left unread or unsent stays in the sockets. */
static void child_run(int slot, const child_opts *o) {
  struct event_base *base = event_base_new();
  sluice_client *c = sem_test_client_at(base, th_server.url, 10000);
  sluice_sem *s = case_sem(c, o);
  acq_result r = {0};
  if (sluice_sem_acquire(s, o->timeout_ms, acq_cb, &r, NULL) != SLUICE_OK) _exit(91);
  if (!th_loop_until(base, &r.done, o->timeout_ms + 30000)) _exit(92);
  rep[slot].at_ms = r.at_ms;
  rep[slot].status = 1 - r.status;
  if (r.status == SLUICE_ETIMEDOUT) kill(getpid(), SIGKILL);
  if (r.status != SLUICE_OK) _exit(93);
  th_loop_for(base, o->hold_ms);
  sluice_permit_release(r.permit, NULL, NULL);
  sluice_sem_free(s);
  th_free_client_and_loop(base, c, 5000);
  _exit(0);
}

static pid_t child_start(int slot, const child_opts *o) {
  pid_t pid = fork();
  TH_ASSERT(pid >= 0);
  if (pid == 0) child_run(slot, o);
  return pid;
}

static int child_exit(pid_t pid) {
  int st;
  TH_ASSERT_EQ(waitpid(pid, &st, 0), pid);
  return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

static void child_kill(pid_t pid) {
  kill(pid, SIGKILL);
  TH_ASSERT_EQ(child_exit(pid), 128 + SIGKILL);
}

static long long zcard(const char *name, const char *part) {
  return th_redis_int(&th_server, "ZCARD sluice:sem:{%s}:%s", name, part);
}

/* Run base's loop (a parent that holds permits keeps renewing) until the
 * queue of `name` holds n waiters. */
static void loop_until_queued(struct event_base *base, const char *name, long long n) {
  uint64_t end = th_now_ms() + 10000;
  while (zcard(name, "queue") < n && th_now_ms() < end) th_loop_for(base, 5);
  TH_ASSERT_EQ(zcard(name, "queue"), n);
}

/* Run base's loop until slot reports (the child writes the shared page;
 * the loop ticks every 5 ms to look). */
static int loop_until_reported(struct event_base *base, int slot, unsigned ms) {
  uint64_t end = th_now_ms() + ms;
  while (!rep[slot].status && th_now_ms() < end) th_loop_for(base, 5);
  return rep[slot].status;
}

/* ---- a holder killed ----------------------------------------------------- */

/* The holder's process is killed with SIGKILL while two others wait: the
 * first in line gets the permit within the dead holder's lease, then the
 * second. */
static void holder_killed(int fair) {
  reports_open();
  child_opts h = {"hk", fair, 800, 600, 20000, 60000};
  child_opts w = {"hk", fair, 5000, 600, 20000, 200};
  sem_fx fx = sem_fx_open();
  pid_t holder = child_start(0, &h);
  uint64_t end = th_now_ms() + 10000;
  while (!rep[0].status && th_now_ms() < end) th_loop_for(fx.base, 5);
  TH_ASSERT_EQ(rep[0].status, 1);
  pid_t w1 = child_start(1, &w);
  loop_until_queued(fx.base, "hk", 1);
  pid_t w2 = child_start(2, &w);
  loop_until_queued(fx.base, "hk", 2);
  th_loop_for(fx.base, 1000); /* renewals carry the holder past its TTL */
  TH_ASSERT_EQ(rep[1].status, 0);
  uint64_t t0 = th_now_ms();
  child_kill(holder);
  TH_ASSERT_EQ(child_exit(w1), 0);
  TH_ASSERT_EQ(child_exit(w2), 0);
  th_note("granted %llu ms and %llu ms after the kill\n", (unsigned long long)(rep[1].at_ms - t0),
          (unsigned long long)(rep[2].at_ms - t0));
  TH_ASSERT_CMP(rep[1].at_ms - t0, <, 800 + 500); /* within the dead holder's lease */
  TH_ASSERT_CMP(rep[2].at_ms, >=, rep[1].at_ms);
  TH_ASSERT_CMP(rep[2].at_ms - rep[1].at_ms, <, 200 + 500);
  sem_fx_close(&fx);
  reports_close();
}

static void test_holder_killed(void) { holder_killed(0); }
static void test_holder_killed_fair(void) { holder_killed(1); }

/* ---- a waiter killed ----------------------------------------------------- */

/* The first of two waiting processes is killed; then the holder releases.
 * The live waiter gets the permit within a heartbeat of the kill (the dead
 * one keeps its place, or a permit handed to it, no longer). */
static void waiter_killed(int fair) {
  reports_open();
  child_opts o = {"wk", fair, 5000, 600, 20000, 100};
  sem_fx fx = sem_fx_open();
  sluice_sem *s = case_sem(fx.c, &o);
  acq_result holder = sem_hold(fx.base, s);
  pid_t w1 = child_start(1, &o);
  loop_until_queued(fx.base, "wk", 1);
  pid_t w2 = child_start(2, &o);
  loop_until_queued(fx.base, "wk", 2);
  uint64_t t0 = th_now_ms();
  child_kill(w1);
  sluice_permit_release(holder.permit, NULL, NULL);
  TH_ASSERT_EQ(loop_until_reported(fx.base, 2, 5000), 1);
  th_note("granted %llu ms after the kill\n", (unsigned long long)(rep[2].at_ms - t0));
  TH_ASSERT_CMP(rep[2].at_ms - t0, <, 600 + 600);
  TH_ASSERT_EQ(child_exit(w2), 0);
  sem_case_close(&fx, s);
  reports_close();
}

static void test_waiter_killed(void) { waiter_killed(0); }
static void test_waiter_killed_fair(void) { waiter_killed(1); }

/* ---- a waiter that gave up during a stall -------------------------------- */

/* How long the cases stall Redis: long enough for a waiter to give up in
 * the middle, shorter than a heartbeat (3 s) so only the deadline can keep
 * the permit from the waiter that left, and than failure detection. */
static unsigned stall_ms(void) {
  unsigned most = th_redis_stall_max_ms();
  return most && most < 2500 ? most : 2500;
}

/* A waiter queued first gives up while Redis is stopped, and its process
 * exits with its heartbeat still valid; the holder releases meanwhile (the
 * release waits in its socket too). On resume the permit goes to the live
 * waiter behind, within a second, never to the one that left. */
static void stall_gave_up(int fair) {
  reports_open();
  unsigned stall = stall_ms();
  child_opts o = {"sg", fair, 10000, 3000, stall / 2, 0};
  sem_fx fx = sem_fx_open();
  sluice_client *c2 = sem_test_client_at(fx.base, th_server.url, 10000);
  sluice_sem *s = case_sem(fx.c, &o), *s2 = case_sem(c2, &o);
  acq_result holder = sem_try(fx.base, s), next = {0};
  TH_ASSERT_EQ(holder.status, SLUICE_OK);
  pid_t w = child_start(1, &o);
  loop_until_queued(fx.base, "sg", 1);
  TH_ASSERT_EQ(sluice_sem_acquire(s2, 30000, acq_cb, &next, NULL), SLUICE_OK);
  loop_until_queued(fx.base, "sg", 2);
  uint64_t stalled = th_now_ms();
  pid_t server = th_redis_stall("sluice:sem:{sg}:holders");
  sluice_permit_release(holder.permit, NULL, NULL);
  th_loop_for(fx.base, stall);
  TH_ASSERT_EQ(child_exit(w), 128 + SIGKILL); /* gave up, and ended, during the stall */
  TH_ASSERT_EQ(rep[1].status, 1 - SLUICE_ETIMEDOUT);
  TH_ASSERT_CMP(rep[1].at_ms, >=, stalled);
  uint64_t resumed = th_now_ms();
  th_redis_unstall(server);
  TH_ASSERT(th_loop_until(fx.base, &next.done, 5000));
  TH_ASSERT_EQ(next.status, SLUICE_OK);
  th_note("stall %u ms; granted %llu ms after the resume\n", stall,
          (unsigned long long)(next.at_ms - resumed));
  TH_ASSERT_CMP(next.at_ms - resumed, <, 1000);
  /* The one grant is the live waiter's; nothing was handed to the other. */
  TH_ASSERT_EQ(zcard("sg", "holders"), 1);
  redisReply *r = th_redis_command(&th_server, "ZSCORE sluice:sem:{sg}:holders %s",
                                   sluice_permit_id(next.permit));
  TH_ASSERT(r && r->type == REDIS_REPLY_STRING);
  freeReplyObject(r);
  sluice_permit_release(next.permit, NULL, NULL);
  sluice_sem_free(s2);
  sluice_sem_free(s);
  sluice_client_free(c2); /* drained with the other */
  sem_fx_close(&fx);
  reports_close();
}

static void test_stall_gave_up(void) { stall_gave_up(0); }
static void test_stall_gave_up_fair(void) { stall_gave_up(1); }

/* A client's very first step is sent during a stall, before it knows
 * Redis's clock: it gives up at its timeout, and Redis, when it resumes,
 * grants nothing for it (the clock probe went first, alone). */
static void test_first_step_in_stall(void) {
  unsigned stall = stall_ms();
  struct event_base *base = event_base_new();
  pid_t server = th_redis_stall("sluice:sem:{fs}:holders");
  sluice_client *c = sem_test_client_at(base, th_server.url, stall / 2);
  sluice_sem *s = sem_test_new(c, "fs", 1, 10000, 0);
  acq_result r = {0};
  TH_ASSERT_EQ(sluice_sem_try_acquire(s, acq_cb, &r), SLUICE_OK);
  TH_ASSERT(th_loop_until(base, &r.done, stall));
  TH_ASSERT(r.status == SLUICE_ETIMEDOUT || r.status == SLUICE_ECONNECTION);
  th_loop_for(base, stall - stall / 2);
  th_redis_unstall(server);
  th_loop_for(base, 300);
  TH_ASSERT_EQ(zcard("fs", "holders"), 0);
  sluice_sem_free(s);
  th_free_client_and_loop(base, c, 5000);
}

/* ---- the same through `sluice sem run` ----------------------------------- */

/* `sluice sem run ARGS...` (NULL-terminated) on th_server; returns pid. */
static pid_t tool_start(const char *first, ...) {
  const char *argv[40];
  int n = 0;
  va_list ap;
  const char *bin = getenv("SLUICE_BIN");
  if (!bin) th_fail(__FILE__, __LINE__, "SLUICE_BIN not set");
  argv[n++] = bin;
  argv[n++] = "sem";
  argv[n++] = "run";
  argv[n++] = "--redis";
  argv[n++] = th_server.url;
  argv[n++] = first;
  va_start(ap, first);
  const char *a;
  while ((a = va_arg(ap, const char *)) && n < 39) argv[n++] = a;
  va_end(ap);
  argv[n] = NULL;
  pid_t pid = fork();
  TH_ASSERT(pid >= 0);
  if (pid == 0) {
    int null = open("/dev/null", O_RDWR);
    dup2(null, 0);
    dup2(null, 1);
    execv(argv[0], (char *const *)argv);
    _exit(99);
  }
  return pid;
}

/* A FIFO that a command writes to when it runs: "sh -c 'echo > FIFO'". */
typedef struct signal_fifo {
  char path[256];
  char script[320];
  int fd;
} signal_fifo;

/* A path of this case's own (th_server has no directory on a topology). */
static void case_path(char *buf, size_t size, const char *name) {
  const char *tmp = getenv("TMPDIR");
  snprintf(buf, size, "%s/sluice-live-%d-%s", tmp && *tmp ? tmp : "/tmp", (int)getpid(), name);
}

static void fifo_open(signal_fifo *f, const char *name) {
  case_path(f->path, sizeof f->path, name);
  unlink(f->path);
  TH_ASSERT_EQ(mkfifo(f->path, 0600), 0);
  f->fd = open(f->path, O_RDONLY | O_NONBLOCK);
  TH_ASSERT(f->fd >= 0);
  snprintf(f->script, sizeof f->script, "echo x > %s", f->path);
}

/* Waits (poll) until the command wrote; the moment it did, or 0. */
static uint64_t fifo_wait(signal_fifo *f, unsigned ms) {
  struct pollfd p = {f->fd, POLLIN, 0};
  uint64_t end = th_now_ms() + ms;
  while (th_now_ms() < end) {
    int left = (int)(end - th_now_ms());
    if (poll(&p, 1, left) > 0 && (p.revents & POLLIN)) return th_now_ms();
  }
  return 0;
}

static void fifo_close(signal_fifo *f) {
  close(f->fd);
  unlink(f->path);
}

/* Polls (10 ms) until `name`'s key `part` holds n members. */
static void wait_zcard(const char *name, const char *part, long long n) {
  uint64_t end = th_now_ms() + 10000;
  while (zcard(name, part) != n && th_now_ms() < end) usleep(10000);
  TH_ASSERT_EQ(zcard(name, part), n);
}

static const char *ms_arg(char *buf, unsigned ms) {
  snprintf(buf, 16, "%u", ms);
  return buf;
}

/* Issue 15's scenario: a holder with a short lease, a waiter that will
 * give up (--wait) before a Redis stall ends. On resume the next acquirer
 * runs within a second (before: the waiter that exited got the permit and
 * the next one waited out its whole lease). Standalone: the 9 s
 * stall, 8 s wait, 3 s lease, and Redis stays stopped until the waiter has
 * exited (its close gives up on Redis after 2 s). On a topology the stall
 * must end sooner: the waiter gives up in it and exits after it. */
static void test_cli_stall_gave_up(void) {
  unsigned most = th_redis_stall_max_ms(), stall = most ? most : 9000;
  char ttl[16], wait[16];
  signal_fifo f;
  fifo_open(&f, "cli-stall");
  pid_t holder = tool_start("cs", "-n", "1", "--ttl", ms_arg(ttl, most ? stall / 3 : 3000), "--",
                            "sleep", "30", NULL);
  wait_zcard("cs", "holders", 1);
  pid_t waiter = tool_start("cs", "-n", "1", "--ttl", "30000", "--wait",
                            ms_arg(wait, most ? stall / 2 : 8000), "--", "true", NULL);
  wait_zcard("cs", "queue", 1);
  pid_t server = th_redis_stall("sluice:sem:{cs}:holders");
  usleep(stall * 1000);
  if (!most) TH_ASSERT_EQ(child_exit(waiter), 75); /* no permit in time: gave up, exited */
  uint64_t resumed = th_now_ms();
  th_redis_unstall(server);
  if (most) TH_ASSERT_EQ(child_exit(waiter), 75);
  pid_t next = tool_start("cs", "-n", "1", "--ttl", "30000", "--wait", "5000", "--", "sh", "-c",
                          f.script, NULL);
  uint64_t ran = fifo_wait(&f, 5000);
  TH_ASSERT(ran != 0);
  th_note("stall %u ms; the next acquirer ran %llu ms after the resume\n", stall,
          (unsigned long long)(ran - resumed));
  TH_ASSERT_CMP(ran - resumed, <, 1000);
  TH_ASSERT_EQ(child_exit(next), 0);
  TH_ASSERT_EQ(child_exit(holder), 76); /* its lease ran out in the stall */
  fifo_close(&f);
}

/* The holder's tool is killed: a waiting tool runs within the lease. */
static void test_cli_holder_killed(void) {
  signal_fifo f;
  fifo_open(&f, "cli-hk");
  pid_t holder = tool_start("ch", "-n", "1", "--ttl", "1000", "--", "sleep", "30", NULL);
  wait_zcard("ch", "holders", 1);
  pid_t waiter = tool_start("ch", "-n", "1", "--ttl", "5000", "--wait", "20000", "--", "sh", "-c",
                            f.script, NULL);
  wait_zcard("ch", "queue", 1);
  usleep(1500 * 1000); /* renewals carry the holder past its lease */
  uint64_t t0 = th_now_ms();
  kill(holder, SIGKILL);
  TH_ASSERT_EQ(child_exit(holder), 128 + SIGKILL);
  uint64_t ran = fifo_wait(&f, 5000);
  TH_ASSERT(ran != 0);
  th_note("the waiter ran %llu ms after the kill\n", (unsigned long long)(ran - t0));
  TH_ASSERT_CMP(ran - t0, <, 1000 + 500);
  TH_ASSERT_EQ(child_exit(waiter), 0);
  fifo_close(&f);
}

/* The first waiting tool is killed, then the holder's command ends: the
 * second runs within the dead waiter's heartbeat (3 s, the tool's). */
static void test_cli_waiter_killed(void) {
  signal_fifo f;
  fifo_open(&f, "cli-wk");
  char gate[300], script[700];
  case_path(gate, sizeof gate, "cli-wk.gate");
  unlink(gate);
  TH_ASSERT_EQ(mkfifo(gate, 0600), 0);
  snprintf(script, sizeof script, "read x < %s", gate);
  pid_t holder = tool_start("cw", "-n", "1", "--ttl", "5000", "--", "sh", "-c", script, NULL);
  wait_zcard("cw", "holders", 1);
  pid_t w1 = tool_start("cw", "-n", "1", "--ttl", "5000", "--wait", "20000", "--", "true", NULL);
  wait_zcard("cw", "queue", 1);
  pid_t w2 = tool_start("cw", "-n", "1", "--ttl", "5000", "--wait", "20000", "--", "sh", "-c",
                        f.script, NULL);
  wait_zcard("cw", "queue", 2);
  uint64_t t0 = th_now_ms();
  kill(w1, SIGKILL);
  TH_ASSERT_EQ(child_exit(w1), 128 + SIGKILL);
  int g = open(gate, O_WRONLY); /* the holder's command ends */
  TH_ASSERT(g >= 0 && write(g, "x\n", 2) == 2);
  close(g);
  TH_ASSERT_EQ(child_exit(holder), 0);
  uint64_t ran = fifo_wait(&f, 8000);
  TH_ASSERT(ran != 0);
  th_note("the live waiter ran %llu ms after the kill\n", (unsigned long long)(ran - t0));
  TH_ASSERT_CMP(ran - t0, <, 3000 + 1000);
  TH_ASSERT_EQ(child_exit(w2), 0);
  unlink(gate);
  fifo_close(&f);
}

static const th_case cases[] = {
    TH_CASE(holder_killed, 60),       TH_CASE(holder_killed_fair, 60),
    TH_CASE(waiter_killed, 60),       TH_CASE(waiter_killed_fair, 60),
    TH_CASE(stall_gave_up, 60),       TH_CASE(stall_gave_up_fair, 60),
    TH_CASE(first_step_in_stall, 60), TH_CASE(cli_stall_gave_up, 90),
    TH_CASE(cli_holder_killed, 60),   TH_CASE(cli_waiter_killed, 60),
};
TH_MAIN(cases)
