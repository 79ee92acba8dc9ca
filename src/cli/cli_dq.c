/* `sluice dq`: push to, consume from and inspect a delay queue. */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <event2/event.h>

#include "cli.h"

static void dq_usage(FILE *out) {
  fputs(
      "usage: sluice dq push QUEUE [--delay MS | --at UNIX_MS] [--id ID] [--priority N]\n"
      "                      [--replace | --postpone] [PAYLOAD | -]\n"
      "       sluice dq consume QUEUE [--concurrency N] [--visibility MS] [--timeout MS]\n"
      "                         [--max-attempts N] [--retry-delay MS] [--count N] -- CMD [ARGS]\n"
      "       sluice dq status QUEUE\n",
      out);
  cli_dq_schedule_usage(out);
  fputs(
      "\n"
      "push: queue PAYLOAD (or stdin when it is '-' or missing; any bytes, up to\n"
      "  1 MiB) due after --delay MS (default 0) or at --at UNIX_MS on Redis's\n"
      "  clock; prints the message id. --id sets the id; if a message with that\n"
      "  id is still queued nothing is pushed and the exit status is 1.\n"
      "  --priority N (0..9, default 0): due messages of a higher priority go first.\n"
      "  --replace (with --id): a queued message with that id gets this payload, due\n"
      "    time and priority (debounce: push each change with a --delay);\n"
      "  --postpone (with --id): its due time moves to this one if later. Either\n"
      "    exits 1 if the message is in flight or dead, and pushes a missing one.\n"
      "consume: run CMD once per due message with the payload on its stdin and\n"
      "  SLUICE_DQ_QUEUE, SLUICE_DQ_ID, SLUICE_DQ_ATTEMPT, SLUICE_DQ_PRIORITY in its\n"
      "  environment.\n"
      "  Exit 0 acknowledges the message; any other status, or death by a signal,\n"
      "  retries it after --retry-delay MS (default 1000); after --max-attempts N\n"
      "  deliveries (default 5, 0 = no limit) it goes to the dead letters.\n"
      "  --concurrency N (-j N; default 1, at most 10000): up to N CMDs run at once,\n"
      "    each in its own process group (--batch N is an older name for it).\n"
      "  --visibility MS (default 60000, at least 10): how soon a message comes back\n"
      "    to other consumers if this one dies. While CMD runs its message is renewed\n"
      "    every MS/3, so a run may take longer. If renewals stop being confirmed\n"
      "    (Redis unreachable) or the message is lost, CMD gets SIGTERM, then SIGKILL\n"
      "    (MS/5, at most 5 s, later; MS/10, at most 1 s, before the deadline), and its\n"
      "    message is retried; two copies of one message never run at once.\n"
      "  --timeout MS (default 0: none): the longest run; CMD then gets SIGTERM, then\n"
      "    SIGKILL as above, and its message is retried.\n"
      "  --count N: stop taking messages after N CMD runs.\n"
      "  SIGINT, SIGTERM or SIGHUP: take nothing more, wait for running CMDs and\n"
      "  settle their messages, exit 0; a second signal sends SIGTERM to the running\n"
      "  CMDs' process groups. If the tool dies, CMDs get SIGTERM.\n"
      "status: counts of delayed (and due), in-flight (and expired) and dead\n"
      "  messages, and the next due one.\n",
      out);
  cli_dq_schedule_help(out);
  fputs(
      "\n"
      "Options of every command: --redis URL, --prefix PREFIX (see sluice --help).\n"
      "Exit status: 0 success; 1 push: duplicate id, schedule remove: no such\n"
      "schedule; 64 bad arguments; 69 Redis unreachable or failing; 70 internal error;\n"
      "126, 127 consume: CMD not executable / not found.\n",
      out);
}

/* ---- push ------------------------------------------------------------------- */

typedef struct push_state {
  cli_call call;
  char id[SLUICE_DQ_ID_MAX + 1]; /* the given or generated id */
} push_state;

static void on_pushed(sluice_dq *dq, int status, const char *id, int64_t due, void *ud) {
  push_state *p = ud;
  cli_call_done(&p->call, status);
  if (id) snprintf(p->id, sizeof p->id, "%s", id);
  if (status == SLUICE_OK) printf("%s\n", cli_clean(id));
}

