/*
 * Shared benchmark helpers: a private, pinned redis-server; redis-benchmark
 * runs parsed from --csv; SCRIPT LOAD of the embedded scripts; a latency
 * recorder; a table printer. See bench.h.
 */
#include "bench.h"

#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <hiredis/hiredis.h>

#ifndef BENCH_NODE_DIR
#define BENCH_NODE_DIR "bench/node"
#endif

/* ---- CPUs and pinning ---------------------------------------------------- */

/* The CPUs this process could use at start-up, before anyone pinned it:
 * "CPU 0" and "CPU 1" below are the first two of these. */
static int allowed_cpus[CPU_SETSIZE];
static int n_allowed;

__attribute__((constructor)) static void snapshot_affinity(void) {
  cpu_set_t set;
  n_allowed = 0;
  if (sched_getaffinity(0, sizeof set, &set) != 0) return;
  for (int c = 0; c < CPU_SETSIZE; c++)
    if (CPU_ISSET(c, &set)) allowed_cpus[n_allowed++] = c;
}

int bench_ncpus(void) { return n_allowed > 0 ? n_allowed : 1; }

int bench_can_pin(void) { return bench_ncpus() >= 2; }

int bench_pin_self(int cpu) {
  if (!bench_can_pin() || cpu < 0 || cpu >= n_allowed) {
    errno = EINVAL;
    return -1;
  }
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(allowed_cpus[cpu], &set);
  return sched_setaffinity(0, sizeof set, &set);
}

/* In a forked child before exec: the same as "taskset -c <cpu>". */
static void pin_child(int cpu) {
  if (bench_can_pin()) (void)bench_pin_self(cpu);
}

uint64_t bench_now_us(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000u + (uint64_t)ts.tv_nsec / 1000u;
}

int bench_replay_off(void) {
  const char *v = getenv("SLUICE_BENCH_REPLAY_OFF");
  return v && *v == '1';
}

void bench_replica_ack(sluice_client *c) {
  const char *v = getenv("SLUICE_BENCH_REPLICA_ACK_OFF");
  if (v && *v == '1') (void)sluice_client_set_replica_ack(c, 0);
}

/* ---- CPU time ------------------------------------------------------------ */

static uint64_t rusage_us(int who) {
  struct rusage ru;
  if (getrusage(who, &ru) != 0) return 0;
  return (uint64_t)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) * 1000000u +
         (uint64_t)(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec);
}

static uint64_t rusage_sleeps(int who) {
  struct rusage ru;
  return getrusage(who, &ru) == 0 ? (uint64_t)ru.ru_nvcsw : 0;
}

bench_cpu bench_cpu_start(void) {
  bench_cpu c = {rusage_us(RUSAGE_SELF), rusage_us(RUSAGE_CHILDREN), rusage_sleeps(RUSAGE_SELF),
                 rusage_sleeps(RUSAGE_CHILDREN)};
  return c;
}

static double per_sleep(uint64_t sleeps, long ops) {
  return sleeps ? (double)ops / (double)sleeps : 0;
}

double bench_cpu_ops_per_sleep(const bench_cpu *start, long ops) {
  return per_sleep(rusage_sleeps(RUSAGE_SELF) - start->self_sleeps, ops);
}

double bench_cpu_children_ops_per_sleep(const bench_cpu *start, long ops) {
  return per_sleep(rusage_sleeps(RUSAGE_CHILDREN) - start->children_sleeps, ops);
}

double bench_cpu_us_per_op(const bench_cpu *start, long ops) {
  return ops > 0 ? (double)(rusage_us(RUSAGE_SELF) - start->self_us) / (double)ops : 0;
}

double bench_cpu_children_us_per_op(const bench_cpu *start, long ops) {
  return ops > 0 ? (double)(rusage_us(RUSAGE_CHILDREN) - start->children_us) / (double)ops : 0;
}

static void sleep_ms(unsigned ms) {
  struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
  while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {}
}

