/*
 * `sluice top [NAME...]`: a live view of semaphores (holders, waiters),
 * delay queues (counts by state, oldest due message) and limiter keys,
 * redrawn every --interval ms with plain ANSI escapes (home, clear), or
 * printed once without any escape code (--once, for scripts).
 *
 * Objects are found by sluice_client_scan (one read-only script per SCAN
 * page) unless NAMEs are given; each semaphore and queue is then read with
 * sluice_sem_inspect / sluice_dq_inspect. Given NAMEs, top needs no SCAN
 * right (a tenant confined to its prefix should be denied SCAN, which lists
 * every key name of the server): only the limiter keys, found by SCAN, are
 * then left out. Steps run one after the other:
 * the view is for people, and one step at a time keeps Redis's load tiny.
 * --prometheus collects one frame's semaphores and queues instead and
 * prints them in the Prometheus text format (cli_top_prom.c).
 * --scrape URL adds each application's own counters, fetched over HTTP
 * while Redis is read (cli_top_scrape.c).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <event2/event.h>
#include <sluice/sluice.h>

#include "cli.h"
#include "cli_top.h"
#include "cli_top_scrape.h"

#define TOP_MAX_OBJECTS 200 /* per kind and frame: a view, not an export */
#define TOP_SCHEDULES 10    /* shown under a queue */
/* Per fetch of --scrape: the library's default op_timeout_ms, which the
 * tool's own steps run under. */
#define TOP_SCRAPE_TIMEOUT_MS 5000

typedef struct top {
  cli_ctx ctx;
  int done;
  int status;      /* of the last step */
  FILE *out;       /* the frame being built */
  char **names[2]; /* found semaphores [0] and queues [1] */
  size_t nnames[2];
  uint64_t cursor;
  size_t nrl;         /* limiter keys shown in this frame */
  int which;          /* scanning names: 0 semaphores, 1 queues */
  int named;          /* NAMEs given: skip what does not exist */
  top_prom *prom;     /* --prometheus: the frame's objects go here */
  top_scrape *scrape; /* --scrape: the PROCESSES section */
} top;

static void wait_step(top *t) {
  while (!t->done) event_base_loop(t->ctx.base, EVLOOP_ONCE);
  t->done = 0;
}

static void add_name(top *t, int which, const char *name) {
  for (size_t i = 0; i < t->nnames[which]; i++)
    if (strcmp(t->names[which][i], name) == 0) return; /* SCAN may repeat */
  if (t->nnames[which] >= TOP_MAX_OBJECTS) return;
  char **grown = realloc(t->names[which], (t->nnames[which] + 1) * sizeof *grown);
  char *copy = strdup(name);
  if (!grown || !copy) {
    free(copy);
    if (grown) t->names[which] = grown;
    return;
  }
  t->names[which] = grown;
  t->names[which][t->nnames[which]++] = copy;
}

static void clear_names(top *t) {
  for (int w = 0; w < 2; w++) {
    for (size_t i = 0; i < t->nnames[w]; i++) free(t->names[w][i]);
    free(t->names[w]);
    t->names[w] = NULL;
    t->nnames[w] = 0;
  }
}

void top_fmt_ms(char *buf, size_t size, int64_t ms) {
  if (ms < 0) snprintf(buf, size, "-");
  else if (ms < 10000) snprintf(buf, size, "%lldms", (long long)ms);
  else if (ms < 600000) snprintf(buf, size, "%.1fs", (double)ms / 1000);
  else snprintf(buf, size, "%.1fm", (double)ms / 60000);
}

/* ---- discovery ------------------------------------------------------------ */

static void on_scan_names(sluice_client *c, int status, uint64_t next, const sluice_scan_entry *e,
                          size_t n, void *ud) {
  top *t = ud;
  for (size_t i = 0; i < n; i++) add_name(t, t->which, e[i].name);
  t->cursor = next;
  t->status = status;
  t->done = 1;
}

