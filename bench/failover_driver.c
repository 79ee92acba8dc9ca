/* The failover driver of bench_failover: see failover_driver.h. */
#include "failover_driver.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <hiredis/hiredis.h>

#include "bench.h"

#define SETTLE_MS 3000 /* quiet time after a failover, the old master rejoined */

const char *const fo_kind_names[FO_NKINDS] = {"cluster: CLUSTER FAILOVER",
                                              "cluster: SIGSTOP, resumed",
                                              "cluster: SIGKILL, restarted",
                                              "sentinel: SENTINEL FAILOVER",
                                              "sentinel: SIGSTOP, resumed",
                                              "sentinel: SIGKILL, restarted",
                                              "one Redis: kill -9, restart (AOF everysec)",
                                              "one Redis: kill -9, restart (no persistence)"};

static void sleep_ms(unsigned ms) {
  struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
  while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {}
}

static redisContext *connect_addr(const char *host, int port) {
  struct timeval tv = {1, 0};
  redisContext *c = redisConnectWithTimeout(host, port, tv);
  if (c && c->err) {
    redisFree(c);
    return NULL;
  }
  if (c) redisSetTimeout(c, tv);
  return c;
}

/* One command on host:port; NULL when it cannot connect or gets no reply. */
static redisReply *cmd_at(const char *host, int port, const char *fmt, ...) {
  redisContext *c = connect_addr(host, port);
  if (!c) return NULL;
  va_list ap;
  va_start(ap, fmt);
  redisReply *r = redisvCommand(c, fmt, ap);
  va_end(ap);
  redisFree(c);
  return r;
}

typedef struct addr {
  char host[64];
  int port;
} addr;

/* ROLE: 1 master, 0 replica with its link up, -1 otherwise (or no answer). */
static int role(const addr *a) {
  redisReply *r = cmd_at(a->host, a->port, "ROLE");
  int v = -1;
  if (r && r->type == REDIS_REPLY_ARRAY && r->elements > 0 &&
      r->element[0]->type == REDIS_REPLY_STRING) {
    if (strcmp(r->element[0]->str, "master") == 0) v = 1;
    else if (r->elements > 3 && r->element[3]->type == REDIS_REPLY_STRING &&
             strcmp(r->element[3]->str, "connected") == 0)
      v = 0;
  }
  if (r) freeReplyObject(r);
  return v;
}

static pid_t server_pid(const addr *a) {
  redisReply *r = cmd_at(a->host, a->port, "INFO server");
  pid_t pid = 0;
  const char *p = r && r->type == REDIS_REPLY_STRING ? strstr(r->str, "process_id:") : NULL;
  if (p) pid = (pid_t)atol(p + 11);
  if (r) freeReplyObject(r);
  return pid;
}

/* Poll until role(a) == want; 0, or -1 after timeout_ms. */
static int wait_role(const addr *a, int want, unsigned timeout_ms) {
  uint64_t end = bench_now_us() + timeout_ms * 1000ull;
  while (bench_now_us() < end) {
    if (role(a) == want) return 0;
    sleep_ms(10);
  }
  return -1;
}

/* The first "host:port" of s (a comma ends it). */
static int parse_addr(const char *s, addr *a) {
  size_t len = strcspn(s, ",");
  const char *colon = memchr(s, ':', len);
  if (!colon || (size_t)(colon - s) >= sizeof a->host) return -1;
  snprintf(a->host, sizeof a->host, "%.*s", (int)(colon - s), s);
  a->port = atoi(colon + 1);
  return 0;
}

/* Every node of the list answers cluster_state:ok (a stopped one is skipped
 * by the caller not listing it: here all are expected up). */
static int cluster_all_ok(const char *seeds) {
  char list[512];
  snprintf(list, sizeof list, "%s", seeds);
  for (char *save = NULL, *s = strtok_r(list, ",", &save); s; s = strtok_r(NULL, ",", &save)) {
    addr a;
    if (parse_addr(s, &a) != 0) return 0;
    redisReply *r = cmd_at(a.host, a.port, "CLUSTER INFO");
    int ok = r && r->type == REDIS_REPLY_STRING && strstr(r->str, "cluster_state:ok");
    if (r) freeReplyObject(r);
    if (!ok) return 0;
  }
  return 1;
}

