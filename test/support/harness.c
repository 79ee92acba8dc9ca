/* Test harness; see harness.h. */
#include "harness.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdarg.h>
#include <string.h>
#include <netinet/in.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <event2/event.h>

#include "server_topo.h"
#include "core/engine.h"

th_redis th_server;
const char *const *th_server_args;
static const char *const *server_extra;
static pid_t harness_pid;
static int no_redis; /* th_main_local: no server to reset, adopt or stop */
static th_topo topo = TH_TOPO_STANDALONE;

th_topo th_server_topo(void) { return topo; }

const char *th_server_topo_name(void) {
  return topo == TH_TOPO_CLUSTER ? "cluster" : topo == TH_TOPO_SENTINEL ? "sentinel" : "standalone";
}

/* th_server is a cluster or sentinel set, not one process of ours. */
static int topo_server(const th_redis *r) { return r == &th_server && topo != TH_TOPO_STANDALONE; }

/* A case that stops or restarts th_server cannot run on a topology (its
 * pid is 0 there: kill(0, ...) would hit the harness itself). */
static void need_standalone(const th_redis *r, const char *what) {
  if (topo_server(r))
    th_fail(__FILE__, __LINE__, "%s of the %s server: mark the case standalone_only", what,
            th_server_topo_name());
}

uint64_t th_now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

struct event_base *th_precise_base(void) {
  struct event_config *cfg = event_config_new();
  if (!cfg) return NULL;
  event_config_set_flag(cfg, EVENT_BASE_FLAG_PRECISE_TIMER);
  struct event_base *b = event_base_new_with_config(cfg);
  event_config_free(cfg);
  return b;
}

int th_free_port(void) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in a;
  socklen_t len = sizeof a;
  memset(&a, 0, sizeof a);
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (fd < 0 || bind(fd, (struct sockaddr *)&a, sizeof a) != 0 ||
      getsockname(fd, (struct sockaddr *)&a, &len) != 0) {
    if (fd >= 0) close(fd);
    return -1;
  }
  close(fd);
  return ntohs(a.sin_port);
}

int th_mkdtemp(char *buf, size_t size, const char *name) {
  const char *tmp = getenv("TMPDIR");
  int n = snprintf(buf, size, "%s/sluice-%s-XXXXXX", tmp && *tmp ? tmp : "/tmp", name);
  return n > 0 && (size_t)n < size && mkdtemp(buf) ? 0 : -1;
}

void th_note(const char *fmt, ...) {
  char text[4096];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(text, sizeof text, fmt, ap);
  va_end(ap);
  for (char *line = text, *end; line; line = end ? end + 1 : NULL) {
    end = strchr(line, '\n');
    if (end) *end = '\0';
    if (*line || end) printf("# %s\n", line);
  }
  fflush(stdout);
}

/* The servers this process started that must not outlive it, by pid (each
 * leads its own process group, which also holds its forks). A case that
 * ends, fails or hits its time limit kills their groups on its way out:
 * PR_SET_PDEATHSIG alone kills the server but not a fork of it, and any of
 * them left running keeps the test alive for meson. */
#define MAX_OWNED 32
static struct { pid_t pid, owner; } owned[MAX_OWNED];

static void own(pid_t pid) {
  for (int i = 0; i < MAX_OWNED; i++)
    if (owned[i].pid == 0) {
      owned[i].pid = pid;
      owned[i].owner = getpid();
      return;
    }
}

static void disown(pid_t pid) {
  for (int i = 0; i < MAX_OWNED; i++)
    if (owned[i].pid == pid) owned[i].pid = 0;
}

static void kill_group(pid_t pid) {
  kill(-pid, SIGCONT); /* a paused server keeps its group stopped */
  kill(pid, SIGCONT);
  kill(-pid, SIGKILL);
  kill(pid, SIGKILL);
}

/* Async-signal-safe: also called from the case's SIGALRM handler. */
static void kill_owned(void) {
  pid_t me = getpid();
  for (int i = 0; i < MAX_OWNED; i++)
    if (owned[i].pid > 0 && owned[i].owner == me) kill_group(owned[i].pid);
}

void th_fail(const char *file, int line, const char *fmt, ...) {
  va_list ap;
  fprintf(stderr, "# %s:%d: ", file, line);
  va_start(ap, fmt);
  vfprintf(stderr, fmt, ap);
  va_end(ap);
  fprintf(stderr, "\n");
  fflush(stderr);
  kill_owned();
  _exit(1);
}