/* Why the push failed; the exit status. */
static int push_failed(const cli_ctx *ctx, const push_state *p, int explicit_id) {
  if (p->call.status == SLUICE_EEXIST) {
    cli_error("a message with id '%s' is already queued", cli_echo(p->id));
    return cli_exit_status(p->call.status, 0);
  }
  if (p->call.status == SLUICE_EBUSY) { /* --replace, --postpone: taken or dead */
    cli_error("the message with id '%s' is in flight or dead: left as it is", cli_echo(p->id));
    return CLI_EXIT_NO;
  }
  /* Sent, then no answer: Redis may have run it. Pushing again under the
   * same id is safe while the message is queued (exit 1 then says it is). */
  if ((p->call.status == SLUICE_EINDOUBT || p->call.status == SLUICE_ETIMEDOUT) && p->id[0]) {
    int rc = cli_fail(ctx, p->call.status, 0, "the message may have been queued, as id %s", p->id);
    cli_error("to push it at most once, push again with --id %s%s", p->id,
              explicit_id ? "" : " (exit status 1: it was queued)");
    return rc;
  }
  return cli_fail(ctx, p->call.status, 0, "push failed");
}

/* Read all of stdin, stopping past max bytes (the caller sees the excess). */
static char *read_stdin(size_t max, size_t *len) {
  size_t cap = 4096, n = 0;
  char *buf = malloc(cap);
  while (buf) {
    if (n == cap) {
      if (cap > max) break;
      char *nb = realloc(buf, cap * 2);
      if (!nb) break;
      buf = nb, cap *= 2;
    }
    ssize_t r = read(0, buf + n, cap - n);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) break;
    if (r == 0) {
      *len = n;
      return buf;
    }
    n += (size_t)r;
  }
  if (buf && n == cap && cap > max) {
    *len = n;
    return buf;
  }
  free(buf);
  return NULL;
}

typedef struct push_args {
  const char *queue, *id, *payload;
  uint64_t delay, at, priority;
  int have_delay, have_at, if_exists;
} push_args;

static int push_positional(push_args *a, const char *s) {
  if (!a->queue) a->queue = s;
  else if (!a->payload) a->payload = s;
  else {
    cli_error("unexpected argument '%s'", cli_echo(s));
    return -1;
  }
  return 0;
}

static int parse_push(cli_ctx *ctx, int argc, char **argv, push_args *a) {
  int i, rc;
  for (i = 1; i < argc && strcmp(argv[i], "--"); i++) {
    const char *s = argv[i];
    if ((rc = cli_common_option(ctx, argc, argv, &i)) != 0) {
      if (rc < 0) return -1;
      continue;
    }
    const char *value = i + 1 < argc ? argv[i + 1] : NULL;
    if (!strcmp(s, "--delay")) {
      if (cli_number(s, value, 0, (uint64_t)SLUICE_DQ_TIME_MAX, "ms", &a->delay)) return -1;
      a->have_delay = 1;
      i++;
    } else if (!strcmp(s, "--at")) {
      if (cli_number(s, value, 1, (uint64_t)SLUICE_DQ_TIME_MAX, "ms since 1970", &a->at)) return -1;
      a->have_at = 1;
      i++;
    } else if (!strcmp(s, "--priority")) {
      if (cli_number(s, value, 0, SLUICE_DQ_PRIORITY_MAX, "", &a->priority)) return -1;
      i++;
    } else if (!strcmp(s, "--replace") || !strcmp(s, "--postpone")) {
      int want = s[2] == 'r' ? SLUICE_DQ_REPLACE : SLUICE_DQ_POSTPONE;
      if (a->if_exists && a->if_exists != want) {
        cli_error("--replace and --postpone exclude each other");
        return -1;
      }
      a->if_exists = want;
    } else if (!strcmp(s, "--id")) {
      if (!value) {
        cli_error("--id needs a value");
        return -1;
      }
      a->id = argv[++i];
      if (cli_check_len("--id", a->id, SLUICE_DQ_ID_MAX)) return -1;
    } else if (s[0] == '-' && s[1]) {
      cli_error("unknown option '%s'", cli_echo(s));
      return -1;
    } else if (push_positional(a, s)) {
      return -1;
    }
  }
  for (i++; i < argc; i++) /* after "--": all positional */
    if (push_positional(a, argv[i])) return -1;
  if (!a->queue) cli_error("missing QUEUE");
  else if (cli_check_len("QUEUE", a->queue, SLUICE_NAME_MAX)) return -1;
  else if (a->have_delay && a->have_at) cli_error("--delay and --at exclude each other");
  else if (a->if_exists && !a->id) cli_error("--replace and --postpone need --id");
  else return 0;
  return -1;
}

