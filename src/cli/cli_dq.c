/* `sluice dq`: push to, consume from and inspect a delay queue. */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <event2/event.h>

#include "cli.h"

static void dq_usage(FILE *out) {
  fputs(
      "usage: sluice dq push QUEUE [--delay MS | --at UNIX_MS] [--id ID] [PAYLOAD | -]\n"
      "       sluice dq consume QUEUE [--batch N] [--visibility MS] [--max-attempts N]\n"
      "                         [--retry-delay MS] [--count N] -- CMD [ARGS]\n"
      "       sluice dq status QUEUE\n"
      "\n"
      "push: queue PAYLOAD (or stdin when it is '-' or missing; any bytes, up to\n"
      "  1 MiB) due after --delay MS (default 0) or at --at UNIX_MS on Redis's\n"
      "  clock; prints the message id. --id sets the id; if a message with that\n"
      "  id is still queued nothing is pushed and the exit status is 1.\n"
      "consume: run CMD once per due message with the payload on its stdin and\n"
      "  SLUICE_DQ_QUEUE, SLUICE_DQ_ID, SLUICE_DQ_ATTEMPT in its environment;\n"
      "  acknowledge when it exits 0, else retry after --retry-delay MS (default\n"
      "  1000). Up to --batch N (default 1) CMDs run at once. A message not done\n"
      "  within --visibility MS (default 60000) is given to another consumer;\n"
      "  after --max-attempts N (default 5, 0 = no limit) it is dead-lettered.\n"
      "  Stops after --count N messages, or on SIGINT/SIGTERM once running CMDs\n"
      "  finished; exit status 0.\n"
      "status: counts of delayed (and due), in-flight (and expired) and dead\n"
      "  messages, and the next due one.\n"
      "\n"
      "Options of every command: --redis URL, --prefix PREFIX (see sluice --help).\n"
      "Exit status: 0 success; 1 push: duplicate id; 64 bad arguments;\n"
      "69 Redis unreachable or failing; 70 internal error.\n",
      out);
}

static int status_exit(int status) {
  switch (status) {
  case SLUICE_OK: return CLI_EXIT_OK;
  case SLUICE_EEXIST: return CLI_EXIT_NO;
  case SLUICE_EINVAL:
  case SLUICE_ETOOBIG: return CLI_EXIT_USAGE;
  case SLUICE_ENOMEM: return CLI_EXIT_FAILURE;
  default: return CLI_EXIT_UNAVAILABLE;
  }
}

/* ---- push ------------------------------------------------------------------- */

typedef struct push_state {
  int done, status;
} push_state;

static void on_pushed(sluice_dq *dq, int status, const char *id, int64_t due, void *ud) {
  push_state *p = ud;
  p->done = 1;
  p->status = status;
  if (status == SLUICE_OK) printf("%s\n", id);
  else if (status == SLUICE_EEXIST) cli_error("a message with id '%s' is already queued", id);
  else cli_error("push failed: %s", sluice_strerror(status));
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
  uint64_t delay, at;
  int have_delay, have_at;
} push_args;

/* A value option's number; -1 after printing why on error. */
static int push_number(const char *opt, const char *v, uint64_t *out) {
  if (cli_parse_u64(v, (uint64_t)SLUICE_DQ_TIME_MAX, out) == 0) return 0;
  cli_error("%s: expected milliseconds, got '%s'", opt, v);
  return -1;
}