static void on_scan_rl(sluice_client *c, int status, uint64_t next, const sluice_scan_entry *e,
                       size_t n, void *ud) {
  top *t = ud;
  char ttl[24];
  for (size_t i = 0; i < n && t->nrl < TOP_MAX_OBJECTS; i++, t->nrl++) {
    top_fmt_ms(ttl, sizeof ttl, e[i].ttl_ms);
    fprintf(t->out, "  %-16s %-20s %-16s %-24s %s\n", cli_clean(e[i].name),
            cli_clean(e[i].key ? e[i].key : ""), cli_clean(e[i].algo ? e[i].algo : ""),
            cli_clean(e[i].state ? e[i].state : ""), ttl);
  }
  t->cursor = next;
  t->status = status;
  t->done = 1;
}

/* Every page of one kind; 0 or the failing status. */
static int scan_all(top *t, const char *kind, const char *match, sluice_scan_cb *cb) {
  t->cursor = 0;
  do {
    int rc = sluice_client_scan(t->ctx.client, kind, match, t->cursor, cb, t);
    if (rc) return rc;
    wait_step(t);
    if (t->status) return t->status;
  } while (t->cursor);
  return SLUICE_OK;
}

/* ---- semaphores and queues ------------------------------------------------ */

static void on_sem_info(sluice_sem *sem, int status, const sluice_sem_info *info, void *ud) {
  top *t = ud;
  char left[24];
  t->status = status;
  t->done = 1;
  if (status != SLUICE_OK) {
    fprintf(t->out, "  %-16s error: %s\n", cli_clean(sluice_sem_name(sem)),
            sluice_strerror(status));
    return;
  }
  if (t->named && !info->nholders && !info->nwaiters && !info->last_fence) return;
  if (t->prom) {
    top_prom_sem(t->prom, sluice_sem_name(sem), info);
    return;
  }
  fprintf(t->out, "  %-16s permits %-4u holders %-4zu waiters %-4zu last fence %llu\n",
          cli_clean(sluice_sem_name(sem)), info->permits, info->holders_total, info->nwaiters,
          (unsigned long long)info->last_fence);
  for (size_t i = 0; i < info->nholders; i++) {
    top_fmt_ms(left, sizeof left, info->holders[i].remaining_ms);
    fprintf(t->out, "    holder  %s  lease left %s\n", cli_clean(info->holders[i].id), left);
  }
  for (size_t i = 0; i < info->nwaiters; i++)
    fprintf(t->out, "    waiter  %zu. %s\n", i + 1, cli_clean(info->waiters[i]));
}

/* A queue's repeating schedules, under its line (at most TOP_SCHEDULES). */
static void on_dq_schedules(sluice_dq *dq, int status, int64_t now, size_t total,
                            const sluice_dq_schedule_entry *e, size_t n, void *ud) {
  top *t = ud;
  char in[24];
  t->done = 1; /* the queue's own line stands whatever this says */
  if (status != SLUICE_OK) {
    if (!t->prom) fprintf(t->out, "    schedules error: %s\n", sluice_strerror(status));
    return;
  }
  if (t->prom) {
    top_prom_dq_schedules(t->prom, total, n ? e[0].next_ms - now : -1);
    return;
  }
  for (size_t i = 0; i < n; i++) {
    int late = e[i].next_ms <= now; /* no process runs the queue's schedules */
    top_fmt_ms(in, sizeof in, late ? now - e[i].next_ms : e[i].next_ms - now);
    fprintf(t->out, "    schedule  %s  %s  %s %s%s\n", cli_clean(e[i].name), cli_clean(e[i].spec),
            late ? "next due" : "next in", in, late ? " ago (not running)" : "");
  }
  if (total > n) fprintf(t->out, "    schedule  ... %zu more\n", total - n);
}

