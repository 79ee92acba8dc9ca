/* Topology harness (Redis Cluster, Sentinel); see topology.h. */
#include "topology.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "harness.h"

/* The process that owns the directories (th_topology_init's caller, the
 * test binary's main process): its pid is in their names so its atexit
 * sweep finds those its forked cases made. */
static pid_t topo_owner;
static char topo_prefix[160]; /* "$TMPDIR/sluice-topo-<owner>-" */

static void say(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void say(const char *fmt, ...) {
  va_list ap;
  fprintf(stderr, "# topology: ");
  va_start(ap, fmt);
  vfprintf(stderr, fmt, ap);
  va_end(ap);
  fprintf(stderr, "\n");
  fflush(stderr);
}

static void sleep_ms(unsigned ms) {
  struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
  while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {}
}

static const char *tmp_dir(void) {
  const char *t = getenv("TMPDIR");
  return t && *t ? t : "/tmp";
}

static char server_path[512], cli_path[512];
static const char *redis_server_bin(void) {
  return th_server_prog("redis-server", "REDIS_SERVER", server_path, sizeof server_path);
}
static const char *redis_cli_bin(void) {
  return th_server_prog("redis-cli", "REDIS_CLI", cli_path, sizeof cli_path);
}

int th_topology_available(void) { return redis_server_bin() && redis_cli_bin(); }

/* ---- directories and the sweep ------------------------------------------ */

static int rm_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw) {
  (void)st;
  (void)flag;
  (void)ftw;
  remove(path);
  return 0;
}

/* TH_TOPOLOGY_KEEP=1 keeps the directories (logs, configs) to look at. */
static void rm_tree(const char *dir) {
  const char *keep = getenv("TH_TOPOLOGY_KEEP");
  if (!dir[0]) return;
  if (keep && *keep && strcmp(keep, "0") != 0) {
    say("kept %s", dir);
    return;
  }
  nftw(dir, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
}

/* Running, not a zombie (a dead orphan init has not reaped yet). */
static int pid_running(pid_t pid) {
  char path[64], stat[256];
  snprintf(path, sizeof path, "/proc/%ld/stat", (long)pid);
  FILE *f = fopen(path, "r");
  if (!f) return 0;
  int zombie = 0;
  if (fgets(stat, sizeof stat, f)) {
    const char *rp = strrchr(stat, ')');
    zombie = rp && rp[1] == ' ' && rp[2] == 'Z';
  }
  fclose(f);
  return !zombie;
}

/* The working directory of pid, "" if unknown. */
static void pid_cwd(pid_t pid, char *cwd, size_t len) {
  char link[64];
  snprintf(link, sizeof link, "/proc/%ld/cwd", (long)pid);
  ssize_t n = readlink(link, cwd, len - 1);
  cwd[n > 0 ? n : 0] = 0;
}

/* pid is running with its working directory dir (redis chdirs to its
 * dir): so a stale pid file never makes us kill a reused pid. */
static int pid_lives_in(pid_t pid, const char *dir) {
  char cwd[512];
  pid_cwd(pid, cwd, sizeof cwd);
  size_t dl = strlen(dir);
  if (strncmp(cwd, dir, dl) != 0 || (cwd[dl] != 0 && cwd[dl] != ' ')) return 0;
  return pid_running(pid);
}

static void kill_group(pid_t pid) {
  /* SIGCONT first: a paused server would otherwise keep its group stopped
   * (children of a stopped server, e.g. a replication fork). */
  kill(-pid, SIGCONT);
  kill(pid, SIGCONT);
  kill(-pid, SIGKILL);
  kill(pid, SIGKILL);
}

/* Kill what still runs from a topology directory (by the pid files of its
 * nodes) and remove it. The servers may be our children or orphans. */
static void sweep_root(const char *root) {
  DIR *d = opendir(root);
  if (!d) return;
  struct dirent *e;
  while ((e = readdir(d))) {
    if (e->d_name[0] == '.') continue;
    char node[512], pidf[600];
    if (snprintf(node, sizeof node, "%s/%s", root, e->d_name) >= (int)sizeof node) continue;
    snprintf(pidf, sizeof pidf, "%s/redis.pid", node);
    FILE *f = fopen(pidf, "r");
    long pid = 0;
    if (!f) continue;
    if (fscanf(f, "%ld", &pid) != 1) pid = 0;
    fclose(f);
    if (pid <= 0 || !pid_lives_in((pid_t)pid, node)) continue;
    kill_group((pid_t)pid);
    for (int i = 0; i < 100 && pid_lives_in((pid_t)pid, node); i++) {
      waitpid((pid_t)pid, NULL, WNOHANG);
      sleep_ms(10);
    }
  }
  closedir(d);
  rm_tree(root);
}

/* Every "sluice-topo-<pid>-*" in $TMPDIR whose owner is dead (stale: its
 * test binary was killed before its atexit ran) or, with mine, ours. */
static void sweep(int mine) {
  DIR *d = opendir(tmp_dir());
  if (!d) return;
  struct dirent *e;
  while ((e = readdir(d))) {
    long pid;
    if (sscanf(e->d_name, "sluice-topo-%ld-", &pid) != 1 || pid <= 0) continue;
    int ours = (pid_t)pid == topo_owner;
    if (mine ? !ours : (ours || kill((pid_t)pid, 0) == 0 || errno != ESRCH)) continue;
    char root[512];
    snprintf(root, sizeof root, "%s/%s", tmp_dir(), e->d_name);
    sweep_root(root);
  }
  closedir(d);
}

void th_topology_sweep(void) {
  if (topo_owner) sweep(1);
}

int th_topology_dirs(void) {
  int count = 0;
  if (!topo_owner) return 0;
  DIR *d = opendir(tmp_dir());
  if (!d) return -1;
  struct dirent *e;
  const char *base = strrchr(topo_prefix, '/') + 1;
  while ((e = readdir(d))) count += strncmp(e->d_name, base, strlen(base)) == 0;
  closedir(d);
  return count;
}

static void sweep_at_exit(void) {
  if (getpid() == topo_owner) sweep(1);
}

void th_topology_init(void) {
  if (topo_owner) return;
  topo_owner = getpid();
  snprintf(topo_prefix, sizeof topo_prefix, "%s/sluice-topo-%ld-", tmp_dir(), (long)topo_owner);
  sweep(0);
  atexit(sweep_at_exit);
}

int th_topology_live_processes(void) {
  int count = 0;
  if (!topo_owner) return 0;
  DIR *d = opendir("/proc");
  if (!d) return -1;
  struct dirent *e;
  size_t pl = strlen(topo_prefix);
  while ((e = readdir(d))) {
    char *end;
    long pid = strtol(e->d_name, &end, 10);
    if (*end || pid <= 0) continue;
    char cwd[512];
    pid_cwd((pid_t)pid, cwd, sizeof cwd);
    if (strncmp(cwd, topo_prefix, pl) == 0 && pid_running((pid_t)pid)) count++;
  }
  closedir(d);
  return count;
}

static int make_root(char *root, size_t len) {
  th_topology_init();
  if (snprintf(root, len, "%sXXXXXX", topo_prefix) >= (int)len || !mkdtemp(root)) {
    say("mkdtemp %s: %s", root, strerror(errno));
    root[0] = 0;
    return -1;
  }
  return 0;
}

/* ---- ports, processes ----------------------------------------------------- */

static int port_free(int port) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return 0;
  struct sockaddr_in a;
  memset(&a, 0, sizeof a);
  a.sin_family = AF_INET;
  a.sin_port = htons((uint16_t)port);
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  int ok = bind(fd, (struct sockaddr *)&a, sizeof a) == 0;
  close(fd);
  return ok;
}

/* Ports 10000-21999, so that the cluster bus port (+10000) stays below
 * Linux's ephemeral range (32768-) where outgoing connections could take
 * it. The start depends on the pid so that parallel binaries (and forked
 * cases, each with its own pid) rarely probe the same ports. */