static int push_positional(push_args *a, const char *s) {
  if (!a->queue) a->queue = s;
  else if (!a->payload) a->payload = s;
  else {
    cli_error("dq push: unexpected argument '%s'", s);
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
    int value = !strcmp(s, "--delay") || !strcmp(s, "--at") || !strcmp(s, "--id");
    if (value && i + 1 >= argc) {
      cli_error("%s needs a value", s);
      return -1;
    }
    if (!strcmp(s, "--delay")) {
      if (push_number(s, argv[++i], &a->delay)) return -1;
      a->have_delay = 1;
    } else if (!strcmp(s, "--at")) {
      if (push_number(s, argv[++i], &a->at) || !a->at) return -1;
      a->have_at = 1;
    } else if (!strcmp(s, "--id")) {
      a->id = argv[++i];
    } else if (s[0] == '-' && s[1]) {
      cli_error("dq push: unknown option '%s'", s);
      return -1;
    } else if (push_positional(a, s)) {
      return -1;
    }
  }
  for (i++; i < argc; i++) /* after "--": all positional */
    if (push_positional(a, argv[i])) return -1;
  if (!a->queue) cli_error("dq push: missing QUEUE");
  else if (a->have_delay && a->have_at) cli_error("dq push: --delay and --at exclude each other");
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
  push_state p = {0, 0};
  if (rc == CLI_EXIT_OK) {
    rc = sluice_dq_new(ctx.client, a.queue, NULL, &dq);
    if (rc == SLUICE_OK) rc = sluice_dq_push(dq, &it, on_pushed, &p);
    if (rc != SLUICE_OK) cli_error("dq push: %s", sluice_strerror(rc));
    else while (!p.done) event_base_loop(ctx.base, EVLOOP_ONCE);
    rc = status_exit(rc != SLUICE_OK ? rc : p.status);
    sluice_dq_free(dq);
    cli_close(&ctx);
  }
  free(in);
  return rc;
}

/* ---- status ----------------------------------------------------------------- */

typedef struct status_state {
  int done, status;
} status_state;

static void on_info(sluice_dq *dq, int status, const sluice_dq_info *in, void *ud) {
  status_state *s = ud;
  s->done = 1;
  s->status = status;
  if (status != SLUICE_OK) {
    cli_error("status failed: %s", sluice_strerror(status));
    return;
  }
  printf("queue      %s\n", sluice_dq_name(dq));
  printf("delayed    %llu (due now %llu)\n", (unsigned long long)in->delayed,
         (unsigned long long)in->ready);
  printf("in_flight  %llu (past deadline %llu)\n", (unsigned long long)in->in_flight,
         (unsigned long long)in->expired);
  printf("dead       %llu\n", (unsigned long long)in->dead);
  if (in->next_id)
    printf("next       %s due at %lld (in %lld ms)\n", in->next_id, (long long)in->next_due_ms,
           (long long)(in->next_due_ms - in->now_ms));
  else
    printf("next       -\n");
}

static int cmd_status(int argc, char **argv) {
  cli_ctx ctx = {0};
  const char *queue = NULL;
  for (int i = 1; i < argc; i++) {
    int rc = cli_common_option(&ctx, argc, argv, &i);
    if (rc < 0) return CLI_EXIT_USAGE;
    if (rc > 0) continue;
    if (argv[i][0] == '-' || queue) {
      cli_error("dq status: unexpected argument '%s'", argv[i]);
      return CLI_EXIT_USAGE;
    }
    queue = argv[i];
  }
  if (!queue) {
    cli_error("dq status: missing QUEUE");
    return CLI_EXIT_USAGE;
  }
  int rc = cli_connect(&ctx, 2000);
  if (rc != CLI_EXIT_OK) return rc;
  sluice_dq *dq = NULL;
  status_state s = {0, 0};
  rc = sluice_dq_new(ctx.client, queue, NULL, &dq);
  if (rc == SLUICE_OK) rc = sluice_dq_inspect(dq, on_info, &s);
  if (rc != SLUICE_OK) cli_error("dq status: %s", sluice_strerror(rc));
  else while (!s.done) event_base_loop(ctx.base, EVLOOP_ONCE);
  rc = status_exit(rc != SLUICE_OK ? rc : s.status);
  sluice_dq_free(dq);
  cli_close(&ctx);
  return rc;
}

