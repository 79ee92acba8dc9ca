/*
 * `sluice sem run` — flock(1) for a fleet: run a command while holding a
 * permit of a distributed semaphore — and `sluice sem status`.
 *
 * The permit is renewed while the command runs and released when it exits.
 * If the permit is lost, the command gets SIGTERM (SIGKILL after a grace
 * period) and the tool exits 76. If the tool itself dies, the command gets
 * SIGTERM from the kernel (PR_SET_PDEATHSIG), so it never runs on
 * unprotected.
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <event2/event.h>

#include "cli.h"

#define KILL_GRACE_MS 5000

static void sem_usage(FILE *out) {
  fputs("usage: sluice sem run NAME -n PERMITS --ttl MS [--wait MS | --no-wait] [--fair]\n"
        "                       [--redis URL] [--prefix P] -- CMD [ARGS...]\n"
        "       sluice sem status NAME [--redis URL] [--prefix P]\n"
        "\n"
        "run: wait for a permit of semaphore NAME (shared by every process using the\n"
        "same Redis, NAME and prefix), run CMD while holding it, renew it while CMD\n"
        "runs, release it when CMD exits, and exit with CMD's status.\n"
        "  -n, --permits N  permits of the semaphore (default 1: a mutex)\n"
        "  --ttl MS         lease length; renewed every MS/3 while CMD runs (default 30000)\n"
        "  --wait MS        give up after MS without a permit (default: wait forever)\n"
        "  --no-wait        give up at once if no permit is free\n"
        "  --fair           grant waiters in arrival order (FIFO across processes)\n"
        "Exit status: CMD's (128+N if killed by signal N); 75 no permit in time;\n"
        "76 permit lost while CMD ran (CMD got SIGTERM); 64 usage; 69 Redis unreachable;\n"
        "127 CMD not found, 126 CMD not executable.\n"
        "\n"
        "status: print permits, holders with their remaining lease, and waiters.\n",
        out);
}

typedef struct run_state {
  cli_ctx ctx;
  const char *name;
  sluice_sem *sem;
  sluice_permit *permit;
  char **cmd;
  pid_t child;
  int child_status;       /* raw waitpid status once exited */
  int child_done;
  int lost;               /* sluice_lost_reason */
  int acquire_status;
  int acquired;
  int release_done;
  int exit_code;
  struct event *sigchld, *sigterm, *sigint, *sighup, *kill_timer;
} run_state;

static void on_lost(sluice_permit *p, int reason, void *ud) {
  run_state *st = ud;
  st->lost = reason;
  cli_error("permit for '%s' lost (%s): terminating the command", st->name,
            reason == SLUICE_LOST_DEFINITE ? "Redis no longer holds it"
                                           : "lease could not be renewed in time");
  if (st->child > 0 && !st->child_done) {
    kill(st->child, SIGTERM);
    struct timeval tv = {KILL_GRACE_MS / 1000, (KILL_GRACE_MS % 1000) * 1000};
    evtimer_add(st->kill_timer, &tv);
  }
}

static void on_kill_timer(evutil_socket_t fd, short what, void *ud) {
  run_state *st = ud;
  if (st->child > 0 && !st->child_done) kill(st->child, SIGKILL);
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
  if (st->child > 0 && !st->child_done) kill(st->child, (int)sig);
  else st->child_done = 1;
}

static void on_acquired(sluice_sem *sem, int status, sluice_permit *p, void *ud) {
  run_state *st = ud;
  st->acquired = 1;
  st->acquire_status = status;
  st->permit = p;
  if (p) sluice_permit_set_lost_cb(p, on_lost, st);
}

static void on_released(sluice_sem *sem, int status, void *ud) {
  ((run_state *)ud)->release_done = 1;
}