/* "ip:port@bus" of a CLUSTER NODES line into a. */
static int node_addr(const char *field, addr *a) {
  char buf[96];
  snprintf(buf, sizeof buf, "%.*s", (int)strcspn(field, "@ "), field);
  return parse_addr(buf, a);
}

/* Whether a master line's slot ranges (fields 9 on) hold slot. */
static int owns_slot(char **f, int nf, long slot) {
  for (int i = 8; i < nf; i++) {
    if (f[i][0] == '[') continue; /* a slot being migrated */
    char *dash = strchr(f[i], '-');
    long lo = atol(f[i]), hi = dash ? atol(dash + 1) : lo;
    if (slot >= lo && slot <= hi) return 1;
  }
  return 0;
}

/* The master of NAME's slot and a replica of it, from CLUSTER NODES on a
 * seed (CLUSTER SLOTS leaves out replicas that have not replicated a byte
 * yet). */
static int cluster_pair(const char *seeds, addr *master, addr *replica) {
  addr seed;
  if (parse_addr(seeds, &seed) != 0) return -1;
  redisReply *k = cmd_at(seed.host, seed.port, "CLUSTER KEYSLOT %s", FO_SLOT_NAME);
  long slot = k && k->type == REDIS_REPLY_INTEGER ? (long)k->integer : -1;
  if (k) freeReplyObject(k);
  redisReply *r = slot >= 0 ? cmd_at(seed.host, seed.port, "CLUSTER NODES") : NULL;
  if (!r || r->type != REDIS_REPLY_STRING) {
    if (r) freeReplyObject(r);
    return -1;
  }
  char master_id[48] = "";
  int found = 0;
  for (int pass = 0; pass < 2; pass++) {
    char *text = strdup(r->str);
    for (char *save = NULL, *line = strtok_r(text, "\n", &save); line;
         line = strtok_r(NULL, "\n", &save)) {
      char *f[64];
      int nf = 0;
      for (char *s2 = NULL, *w = strtok_r(line, " ", &s2); w && nf < 64;
           w = strtok_r(NULL, " ", &s2))
        f[nf++] = w;
      if (nf < 8 || strstr(f[2], "fail")) continue;
      if (pass == 0 && strstr(f[2], "master") && owns_slot(f, nf, slot)) {
        snprintf(master_id, sizeof master_id, "%s", f[0]);
        found |= node_addr(f[1], master) == 0;
      } else if (pass == 1 && strstr(f[2], "slave") && strcmp(f[3], master_id) == 0) {
        found |= (node_addr(f[1], replica) == 0) << 1;
      }
    }
    free(text);
  }
  freeReplyObject(r);
  return found == 3 ? 0 : -1;
}

static int sentinel_pair(const char *sentinels, addr *master, addr *replica) {
  char list[256];
  snprintf(list, sizeof list, "%s", sentinels);
  for (char *save = NULL, *s = strtok_r(list, ",", &save); s; s = strtok_r(NULL, ",", &save)) {
    addr sa;
    if (parse_addr(s, &sa) != 0) continue;
    redisReply *r = cmd_at(sa.host, sa.port, "SENTINEL get-master-addr-by-name %s", FO_MASTER_NAME);
    int ok = r && r->type == REDIS_REPLY_ARRAY && r->elements == 2;
    if (ok) {
      snprintf(master->host, sizeof master->host, "%s", r->element[0]->str);
      master->port = atoi(r->element[1]->str);
    }
    if (r) freeReplyObject(r);
    if (!ok) continue;
    r = cmd_at(sa.host, sa.port, "SENTINEL replicas %s", FO_MASTER_NAME);
    ok = 0;
    for (size_t i = 0; r && r->type == REDIS_REPLY_ARRAY && i < r->elements && !ok; i++) {
      redisReply *e = r->element[i];
      for (size_t j = 0; j + 1 < e->elements; j += 2) {
        if (strcmp(e->element[j]->str, "ip") == 0)
          snprintf(replica->host, sizeof replica->host, "%s", e->element[j + 1]->str);
        if (strcmp(e->element[j]->str, "port") == 0) replica->port = atoi(e->element[j + 1]->str);
      }
      ok = replica->port > 0;
    }
    if (r) freeReplyObject(r);
    return ok ? 0 : -1;
  }
  return -1;
}

/* SENTINEL FAILOVER, asked again while a sentinel answers -INPROG or
 * -NOGOODSLAVE (its view of the replica still refreshing). */