/* See harness.h: $env, else $SLUICE_SERVER_DIR, else the PATH. */
const char *th_server_prog(const char *name, const char *env, char *buf, size_t len) {
  const char *e = getenv(env);
  if (e && *e) return e;
  const char *dir = getenv("SLUICE_SERVER_DIR");
  if (dir && *dir) {
    snprintf(buf, len, "%s/%s", dir, name);
    return access(buf, X_OK) == 0 ? buf : NULL;
  }
  const char *p = getenv("PATH");
  if (!p) p = "/usr/bin:/bin";
  while (*p) {
    const char *c = strchr(p, ':');
    size_t n = c ? (size_t)(c - p) : strlen(p);
    snprintf(buf, len, "%.*s/%s", (int)n, p, name);
    if (access(buf, X_OK) == 0) return buf;
    p += n + (c ? 1 : 0);
  }
  return NULL;
}

static const char *find_redis_server(void) {
  static char path[512];
  return th_server_prog("redis-server", "REDIS_SERVER", path, sizeof path);
}

static int wait_ready(th_redis *r) {
  for (int i = 0; i < 500; i++) { /* up to 5 s, checking every 10 ms */
    redisContext *c = th_redis_connect(r);
    if (c && !c->err) {
      redisReply *rep = redisCommand(c, "PING");
      /* A NOAUTH error also means the server is up (requirepass). */
      int ok = rep && (rep->type == REDIS_REPLY_STATUS ||
                       (rep->type == REDIS_REPLY_ERROR && strncmp(rep->str, "NOAUTH", 6) == 0));
      if (rep) freeReplyObject(rep);
      redisFree(c);
      if (ok) return 0;
    } else if (c) {
      redisFree(c);
    }
    int st;
    if (waitpid(r->pid, &st, WNOHANG) == r->pid) return -1;
    struct timespec ts = {0, 10 * 1000 * 1000};
    nanosleep(&ts, NULL);
  }
  return -1;
}

static int spawn(th_redis *r, const char *const *extra) {
  const char *bin = find_redis_server();
  if (!bin) return -2;
  char port[16];
  snprintf(port, sizeof port, "%d", r->port);
  /* The pidfile: see adopt_restarted(). */
  const char *argv[64] = {bin,         "--port",       port,       "--bind",
                          "127.0.0.1", "--unixsocket", r->sock,    "--unixsocketperm",
                          "700",       "--save",       "",         "--appendonly",
                          "no",        "--dir",        r->dir,     "--daemonize",
                          "no",        "--loglevel",   "warning",  "--logfile",
                          "redis.log", "--pidfile",    "redis.pid"};
  int n = 0;
  while (argv[n]) n++;
  for (int i = 0; extra && extra[i] && n < 62; i++) argv[n++] = extra[i];
  /* Its output (what it says before it reads --logfile) goes to its log,
   * never to the test's stdout or stderr, which meson waits on. */
  char log[300];
  snprintf(log, sizeof log, "%s/redis.log", r->dir);
  /* A server dies with the process that started it, even one that failed
   * before stopping it; but th_server outlives a case that restarted it
   * (see adopt_restarted). */
  int dies_with_us = r != &th_server || getpid() == harness_pid;
  pid_t parent = getpid();
  pid_t pid = fork();
  if (pid < 0) return -1;
  if (pid == 0) {
    setpgid(0, 0);
    if (dies_with_us && (prctl(PR_SET_PDEATHSIG, SIGKILL) != 0 || getppid() != parent)) _exit(127);
    int in = open("/dev/null", O_RDONLY);
    int out = open(log, O_WRONLY | O_CREAT | O_APPEND, 0600);
    if (in >= 0) dup2(in, 0);
    if (out >= 0) {
      dup2(out, 1);
      dup2(out, 2);
    }
    execv(bin, (char *const *)argv);
    _exit(127);
  }
  setpgid(pid, pid); /* also here: no window where a kill(-pid) misses it */
  if (dies_with_us) own(pid);
  r->pid = pid;
  return wait_ready(r);
}

int th_redis_start(th_redis *r, int tcp_port, const char *const *extra) {
  memset(r, 0, sizeof *r);
  if (th_mkdtemp(r->dir, sizeof r->dir, "test") != 0) return -1;
  snprintf(r->sock, sizeof r->sock, "%s/redis.sock", r->dir);
  snprintf(r->url, sizeof r->url, "unix://%s", r->sock);
  r->port = tcp_port;
  if (r == &th_server) server_extra = extra; /* for th_redis_restart */
  int rc = spawn(r, extra);
  if (rc != 0) th_redis_stop(r);
  return rc;
}

