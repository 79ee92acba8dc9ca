/*
 * Test harness: a private redis-server per test binary (unix socket in a
 * temp dir, so binaries run in parallel), each case in its own forked child
 * with a time limit, TAP output for meson, typed assertions, and an event
 * loop runner that waits on conditions instead of sleeping.
 *
 * TH_TOPOLOGY picks what the binary's server is: "standalone" (the default,
 * as above), "cluster" (a local Redis Cluster, 3 masters) or "sentinel" (a
 * master, its replica and three sentinels); see server_topo.c. The same
 * cases then run through redis+cluster:// or redis+sentinel:// URLs, and
 * the check helpers below reach the right node.
 *
 * Without redis-server the binary exits 77 (meson: SKIP) — except under
 * CI=true, where a missing server is a failure.
 */
#ifndef SLUICE_TEST_HARNESS_H
#define SLUICE_TEST_HARNESS_H

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/types.h>

#include <hiredis/hiredis.h>
#include <sluice/sluice.h>

struct event_base;

typedef struct th_redis {
  pid_t pid;
  char dir[128];  /* private temp dir */
  char sock[192]; /* unix socket path */
  char url[224];  /* "unix://<sock>" */
  int port;       /* TCP port, 0 for unix only */
} th_redis;

/* The binary's server (started by th_main). Under a cluster or sentinel
 * topology only url is set (pid 0, no socket). */
extern th_redis th_server;

typedef enum th_topo { TH_TOPO_STANDALONE, TH_TOPO_CLUSTER, TH_TOPO_SENTINEL } th_topo;
/* What th_server is (TH_TOPOLOGY, read by th_main). */
th_topo th_server_topo(void);
const char *th_server_topo_name(void);
/* Extra redis-server arguments (NULL-terminated) for th_server; set before
 * th_main (e.g. a TLS port). */
extern const char *const *th_server_args;

/* Start/stop a redis-server; extra args (NULL-terminated) go to its command line. */
int th_redis_start(th_redis *r, int tcp_port, const char *const *extra);
void th_redis_stop(th_redis *r);
/* th_redis_start on a free loopback TCP port (th_free_port; tried 5
 * times); fails the case if none works. For URLs that need TCP
 * (credentials, TLS). */
void th_redis_start_tcp(th_redis *r, const char *const *extra);
/* th_redis_start (unix socket only) of a server with maxmemory 1 MB and
 * noeviction, filled past it: every script that writes fails with OOM. */
void th_redis_start_full(th_redis *r);
/* Kill -9 and start again on the same socket/port, empty (no persistence). */
void th_redis_restart(th_redis *r);
/* Kill -9 and start r again with extra (as th_redis_start), in the same
 * directory: a server started with persistence (--appendonly yes) finds its
 * files. th_redis_stop removes them. */
void th_redis_respawn(th_redis *r, const char *const *extra);
/* Start a master on TCP (th_redis_start_tcp, with extra) and a replica of
 * it, and wait until the replica acknowledges a write: a replica just
 * synced acknowledges its first a moment later (WAIT counts it only then). */
void th_redis_start_pair(th_redis *master, th_redis *replica, const char *const *extra);
void th_redis_pause(th_redis *r);  /* SIGSTOP */
void th_redis_resume(th_redis *r); /* SIGCONT */
/* pid's state letter in /proc/PID/stat ('T' stopped, 'Z' zombie...); 0 if
 * it is gone or unreadable. */
char th_proc_state(pid_t pid);
/* (restart, pause and resume of th_server fail the case under a cluster or
 * sentinel topology: such cases are marked standalone_only.) */
/* SIGSTOP the server process that serves key on th_server, on every
 * topology: the standalone server, the cluster's master of the key's slot,
 * the sentinels' master; returns its pid for th_redis_unstall (SIGCONT).
 * A stall must stay shorter than the topology's failure detection, so
 * that nothing is failed over (th_redis_stall_max_ms). */
pid_t th_redis_stall(const char *key);
void th_redis_unstall(pid_t pid);
/* The longest stall that fails nothing over, with a margin for a loaded
 * machine: unlimited (0) standalone, 1 s on the cluster (node timeout 2 s),
 * 0.6 s under Sentinel (down-after 1 s). */
unsigned th_redis_stall_max_ms(void);