/* Full path of an executable on PATH, into buf; NULL if absent. */
static const char *find_in_path(const char *name, char *buf, size_t cap) {
  const char *path = getenv("PATH");
  if (!path || !*path) path = "/usr/local/bin:/usr/bin:/bin";
  while (*path) {
    size_t n = strcspn(path, ":");
    if (n > 0 && (size_t)snprintf(buf, cap, "%.*s/%s", (int)n, path, name) < cap &&
        access(buf, X_OK) == 0)
      return buf;
    path += n;
    if (*path == ':') path++;
  }
  return NULL;
}

/* ---- redis-server -------------------------------------------------------- */

static int free_tcp_port(void) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return -1;
  struct sockaddr_in sa;
  memset(&sa, 0, sizeof sa);
  sa.sin_family = AF_INET;
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof sa;
  int port = -1;
  if (bind(fd, (struct sockaddr *)&sa, sizeof sa) == 0 &&
      getsockname(fd, (struct sockaddr *)&sa, &len) == 0)
    port = ntohs(sa.sin_port);
  close(fd);
  return port;
}

static redisContext *connect_to(const bench_redis *r) {
  struct timeval tv = {2, 0};
  redisContext *c = redisConnectWithTimeout(r->host, r->port, tv);
  if (c && c->err) {
    redisFree(c);
    return NULL;
  }
  return c;
}

static int ping(const bench_redis *r) {
  redisContext *c = connect_to(r);
  if (!c) return -1;
  redisReply *rep = redisCommand(c, "PING");
  int ok = rep && rep->type == REDIS_REPLY_STATUS && strcmp(rep->str, "PONG") == 0;
  if (rep) freeReplyObject(rep);
  redisFree(c);
  return ok ? 0 : -1;
}

static void set_url(bench_redis *r) {
  snprintf(r->url, sizeof r->url, "redis://%s:%d", r->host, r->port);
}

static int attach_shared(bench_redis *r, const char *spec) {
  const char *colon = strrchr(spec, ':');
  if (!colon || colon == spec || (size_t)(colon - spec) >= sizeof r->host) {
    fprintf(stderr, "bench: SLUICE_BENCH_REDIS must be host:port, not '%s'\n", spec);
    return -1;
  }
  memcpy(r->host, spec, (size_t)(colon - spec));
  r->host[colon - spec] = '\0';
  r->port = atoi(colon + 1);
  set_url(r);
  if (ping(r) != 0) {
    fprintf(stderr, "bench: no Redis answering at %s\n", spec);
    return -1;
  }
  return 0;
}

static pid_t spawn_server(const char *bin, bench_redis *r) {
  char port[16];
  snprintf(port, sizeof port, "%d", r->port);
  const char *argv[] = {bin,  "--port",       port,      "--bind",    "127.0.0.1", "--save",
                        "",   "--appendonly", "no",      "--dir",     r->dir,      "--daemonize",
                        "no", "--loglevel",   "warning", "--logfile", "redis.log", NULL};
  pid_t pid = fork();
  if (pid != 0) return pid;
  setpgid(0, 0);
  /* Never hold the caller's stdout/stderr: a pipe reader would wait on us. */
  int devnull = open("/dev/null", O_RDWR);
  if (devnull >= 0) {
    dup2(devnull, 0);
    dup2(devnull, 1);
    dup2(devnull, 2);
  }
  pin_child(BENCH_CPU_SERVER);
  execv(bin, (char *const *)argv);
  _exit(127);
}

/* Wait for PING; 0 when up, -1 if the server exited or 5 s passed. */
static int wait_up(bench_redis *r) {
  for (int i = 0; i < 500; i++) {
    if (waitpid(r->pid, NULL, WNOHANG) == r->pid) {
      r->pid = 0;
      return -1;
    }
    if (ping(r) == 0) return 0;
    sleep_ms(10);
  }
  return -1;
}

