/*
 * `sluice sem run` — flock(1) for a fleet: run a command while holding a
 * permit of a distributed semaphore — and `sluice sem status`.
 *
 * The permit is renewed while the command runs and released when it exits.
 * If the permit is lost, the command gets SIGTERM (SIGKILL after a grace
 * period) and the tool exits 76. If the tool itself dies, the command gets
 * SIGTERM from the kernel (PR_SET_PDEATHSIG), so it never runs on
 * unprotected. CMD gets the fds the tool was started with, not its Redis
 * connections, and its own process group (see wants_own_group).
 *
 * `sluice sem release` releases a permit by its id, for a program that
 * stored the id and lost its handle (or its process).
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <termios.h>
#include <unistd.h>

#include <event2/event.h>

#include "cli.h"

#define KILL_GRACE_MS 5000
/* sluice_sem_new's limits (sem.h documents only the lower bounds): checked
 * here so that a bad value is a usage error naming the option. */
#define PERMITS_MAX 1000000u
#define TTL_MIN_MS 10u
#define TTL_MAX_MS 86400000u

static void sem_usage(FILE *out) {
  fputs(
      "usage: sluice sem run NAME -n PERMITS --ttl MS [--wait MS | --no-wait] [--fair]\n"
      "                       [--redis URL] [--prefix P] -- CMD [ARGS...]\n"
      "       sluice sem status NAME [--redis URL] [--prefix P]\n"
      "       sluice sem release NAME ID [-n PERMITS] [--fair] [--redis URL] [--prefix P]\n"
      "\n"
      "run: wait for a permit of semaphore NAME (shared by every process using the\n"
      "same Redis, NAME and prefix), run CMD while holding it, renew it while CMD\n"
      "runs, release it when CMD exits, and exit with CMD's status.\n"
      "  -n, --permits N  permits of the semaphore, 1..1000000 (default 1: a mutex)\n"
      "  --ttl MS         lease length, 10..86400000; renewed every MS/3 while CMD runs\n"
      "                   (default 30000)\n"
      "  --wait MS        give up after MS without a permit (default, or 0: wait forever)\n"
      "  --no-wait        give up at once if no permit is free\n"
      "  --fair           grant waiters in arrival order (FIFO across processes)\n"
      "CMD runs in its own process group (unless the tool runs in the foreground of\n"
      "a terminal), which gets the signals passed on; it inherits the tool's fds but\n"
      "not its Redis connections.\n"
      "Exit status: CMD's (128+N if killed by signal N); 75 no permit in time;\n"
      "76 permit lost while CMD ran (CMD got SIGTERM); 64 usage; 69 Redis unreachable\n"
      "or failing; 127 CMD not found, 126 CMD not executable.\n"
      "\n"
      "status: print permits, holders with their remaining lease, and waiters.\n"
      "\n"
      "release: release the permit with id ID (32 hex digits, as status prints it),\n"
      "for a program that stored its permit's id and lost its handle. The freed\n"
      "permit goes to the first waiter; -n (default: the permits the semaphore\n"
      "declared) and --fair should match its users'.\n"
      "Exit status: 0 released; 1 the permit was not held (its lease expired or it\n"
      "was released already); 64 usage (a malformed ID); 69 Redis unreachable or\n"
      "failing.\n",
      out);
}

typedef struct run_state {
  cli_ctx ctx;
  const char *name;
  sluice_sem *sem;
  sluice_permit *permit;
  char **cmd;
  pid_t child;
  int child_status; /* raw waitpid status once exited */
  int child_done;
  int lost; /* sluice_lost_reason */
  int acquire_status;
  int acquired;
  int release_done;
  int exit_code;
  int own_group; /* CMD leads its own process group */
  cli_fds fds;   /* ours at start: CMD's */
  struct event *sigchld, *sigterm, *sigint, *sighup, *kill_timer;
} run_state;

/* CMD's group when it has one, so that what CMD started hears it too. */
static void signal_cmd(const run_state *st, int sig) {
  kill(st->own_group ? -st->child : st->child, sig);
}