/* A synchronous hiredis connection to r, for checks; free with redisFree.
 * For th_server under a topology: its first master (cluster; keyed
 * commands may answer MOVED there, use th_redis_command) or the current
 * master (sentinel). */
redisContext *th_redis_connect(const th_redis *r);
/* Run a command on a fresh sync connection and return its reply (free with
 * freeReplyObject); aborts the case if none comes. For th_server on a
 * cluster it follows MOVED and ASK to the node that has the key. */
redisReply *th_redis_command(const th_redis *r, const char *fmt, ...);
/* The same, returning its integer reply (or, for a string reply, its
 * numeric value); aborts the case on an error reply. */
long long th_redis_int(const th_redis *r, const char *fmt, ...);
/* One command on c, then c freed; NULL if c is NULL or failed, or no reply
 * came. The reply may be an error reply. */
redisReply *th_vcommand_once(redisContext *c, const char *fmt, va_list ap);
/* The masters of th_server: 3 on the cluster, else 1; a connection to the
 * i-th (0 <= i < th_redis_masters()). */
int th_redis_masters(void);
redisContext *th_redis_connect_master(int i);
/* A keyless command on every master of th_server (FLUSHALL, DBSIZE...):
 * the sum of their integer replies, as th_redis_int reads them. */
long long th_redis_int_all(const char *fmt, ...);
/* An INFO field's number summed over every master of th_server: section
 * "commandstats", field "cmdstat_evalsha:calls=". 0 where absent. */
long long th_redis_info_sum(const char *section, const char *field);
/* Client connections on every master of th_server, or those blocked in a
 * command (BRPOP...): the library's and the cases', not the topology's own
 * (sentinels, replicas) nor the one asking. */
long long th_redis_clients(int blocked_only);
/* Kill the connections of every client (the library's and the cases'):
 * CLIENT KILL TYPE normal on each master, sparing the sentinels' own
 * monitoring connections. Returns how many were killed. */
long long th_redis_kill_clients(void);
/* Redis's clock (TIME on th_server) in microseconds. */
int64_t th_redis_time_us(void);
/* FLUSHALL + SCRIPT FLUSH on the binary's server (every master). */
void th_redis_reset(void);

/* Run the loop until *flag becomes non-zero or timeout_ms passes.
 * Returns 1 if the flag was set, 0 on timeout. */
int th_loop_until(struct event_base *base, const int *flag, unsigned timeout_ms);
/* Run the loop until it has nothing left to do, or timeout_ms passes.
 * Returns 1 if it drained (nothing pending), 0 on timeout. */
int th_loop_drain(struct event_base *base, unsigned timeout_ms);
/* Run the loop for ms (for measuring that something does NOT happen). */
void th_loop_for(struct event_base *base, unsigned ms);

uint64_t th_now_ms(void);
/* An event_base on libevent's precise clock (EVENT_BASE_FLAG_PRECISE_TIMER:
 * sluice's deadlines and leases are its timers); NULL on failure. */
struct event_base *th_precise_base(void);
/* A free loopback TCP port (the kernel's pick, for a server that binds it
 * right after), or -1. */
int th_free_port(void);

/* Run base in short turns until cond holds or timeout_ms has passed; the
 * case then asserts cond as it needs. cond is read before each turn. */
#define TH_LOOP_UNTIL(base, cond, timeout_ms) \
  for (uint64_t th_end_ = th_now_ms() + (timeout_ms); !(cond) && th__turn((base), th_end_);) {}
/* One turn of TH_LOOP_UNTIL: runs base for a few ms; 0 once end has passed. */
int th__turn(struct event_base *base, uint64_t end);

/* What a callback whose only news is a status reported: how many times it
 * ran, and its last status. th_status_set(ud, status) is its body. */
typedef struct th_status {
  int done, status;
} th_status;
void th_status_set(void *ud, int status);

/* The cases' client options: the defaults with url (may be NULL). */
void th_client_options(sluice_client_options *o, const char *url);
/* sluice_client_new(base, o), which must succeed. */
sluice_client *th_client_with(struct event_base *base, const sluice_client_options *o);
/* A client of url with a quick reconnect (20 to 200 ms, so a restarted
 * server is found at once) and op_timeout_ms (0: the default). */
sluice_client *th_client(struct event_base *base, const char *url, unsigned op_timeout_ms);
/* th_client's options, for a case that sets more of them. */
void th_client_quick_options(sluice_client_options *o, const char *url, unsigned op_timeout_ms);