void th_redis_start_tcp(th_redis *r, const char *const *extra) {
  int rc = -1;
  for (int attempt = 0; attempt < 5 && rc != 0; attempt++) { /* another may take the port */
    int port = th_free_port();
    if (port > 0) rc = th_redis_start(r, port, extra);
  }
  TH_ASSERT_EQ(rc, 0);
}

static void kill_wait(th_redis *r) {
  if (r->pid > 0) {
    kill_group(r->pid);
    waitpid(r->pid, NULL, 0);
    disown(r->pid);
    r->pid = 0;
  }
}

/* What a server with persistence left in dir (AOF's directory, dumps). */
static void remove_persistence(const char *dir) {
  char path[400];
  snprintf(path, sizeof path, "%s/appendonlydir", dir);
  DIR *d = opendir(path);
  for (struct dirent *e; d && (e = readdir(d));) {
    if (e->d_name[0] == '.') continue;
    char file[700];
    snprintf(file, sizeof file, "%s/%s", path, e->d_name);
    unlink(file);
  }
  if (d) closedir(d);
  rmdir(path);
  snprintf(path, sizeof path, "%s/dump.rdb", dir);
  unlink(path);
}

void th_redis_stop(th_redis *r) {
  char path[300];
  kill_wait(r);
  unlink(r->sock);
  remove_persistence(r->dir);
  snprintf(path, sizeof path, "%s/redis.log", r->dir);
  unlink(path);
  snprintf(path, sizeof path, "%s/redis.pid", r->dir);
  unlink(path);
  rmdir(r->dir);
}

void th_redis_restart(th_redis *r) {
  need_standalone(r, "restart");
  kill_wait(r);
  unlink(r->sock);
  if (spawn(r, server_extra) != 0) th_fail(__FILE__, __LINE__, "redis-server restart failed");
}

void th_redis_respawn(th_redis *r, const char *const *extra) {
  kill_wait(r);
  unlink(r->sock);
  if (spawn(r, extra) != 0) th_fail(__FILE__, __LINE__, "redis-server respawn failed");
}

char th_proc_state(pid_t pid) {
  char path[64], buf[512];
  snprintf(path, sizeof path, "/proc/%ld/stat", (long)pid);
  FILE *f = fopen(path, "r");
  if (!f) return 0;
  size_t n = fread(buf, 1, sizeof buf - 1, f);
  fclose(f);
  buf[n] = '\0';
  const char *end = strrchr(buf, ')'); /* "pid (comm) S ...": comm may hold spaces */
  return end && end[1] == ' ' ? end[2] : 0;
}

static int is_stopped(pid_t pid) { return th_proc_state(pid) == 'T'; }

void th_redis_start_pair(th_redis *master, th_redis *replica, const char *const *extra) {
  const char *args[16] = {"--repl-diskless-sync-delay", "0"}; /* else 5 s */
  size_t n = 2;
  for (; extra && *extra && n < 15; extra++) args[n++] = *extra;
  args[n] = NULL;
  th_redis_start_tcp(master, args);
  char port[16];
  snprintf(port, sizeof port, "%d", master->port);
  const char *replica_of[] = {"--replicaof", "127.0.0.1", port, NULL};
  th_redis_start_tcp(replica, replica_of);
  /* A write before the replica came online leaves the master's offset at
   * 0, which WAIT counts as acknowledged at once: wait for the replica to
   * acknowledge a master offset past 0 (after a diskless sync Redis 7
   * streams nothing to it until its first acknowledgement). */
  redisContext *ctx = th_redis_connect(master);
  TH_ASSERT(ctx != NULL);
  long long off = 0, acked = -1;
  uint64_t end = th_now_ms() + 10000;
  while ((off <= 0 || acked < off) && th_now_ms() < end) {
    freeReplyObject(redisCommand(ctx, "SET th:synced 1"));
    freeReplyObject(redisCommand(ctx, "WAIT 1 100"));
    redisReply *r = redisCommand(ctx, "ROLE"); /* master, offset, [[ip, port, acked]] */
    if (r && r->type == REDIS_REPLY_ARRAY && r->elements == 3 &&
        r->element[1]->type == REDIS_REPLY_INTEGER && r->element[2]->type == REDIS_REPLY_ARRAY &&
        r->element[2]->elements == 1 && r->element[2]->element[0]->elements == 3) {
      off = r->element[1]->integer;
      acked = strtoll(r->element[2]->element[0]->element[2]->str, NULL, 10);
    }
    if (r) freeReplyObject(r);
  }
  freeReplyObject(redisCommand(ctx, "DEL th:synced"));
  redisFree(ctx);
  TH_ASSERT(off > 0 && acked >= off);
}