/* CMD gets its own process group, so that a lost permit's SIGTERM (and the
 * signals passed on) reach what CMD started too, not CMD alone — except
 * when the tool runs in the foreground of a terminal: CMD must stay in the
 * terminal's foreground group to read it (else SIGTTIN stops it), and the
 * terminal's Ctrl-C reaches that whole group anyway. */
static int wants_own_group(void) {
  for (int fd = 0; fd <= 2; fd++)
    if (isatty(fd) && tcgetpgrp(fd) == getpgrp()) return 0;
  return 1;
}

static void on_lost(sluice_permit *p, int reason, void *ud) {
  run_state *st = ud;
  st->lost = reason;
  cli_error("permit for '%s' lost (%s): terminating the command", cli_echo(st->name),
            reason == SLUICE_LOST_DEFINITE ? "Redis no longer holds it"
                                           : "lease could not be renewed in time");
  if (st->child > 0 && !st->child_done) {
    signal_cmd(st, SIGTERM);
    struct timeval tv = {KILL_GRACE_MS / 1000, (KILL_GRACE_MS % 1000) * 1000};
    evtimer_add(st->kill_timer, &tv);
  }
}

static void on_kill_timer(evutil_socket_t fd, short what, void *ud) {
  run_state *st = ud;
  if (st->child > 0 && !st->child_done) signal_cmd(st, SIGKILL);
}

static void on_signal(evutil_socket_t sig, short what, void *ud) {
  run_state *st = ud;
  if (sig == SIGCHLD) {
    int status;
    if (st->child > 0 && waitpid(st->child, &status, WNOHANG) == st->child) {
      st->child_status = status;
      st->child_done = 1;
    }
    return;
  }
  /* Pass termination requests on to the command; we release when it exits. */
  if (st->child > 0 && !st->child_done) signal_cmd(st, (int)sig);
  else st->child_done = 1;
}

static void on_acquired(sluice_sem *sem, int status, sluice_permit *p, void *ud) {
  run_state *st = ud;
  st->acquired = 1;
  st->acquire_status = status;
  cli_capture(&st->ctx, status);
  st->permit = p;
  if (p) sluice_permit_set_lost_cb(p, on_lost, st);
}

static void on_released(sluice_sem *sem, int status, void *ud) {
  ((run_state *)ud)->release_done = 1;
}

static const int forwarded[] = {SIGCHLD, SIGTERM, SIGINT, SIGHUP};

static pid_t spawn_command(run_state *st) {
  pid_t parent = getpid();
  sigset_t all, old;
  sigfillset(&all);
  sigprocmask(SIG_BLOCK, &all, &old); /* no libevent handler runs in the child */
  pid_t pid = fork();
  if (pid != 0) {
    int e = errno;
    sigprocmask(SIG_SETMASK, &old, NULL);
    /* Also here, so that a signal to the group reaches it before it ran. */
    if (pid > 0 && st->own_group) setpgid(pid, pid);
    errno = e;
    return pid;
  }
  if (st->own_group) setpgid(0, 0);
  /* The command must not outlive us unprotected: SIGTERM when we die. */
  prctl(PR_SET_PDEATHSIG, SIGTERM);
  if (getppid() != parent) _exit(CLI_EXIT_LOST); /* we died before prctl */
  /* Our Redis connections are ours: a CMD (or what it leaves running)
   * holding them would keep them open after we exit. */
  cli_fds_close_others(&st->fds, -1);
  for (size_t i = 0; i < sizeof forwarded / sizeof forwarded[0]; i++) signal(forwarded[i], SIG_DFL);
  signal(SIGPIPE, SIG_DFL); /* the tool ignores it; CMD gets the usual default */
  sigset_t none;
  sigemptyset(&none);
  sigprocmask(SIG_SETMASK, &none, NULL);
  char **cmd = st->cmd;
  execvp(cmd[0], cmd);
  int code = errno == ENOENT ? 127 : 126;
  fprintf(stderr, "sluice: sem run: cannot run '%s': %s\n", cli_echo(cmd[0]), strerror(errno));
  _exit(code);
}

static void run_loop_until(run_state *st, const int *flag) {
  while (!*flag && event_base_loop(st->ctx.base, EVLOOP_ONCE) == 0) {}
}