static int cmd_push(int argc, char **argv) {
  cli_ctx ctx = {0};
  push_args a = {0};
  size_t len;
  if (parse_push(&ctx, argc, argv, &a)) return CLI_EXIT_USAGE;
  char *in = NULL;
  if (!a.payload || !strcmp(a.payload, "-")) {
    if (!(in = read_stdin(SLUICE_DQ_PAYLOAD_MAX, &len))) {
      cli_error("cannot read the payload from stdin");
      return CLI_EXIT_FAILURE;
    }
  } else {
    len = strlen(a.payload);
  }
  sluice_dq_item it = {in ? in : a.payload, len, (int64_t)a.delay, (int64_t)a.at, a.id};
  int rc = cli_connect(&ctx, 2000);
  sluice_dq *dq = NULL;
  push_state p = {{&ctx, 0, 0}, ""};
  if (rc == CLI_EXIT_OK) {
    rc = sluice_dq_new(ctx.client, a.queue, NULL, &dq);
    if (rc == SLUICE_OK)
      rc = sluice_dq_push_ex(dq, &it, (unsigned)a.priority, a.if_exists, on_pushed, &p);
    if (rc != SLUICE_OK) {
      rc = cli_fail(&ctx, rc, 0, "cannot push");
    } else {
      rc = cli_call_wait(&p.call) == SLUICE_OK ? CLI_EXIT_OK : push_failed(&ctx, &p, a.id != NULL);
    }
    sluice_dq_free(dq);
    cli_close(&ctx);
  }
  free(in);
  return rc;
}

/* ---- status ----------------------------------------------------------------- */

static void on_info(sluice_dq *dq, int status, const sluice_dq_info *in, unsigned priority,
                    void *ud) {
  cli_call_done(ud, status);
  if (status != SLUICE_OK) return;
  printf("queue      %s\n", cli_clean(sluice_dq_name(dq)));
  printf("delayed    %llu (due now %llu)\n", (unsigned long long)in->delayed,
         (unsigned long long)in->ready);
  printf("in_flight  %llu (past deadline %llu)\n", (unsigned long long)in->in_flight,
         (unsigned long long)in->expired);
  printf("dead       %llu\n", (unsigned long long)in->dead);
  if (in->next_id)
    printf("next       %s due at %lld (in %lld ms), priority %u\n", cli_clean(in->next_id),
           (long long)in->next_due_ms, (long long)(in->next_due_ms - in->now_ms), priority);
  else printf("next       -\n");
}

static int cmd_status(int argc, char **argv) {
  static const cli_name_words words = {"QUEUE", "missing QUEUE", ""};
  cli_ctx ctx = {0};
  const char *queue;
  if (cli_parse_name_only(&ctx, argc, argv, 1, &words, &queue)) return CLI_EXIT_USAGE;
  int rc = cli_connect(&ctx, 2000);
  if (rc != CLI_EXIT_OK) return rc;
  sluice_dq *dq = NULL;
  cli_call call = {&ctx, 0, 0};
  rc = sluice_dq_new(ctx.client, queue, NULL, &dq);
  if (rc == SLUICE_OK) rc = sluice_dq_inspect_ex(dq, on_info, &call);
  if (rc == SLUICE_OK) rc = cli_call_wait(&call);
  if (rc != SLUICE_OK) rc = cli_fail(&ctx, rc, 0, "cannot read queue '%s'", cli_echo(queue));
  sluice_dq_free(dq);
  cli_close(&ctx);
  return rc;
}

/* ---- consume ---------------------------------------------------------------- */

/*
 * One CMD process per delivered message, up to --concurrency at once (the
 * consumer's max_in_flight, so the library takes no more than can run).
 *
 * The consumer renews every message while its CMD runs (auto-renewal), so
 * --visibility only says how soon a dead tool's messages come back. A CMD
 * may still only run while its message is invisible to other consumers: a
 * watchdog follows the (conservative, local) deadline, which each confirmed
 * renewal moves on, and sends the process group SIGTERM when renewals have
 * not been confirmed for a while, SIGKILL just before the deadline, then
 * retries the message; the same when the message was lost (the library's
 * lost callback) or the run passed --timeout. Two copies of one message thus
 * never run at once.
 */

#define CONCURRENCY_MAX 10000

typedef struct job job;