static void on_dq_info(sluice_dq *dq, int status, const sluice_dq_info *info,
                       unsigned next_priority, void *ud) {
  top *t = ud;
  char oldest[24];
  t->status = status;
  t->done = 1;
  if (status != SLUICE_OK) {
    fprintf(t->out, "  %-16s error: %s\n", cli_clean(sluice_dq_name(dq)), sluice_strerror(status));
    return;
  }
  /* The earliest message of the delayed set is the oldest due one when
   * any is due: how long the queue has kept work waiting. */
  if (t->named && !info->delayed && !info->in_flight && !info->dead) return;
  if (t->prom) {
    top_prom_dq(t->prom, sluice_dq_name(dq), info, next_priority);
  } else {
    int64_t age = info->ready && info->next_due_ms >= 0 ? info->now_ms - info->next_due_ms : -1;
    top_fmt_ms(oldest, sizeof oldest, age);
    fprintf(t->out, "  %-16s %8llu %10llu %10llu %6llu  %s\n", cli_clean(sluice_dq_name(dq)),
            (unsigned long long)info->ready, (unsigned long long)(info->delayed - info->ready),
            (unsigned long long)info->in_flight, (unsigned long long)info->dead, oldest);
    /* Only when priorities reorder the queue: the default needs no line. */
    if (info->delayed && next_priority)
      fprintf(t->out, "    next message: priority %u\n", next_priority);
  }
  /* A schedule always has its next message queued: a queue with none
   * delayed has no schedule. */
  if (info->delayed && sluice_dq_schedule_list(dq, 0, TOP_SCHEDULES, on_dq_schedules, t) == 0)
    t->done = 0;
}

/* Open a handle on name (set *handle once it exists) and start its inspect. */
typedef int inspect_fn(top *t, const char *name, void **handle);

static int inspect_sem(top *t, const char *name, void **handle) {
  sluice_sem *sem;
  int rc = sluice_sem_new(t->ctx.client, name, NULL, &sem);
  if (rc != SLUICE_OK) return rc;
  *handle = sem;
  return sluice_sem_inspect(sem, on_sem_info, t);
}

static int inspect_dq(top *t, const char *name, void **handle) {
  sluice_dq *dq;
  int rc = sluice_dq_new(t->ctx.client, name, NULL, &dq);
  if (rc != SLUICE_OK) return rc;
  *handle = dq;
  return sluice_dq_inspect_ex(dq, on_dq_info, t);
}

static void free_sem(void *handle) { sluice_sem_free(handle); }
static void free_dq(void *handle) { sluice_dq_free(handle); }

/* One object shown; a name this kind refuses (EINVAL: a NAME given for
 * the other kind) shows nothing. */
static int show(top *t, const char *name, inspect_fn *inspect, void (*release)(void *)) {
  void *handle = NULL;
  int rc = inspect(t, name, &handle);
  if (rc == SLUICE_OK) wait_step(t);
  if (handle) release(handle);
  if (rc == SLUICE_EINVAL) return SLUICE_OK;
  return rc == SLUICE_OK ? t->status : rc;
}

/* The last step failed because the ACL refuses SCAN. */
static int scan_refused(const top *t) {
  return strstr(sluice_client_last_error(t->ctx.client), "'scan'") != NULL;
}

/* ---- one frame ------------------------------------------------------------ */

static int frame(top *t, int argc, char **names, char **text, size_t *len) {
  int rc = SLUICE_OK;
  t->out = open_memstream(text, len);
  if (!t->out) return SLUICE_ENOMEM;
  clear_names(t);
  if (t->scrape) top_scrape_start(t->scrape, TOP_SCRAPE_TIMEOUT_MS);
  if (argc == 0) {
    t->which = 0;
    rc = scan_all(t, "sem", NULL, on_scan_names);
    t->which = 1;
    if (!rc) rc = scan_all(t, "dq", NULL, on_scan_names);
  } else {
    for (int i = 0; i < argc; i++) add_name(t, 0, names[i]), add_name(t, 1, names[i]);
  }
  fprintf(t->out, "SEMAPHORES\n");
  for (size_t i = 0; !rc && i < t->nnames[0]; i++)
    rc = show(t, t->names[0][i], inspect_sem, free_sem);
  fprintf(t->out, "\nQUEUES             due now  due later  in flight   dead  oldest due\n");
  for (size_t i = 0; !rc && i < t->nnames[1]; i++)
    rc = show(t, t->names[1][i], inspect_dq, free_dq);
  fprintf(
      t->out,
      "\nLIMITERS           KEY                  ALGO             STATE                    TTL\n");
  t->nrl = 0;
  if (!rc && argc == 0 && !t->prom) rc = scan_all(t, "rl", NULL, on_scan_rl);
  for (int i = 0; !rc && !t->prom && i < argc; i++) rc = scan_all(t, "rl", names[i], on_scan_rl);
  if (rc == SLUICE_EREDIS && argc > 0 && scan_refused(t)) {
    /* Named objects need no SCAN; limiter keys do (a key is part of each
     * name): a user confined to its prefix may well be denied it. */
    fprintf(t->out, "  (limiter keys are listed by SCAN, which this Redis user may not run)\n");
    rc = SLUICE_OK;
  }
  if (t->scrape) top_scrape_finish(t->scrape, t->out);
  fclose(t->out);
  t->out = NULL;
  return rc;
}