/* kill() returns before a busy process has stopped: a reply it writes
 * meanwhile would reach the client after the pause. Wait until it has. */
void th_redis_pause(th_redis *r) {
  need_standalone(r, "pause");
  kill(r->pid, SIGSTOP);
  uint64_t end = th_now_ms() + 2000;
  while (!is_stopped(r->pid) && th_now_ms() < end) usleep(1000);
  if (!is_stopped(r->pid))
    th_fail(__FILE__, __LINE__, "redis-server %ld did not stop", (long)r->pid);
}

void th_redis_resume(th_redis *r) {
  need_standalone(r, "resume");
  kill(r->pid, SIGCONT);
}

pid_t th_redis_stall(const char *key) {
  pid_t pid = topo == TH_TOPO_STANDALONE ? th_server.pid : th__server_topo_pid(key);
  if (pid <= 0) th_fail(__FILE__, __LINE__, "no server process serves %s", key);
  kill(pid, SIGSTOP);
  return pid;
}

void th_redis_unstall(pid_t pid) { kill(pid, SIGCONT); }

unsigned th_redis_stall_max_ms(void) {
  return topo == TH_TOPO_CLUSTER ? 1000 : topo == TH_TOPO_SENTINEL ? 600 : 0;
}

redisContext *th_redis_connect(const th_redis *r) {
  if (topo_server(r)) return th__server_topo_master(0);
  struct timeval tv = {2, 0};
  return redisConnectUnixWithTimeout(r->sock, tv);
}

redisReply *th_vcommand_once(redisContext *c, const char *fmt, va_list ap) {
  redisReply *rep = c && !c->err ? redisvCommand(c, fmt, ap) : NULL;
  if (c) redisFree(c);
  return rep;
}

/* fmt's command to r: through server_topo.c for th_server under a
 * topology, else on a fresh connection. NULL if no reply came. */
static redisReply *vcommand(const th_redis *r, const char *fmt, va_list ap) {
  if (!topo_server(r)) return th_vcommand_once(th_redis_connect(r), fmt, ap);
  char *cmd = NULL;
  int len = redisvFormatCommand(&cmd, fmt, ap);
  if (len < 0) th_fail(__FILE__, __LINE__, "bad command format: %s", fmt);
  redisReply *rep = th__server_topo_command(cmd, (size_t)len);
  redisFreeCommand(cmd);
  return rep;
}

redisReply *th_redis_command(const th_redis *r, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  redisReply *rep = vcommand(r, fmt, ap);
  va_end(ap);
  if (!rep) th_fail(__FILE__, __LINE__, "no reply from the test redis to: %s", fmt);
  return rep;
}

/* The reply to fmt's command as a number (freeing it); no reply or an
 * error reply fails the case. */
static long long reply_int(redisReply *rep, const char *fmt) {
  long long v = 0;
  if (!rep) th_fail(__FILE__, __LINE__, "no reply from the test redis to: %s", fmt);
  if (rep->type == REDIS_REPLY_INTEGER) v = rep->integer;
  else if (rep->type == REDIS_REPLY_STRING) v = strtoll(rep->str, NULL, 10);
  else if (rep->type == REDIS_REPLY_NIL) v = 0;
  else if (rep->type == REDIS_REPLY_STATUS) v = 0;
  else
    th_fail(__FILE__, __LINE__, "unexpected reply type %d (%s)", rep->type,
            rep->type == REDIS_REPLY_ERROR ? rep->str : "");
  freeReplyObject(rep);
  return v;
}

long long th_redis_int(const th_redis *r, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  redisReply *rep = vcommand(r, fmt, ap);
  va_end(ap);
  return reply_int(rep, fmt);
}

int th_redis_masters(void) { return topo == TH_TOPO_STANDALONE ? 1 : th__server_topo_masters(); }

redisContext *th_redis_connect_master(int i) {
  redisContext *c = topo == TH_TOPO_STANDALONE ? th_redis_connect(&th_server)
                                               : th__server_topo_master(i);
  if (!c || c->err) th_fail(__FILE__, __LINE__, "cannot connect to master %d of the test redis", i);
  return c;
}