/* ---- consume ---------------------------------------------------------------- */

typedef struct job job;

typedef struct consume_state {
  cli_ctx ctx;
  const char *queue;
  char **cmd;
  uint64_t count;         /* stop after this many settled; 0 = never */
  uint64_t started, settled;
  unsigned retry_delay_ms;
  sluice_dq_consumer *con;
  struct event *sigchld, *sigint, *sigterm;
  job *jobs;              /* CMDs running */
  int stopping, failed;
} consume_state;

struct job {
  job *next;
  pid_t pid;
  sluice_dq_msg *msg;
};

static void maybe_stop(consume_state *st);

static void on_settled(sluice_dq_consumer *con, int status, const char *id, void *ud) {
  consume_state *st = ud;
  st->settled++;
  if (status != SLUICE_OK)
    cli_error("message %s: settle failed: %s", id, sluice_strerror(status));
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

static pid_t spawn_cmd(consume_state *st, sluice_dq_msg *msg) {
  char attempt[16];
  int fd = payload_fd(msg);
  if (fd < 0) return -1;
  snprintf(attempt, sizeof attempt, "%u", sluice_dq_msg_attempt(msg));
  pid_t pid = fork();
  if (pid == 0) {
    dup2(fd, 0);
    close(fd);
    setenv("SLUICE_DQ_QUEUE", st->queue, 1);
    setenv("SLUICE_DQ_ID", sluice_dq_msg_id(msg), 1);
    setenv("SLUICE_DQ_ATTEMPT", attempt, 1);
    signal(SIGPIPE, SIG_DFL);
    execvp(st->cmd[0], st->cmd);
    fprintf(stderr, "sluice: cannot run %s: %s\n", st->cmd[0], strerror(errno));
    _exit(127);
  }
  close(fd);
  return pid;
}

static void handle(sluice_dq_consumer *con, sluice_dq_msg *msg, void *ud) {
  consume_state *st = ud;
  job *j = calloc(1, sizeof *j);
  st->started++;
  if (st->count && st->started >= st->count) st->stopping = 1;
  if (!j || (j->pid = spawn_cmd(st, msg)) < 0) {
    cli_error("cannot start CMD: %s", strerror(errno));
    free(j);
    sluice_dq_retry(msg, st->retry_delay_ms, on_settled, st);
    st->failed = 1;
    st->stopping = 1;
    maybe_stop(st);
    return;
  }
  j->msg = msg;
  j->next = st->jobs;
  st->jobs = j;
  maybe_stop(st);
}

static void job_done(consume_state *st, job *j, int wstatus) {
  int ok = WIFEXITED(wstatus) && WEXITSTATUS(wstatus) == 0;
  int rc = ok ? sluice_dq_ack(j->msg, on_settled, st)
              : sluice_dq_retry(j->msg, st->retry_delay_ms, on_settled, st);
  if (rc != SLUICE_OK) {
    cli_error("message settle failed: %s", sluice_strerror(rc));
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
      job_done(st, j, wstatus);
      break;
    }
  }
  maybe_stop(st);
}

static void on_stop_signal(evutil_socket_t sig, short what, void *arg) {
  consume_state *st = arg;
  st->stopping = 1;
  maybe_stop(st);
}

static void on_take_error(sluice_dq_consumer *con, int status, void *ud) {
  cli_error("take failed (retrying): %s", sluice_strerror(status));
}

/* Stop taking once stopping; finish once no CMD runs and all settled. */
static void maybe_stop(consume_state *st) {
  if (!st->stopping) return;
  if (st->con) {
    sluice_dq_consumer_free(st->con);
    st->con = NULL;
  }
  if (st->jobs || st->settled < st->started) return;
  if (st->sigchld) event_del(st->sigchld);
  if (st->sigint) event_del(st->sigint);
  if (st->sigterm) event_del(st->sigterm);
}