static int sentinel_failover(const char *sentinels) {
  addr sa;
  if (parse_addr(sentinels, &sa) != 0) return -1;
  uint64_t end = bench_now_us() + 15000000ull;
  while (bench_now_us() < end) {
    redisReply *r = cmd_at(sa.host, sa.port, "SENTINEL FAILOVER %s", FO_MASTER_NAME);
    int ok = r && r->type == REDIS_REPLY_STATUS;
    if (r) freeReplyObject(r);
    if (ok) return 0;
    sleep_ms(200);
  }
  return -1;
}

/* The directory a server runs in (CONFIG GET dir): where topology.sh
 * keeps how to start it again. */
static int server_dir(const addr *a, char *dir, size_t size) {
  redisReply *r = cmd_at(a->host, a->port, "CONFIG GET dir");
  int ok = r && r->type == REDIS_REPLY_ARRAY && r->elements == 2 &&
           r->element[1]->type == REDIS_REPLY_STRING;
  if (ok) snprintf(dir, size, "%s", r->element[1]->str);
  if (r) freeReplyObject(r);
  return ok ? 0 : -1;
}

/* bench/topology.sh restart DIR: the killed server runs again as it was
 * started (a cluster node with its nodes.conf, the single Redis with its
 * AOF files); returns once it answers PING. */
static int restart_server(const char *dir) {
  char cmd[600];
  snprintf(cmd, sizeof cmd, "'%s' restart '%s'", bench_topology_script(), dir);
  return system(cmd) == 0 ? 0 : -1;
}

static int is_sentinel(enum fo_kind k) {
  return k >= FO_SENTINEL_MANUAL && k <= FO_SENTINEL_SIGKILL;
}
static int is_sigstop(enum fo_kind k) {
  return k == FO_CLUSTER_SIGSTOP || k == FO_SENTINEL_SIGSTOP;
}
static int is_single(enum fo_kind k) { return k == FO_SINGLE_RESTART || k == FO_SINGLE_EMPTY; }
static int is_sigkill(enum fo_kind k) {
  return k == FO_CLUSTER_SIGKILL || k == FO_SENTINEL_SIGKILL || is_single(k);
}

/* The single Redis: killed -9, started again on its files (none without
 * persistence: it comes back empty); done when it answers PING (it has
 * loaded its AOF by then). */
static int single_restart(enum fo_kind k, const char *spec, FILE *out) {
  addr m;
  char dir[400];
  if (parse_addr(spec, &m) != 0 || server_dir(&m, dir, sizeof dir) != 0) return -1;
  pid_t pid = server_pid(&m);
  if (pid <= 0) return -1;
  uint64_t trigger = bench_now_us();
  fprintf(out, "start %d %llu\n", (int)k, (unsigned long long)trigger);
  fflush(out);
  kill(pid, SIGKILL);
  int rc = restart_server(dir);
  uint64_t done = bench_now_us();
  if (rc != 0) return -1;
  fprintf(out, "end %d %llu %llu\n", (int)k, (unsigned long long)trigger, (unsigned long long)done);
  fflush(out);
  sleep_ms(SETTLE_MS);
  return 0;
}

/* Act: a manual failover, or the master stopped or killed. */
static int act(enum fo_kind k, const char *spec, const addr *r, pid_t pid) {
  if (k == FO_CLUSTER_MANUAL) {
    redisReply *x = cmd_at(r->host, r->port, "CLUSTER FAILOVER");
    int rc = x && x->type == REDIS_REPLY_STATUS ? 0 : -1;
    if (x) freeReplyObject(x);
    return rc;
  }
  if (k == FO_SENTINEL_MANUAL) return sentinel_failover(spec);
  return pid > 0 ? kill(pid, is_sigstop(k) ? SIGSTOP : SIGKILL) : -1;
}

/* One failover of kind k. After it, the old master is a linked replica
 * again and the topology quiet. */