int bench_redis_start(bench_redis *r) {
  memset(r, 0, sizeof *r);
  const char *shared = getenv("SLUICE_BENCH_REDIS");
  if (shared && *shared) return attach_shared(r, shared);

  char bin[512];
  if (!find_in_path("redis-server", bin, sizeof bin)) {
    fprintf(stderr, "bench: redis-server not found on PATH\n");
    return -1;
  }
  const char *tmp = getenv("TMPDIR");
  snprintf(r->dir, sizeof r->dir, "%s/sluice-bench-XXXXXX", tmp && *tmp ? tmp : "/tmp");
  if (!mkdtemp(r->dir)) {
    fprintf(stderr, "bench: mkdtemp: %s\n", strerror(errno));
    return -1;
  }
  snprintf(r->host, sizeof r->host, "127.0.0.1");
  /* The port is free when we look; another process may take it before the
   * server binds, so try a few. */
  for (int attempt = 0; attempt < 5; attempt++) {
    r->port = free_tcp_port();
    if (r->port <= 0) break;
    set_url(r);
    r->pid = spawn_server(bin, r);
    if (r->pid < 0) break;
    if (wait_up(r) == 0) return 0;
    if (r->pid > 0) {
      kill(r->pid, SIGKILL);
      waitpid(r->pid, NULL, 0);
      r->pid = 0;
    }
  }
  fprintf(stderr, "bench: could not start redis-server (see %s/redis.log)\n", r->dir);
  return -1;
}

void bench_redis_stop(bench_redis *r) {
  if (r->pid > 0) {
    kill(r->pid, SIGTERM);
    int done = 0;
    for (int i = 0; i < 300 && !done; i++) {
      if (waitpid(r->pid, NULL, WNOHANG) == r->pid) done = 1;
      else sleep_ms(10);
    }
    if (!done) {
      kill(r->pid, SIGKILL);
      waitpid(r->pid, NULL, 0);
    }
    r->pid = 0;
  }
  if (r->dir[0]) {
    char path[200];
    snprintf(path, sizeof path, "%s/redis.log", r->dir);
    unlink(path);
    rmdir(r->dir);
    r->dir[0] = '\0';
  }
}

int bench_redis_flush(const bench_redis *r) {
  redisContext *c = connect_to(r);
  if (!c) return -1;
  redisReply *rep = redisCommand(c, "FLUSHALL");
  int ok = rep && rep->type == REDIS_REPLY_STATUS;
  if (rep) freeReplyObject(rep);
  redisFree(c);
  return ok ? 0 : -1;
}

int bench_script_load(const bench_redis *r, const sluice__script *script, char sha[41]) {
  redisContext *c = connect_to(r);
  if (!c) {
    fprintf(stderr, "bench: cannot connect to %s\n", r->url);
    return -1;
  }
  redisReply *rep = redisCommand(c, "SCRIPT LOAD %b", script->body, script->len);
  int rc = -1;
  if (!rep || rep->type != REDIS_REPLY_STRING) {
    fprintf(stderr, "bench: SCRIPT LOAD %s failed: %s\n", script->name,
            rep && rep->type == REDIS_REPLY_ERROR ? rep->str : c->errstr);
  } else if (strcmp(rep->str, script->sha) != 0) {
    fprintf(stderr, "bench: SCRIPT LOAD %s: server SHA %s, built-in %s\n", script->name, rep->str,
            script->sha);
  } else {
    memcpy(sha, rep->str, 41);
    rc = 0;
  }
  if (rep) freeReplyObject(rep);
  redisFree(c);
  return rc;
}

/* ---- redis-benchmark ----------------------------------------------------- */

int bench_have_redis_benchmark(void) {
  char buf[512];
  return find_in_path("redis-benchmark", buf, sizeof buf) != NULL;
}

/* Read everything from fd into a NUL-terminated malloc'd buffer. */
static char *slurp(int fd) {
  size_t len = 0, cap = 4096;
  char *buf = malloc(cap);
  if (!buf) return NULL;
  for (;;) {
    if (cap - len < 1024) {
      char *nb = realloc(buf, cap * 2);
      if (!nb) break;
      buf = nb;
      cap *= 2;
    }
    ssize_t n = read(fd, buf + len, cap - len - 1);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    len += (size_t)n;
  }
  buf[len] = '\0';
  return buf;
}

/* Parse the data line of redis-benchmark --csv:
 * "name","rps","avg","min","p50","p95","p99","max" */