static void usage(FILE *f) {
  fputs(
      "usage: sluice top [NAME...] [--once | --prometheus] [--interval MS] [--scrape URL]...\n"
      "                  [--redis URL] [--prefix P]\n"
      "\n"
      "Show semaphores (holders with lease left, waiters in order), delay queues\n"
      "(due now, due later, in flight, dead, age of the oldest due message) and\n"
      "limiter keys (algorithm and stored state), refreshed every --interval ms\n"
      "(default 1000; Ctrl-C quits). Without NAMEs every object under the prefix\n"
      "is found by SCAN; with NAMEs, the semaphores, queues and limiters so named\n"
      "(a Redis user without SCAN rights sees the semaphores and queues).\n"
      "--once prints one frame without escape codes and exits (69: Redis\n"
      "unreachable or failing).\n"
      "--prometheus prints one frame's semaphores and queues (at most 200 of each;\n"
      "no limiter keys) as Prometheus gauges, then the tool's own client metrics,\n"
      "and exits; on failure it prints nothing to stdout and exits 69.\n"
      "--scrape URL (up to 16, http:// only, no credentials) adds a PROCESSES\n"
      "section: per application, read from the Prometheus text it serves there,\n"
      "its record of unreplicated writes (entries, bytes, oldest, dropped), what\n"
      "it replayed after a failover (releases/pushes/settlements/cancels, permits\n"
      "restored and lost) and its local queues (acquiring, limiter waits, pushes\n"
      "in flight). A URL that fails shows unreachable, timeout (5 s) or bad reply\n"
      "(a reply over 1 MiB is refused) and does not change the exit status.\n"
      "Not with --prometheus: Prometheus scrapes the applications directly.\n",
      f);
}

static void on_tick(evutil_socket_t fd, short what, void *ud) { ((top *)ud)->done = 1; }

/* One frame as Prometheus text on stdout; the exit status. */
static int prometheus_once(top *t, int nnames, char **names) {
  char *text = NULL;
  size_t len = 0;
  t->prom = top_prom_new();
  if (!t->prom) return CLI_EXIT_FAILURE;
  int st = frame(t, nnames, names, &text, &len);
  free(text);
  if (!st) st = top_prom_write(t->prom, t->ctx.client, stdout);
  top_prom_free(t->prom);
  t->prom = NULL;
  if (st) return cli_fail(&t->ctx, st, 0, "reading the objects");
  fflush(stdout);
  return CLI_EXIT_OK;
}

typedef struct top_args {
  int once, prometheus, nnames;
  unsigned interval;
  char **names;
  const char *scrape[TOP_SCRAPE_MAX];
  size_t nscrape;
} top_args;

static int add_scrape(top_args *a, const char *url) {
  if (!url) {
    cli_error("--scrape needs a URL");
    return -1;
  }
  if (a->nscrape == TOP_SCRAPE_MAX) {
    cli_error("--scrape: at most %d URLs", TOP_SCRAPE_MAX);
    return -1;
  }
  if (top_scrape_check_url(url)) return -1;
  a->scrape[a->nscrape++] = url;
  return 0;
}