typedef struct consume_state {
  cli_ctx ctx;
  const char *queue;
  char **cmd;
  uint64_t count; /* stop after this many CMD runs; 0 = never */
  uint64_t started, settled;
  unsigned concurrency;
  unsigned retry_delay_ms;
  unsigned max_attempts;
  unsigned visibility_ms;
  unsigned timeout_ms; /* the longest run; 0 = none */
  sluice_dq_consumer *con;
  struct event *sigchld, *sigint, *sigterm, *sighup;
  job *jobs; /* CMDs running */
  unsigned njobs;
  unsigned signals;    /* stop signals received */
  cli_fds fds;         /* open at start, passed on to CMD */
  sigset_t start_mask; /* the mask we started with, CMD's mask */
  pid_t self;
  int stopping;
  int exit_code; /* set by the first fatal problem */
} consume_state;

struct job {
  job *next;
  consume_state *st;
  pid_t pid; /* also its process group */
  sluice_dq_msg *msg;
  int exec_fd;         /* reads the errno of a failed exec, EOF otherwise */
  int watchdog;        /* 0; 1 SIGTERM sent; 2 SIGKILL sent */
  struct event *timer; /* the watchdog */
  uint64_t started_ms; /* monotonic, for --timeout */
  uint64_t term_ms;    /* when SIGTERM was sent */
  int lost;            /* the library said the message is no longer ours */
};

static void maybe_stop(consume_state *st);

static void on_settled(sluice_dq_consumer *con, int status, const char *id, void *ud) {
  consume_state *st = ud;
  st->settled++;
  if (status == SLUICE_ELATE)
    cli_error("message %s: settled after its visibility deadline; it is delivered again", id);
  else if (status != SLUICE_OK) {
    cli_capture(&st->ctx, status);
    cli_fail(&st->ctx, status, 0, "message %s: settle failed", id);
  }
  maybe_stop(st);
}

/* The payload goes through an unlinked temp file: any size, no pipe dance. */
static int payload_fd(sluice_dq_msg *msg) {
  size_t len;
  const char *p = sluice_dq_msg_payload(msg, &len);
  FILE *f = tmpfile();
  if (!f) return -1;
  if ((len && fwrite(p, 1, len, f) != len) || fflush(f) || fseek(f, 0, SEEK_SET)) {
    fclose(f);
    return -1;
  }
  int fd = dup(fileno(f));
  fclose(f);
  return fd;
}

static const int stop_signals[] = {SIGCHLD, SIGINT, SIGTERM, SIGHUP};

/* Runs in the forked child; never returns. */
static void exec_cmd(consume_state *st, sluice_dq_msg *msg, int in_fd, int err_fd) {
  char attempt[16], priority[16];
  snprintf(attempt, sizeof attempt, "%u", sluice_dq_msg_attempt(msg));
  snprintf(priority, sizeof priority, "%u", sluice_dq_msg_priority(msg));
  /* Our own process group: a Ctrl-C at the terminal reaches only the tool
   * (which then drains), and the watchdog can kill CMD's children too. */
  setpgid(0, 0);
  /* The command must not outlive us unnoticed: SIGTERM when we die. */
  prctl(PR_SET_PDEATHSIG, SIGTERM);
  if (getppid() != st->self) _exit(CLI_EXIT_FAILURE); /* we died before prctl */
  if (dup2(in_fd, 0) < 0) _exit(CLI_EXIT_FAILURE);
  close(in_fd);
  /* Not ours (Redis connections, the loop's): a CMD's lingering background
   * child would keep them open, and a BRPOP held that way swallows wake-ups.
   * err_fd is close-on-exec. */
  cli_fds_close_others(&st->fds, err_fd);
  setenv("SLUICE_DQ_QUEUE", st->queue, 1);
  setenv("SLUICE_DQ_ID", sluice_dq_msg_id(msg), 1);
  setenv("SLUICE_DQ_ATTEMPT", attempt, 1);
  setenv("SLUICE_DQ_PRIORITY", priority, 1);
  /* libevent's handlers must not run here: back to defaults, then unblock. */
  for (size_t i = 0; i < sizeof stop_signals / sizeof stop_signals[0]; i++)
    signal(stop_signals[i], SIG_DFL);
  signal(SIGPIPE, SIG_DFL);
  sigprocmask(SIG_SETMASK, &st->start_mask, NULL);
  execvp(st->cmd[0], st->cmd);
  int err = errno;
  if (err_fd >= 0 && write(err_fd, &err, sizeof err) < 0) {} /* parent reports it */
  _exit(err == ENOENT ? 127 : 126);
}