static int pick_port(void) {
  static pid_t cursor_pid;
  static int cursor;
  if (cursor_pid != getpid()) {
    cursor_pid = getpid();
    cursor = (int)((unsigned)cursor_pid * 7919u % 12000u);
  }
  for (int tries = 0; tries < 12000; tries++) {
    int p = 10000 + cursor++ % 12000;
    if (port_free(p) && port_free(p + 10000)) return p;
  }
  return -1;
}

static void print_log_tail(const th_node *n) {
  char path[300], line[512];
  snprintf(path, sizeof path, "%s/redis.log", n->dir);
  FILE *f = fopen(path, "r");
  if (!f) return;
  /* Keep the last 8 lines. */
  char ring[8][512];
  int cnt = 0;
  while (fgets(line, sizeof line, f)) snprintf(ring[cnt++ % 8], sizeof ring[0], "%s", line);
  fclose(f);
  for (int i = cnt > 8 ? cnt - 8 : 0; i < cnt; i++)
    fprintf(stderr, "#   %s: %s", n->addr, ring[i % 8]);
}

/* fork + exec argv in its own process group; the child dies with us
 * (PR_SET_PDEATHSIG), so a case that exits or is killed without stopping
 * its servers does not leave them running. */
static pid_t spawn_argv(const char *const *argv, const char *out_path) {
  pid_t parent = getpid();
  pid_t pid = fork();
  if (pid < 0) return -1;
  if (pid == 0) {
    setpgid(0, 0);
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(127); /* the parent died before prctl */
    int in = open("/dev/null", O_RDONLY);
    int out = open(out_path ? out_path : "/dev/null", O_WRONLY | O_CREAT | O_APPEND, 0600);
    if (in >= 0) dup2(in, 0);
    if (out >= 0) {
      dup2(out, 1);
      dup2(out, 2);
    }
    execv(argv[0], (char *const *)argv);
    _exit(127);
  }
  setpgid(pid, pid); /* also here: no window where a kill(-pid) misses it */
  return pid;
}

static void node_kill(th_node *n) {
  if (n->pid > 0) {
    kill_group(n->pid);
    while (waitpid(n->pid, NULL, 0) < 0 && errno == EINTR) {}
  }
  n->pid = 0;
  n->paused = 0;
}

static void node_pause(th_node *n) {
  kill(-n->pid, SIGSTOP);
  n->paused = 1;
}

static void node_resume(th_node *n) {
  kill(-n->pid, SIGCONT);
  n->paused = 0;
}

static int node_live(const th_node *n) { return n->pid > 0 && !n->paused && !n->cut; }

/* Drop (on) or pass again (off) every TCP packet to or from n's port: the
 * INPUT hook sees both directions of a loopback connection. 0 or -1. */
static int node_cut(th_node *n, int on) {
  char cmd[256];
  int rc = 0;
  for (int dir = 0; dir < 2; dir++) {
    snprintf(cmd, sizeof cmd, "iptables -w -%c INPUT -p tcp --%s %d -j DROP", on ? 'I' : 'D',
             dir ? "sport" : "dport", n->port);
    if (system(cmd) != 0) rc = -1;
  }
  n->cut = on && rc == 0;
  return rc;
}

redisContext *th_node_connect(const th_node *n) {
  struct timeval tv = {2, 0};
  redisContext *c = redisConnectWithTimeout("127.0.0.1", n->port, tv);
  if (!c) return NULL;
  if (c->err) {
    redisFree(c);
    return NULL;
  }
  struct timeval cmd_tv = {5, 0};
  redisSetTimeout(c, cmd_tv);
  return c;
}

void th_node_acl_user(const th_node *n, const char *user, const char *pass, const char *rule,
                      const char *without) {
  char words[2048], pw[128];
  const char *argv[128] = {"ACL", "SETUSER", user, "reset", "on", pw};
  int argc = 6;
  snprintf(pw, sizeof pw, ">%s", pass);
  snprintf(words, sizeof words, "%s", rule);
  for (char *w = strtok(words, " "); w && argc < 128; w = strtok(NULL, " "))
    if (!without || strcmp(w[0] == '+' ? w + 1 : w, without) != 0) argv[argc++] = w;
  redisContext *ctx = th_node_connect(n);
  TH_ASSERT(ctx != NULL);
  redisReply *rep = redisCommandArgv(ctx, argc, argv, NULL);
  if (!rep || rep->type == REDIS_REPLY_ERROR)
    th_fail(__FILE__, __LINE__, "ACL SETUSER on %s: %s", n->addr, rep ? rep->str : ctx->errstr);
  freeReplyObject(rep);
  redisFree(ctx);
}

redisReply *th_node_vcommand(const th_node *n, const char *fmt, va_list ap) {
  return th_vcommand_once(th_node_connect(n), fmt, ap);
}

redisReply *th_node_command(const th_node *n, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  redisReply *r = th_node_vcommand(n, fmt, ap);
  va_end(ap);
  return r;
}

static int reply_ok(redisReply *r) {
  return r && r->type == REDIS_REPLY_STATUS && strcmp(r->str, "OK") == 0;
}

/* The command must answer +OK; otherwise say what it answered. */
static int node_ok(const th_node *n, const char *what, redisReply *r) {
  int ok = reply_ok(r);
  if (!ok)
    say("%s on %s: %s", what, n->addr,
        !r                             ? "no answer"
        : r->type == REDIS_REPLY_ERROR ? r->str
                                       : "unexpected reply");
  if (r) freeReplyObject(r);
  return ok ? 0 : -1;
}

/* Hold replicas that were paused: the bytes of the replication stream
 * already sent still reach them (the kernel takes them), so the master also
 * drops its replicas' connections, and nothing it writes from now on is
 * sent. The paused replicas cannot reconnect. 0 or -1. */
static int cut_replication(const th_node *m) {
  redisReply *r = th_node_command(m, "CLIENT KILL TYPE replica");
  int ok = r && r->type == REDIS_REPLY_INTEGER && r->integer > 0;
  if (!ok)
    say("CLIENT KILL TYPE replica on %s: %s", m->addr,
        !r                             ? "no answer"
        : r->type == REDIS_REPLY_ERROR ? r->str
                                       : "no replica connected");
  if (r) freeReplyObject(r);
  return ok ? 0 : -1;
}

static int wait_ready(th_node *n, unsigned timeout_ms) {
  uint64_t end = th_now_ms() + timeout_ms;
  for (;;) {
    redisReply *r = th_node_command(n, "PING");
    int ok = r && r->type == REDIS_REPLY_STATUS;
    if (r) freeReplyObject(r);
    if (ok) return 0;
    int st;
    if (waitpid(n->pid, &st, WNOHANG) == n->pid) {
      n->pid = 0; /* exited: most likely its port was taken meanwhile */
      return -1;
    }
    if (th_now_ms() >= end) return -1;
    sleep_ms(20);
  }
}

/* Start n's server with argv (its output to <dir>/stdout.log) and wait
 * until it answers: 0, or -1 with it killed (its log shown when this was
 * the last attempt). */
static int node_run(th_node *n, const char *const *argv, int last_attempt) {
  char out[240];
  snprintf(out, sizeof out, "%s/stdout.log", n->dir);
  n->pid = spawn_argv(argv, out);
  if (n->pid > 0 && wait_ready(n, 15000) == 0) return 0;
  if (last_attempt) print_log_tail(n);
  node_kill(n);
  return -1;
}

/* Run n as a data node: redis-server on n->port in n->dir with extra
 * arguments (NULL-terminated, may be NULL), as node_run does. */