/* Free c, run base until everything is released (it must drain within
 * drain_ms), free base: the end of a case that made its own loop. */
void th_free_client_and_loop(struct event_base *base, sluice_client *c, unsigned drain_ms);

/* A case's loop and client of th_server, set up once and torn down once. */
typedef struct th_fx {
  struct event_base *base;
  sluice_client *c;
} th_fx;
/* A new loop and th_client(base, th_server.url, op_timeout_ms). */
th_fx th_fx_open(unsigned op_timeout_ms);
/* Free the client, run the loop until everything is released (it must
 * drain within 5 s), free the loop. */
void th_fx_close(th_fx *fx);

/* Work that blocks (the topology helpers' waits) done while the case's loop
 * keeps running: th_child_start forks a child that runs fn(arg) and exits
 * 0 if it returned 0, else 1; th_loop_until_child runs the loop until that
 * child exits, and fails the case if it exited other than 0 or is still
 * running after timeout_ms (then it is killed). */
pid_t th_child_start(int (*fn)(void *arg), void *arg);
void th_loop_until_child(struct event_base *base, pid_t pid, unsigned timeout_ms);

/* `$SLUICE_BIN ARGS` through sh, with SLUICE_REDIS=url and stderr joined
 * to stdout: the start of its output (size - 1 bytes at most) into out, its
 * exit status returned (-1 if it did not exit). Fails the case without
 * SLUICE_BIN. For the topology tests' runs of the tool on their URLs. */
int th_tool(const char *url, char *out, size_t size, const char *args);

/* The tool's argument list, built a few words at a time (th_argv_add's
 * lists are NULL-terminated); the binary itself is added by th_tool_start. */
typedef struct th_argv {
  const char *v[48];
  int n;
} th_argv;
void th_argv_add(th_argv *a, ...);
void th_argv_addv(th_argv *a, va_list ap);
/* In a variadic function whose last named parameter is `last`: its
 * NULL-terminated variable arguments added to a. */
#define TH_ARGV_ADD_VA(a, last) \
  do {                          \
    va_list th_ap_;             \
    va_start(th_ap_, last);     \
    th_argv_addv(&(a), th_ap_); \
    va_end(th_ap_);             \
  } while (0)
/* Start `$SLUICE_BIN a...` with stdin from /dev/null and only fds 0-2 open;
 * its stdout and stderr are appended to the file log, or inherited when
 * log is NULL. Returns its pid. */
pid_t th_tool_start(const th_argv *a, const char *log);
/* The same with its stdout on a pipe whose reading end goes to *out (its
 * stderr inherited), for a caller that reads while its own loop runs. */
pid_t th_tool_start_piped(const th_argv *a, int *out);
/* The exit status of pid, which must exit within timeout_ms: else it is
 * killed and the case fails (as it does if pid was killed by a signal). */
int th_tool_wait(pid_t pid, unsigned timeout_ms);
/* Run `$SLUICE_BIN a...` as th_tool_start does, to its end: the start of
 * its stdout and its stderr (of both in out, when join is set). */
typedef struct th_tool_out {
  int status;
  char out[4096];
  char err[4096];
} th_tool_out;
void th_tool_run(th_tool_out *r, const th_argv *a, int join);
/* The same for words (NULL-terminated) with all of its output (for the
 * tests that look at every byte) and its environment changed by env
 * (NULL-terminated, may be NULL): "NAME=VALUE" sets, "NAME" unsets. Free
 * with th_run_free. */
typedef struct th_run {
  int status; /* exit status */
  char *out;  /* all of stdout (and stderr when joined), NUL-terminated */
  char *err;  /* all of stderr ("" when joined) */
} th_run;
th_run th_tool_capture(const char *const *words, const char *const *env, int join);
void th_run_free(th_run *r);

/* Every URL of urls (NULL-terminated) is refused at once by
 * sluice_client_new on base: SLUICE_EINVAL, no client, a last error that
 * says why. Fails the case at the first one accepted. */
void th_assert_urls_refused(struct event_base *base, const char *const *urls);

/* A diagnostic on stdout as TAP comments: every line of it gets "# ", so
 * text with newlines in it (a log, a server's error) cannot break the TAP
 * stream. Tests print their notes with this, never a bare printf. */