static int exit_code_of(int status) {
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return CLI_EXIT_FAILURE;
}

static int parse_run(int argc, char **argv, run_state *st, sluice_sem_options *o, unsigned *wait_ms,
                     int *no_wait) {
  int i;
  for (i = 2; i < argc; i++) {
    const char *a = argv[i];
    int r = cli_common_option(&st->ctx, argc, argv, &i);
    if (r < 0) return -1;
    if (r > 0) continue;
    if (strcmp(a, "--") == 0) {
      i++;
      break;
    }
    const char *value = i + 1 < argc ? argv[i + 1] : NULL;
    if (strcmp(a, "-n") == 0 || strcmp(a, "--permits") == 0) {
      if (cli_number_u(a, value, 1, PERMITS_MAX, "", &o->permits)) return -1;
      i++;
    } else if (strcmp(a, "--ttl") == 0) {
      if (cli_number_u(a, value, TTL_MIN_MS, TTL_MAX_MS, "ms", &o->ttl_ms)) return -1;
      i++;
    } else if (strcmp(a, "--wait") == 0) {
      if (cli_number_u(a, value, 0, UINT32_MAX, "ms", wait_ms)) return -1;
      i++;
    } else if (strcmp(a, "--no-wait") == 0) {
      *no_wait = 1;
    } else if (strcmp(a, "--fair") == 0) {
      o->fair = 1;
    } else if (a[0] == '-') {
      cli_error("unknown option '%s' (try: sluice sem --help)", cli_echo(a));
      return -1;
    } else if (!st->name) {
      st->name = a;
    } else {
      cli_error("unexpected argument '%s' (put the command after --)", cli_echo(a));
      return -1;
    }
  }
  if (!st->name) {
    cli_error("needs a semaphore NAME");
    return -1;
  }
  if (cli_check_len("semaphore NAME", st->name, SLUICE_NAME_MAX)) return -1;
  if (i >= argc) {
    cli_error("needs a command after --");
    return -1;
  }
  st->cmd = argv + i;
  return 0;
}

static void add_signal(run_state *st, struct event **ev, int sig) {
  *ev = evsignal_new(st->ctx.base, sig, on_signal, st);
  event_add(*ev, NULL);
}

static int sem_run(int argc, char **argv) {
  run_state st;
  sluice_sem_options o;
  unsigned wait_ms = 0;
  int no_wait = 0, rc;
  memset(&st, 0, sizeof st);
  sluice_sem_options_init(&o);
  if (parse_run(argc, argv, &st, &o, &wait_ms, &no_wait)) return CLI_EXIT_USAGE;
  if (no_wait && wait_ms) {
    cli_error("--wait and --no-wait exclude each other");
    return CLI_EXIT_USAGE;
  }
  /* Only then does a timeout mean that no permit came in time. */
  int own_deadline = !no_wait && wait_ms > 0;
  st.own_group = wants_own_group();
  cli_fds_note(&st.fds); /* before connecting: these are CMD's */
  rc = cli_connect(&st.ctx, 3000);
  if (rc) {
    cli_fds_free(&st.fds);
    return rc;
  }
  rc = sluice_sem_new(st.ctx.client, st.name, &o, &st.sem);
  if (rc) {
    rc = cli_fail(&st.ctx, rc, 0, "semaphore '%s'", cli_echo(st.name));
    cli_close(&st.ctx);
    cli_fds_free(&st.fds);
    return rc;
  }
  add_signal(&st, &st.sigchld, SIGCHLD);
  add_signal(&st, &st.sigterm, SIGTERM);
  add_signal(&st, &st.sigint, SIGINT);
  add_signal(&st, &st.sighup, SIGHUP);
  st.kill_timer = evtimer_new(st.ctx.base, on_kill_timer, &st);
  rc = no_wait ? sluice_sem_try_acquire(st.sem, on_acquired, &st)
               : sluice_sem_acquire(st.sem, wait_ms, on_acquired, &st, NULL);
  if (rc == 0) run_loop_until(&st, &st.acquired);
  else st.acquire_status = rc;
  if (st.acquire_status == SLUICE_OK) {
    st.child = spawn_command(&st);
    if (st.child < 0) {
      cli_error("fork failed: %s", strerror(errno));
      st.exit_code = CLI_EXIT_FAILURE;
      st.child_done = 1;
    }
    run_loop_until(&st, &st.child_done);
    if (st.child > 0) st.exit_code = st.lost ? CLI_EXIT_LOST : exit_code_of(st.child_status);
    /* A lost permit is released without waiting: Redis may be unreachable. */
    if (st.lost) sluice_permit_release(st.permit, NULL, NULL);
    else if (sluice_permit_release(st.permit, on_released, &st) == 0)
      run_loop_until(&st, &st.release_done);
  } else if (st.acquire_status == SLUICE_EBUSY ||
             (own_deadline && st.acquire_status == SLUICE_ETIMEDOUT)) {
    cli_error("no permit of '%s' %s", cli_echo(st.name), no_wait ? "is free" : "came in time");
    st.exit_code = cli_exit_status(st.acquire_status, own_deadline);
  } else {
    st.exit_code = cli_fail(&st.ctx, st.acquire_status, own_deadline, "cannot acquire '%s'",
                            cli_echo(st.name));
  }
  event_free(st.sigchld);
  event_free(st.sigterm);
  event_free(st.sigint);
  event_free(st.sighup);
  event_free(st.kill_timer);
  sluice_sem_free(st.sem);
  cli_close(&st.ctx);
  cli_fds_free(&st.fds);
  return st.exit_code;
}