/* Fork CMD for msg; 0 on success, else -1 with errno set. */
static int spawn_job(consume_state *st, job *j) {
  int in_fd = payload_fd(j->msg), pfd[2];
  if (in_fd < 0) return -1;
  if (pipe2(pfd, O_CLOEXEC)) {
    int e = errno;
    close(in_fd);
    errno = e;
    return -1;
  }
  sigset_t all, old;
  sigfillset(&all);
  sigprocmask(SIG_BLOCK, &all, &old); /* no handler runs in the child */
  pid_t pid = fork();
  if (pid == 0) exec_cmd(st, j->msg, in_fd, pfd[1]);
  int e = errno;
  sigprocmask(SIG_SETMASK, &old, NULL);
  close(in_fd);
  close(pfd[1]);
  if (pid < 0) {
    close(pfd[0]);
    errno = e;
    return -1;
  }
  setpgid(pid, pid); /* also here, so kill(-pid) works before the child ran */
  j->pid = pid;
  j->exec_fd = pfd[0];
  return 0;
}

static void on_watchdog(evutil_socket_t fd, short what, void *arg);

static uint64_t mono_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

/* The margin before the deadline covers the kill, the reaping and the
 * retry's trip to Redis; the grace is CMD's time to stop after SIGTERM. */
static int64_t margin_ms(const consume_state *st) {
  return st->visibility_ms / 10 < 1000 ? st->visibility_ms / 10 : 1000;
}
static int64_t grace_ms(const consume_state *st) {
  return st->visibility_ms / 5 < 5000 ? st->visibility_ms / 5 : 5000;
}

/* ms until SIGTERM is due: a grace period before the kill time (a margin
 * before the deadline, which confirmed renewals keep moving on), or the
 * end of --timeout; 0 at once when the message was lost. */
static int64_t until_term(const job *j) {
  const consume_state *st = j->st;
  if (j->lost) return 0;
  int64_t at = sluice_dq_msg_remaining_ms(j->msg) - margin_ms(st) - grace_ms(st);
  if (st->timeout_ms) {
    int64_t left = (int64_t)(j->started_ms + st->timeout_ms) - (int64_t)mono_ms();
    if (left < at) at = left;
  }
  return at > 0 ? at : 0;
}

/* ms until SIGKILL is due: the grace after SIGTERM, but never past the
 * margin before the deadline. */
static int64_t until_kill(const job *j) {
  int64_t at = (int64_t)(j->term_ms + grace_ms(j->st)) - (int64_t)mono_ms();
  int64_t dl = sluice_dq_msg_remaining_ms(j->msg) - margin_ms(j->st);
  if (dl < at) at = dl;
  return at > 0 ? at : 0;
}

static void watchdog_arm(job *j) {
  int64_t at = j->watchdog ? until_kill(j) : until_term(j);
  struct timeval tv = {(time_t)(at / 1000), (suseconds_t)(at % 1000) * 1000};
  evtimer_del(j->timer);
  evtimer_add(j->timer, &tv);
}

static void on_watchdog(evutil_socket_t fd, short what, void *arg) {
  job *j = arg;
  consume_state *st = j->st;
  const char *id = sluice_dq_msg_id(j->msg);
  int64_t left = sluice_dq_msg_remaining_ms(j->msg);
  if (j->watchdog == 0) {
    if (until_term(j) > 0) { /* renewed meanwhile */
      watchdog_arm(j);
      return;
    }
    if (j->lost)
      cli_error(
          "message %s: lost (delivered to another consumer, or gone): SIGTERM to CMD (pid %ld)", id,
          (long)j->pid);
    else if (st->timeout_ms && mono_ms() >= j->started_ms + st->timeout_ms)
      cli_error("message %s: CMD (pid %ld) ran past --timeout %u ms: SIGTERM", id, (long)j->pid,
                st->timeout_ms);
    else
      cli_error(
          "message %s: CMD (pid %ld) still runs near its visibility deadline, renewals "
          "not confirmed (%lld ms left): SIGTERM, SIGKILL before the deadline",
          id, (long)j->pid, (long long)left);
    kill(-j->pid, SIGTERM);
    j->watchdog = 1;
    j->term_ms = mono_ms();
    watchdog_arm(j);
  } else if (j->watchdog == 1) {
    cli_error("message %s: CMD (pid %ld) still runs after SIGTERM: SIGKILL", id, (long)j->pid);
    kill(-j->pid, SIGKILL);
    j->watchdog = 2;
  }
}