static int data_node_run(th_node *n, const char *const *extra, int last_attempt) {
  char port[16], log[240], pidf[240];
  snprintf(port, sizeof port, "%d", n->port);
  snprintf(log, sizeof log, "%s/redis.log", n->dir);
  snprintf(pidf, sizeof pidf, "%s/redis.pid", n->dir);
  /* Redis 7.0 waits 5 s by default before a diskless full sync, for more
   * replicas to join it: every replica would start 5 s late. */
  const char *argv[48] = {redis_server_bin(),
                          "--port",
                          port,
                          "--bind",
                          "127.0.0.1",
                          "--dir",
                          n->dir,
                          "--save",
                          "",
                          "--appendonly",
                          "no",
                          "--daemonize",
                          "no",
                          "--logfile",
                          log,
                          "--pidfile",
                          pidf,
                          "--repl-diskless-sync-delay",
                          "0"};
  int k = 0;
  while (argv[k]) k++;
  for (int i = 0; extra && extra[i] && k < 46; i++) argv[k++] = extra[i];
  return node_run(n, argv, last_attempt);
}

/* Start a redis-server (data node) in root/<name> on a free port, with
 * extra arguments; a node that fails to come up is tried again on another
 * port. */
static int data_node_start(th_node *n, const char *root, const char *name,
                           const char *const *extra) {
  memset(n, 0, sizeof *n);
  n->master = -1;
  snprintf(n->dir, sizeof n->dir, "%s/%s", root, name);
  if (mkdir(n->dir, 0700) != 0 && errno != EEXIST) {
    say("mkdir %s: %s", n->dir, strerror(errno));
    return -1;
  }
  for (int attempt = 0; attempt < 5; attempt++) {
    n->port = pick_port();
    if (n->port < 0) {
      say("no free port");
      return -1;
    }
    snprintf(n->addr, sizeof n->addr, "127.0.0.1:%d", n->port);
    if (data_node_run(n, extra, attempt == 4) == 0) return 0;
  }
  say("redis-server in %s did not start", n->dir);
  return -1;
}

/* ---- replies ----------------------------------------------------------- */

/* "field:value" line of an INFO-style text into out. */
static int info_field(const char *text, const char *field, char *out, size_t len) {
  size_t fl = strlen(field);
  for (const char *p = text; p && *p;) {
    if (strncmp(p, field, fl) == 0 && p[fl] == ':') {
      const char *v = p + fl + 1;
      size_t n = strcspn(v, "\r\n");
      snprintf(out, len, "%.*s", (int)n, v);
      return 0;
    }
    p = strchr(p, '\n');
    if (p) p++;
  }
  out[0] = 0;
  return -1;
}

/* Value of key in a flat key/value array reply (SENTINEL MASTER etc.). */
static const char *kv(const redisReply *r, const char *key) {
  if (!r || r->type != REDIS_REPLY_ARRAY) return NULL;
  for (size_t i = 0; i + 1 < r->elements; i += 2)
    if (r->element[i]->type == REDIS_REPLY_STRING && strcmp(r->element[i]->str, key) == 0 &&
        r->element[i + 1]->type == REDIS_REPLY_STRING)
      return r->element[i + 1]->str;
  return NULL;
}

typedef struct node_role {
  int is_master;   /* -1: no answer */
  int master_port; /* replicas */
  int linked;      /* replicas: state "connected" */
  int replica_ports[8];
  int nreplicas; /* masters: replicas listed by ROLE */
} node_role;

static node_role role_of(const th_node *n) {
  node_role ro;
  memset(&ro, 0, sizeof ro);
  ro.is_master = -1;
  redisReply *r = th_node_command(n, "ROLE");
  if (r && r->type == REDIS_REPLY_ARRAY && r->elements >= 1 &&
      r->element[0]->type == REDIS_REPLY_STRING) {
    if (strcmp(r->element[0]->str, "master") == 0) {
      ro.is_master = 1;
      if (r->elements >= 3 && r->element[2]->type == REDIS_REPLY_ARRAY) {
        for (size_t i = 0; i < r->element[2]->elements && ro.nreplicas < 8; i++) {
          redisReply *e = r->element[2]->element[i];
          if (e->type == REDIS_REPLY_ARRAY && e->elements >= 2 &&
              e->element[1]->type == REDIS_REPLY_STRING)
            ro.replica_ports[ro.nreplicas++] = atoi(e->element[1]->str);
        }
      }
    } else if (strcmp(r->element[0]->str, "slave") == 0 && r->elements >= 4) {
      ro.is_master = 0;
      ro.master_port = (int)r->element[2]->integer;
      ro.linked = r->element[3]->type == REDIS_REPLY_STRING &&
                  strcmp(r->element[3]->str, "connected") == 0;
    }
  }
  if (r) freeReplyObject(r);
  return ro;
}

/* ---- CRC16, slots ------------------------------------------------------ */

uint16_t th_crc16(const void *buf, size_t len) {
  const unsigned char *p = buf;
  uint16_t crc = 0;
  for (size_t i = 0; i < len; i++) {
    crc ^= (uint16_t)(p[i] << 8);
    for (int b = 0; b < 8; b++) crc = (uint16_t)(crc & 0x8000 ? (crc << 1) ^ 0x1021 : crc << 1);
  }
  return crc;
}

unsigned th_keyslot(const void *key, size_t len) {
  const char *k = key;
  const char *open = memchr(k, '{', len);
  if (open) {
    size_t rest = len - (size_t)(open - k) - 1;
    const char *close = memchr(open + 1, '}', rest);
    if (close && close > open + 1) return th_crc16(open + 1, (size_t)(close - open - 1)) & 16383u;
  }
  return th_crc16(k, len) & 16383u;
}

/* ---- cluster ------------------------------------------------------------ */

/* One node's CLUSTER NODES, by port (all nodes are on 127.0.0.1). */
typedef struct vnode {
  int port;
  int is_master;
  int master_port;
  int bad; /* fail, fail?, handshake or noaddr */
  char id[41];
  char master_id[41];
} vnode;

typedef struct cview {
  int nn;
  vnode v[TH_CLUSTER_MAX * 2];
  int owner_port[TH_CLUSTER_SLOTS]; /* 0: unassigned */
} cview;

static void set_owner(cview *cv, const char *tok, int port) {
  if (tok[0] == '[') return; /* [slot->-id] / [slot-<-id]: migrating, importing */
  char *end;
  long a = strtol(tok, &end, 10), b = a;
  if (*end == '-') b = strtol(end + 1, NULL, 10);
  for (long s = a; s <= b && s >= 0 && s < TH_CLUSTER_SLOTS; s++) cv->owner_port[s] = port;
}

/* flag is one of the comma-separated flags (not a part: "nofailover"). */
static int has_flag(const char *flags, const char *flag) {
  size_t fl = strlen(flag);
  for (const char *p = flags; p && *p;) {
    size_t n = strcspn(p, ",");
    if (n == fl && strncmp(p, flag, fl) == 0) return 1;
    p = p[n] ? p + n + 1 : NULL;
  }
  return 0;
}