void th_note(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* A fresh private directory $TMPDIR/sluice-NAME-XXXXXX (/tmp without
 * TMPDIR) into buf; 0, or -1 when it cannot be made. */
int th_mkdtemp(char *buf, size_t size, const char *name);

/* Assertions: print both sides and location, then fail the case. */
void th_fail(const char *file, int line, const char *fmt, ...)
    __attribute__((noreturn, format(printf, 3, 4)));
#define TH_ASSERT(c)                                                   \
  do {                                                                 \
    if (!(c)) th_fail(__FILE__, __LINE__, "assertion failed: %s", #c); \
  } while (0)
#define TH_ASSERT_EQ(a, b)                                                         \
  do {                                                                             \
    long long th_a_ = (long long)(a), th_b_ = (long long)(b);                      \
    if (th_a_ != th_b_)                                                            \
      th_fail(__FILE__, __LINE__, "%s == %s: %lld != %lld", #a, #b, th_a_, th_b_); \
  } while (0)
#define TH_ASSERT_CMP(a, op, b)                                                         \
  do {                                                                                  \
    long long th_a_ = (long long)(a), th_b_ = (long long)(b);                           \
    if (!(th_a_ op th_b_))                                                              \
      th_fail(__FILE__, __LINE__, "%s %s %s: %lld vs %lld", #a, #op, #b, th_a_, th_b_); \
  } while (0)
#define TH_ASSERT_STR_EQ(a, b)                                                                    \
  do {                                                                                            \
    const char *th_a_ = (a), *th_b_ = (b);                                                        \
    if (!th_a_ || !th_b_ || strcmp(th_a_, th_b_) != 0)                                            \
      th_fail(__FILE__, __LINE__, "%s == %s: \"%s\" != \"%s\"", #a, #b, th_a_ ? th_a_ : "(null)", \
              th_b_ ? th_b_ : "(null)");                                                          \
  } while (0)

typedef struct th_case {
  const char *name;
  void (*fn)(void);
  unsigned timeout_s; /* 0: 60 */
  /* Why the case needs the standalone server (it restarts, pauses or kills
   * it...): under a cluster or sentinel topology it is left out of the
   * plan, with a "# <name>: not on <topology> (<this>)" comment. NULL: it
   * runs on every topology. */
  const char *standalone_only;
} th_case;

/* Starts th_server (TH_TOPOLOGY), runs every case (or those named in
 * argv), each in a forked child, and prints TAP. Every case starts with an
 * empty Redis (th_redis_reset). After
 * each case the harness checks that the library's live-object counter is 0
 * (cases must close everything they open). Returns the exit status. */
int th_main(int argc, char **argv, const th_case *cases);
/* The same without Redis (the quick suite): no server is started, cases
 * must not use th_server or th_redis_*; the live-object check still runs. */
int th_main_local(int argc, char **argv, const th_case *cases);
/* A row of a case table for the function test_NAME, named "NAME": the
 * rest are th_case's fields after fn (timeout_s, then any designated
 * ones), so a case's name cannot drift from its function's. */
#define TH_CASE(name, ...) \
  { #name, test_##name, __VA_ARGS__ }
/* th_main and th_main_local on a case table of the same file (an array,
 * not NULL-terminated), as the binary's main. */
int th_main_n(int argc, char **argv, const th_case *cases, size_t n);
int th_main_local_n(int argc, char **argv, const th_case *cases, size_t n);
#define TH_MAIN(cases)                                                 \
  int main(int argc, char **argv) {                                    \
    return th_main_n(argc, argv, cases, sizeof cases / sizeof *cases); \
  }
#define TH_MAIN_LOCAL(cases)                                                 \
  int main(int argc, char **argv) {                                          \
    return th_main_local_n(argc, argv, cases, sizeof cases / sizeof *cases); \
  }
/* The server program name (redis-server, redis-cli) in buf: $env (e.g.
 * REDIS_SERVER) if set, else $SLUICE_SERVER_DIR/name if that is set (a
 * server build of its own, scripts/servers.sh), else the PATH's; NULL when
 * there is none. */
const char *th_server_prog(const char *name, const char *env, char *buf, size_t len);
/* A program the binary needs (what: "redis-server") is not installed:
 * prints the TAP plan that says so and returns the binary's exit status,
 * 77 (SKIP), or 1 under CI=true, where it is required. */
int th_missing(const char *what);

#endif