/* The library says this delivery is no longer ours: stop its CMD now. */
static void on_lost(sluice_dq_consumer *con, sluice_dq_msg *msg, int reason, void *ud) {
  consume_state *st = ud;
  for (job *j = st->jobs; j; j = j->next) {
    if (j->msg != msg) continue;
    j->lost = 1;
    if (j->watchdog == 0) watchdog_arm(j);
    return;
  }
}

static void handle(sluice_dq_consumer *con, sluice_dq_msg *msg, void *ud) {
  consume_state *st = ud;
  job *j = calloc(1, sizeof *j);
  st->started++;
  if (st->count && st->started >= st->count) st->stopping = 1;
  if (j) {
    j->st = st;
    j->msg = msg;
    j->timer = evtimer_new(st->ctx.base, on_watchdog, j);
    j->started_ms = mono_ms();
  }
  if (!j || !j->timer || spawn_job(st, j) < 0) {
    cli_error("cannot start CMD: %s", strerror(errno));
    if (j && j->timer) event_free(j->timer);
    free(j);
    if (sluice_dq_retry(msg, st->retry_delay_ms, on_settled, st) != SLUICE_OK) st->settled++;
    if (!st->exit_code) st->exit_code = CLI_EXIT_FAILURE;
    st->stopping = 1;
    maybe_stop(st);
    return;
  }
  watchdog_arm(j);
  j->next = st->jobs;
  st->jobs = j;
  st->njobs++;
  maybe_stop(st);
}

/* errno of a failed exec, 0 if CMD ran. */
static int exec_error(job *j) {
  int err = 0;
  ssize_t r;
  while ((r = read(j->exec_fd, &err, sizeof err)) < 0 && errno == EINTR) {}
  close(j->exec_fd);
  return r == (ssize_t)sizeof err ? err : 0;
}

/* CMD exited: ack on status 0, else retry (or dead-letter on the last attempt). */
static void job_done(consume_state *st, job *j, int wstatus) {
  const char *id = sluice_dq_msg_id(j->msg);
  unsigned attempt = sluice_dq_msg_attempt(j->msg);
  int err = exec_error(j), rc;
  event_free(j->timer);
  if (err) {
    cli_error("cannot run '%s': %s", cli_echo(st->cmd[0]), strerror(err));
    if (!st->exit_code) st->exit_code = err == ENOENT ? 127 : 126;
    st->stopping = 1; /* every message would fail the same way */
  }
  if (!err && !j->watchdog && WIFEXITED(wstatus) && WEXITSTATUS(wstatus) == 0) {
    rc = sluice_dq_ack(j->msg, on_settled, st);
  } else {
    int last = st->max_attempts && attempt >= st->max_attempts;
    if (err) {
      /* said above */
    } else if (j->watchdog) {
      cli_error("message %s attempt %u: CMD stopped (%s)", id, attempt,
                j->lost ? "message lost"
                : st->timeout_ms && mono_ms() >= j->started_ms + st->timeout_ms
                    ? "--timeout"
                    : "visibility deadline");
    } else if (WIFSIGNALED(wstatus)) {
      cli_error("message %s attempt %u: CMD killed by signal %d", id, attempt, WTERMSIG(wstatus));
    } else {
      cli_error("message %s attempt %u: CMD exited with status %d", id, attempt,
                WEXITSTATUS(wstatus));
    }
    if (last)
      cli_error("message %s: %u attempts failed: moving it to the dead letters", id, attempt);
    rc = sluice_dq_retry(j->msg, st->retry_delay_ms, on_settled, st);
  }
  if (rc != SLUICE_OK) {
    cli_fail(&st->ctx, rc, 0, "cannot settle a message");
    st->settled++;
  }
  free(j);
}

static void on_sigchld(evutil_socket_t sig, short what, void *arg) {
  consume_state *st = arg;
  int wstatus;
  pid_t pid;
  while ((pid = waitpid(-1, &wstatus, WNOHANG)) > 0) {
    for (job **pp = &st->jobs; *pp; pp = &(*pp)->next) {
      if ((*pp)->pid != pid) continue;
      job *j = *pp;
      *pp = j->next;
      st->njobs--;
      job_done(st, j, wstatus);
      break;
    }
  }
  maybe_stop(st);
}

/* First signal: take nothing more, let running CMDs finish and settle them.
 * Later ones: pass SIGTERM on to the running CMDs (their messages are then
 * retried unless they still exit 0). */