static int parse_csv(const char *text, bench_rb_result *out) {
  const char *line = text, *found = NULL;
  while (line && *line) {
    if (line[0] == '"' && strncmp(line, "\"test\"", 6) != 0) found = line;
    line = strchr(line, '\n');
    if (line) line++;
  }
  if (!found) return -1;
  double v[7];
  int nv = 0;
  const char *p = strstr(found + 1, "\",\""); /* end of the (quoted) name */
  while (p && nv < 7) {
    p += 3;
    v[nv++] = strtod(p, NULL);
    p = strstr(p, "\",\"");
  }
  if (nv < 7) return -1;
  out->rps = v[0];
  out->avg_ms = v[1];
  out->p50_ms = v[3];
  out->p99_ms = v[5];
  out->max_ms = v[6];
  return 0;
}

int bench_redis_benchmark(const bench_redis *r, const bench_rb_opts *opts, int argc,
                          const char *const *argv, bench_rb_result *out) {
  char bin[512];
  if (!find_in_path("redis-benchmark", bin, sizeof bin)) {
    fprintf(stderr, "bench: redis-benchmark not found on PATH\n");
    return -1;
  }
  char port[16], c[16], n[16], p[16], k[16];
  snprintf(port, sizeof port, "%d", r->port);
  snprintf(c, sizeof c, "%d", opts && opts->clients > 0 ? opts->clients : 50);
  snprintf(n, sizeof n, "%d", opts && opts->requests > 0 ? opts->requests : 100000);
  snprintf(p, sizeof p, "%d", opts && opts->pipeline > 0 ? opts->pipeline : 1);
  const char **av = calloc((size_t)argc + 20, sizeof *av);
  if (!av) return -1;
  int i = 0;
  av[i++] = bin;
  av[i++] = "-h";
  av[i++] = r->host;
  av[i++] = "-p";
  av[i++] = port;
  av[i++] = "-c";
  av[i++] = c;
  av[i++] = "-n";
  av[i++] = n;
  av[i++] = "-P";
  av[i++] = p;
  if (opts && opts->keyspace > 0) {
    snprintf(k, sizeof k, "%d", opts->keyspace);
    av[i++] = "-r";
    av[i++] = k;
  }
  if (opts && opts->cluster) {
    /* One thread, like the standalone runs: with its default of a thread
     * per node it notices the end only every few hundred ms, which rounds
     * a short run's time up (a 0.2 s run reported as 0.5 s). */
    av[i++] = "--cluster";
    av[i++] = "--threads";
    av[i++] = "1";
  }
  av[i++] = "--csv";
  for (int a = 0; a < argc; a++) av[i++] = argv[a];
  av[i] = NULL;

  int fds[2];
  if (pipe(fds) != 0) {
    free(av);
    return -1;
  }
  fflush(NULL);
  pid_t pid = fork();
  if (pid == 0) {
    close(fds[0]);
    dup2(fds[1], 1);
    dup2(fds[1], 2);
    close(fds[1]);
    pin_child(BENCH_CPU_CLIENT);
    execv(bin, (char *const *)av);
    _exit(127);
  }
  free(av);
  close(fds[1]);
  if (pid < 0) {
    close(fds[0]);
    return -1;
  }
  char *text = slurp(fds[0]);
  close(fds[0]);
  int st = 0;
  while (waitpid(pid, &st, 0) < 0 && errno == EINTR) {}
  int rc = -1;
  if (text && WIFEXITED(st) && WEXITSTATUS(st) == 0 && parse_csv(text, out) == 0) rc = 0;
  if (rc != 0) fprintf(stderr, "bench: redis-benchmark failed:\n%s\n", text ? text : "");
  free(text);
  return rc;
}

int bench_evalsha(const bench_redis *r, const bench_rb_opts *opts, const char *sha, int numkeys,
                  int nargs, const char *const *keys_and_args, bench_rb_result *out) {
  const char **av = calloc((size_t)nargs + 3, sizeof *av);
  if (!av) return -1;
  char nk[16];
  snprintf(nk, sizeof nk, "%d", numkeys);
  av[0] = "EVALSHA";
  av[1] = sha;
  av[2] = nk;
  for (int i = 0; i < nargs; i++) av[3 + i] = keys_and_args[i];
  int rc = bench_redis_benchmark(r, opts, nargs + 3, av, out);
  free(av);
  return rc;
}