static pid_t spawn_command(char **cmd) {
  pid_t parent = getpid();
  pid_t pid = fork();
  if (pid != 0) return pid;
  /* The command must not outlive us unprotected: SIGTERM when we die. */
  prctl(PR_SET_PDEATHSIG, SIGTERM);
  if (getppid() != parent) _exit(CLI_EXIT_LOST); /* we died before prctl */
  sigset_t none;
  sigemptyset(&none);
  sigprocmask(SIG_SETMASK, &none, NULL);
  execvp(cmd[0], cmd);
  int code = errno == ENOENT ? 127 : 126;
  fprintf(stderr, "sluice: cannot run '%s': %s\n", cmd[0], strerror(errno));
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

static int parse_run(int argc, char **argv, run_state *st, sluice_sem_options *o,
                     unsigned *wait_ms, int *no_wait) {
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
    int has_value = i + 1 < argc;
    if ((strcmp(a, "-n") == 0 || strcmp(a, "--permits") == 0) && has_value) {
      if (cli_parse_unsigned(argv[++i], &o->permits) || o->permits == 0) {
        cli_error("--permits needs a whole number >= 1");
        return -1;
      }
    } else if (strcmp(a, "--ttl") == 0 && has_value) {
      if (cli_parse_unsigned(argv[++i], &o->ttl_ms) || o->ttl_ms < 10) {
        cli_error("--ttl needs milliseconds >= 10");
        return -1;
      }
    } else if (strcmp(a, "--wait") == 0 && has_value) {
      if (cli_parse_unsigned(argv[++i], wait_ms)) {
        cli_error("--wait needs milliseconds");
        return -1;
      }
    } else if (strcmp(a, "--no-wait") == 0) {
      *no_wait = 1;
    } else if (strcmp(a, "--fair") == 0) {
      o->fair = 1;
    } else if (a[0] == '-') {
      cli_error("unknown or incomplete option '%s' (try: sluice sem --help)", a);
      return -1;
    } else if (!st->name) {
      st->name = a;
    } else {
      cli_error("unexpected argument '%s' (put the command after --)", a);
      return -1;
    }
  }
  if (!st->name) {
    cli_error("sem run needs a semaphore NAME");
    return -1;
  }
  if (i >= argc) {
    cli_error("sem run needs a command after --");
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
  rc = cli_connect(&st.ctx, 3000);
  if (rc) return rc;
  rc = sluice_sem_new(st.ctx.client, st.name, &o, &st.sem);
  if (rc) {
    cli_error("bad semaphore '%s': %s", st.name, sluice_strerror(rc));
    cli_close(&st.ctx);
    return CLI_EXIT_USAGE;
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
    st.child = spawn_command(st.cmd);
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
  } else if (st.acquire_status == SLUICE_EBUSY || st.acquire_status == SLUICE_ETIMEDOUT) {
    cli_error("no permit of '%s' %s", st.name, no_wait ? "is free" : "came in time");
    st.exit_code = CLI_EXIT_TIMEOUT;
  } else {
    cli_error("cannot acquire '%s': %s", st.name, sluice_strerror(st.acquire_status));
    st.exit_code = st.acquire_status == SLUICE_ECONNECTION ? CLI_EXIT_UNAVAILABLE : CLI_EXIT_FAILURE;
  }
  event_free(st.sigchld);
  event_free(st.sigterm);
  event_free(st.sigint);
  event_free(st.sighup);
  event_free(st.kill_timer);
  sluice_sem_free(st.sem);
  cli_close(&st.ctx);
  return st.exit_code;
}

typedef struct status_state {
  int done;
  int status;
} status_state;

static void on_info(sluice_sem *sem, int status, const sluice_sem_info *info, void *ud) {
  status_state *st = ud;
  st->done = 1;
  st->status = status;
  if (status != SLUICE_OK) return;
  printf("semaphore %s: permits %u, holders %zu, waiters %zu, last fence %llu\n",
         sluice_sem_name(sem), info->permits, info->nholders, info->nwaiters,
         (unsigned long long)info->last_fence);
  for (size_t i = 0; i < info->nholders; i++)
    printf("  holder %s  lease %lld ms left\n", info->holders[i].id,
           (long long)info->holders[i].remaining_ms);
  for (size_t i = 0; i < info->nwaiters; i++) printf("  waiter %zu: %s\n", i + 1, info->waiters[i]);
}

static int sem_status(int argc, char **argv) {
  cli_ctx ctx = {0};
  const char *name = NULL;
  for (int i = 2; i < argc; i++) {
    int r = cli_common_option(&ctx, argc, argv, &i);
    if (r < 0) return CLI_EXIT_USAGE;
    if (r > 0) continue;
    if (argv[i][0] == '-' || name) {
      cli_error("unexpected argument '%s' (try: sluice sem --help)", argv[i]);
      return CLI_EXIT_USAGE;
    }
    name = argv[i];
  }
  if (!name) {
    cli_error("sem status needs a semaphore NAME");
    return CLI_EXIT_USAGE;
  }
  int rc = cli_connect(&ctx, 3000);
  if (rc) return rc;
  sluice_sem *sem = NULL;
  status_state st = {0, 0};
  rc = sluice_sem_new(ctx.client, name, NULL, &sem);
  if (rc == 0) rc = sluice_sem_inspect(sem, on_info, &st);
  if (rc == 0) {
    while (!st.done && event_base_loop(ctx.base, EVLOOP_ONCE) == 0) {}
    rc = st.status;
  }
  if (rc) cli_error("cannot read semaphore '%s': %s", name, sluice_strerror(rc));
  sluice_sem_free(sem);
  cli_close(&ctx);
  if (rc == SLUICE_EINVAL) return CLI_EXIT_USAGE;
  return rc ? CLI_EXIT_UNAVAILABLE : CLI_EXIT_OK;
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
  if (strcmp(argv[1], "run") == 0) return sem_run(argc, argv);
  if (strcmp(argv[1], "status") == 0) return sem_status(argc, argv);
  cli_error("unknown sem command '%s' (try: sluice sem --help)", argv[1]);
  return CLI_EXIT_USAGE;
}