static void on_stop_signal(evutil_socket_t sig, short what, void *arg) {
  consume_state *st = arg;
  if (st->signals++ == 0) {
    st->stopping = 1;
    if (st->njobs)
      cli_error("stopping: waiting for %u running CMD%s (signal again to send %s SIGTERM)",
                st->njobs, st->njobs == 1 ? "" : "s", st->njobs == 1 ? "it" : "them");
  } else if (st->njobs) {
    cli_error("sending SIGTERM to %u running CMD%s", st->njobs, st->njobs == 1 ? "" : "s");
    for (job *j = st->jobs; j; j = j->next) kill(-j->pid, SIGTERM);
  }
  maybe_stop(st);
}

static void on_take_error(sluice_dq_consumer *con, int status, void *ud) {
  consume_state *st = ud;
  cli_capture(&st->ctx, status);
  cli_fail(&st->ctx, status, 0, "take failed (retrying)");
}

static int finished(const consume_state *st) {
  return st->stopping && !st->con && !st->jobs && st->settled >= st->started;
}

/* Stop taking once stopping; finish once no CMD runs and all settled. */
static void maybe_stop(consume_state *st) {
  if (!st->stopping) return;
  if (st->con) {
    sluice_dq_consumer_free(st->con);
    st->con = NULL;
  }
  if (!finished(st)) return;
  if (st->sigchld) event_del(st->sigchld);
  if (st->sigint) event_del(st->sigint);
  if (st->sigterm) event_del(st->sigterm);
  if (st->sighup) event_del(st->sighup);
}

/* Whether execvp would find CMD; an errno value when it cannot. */
static int cmd_missing(const char *cmd) {
  struct stat sb;
  if (strchr(cmd, '/')) {
    if (stat(cmd, &sb)) return errno;
    return S_ISREG(sb.st_mode) && access(cmd, X_OK) == 0 ? 0 : EACCES;
  }
  const char *path = getenv("PATH");
  int err = ENOENT;
  if (!path) path = "/bin:/usr/bin";
  for (const char *p = path;; p++) {
    const char *end = strchr(p, ':');
    size_t n = end ? (size_t)(end - p) : strlen(p);
    char full[4096];
    if (snprintf(full, sizeof full, "%.*s%s%s", (int)n, p, n ? "/" : "", cmd) < (int)sizeof full &&
        stat(full, &sb) == 0 && S_ISREG(sb.st_mode)) {
      if (access(full, X_OK) == 0) return 0;
      err = EACCES;
    }
    if (!end) break;
    p = end;
  }
  return err;
}

static int parse_consume(consume_state *st, sluice_dq_consumer_options *o, int argc, char **argv) {
  for (int i = 1; i < argc; i++) {
    const char *s = argv[i];
    unsigned *target = NULL;
    int rc = cli_common_option(&st->ctx, argc, argv, &i);
    if (rc < 0) return -1;
    if (rc > 0) continue;
    if (!strcmp(s, "--")) {
      st->cmd = argv + i + 1;
      break;
    }
    /* --batch is the older name: it always meant CMDs run at once. */
    if (!strcmp(s, "--concurrency") || !strcmp(s, "-j") || !strcmp(s, "--batch"))
      target = &st->concurrency;
    else if (!strcmp(s, "--visibility")) target = &o->visibility_ms;
    else if (!strcmp(s, "--timeout")) target = &st->timeout_ms;
    else if (!strcmp(s, "--max-attempts")) target = &o->max_attempts;
    else if (!strcmp(s, "--retry-delay")) target = &st->retry_delay_ms;
    if (target || !strcmp(s, "--count")) {
      const char *value = i + 1 < argc ? argv[i + 1] : NULL;
      uint64_t v, min = 0, max = UINT32_MAX;
      const char *unit = "ms";
      if (target == &st->concurrency) min = 1, max = CONCURRENCY_MAX, unit = "";
      else if (target == &o->visibility_ms) min = 10;
      else if (target == &o->max_attempts || !target) unit = "";
      if (!target) max = UINT64_MAX;
      if (cli_number(s, value, min, max, unit, &v)) return -1;
      i++;
      if (target) *target = (unsigned)v;
      else st->count = v;
    } else if (s[0] == '-' || st->queue) {
      cli_error("unexpected argument '%s'", cli_echo(s));
      return -1;
    } else {
      st->queue = s;
    }
  }
  if (!st->queue) cli_error("missing QUEUE");
  else if (cli_check_len("QUEUE", st->queue, SLUICE_NAME_MAX)) return -1;
  else if (!st->cmd || !st->cmd[0]) cli_error("missing -- CMD");
  else return 0;
  return -1;
}