static int parse_consume(consume_state *st, sluice_dq_consumer_options *o, int argc,
                         char **argv) {
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
    if (!strcmp(s, "--batch")) target = &o->batch;
    else if (!strcmp(s, "--visibility")) target = &o->visibility_ms;
    else if (!strcmp(s, "--max-attempts")) target = &o->max_attempts;
    else if (!strcmp(s, "--retry-delay")) target = &st->retry_delay_ms;
    if (target || !strcmp(s, "--count")) {
      uint64_t v;
      if (i + 1 >= argc || cli_parse_u64(argv[i + 1], target ? 0xffffffffu : UINT64_MAX, &v)) {
        cli_error("%s needs a number", s);
        return -1;
      }
      i++;
      if (target) *target = (unsigned)v;
      else st->count = v;
    } else if (s[0] == '-' || st->queue) {
      cli_error("dq consume: unexpected argument '%s'", s);
      return -1;
    } else {
      st->queue = s;
    }
  }
  if (!st->queue) cli_error("dq consume: missing QUEUE");
  else if (!st->cmd || !st->cmd[0]) cli_error("dq consume: missing -- CMD");
  else if (o->batch < 1) cli_error("dq consume: --batch must be at least 1");
  else return 0;
  return -1;
}

static int start_consume(consume_state *st, sluice_dq_consumer_options *o) {
  struct event_base *base = st->ctx.base;
  st->sigchld = evsignal_new(base, SIGCHLD, on_sigchld, st);
  st->sigint = evsignal_new(base, SIGINT, on_stop_signal, st);
  st->sigterm = evsignal_new(base, SIGTERM, on_stop_signal, st);
  if (!st->sigchld || !st->sigint || !st->sigterm || evsignal_add(st->sigchld, NULL) ||
      evsignal_add(st->sigint, NULL) || evsignal_add(st->sigterm, NULL))
    return SLUICE_ENOMEM;
  o->max_in_flight = o->batch; /* one CMD per message held */
  int rc = sluice_dq_consumer_new(st->ctx.client, st->queue, o, handle, st, &st->con);
  if (rc == SLUICE_OK) sluice_dq_consumer_set_error_cb(st->con, on_take_error, st);
  return rc;
}

static int cmd_consume(int argc, char **argv) {
  consume_state st = {0};
  sluice_dq_consumer_options o;
  sluice_dq_consumer_options_init(&o);
  o.batch = 1;
  o.visibility_ms = 60000;
  st.retry_delay_ms = 1000;
  if (parse_consume(&st, &o, argc, argv)) return CLI_EXIT_USAGE;
  int rc = cli_connect(&st.ctx, 2000);
  if (rc != CLI_EXIT_OK) return rc;
  rc = start_consume(&st, &o);
  if (rc != SLUICE_OK) {
    cli_error("dq consume: %s", sluice_strerror(rc));
    st.stopping = 1;
    maybe_stop(&st);
  }
  /* Runs until maybe_stop removed the signal events and the consumer is gone. */
  while (!st.stopping || st.jobs || st.settled < st.started || st.con)
    event_base_loop(st.ctx.base, EVLOOP_ONCE);
  if (st.sigchld) event_free(st.sigchld);
  if (st.sigint) event_free(st.sigint);
  if (st.sigterm) event_free(st.sigterm);
  cli_close(&st.ctx);
  if (rc != SLUICE_OK) return status_exit(rc);
  return st.failed ? CLI_EXIT_FAILURE : CLI_EXIT_OK;
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
  if (!strcmp(argv[1], "push")) return cmd_push(argc - 1, argv + 1);
  if (!strcmp(argv[1], "consume")) return cmd_consume(argc - 1, argv + 1);
  if (!strcmp(argv[1], "status")) return cmd_status(argc - 1, argv + 1);
  cli_error("dq: unknown command '%s' (try: sluice dq --help)", argv[1]);
  return CLI_EXIT_USAGE;
}