static int drive_one(enum fo_kind k, const char *spec, FILE *out) {
  addr m, r;
  char dir[400] = "";
  if (is_single(k)) return single_restart(k, spec, out);
  if ((is_sentinel(k) ? sentinel_pair(spec, &m, &r) : cluster_pair(spec, &m, &r)) != 0) {
    fprintf(stderr, "bench_failover: no master/replica pair found\n");
    return -1;
  }
  pid_t pid = is_sigstop(k) || is_sigkill(k) ? server_pid(&m) : 0;
  if (is_sigkill(k) && server_dir(&m, dir, sizeof dir) != 0) return -1;
  uint64_t trigger = bench_now_us();
  fprintf(out, "start %d %llu\n", (int)k, (unsigned long long)trigger);
  fflush(out);
  int rc = act(k, spec, &r, pid);
  if (rc == 0) rc = wait_role(&r, 1, 60000);
  uint64_t done = bench_now_us();
  if (rc == 0) {
    fprintf(out, "up %d %llu\n", (int)k, (unsigned long long)done);
    fflush(out);
  }
  if (is_sigstop(k) && pid > 0) kill(pid, SIGCONT); /* at once: it answers what it had queued */
  if (rc == 0 && is_sigkill(k)) rc = restart_server(dir);
  if (rc != 0) {
    fprintf(stderr, "bench_failover: %s: no new master\n", fo_kind_names[k]);
    return -1;
  }
  fprintf(out, "end %d %llu %llu\n", (int)k, (unsigned long long)trigger, (unsigned long long)done);
  fflush(out);
  /* The old master back as a linked replica, the cluster ok everywhere. */
  if (wait_role(&m, 0, 60000) != 0) {
    fprintf(stderr, "bench_failover: %s: old master did not rejoin as a replica\n",
            fo_kind_names[k]);
    return -1;
  }
  for (int i = 0; !is_sentinel(k) && i < 3000 && !cluster_all_ok(spec); i++) sleep_ms(10);
  /* Sentinels refresh their view of the new replica every second: a
   * failover asked before that finds no good replica. */
  sleep_ms(is_sentinel(k) ? SETTLE_MS + 2000 : SETTLE_MS);
  /* A step caught on a stopped node may need an acquire's timeout (10 s)
   * to end: rounds stay apart. */
  if (pid > 0) sleep_ms(10000);
  return 0;
}

void fo_driver(int go_fd, int out_fd, const char *spec, enum fo_kind first, enum fo_kind last,
               int rounds) {
  if (bench_can_pin()) bench_pin_self(BENCH_CPU_SERVER);
  char b;
  /* The servers it restarts must not hold the pipe open: its end is the
   * benchmark's signal that the driver is done. */
  fcntl(out_fd, F_SETFD, FD_CLOEXEC);
  fcntl(go_fd, F_SETFD, FD_CLOEXEC);
  while (read(go_fd, &b, 1) < 0 && errno == EINTR) {}
  FILE *out = fdopen(out_fd, "w");
  int rc = 0;
  for (int k = first; k <= (int)last && rc == 0; k++)
    for (int i = 0; i < rounds && rc == 0; i++) rc = drive_one((enum fo_kind)k, spec, out);
  fclose(out);
  _exit(rc == 0 ? 0 : 1);
}

/* ---- the topology under test --------------------------------------------- */

static char topo_dir[160];

void fo_topology_stop(void) {
  if (!topo_dir[0]) return;
  char cmd[400];
  snprintf(cmd, sizeof cmd, "'%s' stop '%s'", bench_topology_script(), topo_dir);
  if (system(cmd) != 0) fprintf(stderr, "could not stop %s\n", topo_dir);
  topo_dir[0] = '\0';
}

static void on_signal(int sig) {
  fo_topology_stop();
  signal(sig, SIG_DFL);
  raise(sig);
}

int fo_topology_start(const char *tag, const char *args_fmt, char *spec, size_t cap) {
  static const int sigs[] = {SIGINT, SIGTERM, SIGSEGV, SIGABRT};
  for (size_t i = 0; i < sizeof sigs / sizeof sigs[0]; i++) signal(sigs[i], on_signal);
  const char *tmp = getenv("TMPDIR");
  snprintf(topo_dir, sizeof topo_dir, "%s/sluice-bench-%s-XXXXXX", tmp && *tmp ? tmp : "/tmp", tag);
  if (!mkdtemp(topo_dir)) return -1;
  char args[256], cmd[512];
  snprintf(args, sizeof args, args_fmt, topo_dir);
  snprintf(cmd, sizeof cmd, "'%s' %s", bench_topology_script(), args);
  FILE *p = popen(cmd, "r");
  int got = p && fgets(spec, (int)cap, p) != NULL;
  if (p && pclose(p) != 0) got = 0;
  if (!got) {
    fprintf(stderr, "bench/topology.sh %s failed\n", args);
    return -1;
  }
  spec[strcspn(spec, "\n")] = '\0';
  return 0;
}