static int start_consume(consume_state *st, sluice_dq_consumer_options *o) {
  struct event_base *base = st->ctx.base;
  st->sigchld = evsignal_new(base, SIGCHLD, on_sigchld, st);
  st->sigint = evsignal_new(base, SIGINT, on_stop_signal, st);
  st->sigterm = evsignal_new(base, SIGTERM, on_stop_signal, st);
  st->sighup = evsignal_new(base, SIGHUP, on_stop_signal, st);
  if (!st->sigchld || !st->sigint || !st->sigterm || !st->sighup ||
      evsignal_add(st->sigchld, NULL) || evsignal_add(st->sigint, NULL) ||
      evsignal_add(st->sigterm, NULL) || evsignal_add(st->sighup, NULL))
    return SLUICE_ENOMEM;
  /* Take only what can run at once: what we hold is invisible to others. */
  o->max_in_flight = st->concurrency;
  o->batch = st->concurrency < 1000 ? st->concurrency : 1000;
  st->max_attempts = o->max_attempts;
  st->visibility_ms = o->visibility_ms;
  int rc = sluice_dq_consumer_new(st->ctx.client, st->queue, o, handle, st, &st->con);
  if (rc != SLUICE_OK) return rc;
  sluice_dq_consumer_set_error_cb(st->con, on_take_error, st);
  sluice_dq_consumer_set_lost_cb(st->con, on_lost, st);
  return sluice_dq_consumer_set_auto_renew(st->con, 1);
}

static int cmd_consume(int argc, char **argv) {
  consume_state st = {0};
  sluice_dq_consumer_options o;
  sluice_dq_consumer_options_init(&o);
  o.visibility_ms = 60000;
  st.concurrency = 1;
  st.retry_delay_ms = 1000;
  if (parse_consume(&st, &o, argc, argv)) return CLI_EXIT_USAGE;
  int err = cmd_missing(st.cmd[0]);
  if (err) {
    cli_error("cannot run '%s': %s", cli_echo(st.cmd[0]),
              err == ENOENT ? "command not found" : strerror(err));
    return err == ENOENT ? 127 : 126;
  }
  sigprocmask(SIG_SETMASK, NULL, &st.start_mask);
  st.self = getpid();
  cli_fds_note(&st.fds);
  int rc = cli_connect(&st.ctx, 2000);
  if (rc != CLI_EXIT_OK) {
    cli_fds_free(&st.fds);
    return rc;
  }
  rc = start_consume(&st, &o);
  if (rc != SLUICE_OK) {
    st.exit_code = cli_fail(&st.ctx, rc, 0, "cannot consume");
    st.stopping = 1;
    maybe_stop(&st);
  }
  while (!finished(&st)) event_base_loop(st.ctx.base, EVLOOP_ONCE);
  if (st.sigchld) event_free(st.sigchld);
  if (st.sigint) event_free(st.sigint);
  if (st.sigterm) event_free(st.sigterm);
  if (st.sighup) event_free(st.sighup);
  cli_close(&st.ctx);
  cli_fds_free(&st.fds);
  return st.exit_code;
}

int cli_dq_main(int argc, char **argv) {
  if (argc < 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
    dq_usage(argc < 2 ? stderr : stdout);
    return argc < 2 ? CLI_EXIT_USAGE : CLI_EXIT_OK;
  }
  for (int i = 2; i < argc && strcmp(argv[i], "--"); i++)
    if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
      dq_usage(stdout);
      return CLI_EXIT_OK;
    }
  if (!strcmp(argv[1], "push")) {
    cli_set_command("dq push");
    return cmd_push(argc - 1, argv + 1);
  }
  if (!strcmp(argv[1], "consume")) {
    cli_set_command("dq consume");
    return cmd_consume(argc - 1, argv + 1);
  }
  if (!strcmp(argv[1], "status")) {
    cli_set_command("dq status");
    return cmd_status(argc - 1, argv + 1);
  }
  if (!strcmp(argv[1], "schedule")) {
    cli_set_command("dq schedule");
    return cli_dq_schedule_main(argc - 1, argv + 1);
  }
  cli_error("unknown dq command '%s' (try: sluice dq --help)", cli_echo(argv[1]));
  return CLI_EXIT_USAGE;
}