/* argv into a: 0, 1 when --help was printed, -1 on a usage error. */
static int parse_args(top *t, top_args *a, int argc, char **argv) {
  for (int i = 1; i < argc; i++) {
    int c = cli_common_option(&t->ctx, argc, argv, &i);
    if (c < 0) return -1;
    if (c > 0) continue;
    const char *next = i + 1 < argc ? argv[i + 1] : NULL;
    if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
      usage(stdout);
      return 1;
    } else if (strcmp(argv[i], "--once") == 0) {
      a->once = 1;
    } else if (strcmp(argv[i], "--prometheus") == 0) {
      a->prometheus = 1;
    } else if (strcmp(argv[i], "--interval") == 0) {
      if (cli_number_u("--interval", next, 50, 3600000, "ms", &a->interval)) return -1;
      i++;
    } else if (strcmp(argv[i], "--scrape") == 0) {
      if (add_scrape(a, next)) return -1;
      i++;
    } else if (argv[i][0] == '-') {
      cli_error("unknown option '%s'", cli_echo(argv[i]));
      return -1;
    } else {
      a->names[a->nnames++] = argv[i];
    }
  }
  if (a->prometheus && a->nscrape) {
    cli_error("--scrape is not for --prometheus: let Prometheus scrape the applications");
    return -1;
  }
  return 0;
}

/* Frames until Ctrl-C (or one with --once); the exit status. */
static int run_view(top *t, const top_args *a) {
  struct event *tick = evtimer_new(t->ctx.base, on_tick, t);
  int exit_code = CLI_EXIT_OK, once = a->once;
  for (;;) {
    char *text = NULL, stamp[32];
    size_t len = 0;
    int st = frame(t, a->nnames, a->names, &text, &len);
    time_t now = time(NULL);
    strftime(stamp, sizeof stamp, "%Y-%m-%d %H:%M:%S", localtime(&now));
    /* Live: overwrite in place (home, each line cleared to its end, the
     * rest of the screen cleared) rather than clear-then-draw, which
     * flickers. */
    const char *eol = once ? "\n" : "\033[K\n";
    if (!once) fputs("\033[H", stdout);
    printf("sluice top  %s  prefix %s%s%s%s%s", t->ctx.shown_url,
           t->ctx.prefix ? t->ctx.prefix : "sluice:", once ? "" : "  ", once ? "" : stamp, eol,
           eol);
    for (size_t at = 0; text && at < len;) {
      const char *nl = memchr(text + at, '\n', len - at);
      size_t n = nl ? (size_t)(nl - (text + at)) : len - at;
      fwrite(text + at, 1, n, stdout);
      fputs(eol, stdout);
      at += n + 1;
    }
    free(text);
    if (st) {
      /* The error itself goes to stderr; the view only says it is partial. */
      const char *why = sluice_client_last_error(t->ctx.client);
      printf("%s(incomplete: see the error on stderr)%s", eol, eol);
      cli_error("incomplete view: %s%s%s", sluice_strerror(st), *why ? ": " : "", why);
    }
    if (!once) fputs("\033[J", stdout);
    fflush(stdout);
    if (once) {
      exit_code = st ? CLI_EXIT_UNAVAILABLE : CLI_EXIT_OK;
      break;
    }
    struct timeval tv = {a->interval / 1000, (a->interval % 1000) * 1000};
    evtimer_add(tick, &tv);
    wait_step(t);
  }
  event_free(tick);
  return exit_code;
}

int cli_top_main(int argc, char **argv) {
  top t;
  top_args a;
  memset(&t, 0, sizeof t);
  memset(&a, 0, sizeof a);
  a.interval = 1000;
  cli_set_command("top");
  a.names = calloc((size_t)argc + 1, sizeof *a.names);
  if (!a.names) return CLI_EXIT_FAILURE;
  int rc = parse_args(&t, &a, argc, argv);
  if (rc) {
    if (rc < 0) usage(stderr);
    free(a.names);
    return rc < 0 ? CLI_EXIT_USAGE : CLI_EXIT_OK;
  }
  rc = cli_connect(&t.ctx, 2000);
  if (rc) {
    free(a.names);
    return rc;
  }
  t.named = a.nnames > 0;
  if (a.nscrape && !(t.scrape = top_scrape_new(t.ctx.base, a.scrape, a.nscrape)))
    rc = CLI_EXIT_FAILURE;
  else if (a.prometheus) rc = prometheus_once(&t, a.nnames, a.names);
  else rc = run_view(&t, &a);
  top_scrape_free(t.scrape);
  clear_names(&t);
  cli_close(&t.ctx);
  free(a.names);
  return rc;
}