static int parse_nodes(const char *text, cview *cv) {
  memset(cv, 0, sizeof *cv);
  char *copy = strdup(text), *save = NULL;
  if (!copy) return -1;
  for (char *line = strtok_r(copy, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
    if (cv->nn >= (int)(sizeof cv->v / sizeof cv->v[0])) break;
    /* id addr flags master ping-sent pong-recv epoch link-state slot... */
    char *tsave = NULL, *tok[8];
    int nt = 0;
    while (nt < 8 && (tok[nt] = strtok_r(nt ? NULL : line, " \r", &tsave))) nt++;
    if (nt < 8) continue;
    vnode *v = &cv->v[cv->nn++];
    snprintf(v->id, sizeof v->id, "%s", tok[0]);
    tok[1][strcspn(tok[1], "@")] = 0; /* "ip:port@bus[,hostname]" */
    const char *colon = strrchr(tok[1], ':');
    v->port = colon ? atoi(colon + 1) : 0;
    v->is_master = has_flag(tok[2], "master");
    v->bad = has_flag(tok[2], "fail") || has_flag(tok[2], "fail?") ||
             has_flag(tok[2], "handshake") || has_flag(tok[2], "noaddr");
    snprintf(v->master_id, sizeof v->master_id, "%s", tok[3]);
    for (char *t = strtok_r(NULL, " \r", &tsave); t; t = strtok_r(NULL, " \r", &tsave))
      set_owner(cv, t, v->port);
  }
  free(copy);
  for (int i = 0; i < cv->nn; i++) {
    cv->v[i].master_port = 0;
    for (int j = 0; j < cv->nn && !cv->v[i].is_master; j++)
      if (strcmp(cv->v[j].id, cv->v[i].master_id) == 0) cv->v[i].master_port = cv->v[j].port;
  }
  return 0;
}

static vnode *vfind(cview *cv, int port) {
  for (int i = 0; i < cv->nn; i++)
    if (cv->v[i].port == port) return &cv->v[i];
  return NULL;
}

static int node_index(const th_cluster *cl, int port) {
  for (int i = 0; i < cl->n; i++)
    if (cl->node[i].port == port) return i;
  return -1;
}

/* Every live node: cluster_state ok, all slots assigned and served, all
 * nodes known, the same slot map and roles as the first live node, no
 * live node flagged failing by anyone, every live replica linked to its
 * master. On success the agreed map and roles are stored in cl. */
static int cluster_settled(th_cluster *cl, char *why, size_t wl) {
  static cview views[TH_CLUSTER_MAX];
  int ref = -1;
  for (int i = 0; i < cl->n; i++) {
    th_node *n = &cl->node[i];
    if (!node_live(n)) continue;
    redisReply *r = th_node_command(n, "CLUSTER INFO");
    if (!r || r->type != REDIS_REPLY_STRING) {
      snprintf(why, wl, "%s: CLUSTER INFO: %s", n->addr,
               r && r->type == REDIS_REPLY_ERROR ? r->str : "no answer");
      if (r) freeReplyObject(r);
      return -1;
    }
    char state[32], assigned[16], ok[16], known[16];
    info_field(r->str, "cluster_state", state, sizeof state);
    info_field(r->str, "cluster_slots_assigned", assigned, sizeof assigned);
    info_field(r->str, "cluster_slots_ok", ok, sizeof ok);
    info_field(r->str, "cluster_known_nodes", known, sizeof known);
    freeReplyObject(r);
    if (strcmp(state, "ok") != 0 || atoi(assigned) != TH_CLUSTER_SLOTS ||
        atoi(ok) != TH_CLUSTER_SLOTS || atoi(known) != cl->n) {
      snprintf(why, wl,
               "%s: cluster_state:%s slots_assigned:%s slots_ok:%s known_nodes:%s (want %d)",
               n->addr, state, assigned, ok, known, cl->n);
      return -1;
    }
    r = th_node_command(n, "CLUSTER NODES");
    if (!r || r->type != REDIS_REPLY_STRING) {
      snprintf(why, wl, "%s: CLUSTER NODES failed", n->addr);
      if (r) freeReplyObject(r);
      return -1;
    }
    parse_nodes(r->str, &views[i]);
    freeReplyObject(r);
    if (ref < 0) ref = i;
  }
  if (ref < 0) {
    snprintf(why, wl, "no live node");
    return -1;
  }
  cview *rv = &views[ref];
  for (int i = 0; i < cl->n; i++) {
    if (!node_live(&cl->node[i])) continue;
    cview *cv = &views[i];
    for (int s = 0; s < TH_CLUSTER_SLOTS; s++)
      if (cv->owner_port[s] != rv->owner_port[s]) {
        snprintf(why, wl, "slot %d: %s says port %d, %s says port %d", s, cl->node[ref].addr,
                 rv->owner_port[s], cl->node[i].addr, cv->owner_port[s]);
        return -1;
      }
    for (int j = 0; j < cl->n; j++) {
      const th_node *m = &cl->node[j];
      if (!node_live(m)) continue;
      vnode *a = vfind(rv, m->port), *b = vfind(cv, m->port);
      if (!a || !b || b->bad || a->is_master != b->is_master || a->master_port != b->master_port) {
        snprintf(why, wl, "%s's view of %s: %s", cl->node[i].addr, m->addr,
                 !b       ? "unknown"
                 : b->bad ? "flagged failing"
                          : "role differs from the others'");
        return -1;
      }
    }
  }
  for (int i = 0; i < cl->n; i++) {
    th_node *n = &cl->node[i];
    if (!node_live(n)) continue;
    vnode *a = vfind(rv, n->port);
    node_role ro = role_of(n);
    if (ro.is_master != a->is_master ||
        (!a->is_master && (ro.master_port != a->master_port || !ro.linked))) {
      snprintf(why, wl, "%s: ROLE %s (cluster says %s of %d)", n->addr,
               ro.is_master < 0 ? "no answer"
               : ro.is_master   ? "master"
               : ro.linked      ? "replica"
                                : "replica, link down",
               a->is_master ? "master" : "replica", a->master_port);
      return -1;
    }
  }
  for (int i = 0; i < cl->n; i++) {
    th_node *n = &cl->node[i];
    vnode *a = vfind(rv, n->port);
    if (!a) continue;
    snprintf(n->id, sizeof n->id, "%s", a->id);
    n->is_master = a->is_master;
    n->master = a->is_master ? -1 : node_index(cl, a->master_port);
  }
  for (int s = 0; s < TH_CLUSTER_SLOTS; s++)
    cl->slot_owner[s] = (short)node_index(cl, rv->owner_port[s]);
  return 0;
}

typedef int (*cluster_pred)(th_cluster *cl, const void *arg, char *why, size_t wl);

static int cluster_wait(th_cluster *cl, unsigned timeout_ms, const char *what, cluster_pred pred,
                        const void *arg) {
  char why[512] = "";
  uint64_t t0 = th_now_ms(), end = t0 + timeout_ms;
  for (;;) {
    if (cluster_settled(cl, why, sizeof why) == 0 && (!pred || pred(cl, arg, why, sizeof why) == 0))
      return 0;
    if (th_now_ms() >= end) {
      say("%s: not settled after %u ms: %s", what, timeout_ms, why);
      return -1;
    }
    sleep_ms(50);
  }
}

int th_cluster_wait_ok(th_cluster *cl, unsigned timeout_ms) {
  return cluster_wait(cl, timeout_ms, "cluster", NULL, NULL);
}

/* The shape asked for: `masters` masters with `replicas` replicas each. */
static int shape_ok(th_cluster *cl, const void *arg, char *why, size_t wl) {
  (void)arg;
  int masters = 0;
  for (int i = 0; i < cl->n; i++) {
    if (!cl->node[i].is_master) continue;
    masters++;
    int reps = 0;
    for (int j = 0; j < cl->n; j++) reps += cl->node[j].master == i;
    if (reps != cl->replicas) {
      snprintf(why, wl, "%s has %d replicas, want %d", cl->node[i].addr, reps, cl->replicas);
      return -1;
    }
  }
  if (masters != cl->masters) {
    snprintf(why, wl, "%d masters, want %d", masters, cl->masters);
    return -1;
  }
  return 0;
}

/* Runs argv with a time limit, output to log; 0 if it exited 0. */
static int run_tool(const char *const *argv, const char *log, unsigned timeout_ms) {
  pid_t pid = spawn_argv(argv, log);
  if (pid < 0) return -1;
  uint64_t end = th_now_ms() + timeout_ms;
  int st = 0;
  for (;;) {
    pid_t w = waitpid(pid, &st, WNOHANG);
    if (w == pid) break;
    if (th_now_ms() >= end) {
      kill_group(pid);
      waitpid(pid, NULL, 0);
      say("%s did not finish within %u ms", argv[0], timeout_ms);
      return -1;
    }
    sleep_ms(20);
  }
  return WIFEXITED(st) && WEXITSTATUS(st) == 0 ? 0 : -1;
}

static void print_file(const char *path) {
  FILE *f = fopen(path, "r");
  char line[512];
  if (!f) return;
  while (fgets(line, sizeof line, f)) fprintf(stderr, "#   %s", line);
  fclose(f);
}

/* A cluster node's extra arguments (extra: 7 entries, NULL-terminated). */
static void cluster_node_extra(const char *conf, const char **extra) {
  static const char *const args[] = {"--cluster-enabled",      "yes", "--cluster-config-file", NULL,
                                     "--cluster-node-timeout", "1000"};
  for (int i = 0; i < 6; i++) extra[i] = args[i] ? args[i] : conf;
  extra[6] = NULL;
}

/* Every master's replicas acknowledge a write of its own, as
 * th_redis_start_pair waits for one: a replica just synced acknowledges
 * its master's offset only a moment later (after a diskless sync Redis 7
 * streams nothing to it before its first acknowledgement), and a test's
 * first WAIT, 200 ms in test_cluster's pause_master, ran out under CI's
 * load on a cluster that had only just come up. 0, or -1 after timeout_ms
 * per master. */
static int replicas_acked(th_cluster *cl, int replicas, unsigned timeout_ms) {
  for (int i = 0; i < cl->n; i++) {
    if (cl->node[i].master >= 0) continue; /* a replica */
    char key[32];
    int j = 0;
    do snprintf(key, sizeof key, "th:synced:%d", j++); /* a key on this master */
    while (th_cluster_master_for_key(cl, key) != &cl->node[i] && j < 100000);
    redisContext *c = th_node_connect(&cl->node[i]);
    if (!c) return -1;
    long long acked = 0;
    uint64_t end = th_now_ms() + timeout_ms;
    while (acked < replicas && th_now_ms() < end) {
      freeReplyObject(redisCommand(c, "SET %s 1", key));
      redisReply *r = redisCommand(c, "WAIT %d 100", replicas);
      acked = r && r->type == REDIS_REPLY_INTEGER ? r->integer : 0;
      if (r) freeReplyObject(r);
    }
    freeReplyObject(redisCommand(c, "DEL %s", key));
    redisFree(c);
    if (acked < replicas) {
      say("%s: %lld of %d replicas acknowledged a write", cl->node[i].addr, acked, replicas);
      return -1;
    }
  }
  return 0;
}

static int cluster_start_once(th_cluster *cl, int masters, int replicas_per_master) {
  memset(cl, 0, sizeof *cl);
  for (int s = 0; s < TH_CLUSTER_SLOTS; s++) cl->slot_owner[s] = -1;
  if (!th_topology_available()) return -2;
  int n = masters * (1 + replicas_per_master);
  if (masters < 3 || replicas_per_master < 0 || n > TH_CLUSTER_MAX) {
    say("cluster of %d masters x %d replicas: not supported", masters, replicas_per_master);
    return -1;
  }
  if (make_root(cl->root, sizeof cl->root) != 0) return -1;
  cl->masters = masters;
  cl->replicas = replicas_per_master;
  for (int i = 0; i < n; i++) {
    char name[16], conf[240];
    const char *extra[7];
    snprintf(name, sizeof name, "n%d", i);
    snprintf(conf, sizeof conf, "%s/%s/nodes.conf", cl->root, name);
    cluster_node_extra(conf, extra);
    cl->n = i + 1; /* so that th_cluster_stop sees it */
    if (data_node_start(&cl->node[i], cl->root, name, extra) != 0) goto fail;
  }
  size_t off = 0;
  for (int i = 0; i < n; i++)
    off += (size_t)snprintf(cl->seeds + off, sizeof cl->seeds - off, "%s%s", i ? "," : "",
                            cl->node[i].addr);

  char replicas[16], log[240];
  snprintf(replicas, sizeof replicas, "%d", replicas_per_master);
  snprintf(log, sizeof log, "%s/create.log", cl->root);
  const char *argv[TH_CLUSTER_MAX + 10];
  int k = 0;
  argv[k++] = redis_cli_bin();
  argv[k++] = "--cluster";
  argv[k++] = "create";
  for (int i = 0; i < n; i++) argv[k++] = cl->node[i].addr;
  argv[k++] = "--cluster-replicas";
  argv[k++] = replicas;
  argv[k++] = "--cluster-yes";
  argv[k] = NULL;
  if (run_tool(argv, log, 60000) != 0) {
    say("redis-cli --cluster create failed:");
    print_file(log);
    goto fail;
  }
  if (cluster_wait(cl, 60000, "cluster start", shape_ok, NULL) != 0) goto fail;
  if (replicas_per_master > 0 && replicas_acked(cl, replicas_per_master, 10000) != 0) goto fail;
  return 0;
fail:
  th_cluster_stop(cl);
  return -1;
}

/* Once more on other ports when the first start fails: under CI's load a
 * cluster once never finished joining (redis-cli waited 60 s on its
 * gossip), which says nothing about the test that wanted it. */
int th_cluster_start(th_cluster *cl, int masters, int replicas_per_master) {
  int rc = cluster_start_once(cl, masters, replicas_per_master);
  if (rc == -1) {
    say("the cluster did not start: once more");
    rc = cluster_start_once(cl, masters, replicas_per_master);
  }
  return rc;
}

void th_cluster_stop(th_cluster *cl) {
  for (int i = 0; i < cl->n; i++) node_kill(&cl->node[i]);
  rm_tree(cl->root);
  cl->root[0] = 0;
}

th_node *th_cluster_master_for_slot(th_cluster *cl, unsigned slot) {
  if (slot >= TH_CLUSTER_SLOTS || cl->slot_owner[slot] < 0) return NULL;
  return &cl->node[cl->slot_owner[slot]];
}

th_node *th_cluster_master_for_key(th_cluster *cl, const char *key) {
  return th_cluster_master_for_slot(cl, th_keyslot(key, strlen(key)));
}

th_node *th_cluster_replica_of(th_cluster *cl, const th_node *m) {
  int mi = (int)(m - cl->node);
  for (int i = 0; i < cl->n; i++)
    if (cl->node[i].master == mi && node_live(&cl->node[i])) return &cl->node[i];
  return NULL;
}

typedef struct slot_at {
  unsigned slot;
  int idx;
} slot_at;

static int slot_owned(th_cluster *cl, const void *arg, char *why, size_t wl) {
  const slot_at *sa = arg;
  if (cl->slot_owner[sa->slot] == sa->idx) return 0;
  snprintf(why, wl, "slot %u still on node %d", sa->slot, cl->slot_owner[sa->slot]);
  return -1;
}

long th_cluster_migrate_slot(th_cluster *cl, unsigned slot, th_node *to) {
  th_node *from = th_cluster_master_for_slot(cl, slot);
  if (!from || !to || from == to || !to->is_master || !node_live(to) || !node_live(from)) {
    say("migrate slot %u: need two different live masters", slot);
    return -1;
  }
  /* The order the cluster spec gives: importing side first, so that a
   * client redirected by ASK always finds the target ready. */
  if (node_ok(to, "SETSLOT IMPORTING",
              th_node_command(to, "CLUSTER SETSLOT %u IMPORTING %s", slot, from->id)) ||
      node_ok(from, "SETSLOT MIGRATING",
              th_node_command(from, "CLUSTER SETSLOT %u MIGRATING %s", slot, to->id)))
    return -1;
  long moved = 0;
  redisContext *c = th_node_connect(from);
  if (!c) {
    say("migrate slot %u: cannot connect to %s", slot, from->addr);
    return -1;
  }
  char port[16];
  snprintf(port, sizeof port, "%d", to->port);
  for (int round = 0; round < 10000; round++) {
    redisReply *keys = redisCommand(c, "CLUSTER GETKEYSINSLOT %u 100", slot);
    if (!keys || keys->type != REDIS_REPLY_ARRAY) {
      say("GETKEYSINSLOT on %s: %s", from->addr,
          keys && keys->type == REDIS_REPLY_ERROR ? keys->str : "failed");
      if (keys) freeReplyObject(keys);
      redisFree(c);
      return -1;
    }
    size_t nk = keys->elements;
    if (nk == 0) {
      freeReplyObject(keys);
      break;
    }
    const char **argv = calloc(nk + 8, sizeof *argv);
    size_t *lens = calloc(nk + 8, sizeof *lens);
    if (!argv || !lens) abort();
    int k = 0;
    const char *head[] = {"MIGRATE", "127.0.0.1", port, "", "0", "5000", "REPLACE", "KEYS"};
    for (int i = 0; i < 8; i++) {
      argv[k] = head[i];
      lens[k++] = strlen(head[i]);
    }
    for (size_t i = 0; i < nk; i++) {
      argv[k] = keys->element[i]->str;
      lens[k++] = keys->element[i]->len;
    }
    redisReply *r = redisCommandArgv(c, k, argv, lens);
    free(argv);
    free(lens);
    freeReplyObject(keys);
    if (!reply_ok(r)) {
      say("MIGRATE from %s to %s: %s", from->addr, to->addr,
          r && r->type == REDIS_REPLY_ERROR ? r->str : "failed");
      if (r) freeReplyObject(r);
      redisFree(c);
      return -1;
    }
    freeReplyObject(r);
    moved += (long)nk;
  }
  redisFree(c);
  /* Target first (it bumps its config epoch and claims the slot), then the
   * source (it stops redirecting with ASK), then every other master so no
   * one waits for gossip to learn it. */
  if (node_ok(to, "SETSLOT NODE",
              th_node_command(to, "CLUSTER SETSLOT %u NODE %s", slot, to->id)) ||
      node_ok(from, "SETSLOT NODE",
              th_node_command(from, "CLUSTER SETSLOT %u NODE %s", slot, to->id)))
    return -1;
  for (int i = 0; i < cl->n; i++) {
    th_node *m = &cl->node[i];
    if (m == to || m == from || !m->is_master || !node_live(m)) continue;
    if (node_ok(m, "SETSLOT NODE", th_node_command(m, "CLUSTER SETSLOT %u NODE %s", slot, to->id)))
      return -1;
  }
  slot_at sa = {slot, (int)(to - cl->node)};
  if (cluster_wait(cl, 30000, "slot migration", slot_owned, &sa) != 0) return -1;
  return moved;
}

typedef struct flip {
  int new_master, old_master;
} flip;

static int flipped(th_cluster *cl, const void *arg, char *why, size_t wl) {
  const flip *f = arg;
  th_node *nm = &cl->node[f->new_master], *om = &cl->node[f->old_master];
  if (nm->is_master && !om->is_master && om->master == f->new_master) return 0;
  snprintf(why, wl, "%s is %s, %s is %s", nm->addr, nm->is_master ? "master" : "replica", om->addr,
           om->is_master ? "master" : "replica");
  return -1;
}

th_node *th_cluster_failover(th_cluster *cl, th_node *m) {
  th_node *r = th_cluster_replica_of(cl, m);
  if (!r || !m->is_master) {
    say("failover of %s: not a master with a live replica", m->addr);
    return NULL;
  }
  flip f = {(int)(r - cl->node), (int)(m - cl->node)};
  /* A manual failover gives up after 5 s if the master and replica do not
   * reach the same offset in time (busy machine): ask again, up to 3 times. */
  for (int attempt = 0; attempt < 3; attempt++) {
    if (node_ok(r, "CLUSTER FAILOVER", th_node_command(r, "CLUSTER FAILOVER"))) return NULL;
    uint64_t end = th_now_ms() + 10000;
    while (th_now_ms() < end && role_of(r).is_master != 1) sleep_ms(50);
    if (role_of(r).is_master == 1) break;
  }
  return cluster_wait(cl, 30000, "CLUSTER FAILOVER", flipped, &f) == 0 ? r : NULL;
}

typedef struct lost {
  int idx[TH_CLUSTER_MAX];
  int n;
  int winner;
} lost;

static int replica_took_over(th_cluster *cl, const void *arg, char *why, size_t wl) {
  lost *l = (lost *)arg;
  for (int i = 0; i < l->n; i++)
    if (cl->node[l->idx[i]].is_master) {
      l->winner = l->idx[i];
      return 0;
    }
  snprintf(why, wl, "no replica of the lost master promoted yet");
  return -1;
}

/* m's replicas: the live ones, or with held, the paused ones (which are
 * resumed). */
static void replicas_of(th_cluster *cl, th_node *m, lost *l, int held) {
  int mi = (int)(m - cl->node);
  for (int i = 0; i < cl->n; i++) {
    th_node *r = &cl->node[i];
    if (r->master != mi || r->pid <= 0 || r->paused != held) continue;
    l->idx[l->n++] = i;
  }
}

static th_node *cluster_lose_master(th_cluster *cl, th_node *m, int sig, int held) {
  lost l = {{0}, 0, -1};
  replicas_of(cl, m, &l, held);
  if (!m->is_master || !node_live(m) || l.n == 0) {
    say("%s: not a live master with a %s replica", m->addr, held ? "held" : "live");
    return NULL;
  }
  if (sig == SIGSTOP) node_pause(m);
  else node_kill(m);
  for (int i = 0; held && i < l.n; i++) node_resume(&cl->node[l.idx[i]]);
  /* node timeout 1 s to flag it, then the election (rank-delayed): a few
   * seconds; generous for a busy machine. */
  if (cluster_wait(cl, 60000,
                   sig == SIGSTOP ? "failover of a paused master" : "failover of a killed master",
                   replica_took_over, &l) != 0)
    return NULL;
  return &cl->node[l.winner];
}

th_node *th_cluster_pause_master(th_cluster *cl, th_node *m) {
  return cluster_lose_master(cl, m, SIGSTOP, 0);
}
th_node *th_cluster_kill_master(th_cluster *cl, th_node *m) {
  return cluster_lose_master(cl, m, SIGKILL, 0);
}
th_node *th_cluster_kill_held(th_cluster *cl, th_node *m) {
  return cluster_lose_master(cl, m, SIGKILL, 1);
}

int th_cluster_hold_replicas(th_cluster *cl, th_node *m) {
  lost l = {{0}, 0, -1};
  replicas_of(cl, m, &l, 0);
  for (int i = 0; i < l.n; i++) node_pause(&cl->node[l.idx[i]]);
  return l.n > 0 ? cut_replication(m) : -1;
}

int th_cluster_restart_node(th_cluster *cl, th_node *n) {
  if (n < cl->node || n >= cl->node + cl->n || n->pid > 0) {
    say("%s is not a killed node of this cluster", n->addr);
    return -1;
  }
  char conf[240];
  const char *extra[7];
  snprintf(conf, sizeof conf, "%s/nodes.conf", n->dir);
  cluster_node_extra(conf, extra);
  return data_node_run(n, extra, 1);
}

int th_cluster_resume_node(th_cluster *cl, th_node *n) {
  if (n->pid <= 0 || !n->paused) {
    say("%s is not paused", n->addr);
    return -1;
  }
  node_resume(n);
  return cluster_wait(cl, 60000, "rejoin of a resumed node", NULL, NULL);
}

/* ---- sentinel ------------------------------------------------------------ */

static int sentinel_node_start(th_node *n, const char *root, int i, const char *name,
                               int master_port) {
  memset(n, 0, sizeof *n);
  n->master = -1;
  snprintf(n->dir, sizeof n->dir, "%s/s%d", root, i);
  snprintf(n->conf, sizeof n->conf, "%s/sentinel.conf", n->dir);
  if (mkdir(n->dir, 0700) != 0 && errno != EEXIST) {
    say("mkdir %s: %s", n->dir, strerror(errno));
    return -1;
  }
  for (int attempt = 0; attempt < 5; attempt++) {
    n->port = pick_port();
    if (n->port < 0) return -1;
    snprintf(n->addr, sizeof n->addr, "127.0.0.1:%d", n->port);
    /* Sentinel rewrites this file (state, known peers): it must be its own
     * and writable. */
    FILE *f = fopen(n->conf, "w");
    if (!f) {
      say("%s: %s", n->conf, strerror(errno));
      return -1;
    }
    fprintf(f,
            "port %d\nbind 127.0.0.1\ndaemonize no\ndir %s\nlogfile %s/redis.log\n"
            "pidfile %s/redis.pid\nsentinel resolve-hostnames no\n"
            "sentinel monitor %s 127.0.0.1 %d 2\n"
            "sentinel down-after-milliseconds %s 1000\n"
            "sentinel failover-timeout %s 5000\n"
            "sentinel parallel-syncs %s 1\n",
            n->port, n->dir, n->dir, n->dir, name, master_port, name, name, name);
    fclose(f);
    const char *argv[] = {redis_server_bin(), n->conf, "--sentinel", NULL};
    if (node_run(n, argv, attempt == 4) == 0) return 0;
  }
  say("sentinel in %s did not start", n->dir);
  return -1;
}

static th_node *data_by_port(th_sentinel *s, int port) {
  for (int i = 0; i < 2; i++)
    if (s->data[i].port == port) return &s->data[i];
  return NULL;
}

/* The master port sentinel t reports, 0 if none. */
static int reported_master(th_sentinel *s, th_node *t) {
  redisReply *r = th_node_command(t, "SENTINEL get-master-addr-by-name %s", s->name);
  int port = 0;
  if (r && r->type == REDIS_REPLY_ARRAY && r->elements == 2 &&
      r->element[1]->type == REDIS_REPLY_STRING)
    port = atoi(r->element[1]->str);
  if (r) freeReplyObject(r);
  return port;
}

th_node *th_sentinel_master(th_sentinel *s) {
  for (int i = 0; i < 3; i++) {
    if (!node_live(&s->sent[i])) continue;
    int port = reported_master(s, &s->sent[i]);
    if (port) return data_by_port(s, port);
  }
  return NULL;
}

th_node *th_sentinel_replica(th_sentinel *s) {
  th_node *m = th_sentinel_master(s);
  if (!m) return NULL;
  return m == &s->data[0] ? &s->data[1] : &s->data[0];
}

/* Every live sentinel reports master_port as the master; with
 * replica_port, it also lists that replica as linked ("ok"), the master is
 * not flagged down or in failover, and it knows the other live sentinels. */
static int sentinels_agree(th_sentinel *s, int master_port, int replica_port, char *why,
                           size_t wl) {
  int live = 0;
  for (int i = 0; i < 3; i++) live += node_live(&s->sent[i]);
  for (int i = 0; i < 3; i++) {
    th_node *t = &s->sent[i];
    if (!node_live(t)) continue;
    int port = reported_master(s, t);
    if (port != master_port) {
      snprintf(why, wl, "sentinel %s reports master port %d, want %d", t->addr, port, master_port);
      return -1;
    }
    if (!replica_port) continue;
    redisReply *r = th_node_command(t, "SENTINEL MASTER %s", s->name);
    const char *flags = kv(r, "flags"), *others = kv(r, "num-other-sentinels");
    int good = flags && strcmp(flags, "master") == 0 && others && atoi(others) == live - 1;
    if (!good)
      snprintf(why, wl, "sentinel %s: master flags %s, other sentinels %s (want %d)", t->addr,
               flags ? flags : "?", others ? others : "?", live - 1);
    if (r) freeReplyObject(r);
    if (!good) return -1;
    r = th_node_command(t, "SENTINEL REPLICAS %s", s->name);
    good = 0;
    for (size_t j = 0; r && r->type == REDIS_REPLY_ARRAY && j < r->elements; j++) {
      const char *p = kv(r->element[j], "port"), *fl = kv(r->element[j], "flags"),
                 *link = kv(r->element[j], "master-link-status"),
                 *mp = kv(r->element[j], "master-port");
      if (p && atoi(p) == replica_port && fl && strcmp(fl, "slave") == 0 && link &&
          strcmp(link, "ok") == 0 && mp && atoi(mp) == master_port)
        good = 1;
    }
    if (r) freeReplyObject(r);
    if (!good) {
      snprintf(why, wl, "sentinel %s does not list %d as a linked replica of %d yet", t->addr,
               replica_port, master_port);
      return -1;
    }
  }
  return 0;
}

/* Data nodes: master answers ROLE master; replica (if given) ROLE slave of
 * it, link up, and the master lists it. */
static int data_linked(th_node *m, th_node *r, char *why, size_t wl) {
  node_role mr = role_of(m);
  if (mr.is_master != 1) {
    snprintf(why, wl, "%s: ROLE is %s, want master", m->addr,
             mr.is_master < 0 ? "no answer" : "replica");
    return -1;
  }
  if (!r) return 0;
  node_role rr = role_of(r);
  int listed = 0;
  for (int i = 0; i < mr.nreplicas; i++) listed |= mr.replica_ports[i] == r->port;
  if (rr.is_master != 0 || rr.master_port != m->port || !rr.linked || !listed) {
    snprintf(why, wl,
             "%s: not yet a linked replica of %s (role %d, master port %d, linked %d, listed %d)",
             r->addr, m->addr, rr.is_master, rr.master_port, rr.linked, listed);
    return -1;
  }
  return 0;
}

/* Waits for: master m (ROLE), the sentinels reporting it, and with r, r its
 * linked replica known to every sentinel. */
static int sentinel_wait(th_sentinel *s, th_node *m, th_node *r, unsigned timeout_ms,
                         const char *what) {
  char why[512] = "";
  uint64_t end = th_now_ms() + timeout_ms;
  for (;;) {
    if (sentinels_agree(s, m->port, r ? r->port : 0, why, sizeof why) == 0 &&
        data_linked(m, r, why, sizeof why) == 0) {
      m->is_master = 1;
      if (r) r->is_master = 0;
      return 0;
    }
    if (th_now_ms() >= end) {
      say("%s: not after %u ms: %s", what, timeout_ms, why);
      return -1;
    }
    sleep_ms(50);
  }
}

/* Sentinel refreshes a replica's INFO every 10 s and reconfigures an old
 * master 4 hello periods (8 s) after it last claimed to be master: a
 * replica is known linked ~20 s after a failover. Redis 7.0's SENTINEL
 * DEBUG shortens both (INFO 1 s, hello 500 ms) without changing what
 * sentinels decide; TH_SENTINEL_DEFAULT_TIMERS=1 keeps the defaults.
 * The PING period goes to 250 ms too: at 1000 ms, equal to down-after,
 * every sentinel's new link to a just-promoted master sends its first PING
 * when that link is already a down-after old, so all of them flag the new
 * master down together for a moment, and a failover elected in that moment
 * promotes the replica that has nothing. */
static void sentinel_timers(th_sentinel *s) {
  const char *keep = getenv("TH_SENTINEL_DEFAULT_TIMERS");
  if (keep && *keep && strcmp(keep, "0") != 0) return;
  for (int i = 0; i < 3; i++) {
    redisReply *r = th_node_command(
        &s->sent[i], "SENTINEL DEBUG info-period 1000 publish-period 500 ping-period 250");
    if (!reply_ok(r))
      say("SENTINEL DEBUG on %s: %s (default timers kept)", s->sent[i].addr,
          r && r->type == REDIS_REPLY_ERROR ? r->str : "no answer");
    if (r) freeReplyObject(r);
  }
}

int th_sentinel_start(th_sentinel *s, const char *master_name) {
  memset(s, 0, sizeof *s);
  if (!redis_server_bin()) return -2;
  snprintf(s->name, sizeof s->name, "%s", master_name);
  if (make_root(s->root, sizeof s->root) != 0) return -1;
  if (data_node_start(&s->data[0], s->root, "m", NULL) != 0) goto fail;
  char mport[16];
  snprintf(mport, sizeof mport, "%d", s->data[0].port);
  const char *extra[] = {"--replicaof", "127.0.0.1", mport, NULL};
  if (data_node_start(&s->data[1], s->root, "r", extra) != 0) goto fail;
  for (int i = 0; i < 3; i++)
    if (sentinel_node_start(&s->sent[i], s->root, i, s->name, s->data[0].port) != 0) goto fail;
  snprintf(s->sentinels, sizeof s->sentinels, "%s,%s,%s", s->sent[0].addr, s->sent[1].addr,
           s->sent[2].addr);
  sentinel_timers(s);
  /* Sentinels learn the replica from the master's INFO and each other from
   * hello messages every 2 s. */
  if (sentinel_wait(s, &s->data[0], &s->data[1], 30000, "sentinel start") != 0) goto fail;
  return 0;
fail:
  th_sentinel_stop(s);
  return -1;
}

void th_sentinel_stop(th_sentinel *s) {
  /* Sentinels first, so that none reacts to the data nodes going away. */
  for (int i = 0; i < 3; i++) node_kill(&s->sent[i]);
  for (int i = 0; i < 2; i++) node_kill(&s->data[i]);
  rm_tree(s->root);
  s->root[0] = 0;
}

th_node *th_sentinel_failover(th_sentinel *s) {
  th_node *old = th_sentinel_master(s);
  if (!old) {
    say("failover: no sentinel reports a master");
    return NULL;
  }
  th_node *neu = old == &s->data[0] ? &s->data[1] : &s->data[0];
  th_node *t = NULL;
  for (int i = 0; i < 3 && !t; i++)
    if (node_live(&s->sent[i])) t = &s->sent[i];
  if (!t) {
    say("failover: no live sentinel");
    return NULL;
  }
  /* -INPROG / -NOGOODSLAVE are transient (a sentinel still refreshing its
   * view of the replica): ask again for a while. */
  uint64_t end = th_now_ms() + 15000;
  for (;;) {
    redisReply *r = th_node_command(t, "SENTINEL FAILOVER %s", s->name);
    int ok = reply_ok(r);
    if (!ok && th_now_ms() >= end) {
      node_ok(t, "SENTINEL FAILOVER", r);
      return NULL;
    }
    if (r) freeReplyObject(r);
    if (ok) break;
    sleep_ms(200);
  }
  return sentinel_wait(s, neu, NULL, 30000, "SENTINEL FAILOVER") == 0 ? neu : NULL;
}

int th_sentinel_wait_replica(th_sentinel *s, unsigned timeout_ms) {
  th_node *m = th_sentinel_master(s);
  if (!m) {
    say("wait for the replica: no sentinel reports a master");
    return -1;
  }
  th_node *r = m == &s->data[0] ? &s->data[1] : &s->data[0];
  if (!node_live(r)) {
    say("wait for the replica: %s is not running", r->addr);
    return -1;
  }
  return sentinel_wait(s, m, r, timeout_ms, "replica linked and known to every sentinel");
}

static th_node *sentinel_lose_master(th_sentinel *s, int sig) {
  th_node *old = th_sentinel_master(s);
  if (!old || !node_live(old)) {
    say("no live master to %s", sig == SIGSTOP ? "pause" : "kill");
    return NULL;
  }
  th_node *neu = old == &s->data[0] ? &s->data[1] : &s->data[0];
  if (sig == SIGSTOP) node_pause(old);
  else node_kill(old);
  if (neu->paused) node_resume(neu); /* held (th_sentinel_hold_replica) */
  /* down-after 1 s, quorum, leader election, promotion: a few seconds; an
   * election that splits its votes retries only after 2 x failover-timeout
   * (10 s), hence the bound. */
  if (sentinel_wait(
          s, neu, NULL, 60000,
          sig == SIGSTOP ? "failover of a paused master" : "failover of a killed master") != 0)
    return NULL;
  old->is_master = 0;
  return neu;
}

th_node *th_sentinel_pause_master(th_sentinel *s) { return sentinel_lose_master(s, SIGSTOP); }

th_node *th_sentinel_cut_master(th_sentinel *s) {
  th_node *old = th_sentinel_master(s);
  if (!old || !node_live(old)) {
    say("no live master to cut off");
    return NULL;
  }
  th_node *neu = old == &s->data[0] ? &s->data[1] : &s->data[0];
  if (node_cut(old, 1) != 0) {
    say("iptables could not cut %s off", old->addr);
    node_cut(old, 0);
    return NULL;
  }
  if (sentinel_wait(s, neu, NULL, 60000, "failover of a cut-off master") != 0) return NULL;
  old->is_master = 0;
  return neu;
}

int th_sentinel_heal_node(th_sentinel *s, th_node *n) {
  if (!n->cut) {
    say("%s is not cut off", n->addr);
    return -1;
  }
  if (node_cut(n, 0) != 0) return -1;
  th_node *m = n == &s->data[0] ? &s->data[1] : &s->data[0];
  return sentinel_wait(s, m, n, 60000, "healed node becoming a replica");
}
th_node *th_sentinel_kill_master(th_sentinel *s) { return sentinel_lose_master(s, SIGKILL); }
th_node *th_sentinel_kill_held(th_sentinel *s) { return sentinel_lose_master(s, SIGKILL); }

int th_sentinel_hold_replica(th_sentinel *s) {
  th_node *m = th_sentinel_master(s), *r = th_sentinel_replica(s);
  if (!m || !r || !node_live(r)) return -1;
  node_pause(r);
  return cut_replication(m);
}

int th_sentinel_resume_node(th_sentinel *s, th_node *n) {
  if (n->pid <= 0 || !n->paused) {
    say("%s is not paused", n->addr);
    return -1;
  }
  node_resume(n);
  th_node *m = n == &s->data[0] ? &s->data[1] : &s->data[0];
  return sentinel_wait(s, m, n, 60000, "resumed node becoming a replica");
}

int th_sentinel_replica_stop(th_sentinel *s) {
  th_node *r = th_sentinel_replica(s);
  if (!r) return -1;
  node_kill(r);
  return 0;
}

int th_sentinel_replica_restart(th_sentinel *s) {
  th_node *m = th_sentinel_master(s), *r = th_sentinel_replica(s);
  if (!m || !r) {
    say("replica restart: no master reported");
    return -1;
  }
  node_kill(r);
  char mport[16];
  snprintf(mport, sizeof mport, "%d", m->port);
  const char *const replicaof[] = {"--replicaof", "127.0.0.1", mport, NULL};
  /* Same port (clients and sentinels know it); Redis binds with
   * SO_REUSEADDR, so connections left in TIME_WAIT do not block it. */
  if (data_node_run(r, replicaof, 1) != 0) {
    say("replica %s did not restart", r->addr);
    return -1;
  }
  char why[512] = "";
  uint64_t end = th_now_ms() + 30000;
  while (data_linked(m, r, why, sizeof why) != 0) {
    if (th_now_ms() >= end) {
      say("replica restart: %s", why);
      return -1;
    }
    sleep_ms(50);
  }
  return 0;
}

int th_sentinel_stop_one(th_sentinel *s, int i) {
  if (i < 0 || i > 2 || s->sent[i].pid <= 0) {
    say("sentinel %d is not running", i);
    return -1;
  }
  node_kill(&s->sent[i]);
  return 0;
}

int th_topology_main(int argc, char **argv, const th_case *cases) {
  size_t n = 0;
  while (cases[n].name) n++;
  return th_topology_main_n(argc, argv, cases, n);
}

int th_topology_main_n(int argc, char **argv, const th_case *cases, size_t n) {
  if (!th_topology_available()) return th_missing("redis-server or redis-cli");
  th_topology_init();
  return th_main_n(argc, argv, cases, n);
}