typedef struct status_state {
  cli_call call;
  int print; /* 0: just learn the permits (sem release) */
  unsigned permits;
} status_state;

static void on_info(sluice_sem *sem, int status, const sluice_sem_info *info, void *ud) {
  status_state *st = ud;
  cli_call_done(&st->call, status);
  if (status != SLUICE_OK) return;
  st->permits = info->permits;
  if (!st->print) return;
  printf("semaphore %s: permits %u, holders %zu, waiters %zu, last fence %llu\n",
         cli_clean(sluice_sem_name(sem)), info->permits, info->holders_total, info->nwaiters,
         (unsigned long long)info->last_fence);
  if (info->holders_total > info->nholders || info->queued_total > SLUICE_SEM_INSPECT_MAX)
    printf(
        "  (listed: the %zu holders soonest to expire, the live waiters of the first %d of "
        "%zu queued)\n",
        info->nholders, SLUICE_SEM_INSPECT_MAX, info->queued_total);
  for (size_t i = 0; i < info->nholders; i++)
    printf("  holder %s  lease %lld ms left\n", cli_clean(info->holders[i].id),
           (long long)info->holders[i].remaining_ms);
  for (size_t i = 0; i < info->nwaiters; i++)
    printf("  waiter %zu: %s\n", i + 1, cli_clean(info->waiters[i]));
}

/* Inspect semaphore name on ctx's client (printing it when print is set);
 * a sluice status. */
static int inspect(cli_ctx *ctx, const char *name, int print, unsigned *permits) {
  sluice_sem *sem = NULL;
  status_state st = {{ctx, 0, 0}, print, 0};
  int rc = sluice_sem_new(ctx->client, name, NULL, &sem);
  if (rc == 0) rc = sluice_sem_inspect(sem, on_info, &st);
  if (rc == 0) rc = cli_call_wait(&st.call);
  sluice_sem_free(sem);
  if (permits) *permits = st.permits;
  return rc;
}

static int sem_status(int argc, char **argv) {
  static const cli_name_words words = {"semaphore NAME", "needs a semaphore NAME",
                                       " (try: sluice sem --help)"};
  cli_ctx ctx = {0};
  const char *name;
  if (cli_parse_name_only(&ctx, argc, argv, 2, &words, &name)) return CLI_EXIT_USAGE;
  int rc = cli_connect(&ctx, 3000);
  if (rc) return rc;
  rc = inspect(&ctx, name, 1, NULL);
  if (rc) rc = cli_fail(&ctx, rc, 0, "cannot read semaphore '%s'", cli_echo(name));
  cli_close(&ctx);
  return rc;
}