long long th_redis_int_all(const char *fmt, ...) {
  long long sum = 0;
  for (int i = 0; i < th_redis_masters(); i++) {
    redisContext *c = th_redis_connect_master(i);
    va_list ap;
    va_start(ap, fmt);
    redisReply *rep = redisvCommand(c, fmt, ap);
    va_end(ap);
    if (!rep) th_fail(__FILE__, __LINE__, "%s on master %d: %s", fmt, i, c->errstr);
    redisFree(c);
    sum += reply_int(rep, fmt);
  }
  return sum;
}

long long th_redis_info_sum(const char *section, const char *field) {
  long long sum = 0;
  for (int i = 0; i < th_redis_masters(); i++) {
    redisContext *c = th_redis_connect_master(i);
    redisReply *rep = redisCommand(c, "INFO %s", section);
    if (!rep || rep->type != REDIS_REPLY_STRING)
      th_fail(__FILE__, __LINE__, "INFO %s on master %d failed", section, i);
    const char *p = strstr(rep->str, field);
    if (p) sum += strtoll(p + strlen(field), NULL, 10);
    freeReplyObject(rep);
    redisFree(c);
  }
  return sum;
}

/* One CLIENT LIST line: its id, and whether it is one of the topology's
 * own links (a sentinel's, named "sentinel-<id>-cmd" or "-pubsub", or a
 * replica's, flag S) rather than a client's, and blocked (flag b). */
typedef struct client_line {
  long long id;
  int topology_link, blocked;
} client_line;

static client_line parse_client(const char *line) {
  client_line cl = {strtoll(line + strlen("id="), NULL, 10), 0, 0};
  const char *name = strstr(line, " name="), *flags = strstr(line, " flags=");
  size_t nflags = flags ? strcspn(flags + 7, " ") : 0;
  cl.topology_link = (name && strncmp(name, " name=sentinel-", 15) == 0) ||
                     (flags && memchr(flags + 7, 'S', nflags));
  cl.blocked = flags && memchr(flags + 7, 'b', nflags);
  return cl;
}

/* Clients on one master but the one asking; with kill, killed (by id, so
 * that the sentinels' links stay: killing them every few hundred ms could
 * get the master flagged down). Returns how many. */
static long long clients_on(redisContext *c, int blocked_only, int kill) {
  long long n = 0, self = reply_int(redisCommand(c, "CLIENT ID"), "CLIENT ID");
  redisReply *list = redisCommand(c, kill ? "CLIENT LIST TYPE normal" : "CLIENT LIST");
  if (!list || list->type != REDIS_REPLY_STRING) th_fail(__FILE__, __LINE__, "CLIENT LIST failed");
  for (const char *line = list->str; line && strncmp(line, "id=", 3) == 0;) {
    client_line cl = parse_client(line);
    line = strchr(line, '\n');
    line = line ? line + 1 : NULL;
    if (cl.id == self || cl.topology_link || (blocked_only && !cl.blocked)) continue;
    if (kill) {
      redisReply *k = redisCommand(c, "CLIENT KILL ID %lld", cl.id);
      n += k && k->type == REDIS_REPLY_INTEGER ? k->integer : 0;
      if (k) freeReplyObject(k);
    } else {
      n++;
    }
  }
  freeReplyObject(list);
  return n;
}

static long long clients_all(int blocked_only, int kill) {
  long long n = 0;
  for (int i = 0; i < th_redis_masters(); i++) {
    redisContext *c = th_redis_connect_master(i);
    n += clients_on(c, blocked_only, kill);
    redisFree(c);
  }
  return n;
}

long long th_redis_clients(int blocked_only) { return clients_all(blocked_only, 0); }

long long th_redis_kill_clients(void) {
  if (topo == TH_TOPO_STANDALONE)
    return th_redis_int(&th_server, "CLIENT KILL TYPE normal SKIPME yes");
  return clients_all(0, 1);
}

void th_redis_start_full(th_redis *r) {
  static const char *const oom[] = {"--maxmemory", "1mb", "--maxmemory-policy", "noeviction", NULL};
  TH_ASSERT_EQ(th_redis_start(r, 0, oom), 0);
  /* Redis checks memory when a script starts, not inside it: one script
   * fills the server past maxmemory. */
  th_redis_int(r, "EVAL %s 0",
               "for i = 1, 20000 do redis.call('SET', 'fill' .. i, string.rep('x', 100)) end "
               "return 1");
}