/* ---- latency recorder ---------------------------------------------------- */

struct bench_lat {
  double *v;
  size_t n, cap;
  int sorted;
};

bench_lat *bench_lat_new(void) { return calloc(1, sizeof(bench_lat)); }

void bench_lat_free(bench_lat *l) {
  if (!l) return;
  free(l->v);
  free(l);
}

int bench_lat_add(bench_lat *l, double us) {
  if (l->n == l->cap) {
    size_t cap = l->cap ? l->cap * 2 : 1024;
    double *nv = realloc(l->v, cap * sizeof *nv);
    if (!nv) return -1;
    l->v = nv;
    l->cap = cap;
  }
  l->v[l->n++] = us;
  l->sorted = 0;
  return 0;
}

size_t bench_lat_count(const bench_lat *l) { return l->n; }

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

static void lat_sort(bench_lat *l) {
  if (!l->sorted) qsort(l->v, l->n, sizeof *l->v, cmp_double);
  l->sorted = 1;
}

double bench_lat_pct(bench_lat *l, double p) {
  if (l->n == 0) return 0;
  lat_sort(l);
  if (p <= 0) return l->v[0];
  if (p >= 100) return l->v[l->n - 1];
  /* nearest rank: the smallest sample with at least p% at or below it */
  size_t rank = (size_t)((p / 100.0) * (double)l->n + 0.999999);
  if (rank < 1) rank = 1;
  if (rank > l->n) rank = l->n;
  return l->v[rank - 1];
}

double bench_lat_max(bench_lat *l) { return bench_lat_pct(l, 100); }

double bench_lat_mean(const bench_lat *l) {
  if (l->n == 0) return 0;
  double s = 0;
  for (size_t i = 0; i < l->n; i++) s += l->v[i];
  return s / (double)l->n;
}

void bench_lat_reset(bench_lat *l) {
  l->n = 0;
  l->sorted = 0;
}

/* ---- table printer ------------------------------------------------------- */

#define BENCH_TABLE_MAX_COLS 16

struct bench_table {
  char *title;
  int ncols;
  char *head[BENCH_TABLE_MAX_COLS];
  char **cells; /* nrows * ncols */
  size_t nrows, cap;
};

bench_table *bench_table_new(const char *title, const char *const *cols) {
  bench_table *t = calloc(1, sizeof *t);
  if (!t) return NULL;
  t->title = strdup(title ? title : "");
  while (cols[t->ncols] && t->ncols < BENCH_TABLE_MAX_COLS) {
    t->head[t->ncols] = strdup(cols[t->ncols]);
    t->ncols++;
  }
  return t;
}