/* What sluice_sem_release_id accepts: 32 lowercase hex digits. */
static int valid_permit_id(const char *id) {
  return strlen(id) == 32 && strspn(id, "0123456789abcdef") == 32;
}

static void on_released_id(sluice_sem *sem, int status, void *ud) { cli_call_done(ud, status); }

static int sem_release(int argc, char **argv) {
  cli_ctx ctx = {0};
  const char *name = NULL, *id = NULL;
  sluice_sem_options o;
  sluice_sem_options_init(&o);
  o.permits = 0; /* unless -n: the semaphore's own */
  for (int i = 2; i < argc; i++) {
    const char *a = argv[i];
    int r = cli_common_option(&ctx, argc, argv, &i);
    if (r < 0) return CLI_EXIT_USAGE;
    if (r > 0) continue;
    if (strcmp(a, "-n") == 0 || strcmp(a, "--permits") == 0) {
      if (cli_number_u(a, i + 1 < argc ? argv[i + 1] : NULL, 1, PERMITS_MAX, "", &o.permits))
        return CLI_EXIT_USAGE;
      i++;
    } else if (strcmp(a, "--fair") == 0) {
      o.fair = 1;
    } else if (a[0] == '-' || (name && id)) {
      cli_error("unexpected argument '%s' (try: sluice sem --help)", cli_echo(a));
      return CLI_EXIT_USAGE;
    } else if (!name) {
      name = a;
    } else {
      id = a;
    }
  }
  if (!name || !id) {
    cli_error("needs a semaphore NAME and a permit ID");
    return CLI_EXIT_USAGE;
  }
  if (cli_check_len("semaphore NAME", name, SLUICE_NAME_MAX)) return CLI_EXIT_USAGE;
  if (!valid_permit_id(id)) {
    cli_error("permit ID must be 32 hex digits (0-9, a-f, as `sluice sem status` prints), got '%s'",
              cli_echo(id));
    return CLI_EXIT_USAGE;
  }
  int rc = cli_connect(&ctx, 3000);
  if (rc) return rc;
  /* The release hands the freed permit to a waiter when fewer than the
   * permits are held: it must count with the semaphore's permits, which
   * its users declared (1 when nobody did: then nobody waits either). */
  if (!o.permits) {
    rc = inspect(&ctx, name, 0, &o.permits);
    if (!o.permits) o.permits = 1;
  }
  sluice_sem *sem = NULL;
  cli_call call = {&ctx, 0, 0};
  if (rc == 0) rc = sluice_sem_new(ctx.client, name, &o, &sem);
  if (rc == 0) rc = sluice_sem_release_id(sem, id, on_released_id, &call);
  if (rc == 0) rc = cli_call_wait(&call);
  sluice_sem_free(sem);
  if (rc == SLUICE_ENOTFOUND) {
    cli_error("permit %s of '%s' is not held (its lease expired, or it was released already)", id,
              cli_echo(name));
    rc = cli_exit_status(rc, 0);
  } else if (rc) {
    rc = cli_fail(&ctx, rc, 0, "cannot release permit %s of '%s'", id, cli_echo(name));
  }
  cli_close(&ctx);
  return rc;
}

int cli_sem_main(int argc, char **argv) {
  if (argc < 2 || strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0) {
    sem_usage(argc < 2 ? stderr : stdout);
    return argc < 2 ? CLI_EXIT_USAGE : CLI_EXIT_OK;
  }
  for (int i = 2; i < argc && strcmp(argv[i], "--") != 0; i++)
    if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
      sem_usage(stdout);
      return CLI_EXIT_OK;
    }
  if (strcmp(argv[1], "run") == 0) {
    cli_set_command("sem run");
    return sem_run(argc, argv);
  }
  if (strcmp(argv[1], "status") == 0) {
    cli_set_command("sem status");
    return sem_status(argc, argv);
  }
  if (strcmp(argv[1], "release") == 0) {
    cli_set_command("sem release");
    return sem_release(argc, argv);
  }
  cli_error("unknown sem command '%s' (try: sluice sem --help)", cli_echo(argv[1]));
  return CLI_EXIT_USAGE;
}