int64_t th_redis_time_us(void) {
  redisReply *r = th_redis_command(&th_server, "TIME");
  TH_ASSERT(r->type == REDIS_REPLY_ARRAY && r->elements == 2);
  int64_t us = strtoll(r->element[0]->str, NULL, 10) * 1000000 +
               strtoll(r->element[1]->str, NULL, 10);
  freeReplyObject(r);
  return us;
}

void th_redis_reset(void) {
  if (topo == TH_TOPO_STANDALONE) {
    th_redis_int(&th_server, "FLUSHALL");
    th_redis_int(&th_server, "SCRIPT FLUSH");
    return;
  }
  th_redis_int_all("FLUSHALL");
  th_redis_int_all("SCRIPT FLUSH");
}

static void flag_timeout_cb(evutil_socket_t fd, short what, void *arg) { *(int *)arg = 1; }

int th_loop_until(struct event_base *base, const int *flag, unsigned timeout_ms) {
  int expired = 0;
  struct event *t = evtimer_new(base, flag_timeout_cb, &expired);
  struct timeval tv = {timeout_ms / 1000, (timeout_ms % 1000) * 1000};
  evtimer_add(t, &tv);
  while (!*flag && !expired) event_base_loop(base, EVLOOP_ONCE);
  event_free(t);
  return *flag != 0;
}

int th_loop_drain(struct event_base *base, unsigned timeout_ms) {
  uint64_t end = th_now_ms() + timeout_ms;
  while (th_now_ms() < end) {
    /* EVLOOP_NONBLOCK returns 1 when no events are pending at all. */
    if (event_base_loop(base, EVLOOP_NONBLOCK) == 1) return 1;
    int dummy = 0;
    struct event *t = evtimer_new(base, flag_timeout_cb, &dummy);
    struct timeval tv = {0, 1000};
    evtimer_add(t, &tv);
    event_base_loop(base, EVLOOP_ONCE);
    event_free(t);
  }
  return 0;
}

void th_loop_for(struct event_base *base, unsigned ms) {
  /* libevent's clock may be the coarse one (a tick behind), so its timer
   * can fire a few ms early: run on until ms have surely passed (+1: this
   * clock is read in whole ms). */
  uint64_t end = th_now_ms() + ms + 1;
  int never = 0;
  for (uint64_t now = th_now_ms(); now < end; now = th_now_ms())
    th_loop_until(base, &never, (unsigned)(end - now));
}

int th__turn(struct event_base *base, uint64_t end) {
  uint64_t now = th_now_ms();
  if (now >= end) return 0;
  int never = 0;
  th_loop_until(base, &never, end - now < 5 ? (unsigned)(end - now) : 5);
  return 1;
}

void th_status_set(void *ud, int status) {
  th_status *s = ud;
  s->done++;
  s->status = status;
}

void th_client_options(sluice_client_options *o, const char *url) {
  sluice_client_options_init(o);
  o->url = url;
}

sluice_client *th_client_with(struct event_base *base, const sluice_client_options *o) {
  sluice_client *c = NULL;
  if (sluice_client_new(base, o, &c) != SLUICE_OK)
    th_fail(__FILE__, __LINE__, "client refused: %s", sluice_client_last_error(NULL));
  return c;
}

void th_client_quick_options(sluice_client_options *o, const char *url, unsigned op_timeout_ms) {
  th_client_options(o, url);
  o->reconnect_min_ms = 20;
  o->reconnect_max_ms = 200;
  if (op_timeout_ms) o->op_timeout_ms = op_timeout_ms;
}

sluice_client *th_client(struct event_base *base, const char *url, unsigned op_timeout_ms) {
  sluice_client_options o;
  th_client_quick_options(&o, url, op_timeout_ms);
  return th_client_with(base, &o);
}

th_fx th_fx_open(unsigned op_timeout_ms) {
  th_fx fx;
  fx.base = event_base_new();
  TH_ASSERT(fx.base != NULL);
  fx.c = th_client(fx.base, th_server.url, op_timeout_ms);
  return fx;
}

void th_free_client_and_loop(struct event_base *base, sluice_client *c, unsigned drain_ms) {
  sluice_client_free(c);
  TH_ASSERT(th_loop_drain(base, drain_ms));
  event_base_free(base);
}

void th_fx_close(th_fx *fx) { th_free_client_and_loop(fx->base, fx->c, 5000); }

pid_t th_child_start(int (*fn)(void *arg), void *arg) {
  pid_t pid = fork();
  TH_ASSERT(pid >= 0);
  if (pid == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL); /* it never outlives a case that failed */
    _exit(fn(arg) == 0 ? 0 : 1);
  }
  return pid;
}