void bench_table_row(bench_table *t, const char *fmt, ...) {
  if (!t) return;
  char line[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(line, sizeof line, fmt, ap);
  va_end(ap);
  if (t->nrows == t->cap) {
    size_t cap = t->cap ? t->cap * 2 : 8;
    char **nc = realloc(t->cells, cap * (size_t)t->ncols * sizeof *nc);
    if (!nc) return;
    t->cells = nc;
    t->cap = cap;
  }
  char **row = t->cells + t->nrows * (size_t)t->ncols;
  char *p = line;
  for (int c = 0; c < t->ncols; c++) {
    char *bar = p ? strchr(p, '|') : NULL;
    if (bar) *bar = '\0';
    row[c] = strdup(p ? p : "");
    p = bar ? bar + 1 : NULL;
  }
  t->nrows++;
}

/* SLUICE_BENCH_TSV=FILE: every printed table is also appended to FILE as
 * "# title", a tab-separated header and rows, and a blank line, for
 * bench/charts.sh; the printed table does not change. */
static void table_append_tsv(const bench_table *t) {
  const char *path = getenv("SLUICE_BENCH_TSV");
  FILE *f = path && *path ? fopen(path, "a") : NULL;
  if (!f) return;
  fprintf(f, "# %s\n", t->title ? t->title : "");
  for (int c = 0; c < t->ncols; c++)
    fprintf(f, "%s%s", c ? "\t" : "", t->head[c] ? t->head[c] : "");
  fputc('\n', f);
  for (size_t r = 0; r < t->nrows; r++)
    for (int c = 0; c < t->ncols; c++) {
      const char *s = t->cells[r * (size_t)t->ncols + c];
      fprintf(f, "%s%s", s ? s : "", c + 1 < t->ncols ? "\t" : "\n");
    }
  fputc('\n', f);
  fclose(f);
}

void bench_table_print(const bench_table *t, FILE *out) {
  if (!t) return;
  int w[BENCH_TABLE_MAX_COLS];
  for (int c = 0; c < t->ncols; c++) {
    w[c] = t->head[c] ? (int)strlen(t->head[c]) : 0;
    for (size_t r = 0; r < t->nrows; r++) {
      const char *s = t->cells[r * (size_t)t->ncols + c];
      if (s && (int)strlen(s) > w[c]) w[c] = (int)strlen(s);
    }
  }
  if (t->title && *t->title) fprintf(out, "\n%s\n", t->title);
  for (int c = 0; c < t->ncols; c++)
    fprintf(out, c ? "  %*s" : "%-*s", w[c], t->head[c] ? t->head[c] : "");
  fputc('\n', out);
  for (int c = 0; c < t->ncols; c++) {
    if (c) fputs("  ", out);
    for (int i = 0; i < w[c]; i++) fputc('-', out);
  }
  fputc('\n', out);
  for (size_t r = 0; r < t->nrows; r++) {
    for (int c = 0; c < t->ncols; c++) {
      const char *s = t->cells[r * (size_t)t->ncols + c];
      fprintf(out, c ? "  %*s" : "%-*s", w[c], s ? s : "");
    }
    fputc('\n', out);
  }
  fflush(out);
  table_append_tsv(t);
}

void bench_table_free(bench_table *t) {
  if (!t) return;
  for (size_t i = 0; i < t->nrows * (size_t)t->ncols; i++) free(t->cells[i]);
  free(t->cells);
  for (int c = 0; c < t->ncols; c++) free(t->head[c]);
  free(t->title);
  free(t);
}

/* ---- the private cluster --------------------------------------------------- */

int bench_cluster_attach(bench_cluster *cl) {
  memset(cl, 0, sizeof *cl);
  const char *env = getenv("SLUICE_BENCH_CLUSTER");
  if (!env || !*env) {
    printf("cluster section skipped: SLUICE_BENCH_CLUSTER unset (bench/run.sh starts one)\n");
    return 1;
  }
  snprintf(cl->seeds, sizeof cl->seeds, "%s", env);
  snprintf(cl->url, sizeof cl->url, "redis+cluster://%s", cl->seeds);
  char list[sizeof cl->seeds];
  snprintf(list, sizeof list, "%s", env);
  for (char *save = NULL, *a = strtok_r(list, ",", &save); a && cl->n < BENCH_CLUSTER_MAX;
       a = strtok_r(NULL, ",", &save))
    if (attach_shared(&cl->node[cl->n], a) != 0) return -1;
    else cl->n++;
  return cl->n > 0 ? 0 : -1;
}

int bench_cluster_flush(const bench_cluster *cl) {
  int rc = 0;
  for (int i = 0; i < cl->n; i++) rc |= bench_redis_flush(&cl->node[i]);
  return rc;
}

int bench_cluster_script_load(const bench_cluster *cl, const sluice__script *script, char sha[41]) {
  for (int i = 0; i < cl->n; i++)
    if (bench_script_load(&cl->node[i], script, sha) != 0) return -1;
  return cl->n > 0 ? 0 : -1;
}

/* ---- Node peers ---------------------------------------------------------- */

const char *bench_node_dir(void) { return BENCH_NODE_DIR; }

const char *bench_topology_script(void) { return BENCH_NODE_DIR "/../topology.sh"; }

int bench_node_available(void) {
  char buf[512];
  return find_in_path("node", buf, sizeof buf) != NULL &&
         access(BENCH_NODE_DIR "/node_modules", F_OK) == 0;
}