void th_loop_until_child(struct event_base *base, pid_t pid, unsigned timeout_ms) {
  int st = 0;
  pid_t done = 0;
  uint64_t until = th_now_ms() + timeout_ms;
  while ((done = waitpid(pid, &st, WNOHANG)) == 0 && th_now_ms() < until) th_loop_for(base, 20);
  if (done == 0) { /* still running: stop it, and the case fails */
    kill(pid, SIGKILL);
    waitpid(pid, &st, 0);
    th_fail(__FILE__, __LINE__, "child %d still running after %u ms", (int)pid, timeout_ms);
  }
  TH_ASSERT(done == pid && WIFEXITED(st) && WEXITSTATUS(st) == 0);
}

int th_tool(const char *url, char *out, size_t size, const char *args) {
  const char *bin = getenv("SLUICE_BIN");
  TH_ASSERT(bin != NULL);
  char cmd[1024];
  snprintf(cmd, sizeof cmd, "SLUICE_REDIS='%s' %s %s 2>&1", url, bin, args);
  FILE *p = popen(cmd, "r");
  TH_ASSERT(p != NULL);
  size_t n = fread(out, 1, size - 1, p);
  out[n] = '\0';
  int st = pclose(p);
  return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

void th_assert_urls_refused(struct event_base *base, const char *const *urls) {
  for (int i = 0; urls[i]; i++) {
    sluice_client_options o;
    sluice_client_options_init(&o);
    o.url = urls[i];
    sluice_client *x = NULL;
    if (sluice_client_new(base, &o, &x) != SLUICE_EINVAL)
      th_fail(__FILE__, __LINE__, "accepted \"%s\"", urls[i]);
    TH_ASSERT(x == NULL);
    TH_ASSERT(strlen(sluice_client_last_error(NULL)) > 0);
  }
}

static void cleanup(void) {
  if (getpid() != harness_pid || no_redis) return;
  if (topo == TH_TOPO_STANDALONE) th_redis_stop(&th_server);
  else th__server_topo_stop();
}

static void on_signal(int sig) {
  cleanup();
  signal(sig, SIG_DFL);
  raise(sig);
}

/* A case that called th_redis_restart left its own server running (its child,
 * orphaned when the case exited): adopt it so it is reused and stopped at the
 * end instead of leaked. */
static void adopt_restarted(th_redis *r) {
  char path[300];
  long pid = 0;
  snprintf(path, sizeof path, "%s/redis.pid", r->dir);
  FILE *f = fopen(path, "r");
  if (!f) return;
  if (fscanf(f, "%ld", &pid) != 1) pid = 0;
  fclose(f);
  if (pid <= 0 || (pid_t)pid == r->pid) return;
  /* kill(pid, 0) also succeeds for a dead server init has not reaped yet:
   * adopt only one that answers (SIGCONT first: the case may have paused it). */
  kill((pid_t)pid, SIGCONT);
  redisContext *c = th_redis_connect(r);
  redisReply *rep = c && !c->err ? redisCommand(c, "PING") : NULL;
  int alive = rep && rep->type == REDIS_REPLY_STATUS;
  if (rep) freeReplyObject(rep);
  if (c) redisFree(c);
  if (!alive) return;
  if (r->pid > 0) {
    kill(r->pid, SIGKILL);
    waitpid(r->pid, NULL, 0);
    disown(r->pid);
  }
  r->pid = (pid_t)pid;
}

/* The case's time limit: its servers go first, then it dies of SIGALRM
 * (which run_case reports). */
static void on_time_limit(int sig) {
  kill_owned();
  signal(sig, SIG_DFL);
  raise(sig);
}

static int run_case(const th_case *tc) {
  pid_t pid = fork();
  if (pid < 0) return -1;
  if (pid == 0) {
    alarm(tc->timeout_s ? tc->timeout_s : 60);
    signal(SIGALRM, on_time_limit);
    if (!no_redis) th_redis_reset();
    tc->fn();
    if (sluice__live_objects != 0)
      th_fail(__FILE__, __LINE__, "%ld sluice objects still alive after the case",
              sluice__live_objects);
    fflush(stdout);
    kill_owned();
    _exit(0);
  }
  int st, bad;
  while (waitpid(pid, &st, 0) < 0 && errno == EINTR) {}
  if (WIFSIGNALED(st)) {
    fprintf(stderr, "# case died with signal %d%s\n", WTERMSIG(st),
            WTERMSIG(st) == SIGALRM ? " (time limit)" : "");
    bad = 1;
  } else {
    bad = WEXITSTATUS(st);
  }
  if (no_redis || topo != TH_TOPO_STANDALONE) return bad;
  /* Even after a case that died: a server it restarted is adopted here,
   * or it would outlive the test. */
  adopt_restarted(&th_server);
  /* The case may have stopped or killed the server: bring it back. */
  if (kill(th_server.pid, 0) != 0 || waitpid(th_server.pid, NULL, WNOHANG) == th_server.pid) {
    disown(th_server.pid);
    th_server.pid = 0;
    th_redis_restart(&th_server);
  }
  th_redis_resume(&th_server);
  return bad;
}

static int selected(int argc, char **argv, const char *name) {
  if (argc < 2) return 1;
  for (int i = 1; i < argc; i++)
    if (strcmp(argv[i], name) == 0) return 1;
  return 0;
}

/* A case that needs the standalone server is not part of a topology's
 * run at all (not planned, not a SKIP): on a topology it does not apply,
 * and a skip count must only ever mean something is missing. */
static int applies(const th_case *tc) { return topo == TH_TOPO_STANDALONE || !tc->standalone_only; }

/* The cases, as TAP; the server (if any) is already up. */
static int run_cases(int argc, char **argv, const th_case *cases, size_t ncases) {
  int total = 0, failed = 0, n = 0;
  const th_case *end = cases + ncases;
  for (const th_case *tc = cases; tc < end; tc++)
    if (selected(argc, argv, tc->name) && applies(tc)) total++;
  printf("1..%d\n", total);
  for (const th_case *tc = cases; tc < end; tc++) {
    if (!selected(argc, argv, tc->name)) continue;
    if (!applies(tc)) {
      printf("# %s: not on %s (%s)\n", tc->name, th_server_topo_name(), tc->standalone_only);
      continue;
    }
    n++;
    uint64_t t0 = th_now_ms();
    int bad = run_case(tc) != 0;
    failed += bad;
    printf("%sok %d - %s # %llu ms\n", bad ? "not " : "", n, tc->name,
           (unsigned long long)(th_now_ms() - t0));
  }
  return failed ? 1 : 0;
}

int th_missing(const char *what) {
  const char *ci = getenv("CI");
  if (ci && strcmp(ci, "true") == 0) {
    printf("Bail out! %s not found (required under CI)\n", what);
    return 1;
  }
  printf("1..0 # SKIP %s not found\n", what);
  return 77;
}

/* The cases of a NULL-terminated table. */
static size_t count_cases(const th_case *cases) {
  size_t n = 0;
  while (cases[n].name) n++;
  return n;
}

int th_main(int argc, char **argv, const th_case *cases) {
  return th_main_n(argc, argv, cases, count_cases(cases));
}

/* What every binary's main does first: TAP lines reach meson as they
 * are printed, a closed pipe is an error rather than a signal. */
static void binary_start(void) {
  setvbuf(stdout, NULL, _IOLBF, 0);
  signal(SIGPIPE, SIG_IGN);
  harness_pid = getpid();
}

int th_main_n(int argc, char **argv, const th_case *cases, size_t n) {
  binary_start();
  if (th__server_topo_parse(&topo) != 0) return 1;
  int rc = topo == TH_TOPO_STANDALONE ? th_redis_start(&th_server, 0, th_server_args)
                                      : th__server_topo_start(topo);
  if (rc == -2)
    return th_missing(topo == TH_TOPO_STANDALONE ? "redis-server" : "redis-server or redis-cli");
  if (rc != 0) {
    printf("Bail out! cannot start the %s redis\n", th_server_topo_name());
    if (topo == TH_TOPO_STANDALONE) th_redis_stop(&th_server);
    return 1;
  }
  if (topo != TH_TOPO_STANDALONE) printf("# %s: %s\n", th_server_topo_name(), th_server.url);
  atexit(cleanup);
  signal(SIGTERM, on_signal);
  signal(SIGINT, on_signal);
  return run_cases(argc, argv, cases, n);
}

int th_main_local(int argc, char **argv, const th_case *cases) {
  return th_main_local_n(argc, argv, cases, count_cases(cases));
}

int th_main_local_n(int argc, char **argv, const th_case *cases, size_t n) {
  binary_start();
  no_redis = 1;
  return run_cases(argc, argv, cases, n);
}
