/* Plumbing shared by the subcommands of the `sluice` tool. */
#include <dirent.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <event2/event.h>

#include "cli.h"
#include "cli_url.h"

static const char *command; /* "sem run": says which command speaks */

void cli_set_command(const char *name) { command = name; }

/* Length of the control character at s (C0, DEL, or C1 as UTF-8
 * U+0080..U+009F, which some terminals obey too), or 0. */
static size_t control_at(const unsigned char *s) {
  if (*s < 0x20 || *s == 0x7f) return 1;
  return s[0] == 0xc2 && s[1] >= 0x80 && s[1] <= 0x9f ? 2 : 0;
}

/* s with every control character written as \xNN into out (4 bytes for
 * each byte at most). */
static void escape_into(const char *s, char *out) {
  const unsigned char *p = (const unsigned char *)s;
  while (*p) {
    size_t n = control_at(p);
    if (!n) {
      *out++ = (char)*p++;
      continue;
    }
    for (; n > 0; n--) out += sprintf(out, "\\x%02x", *p++);
  }
  *out = '\0';
}

const char *cli_clean(const char *s) {
  static char *bufs[8];
  static unsigned next;
  const unsigned char *p = (const unsigned char *)s;
  while (*p && !control_at(p)) p++;
  if (!*p) return s; /* the common case: nothing to escape, no copy */
  char **b = &bufs[next++ % 8];
  free(*b);
  if (!(*b = malloc(strlen(s) * 4 + 1))) return "(unprintable)";
  escape_into(s, *b);
  return *b;
}

/* "sluice: CMD: " + the message, its control characters escaped: it may
 * quote Redis or a name. */
static void verror(const char *fmt, va_list ap, const char *tail) {
  char msg[2048];
  vsnprintf(msg, sizeof msg, fmt, ap);
  fputs("sluice: ", stderr);
  if (command) fprintf(stderr, "%s: ", command);
  fprintf(stderr, "%s%s\n", cli_clean(msg), tail ? cli_clean(tail) : "");
}

void cli_error(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  verror(fmt, ap, NULL);
  va_end(ap);
}

int cli_exit_status(int status, int own_deadline) {
  switch (status) {
    case SLUICE_OK: return CLI_EXIT_OK;
    case SLUICE_EEXIST: /* dq push: that --id is queued already */
    case SLUICE_ENOTFOUND: /* sem release: the permit was not held */ return CLI_EXIT_NO;
    case SLUICE_EINVAL:
    case SLUICE_ETOOBIG: return CLI_EXIT_USAGE;
    case SLUICE_EBUSY: /* --no-wait: no permit free */
    case SLUICE_EFULL: /* too many waiters: try again later */ return CLI_EXIT_TIMEOUT;
    case SLUICE_ETIMEDOUT: return own_deadline ? CLI_EXIT_TIMEOUT : CLI_EXIT_UNAVAILABLE;
    case SLUICE_ECONNECTION:
    case SLUICE_EREDIS:
    case SLUICE_EPROTOCOL:
    case SLUICE_EINDOUBT: /* the command says what may have happened */
    case SLUICE_ENOREPLICA: /* a master cut off from its replicas */ return CLI_EXIT_UNAVAILABLE;
    default: /* ENOMEM, ECANCELED, ECLOSED, ELATE: not expected */ return CLI_EXIT_FAILURE;
  }
}

void cli_capture(cli_ctx *ctx, int status) {
  /* Only these come with words of their own: Redis's error reply, or why
   * the connection failed or went. Another status would show stale text. */
  if (!ctx->client ||
      (status != SLUICE_EREDIS && status != SLUICE_ECONNECTION && status != SLUICE_EINDOUBT))
    return;
  snprintf(ctx->why, sizeof ctx->why, "%s", sluice_client_last_error(ctx->client));
  ctx->why_status = status;
}

int cli_fail(const cli_ctx *ctx, int status, int own_deadline, const char *fmt, ...) {
  va_list ap;
  char tail[sizeof ctx->why + 64];
  const char *why = ctx && ctx->why[0] && ctx->why_status == status ? ctx->why : NULL;
  if (status == SLUICE_EREDIS && why)
    snprintf(tail, sizeof tail, ": %s", why); /* "Redis: OOM ..." */
  else if (why) snprintf(tail, sizeof tail, ": %s (%s)", sluice_strerror(status), why);
  else snprintf(tail, sizeof tail, ": %s", sluice_strerror(status));
  va_start(ap, fmt);
  verror(fmt, ap, tail);
  va_end(ap);
  return cli_exit_status(status, own_deadline);
}

#define ECHO_MAX 64

const char *cli_echo(const char *s) {
  static char bufs[4][ECHO_MAX + 48];
  static unsigned next;
  char *b = bufs[next++ % 4];
  size_t len = strlen(s), n = len;
  if (len > ECHO_MAX) {
    n = ECHO_MAX;
    while (n > 0 && ((unsigned char)s[n] & 0xc0) == 0x80) n--; /* whole UTF-8 characters */
  }
  for (size_t i = 0; i < n; i++) {
    unsigned char c = (unsigned char)s[i];
    b[i] = c < 0x20 || c == 0x7f ? '?' : (char)c; /* no escapes reach the terminal */
  }
  b[n] = '\0';
  if (n < len) snprintf(b + n, sizeof bufs[0] - n, "\u2026 (%zu bytes)", len);
  return b;
}

int cli_check_len(const char *what, const char *name, size_t max) {
  size_t len = strlen(name);
  if (len >= 1 && len <= max) return 0;
  if (len == 0) cli_error("%s must be 1..%zu bytes, got an empty one", what, max);
  else cli_error("%s '%s' is too long: at most %zu bytes", what, cli_echo(name), max);
  return -1;
}

int cli_number(const char *opt, const char *s, uint64_t min, uint64_t max, const char *unit,
               uint64_t *out) {
  const char *sp = *unit ? " " : "";
  uint64_t v;
  if (!s) {
    cli_error("%s needs a value: %llu..%llu%s%s", opt, (unsigned long long)min,
              (unsigned long long)max, sp, unit);
    return -1;
  }
  if (cli_parse_u64(s, UINT64_MAX, &v) == 0 && v >= min && v <= max) {
    *out = v;
    return 0;
  }
  /* A number too large is shown as given; anything else quoted. */
  const char *q = *s && strspn(s, "0123456789") == strlen(s) ? "" : "'";
  cli_error("%s must be %llu..%llu%s%s, got %s%s%s", opt, (unsigned long long)min,
            (unsigned long long)max, sp, unit, q, cli_echo(s), q);
  return -1;
}

int cli_number_u(const char *opt, const char *s, unsigned min, unsigned max, const char *unit,
                 unsigned *out) {
  uint64_t v;
  if (cli_number(opt, s, min, max, unit, &v)) return -1;
  *out = (unsigned)v;
  return 0;
}

int cli_parse_u64(const char *s, uint64_t max, uint64_t *out) {
  char *end;
  if (!s || !*s || *s == '-' || *s == '+') return -1;
  errno = 0;
  unsigned long long v = strtoull(s, &end, 10);
  if (errno || *end || v > max) return -1;
  *out = v;
  return 0;
}

/* The URLs the tool was given, its own copies (argv's and the
 * environment's bytes are scrubbed); kept until exit. */
static char *env_url, *arg_url;

void cli_secrets_init(void) {
  char *url = getenv("SLUICE_REDIS");
  if (!url) return;
  char *bare = cli_url_without_credentials(url);
  if (!(env_url = strdup(url)) || !bare || setenv("SLUICE_REDIS", bare, 1) != 0) {
    /* Better no URL for the children than one with its password. */
    unsetenv("SLUICE_REDIS");
  }
  free(bare);
  cli_url_scrub(url); /* setenv made a new string: the old one stays in /proc */
}

static const char *take_url(char *arg) {
  free(arg_url);
  arg_url = strdup(arg);
  cli_url_scrub(arg);
  return arg_url ? arg_url : ""; /* out of memory: refused as an empty URL */
}

static const char *const common_options[] = {"--redis", "--redis-password-file", "--prefix"};

int cli_common_option(cli_ctx *ctx, int argc, char **argv, int *i) {
  char *a = argv[*i], *value = NULL;
  size_t k;
  for (k = 0; k < sizeof common_options / sizeof common_options[0]; k++) {
    size_t n = strlen(common_options[k]);
    if (strncmp(a, common_options[k], n) != 0) continue;
    if (a[n] == '=') {
      value = a + n + 1;
    } else if (a[n] == '\0') {
      if (*i + 1 >= argc) {
        cli_error("%s needs a value", a);
        return -1;
      }
      value = argv[++*i];
    } else {
      continue;
    }
    break;
  }
  if (!value) return 0;
  if (k == 0) ctx->url = take_url(value);
  else if (k == 1) ctx->password_file = value;
  else ctx->prefix = value;
  return 1;
}

int cli_parse_name_only(cli_ctx *ctx, int argc, char **argv, int first, const cli_name_words *w,
                        const char **name) {
  *name = NULL;
  for (int i = first; i < argc; i++) {
    int rc = cli_common_option(ctx, argc, argv, &i);
    if (rc < 0) return -1;
    if (rc > 0) continue;
    if (argv[i][0] == '-' || *name) {
      cli_error("unexpected argument '%s'%s", cli_echo(argv[i]), w->hint);
      return -1;
    }
    *name = argv[i];
  }
  if (!*name) {
    cli_error("%s", w->missing);
    return -1;
  }
  return cli_check_len(w->what, *name, SLUICE_NAME_MAX);
}

void cli_call_done(cli_call *call, int status) {
  call->done = 1;
  call->status = status;
  cli_capture(call->ctx, status);
}

int cli_call_wait(cli_call *call) {
  while (!call->done && event_base_loop(call->ctx->base, EVLOOP_ONCE) == 0) {}
  if (!call->done) call->status = SLUICE_ECONNECTION;
  return call->status;
}

typedef struct connect_wait {
  int done;
  int up;
} connect_wait;

static void on_state(sluice_client *c, int connected, int status, void *ud) {
  connect_wait *w = ud;
  w->done = 1;
  w->up = connected;
}

static void on_deadline(evutil_socket_t fd, short what, void *ud) {
  ((connect_wait *)ud)->done = 1;
}

const char *cli_redis_url(const cli_ctx *ctx) {
  return ctx->url ? ctx->url : env_url ? env_url : CLI_DEFAULT_REDIS;
}

int cli_connect(cli_ctx *ctx, unsigned timeout_ms) {
  sluice_client_options o;
  connect_wait w = {0, 0};
  ctx->url = cli_redis_url(ctx);
  if (!ctx->password_file) ctx->password_file = getenv("SLUICE_REDIS_PASSWORD_FILE");
  if (!(ctx->shown_url = cli_url_masked(ctx->url))) {
    cli_error("out of memory");
    return CLI_EXIT_FAILURE;
  }
  sluice_client_options_init(&o);
  o.url = ctx->url;
  o.password_file = ctx->password_file;
  if (ctx->prefix) o.key_prefix = ctx->prefix;
  o.connect_timeout_ms = timeout_ms;
  /* The precise clock: --wait and --timeout are deadlines, and libevent's
   * default coarse clock can end them a few ms early. */
  struct event_config *cfg = event_config_new();
  if (cfg) event_config_set_flag(cfg, EVENT_BASE_FLAG_PRECISE_TIMER);
  ctx->base = cfg ? event_base_new_with_config(cfg) : NULL;
  if (cfg) event_config_free(cfg);
  if (!ctx->base) {
    cli_error("cannot create event loop");
    cli_close(ctx);
    return CLI_EXIT_FAILURE;
  }
  int rc = sluice_client_new(ctx->base, &o, &ctx->client);
  if (rc) {
    const char *why = sluice_client_last_error(NULL);
    cli_error("cannot use Redis URL '%s'%s: %s", cli_echo(ctx->shown_url),
              o.password_file ? " with its password file" : "", *why ? why : sluice_strerror(rc));
    cli_close(ctx);
    return CLI_EXIT_USAGE;
  }
  sluice_client_set_state_cb(ctx->client, on_state, &w);
  struct event *t = evtimer_new(ctx->base, on_deadline, &w);
  struct timeval tv = {timeout_ms / 1000, (timeout_ms % 1000) * 1000};
  evtimer_add(t, &tv);
  while (!w.done) event_base_loop(ctx->base, EVLOOP_ONCE);
  event_free(t);
  sluice_client_set_state_cb(ctx->client, NULL, NULL);
  if (!w.up) {
    const char *why = sluice_client_last_error(ctx->client);
    cli_error("cannot reach Redis at %s: %s", ctx->shown_url, *why ? why : "timed out");
    cli_close(ctx);
    return CLI_EXIT_UNAVAILABLE;
  }
  return CLI_EXIT_OK;
}

void cli_close(cli_ctx *ctx) {
  free(ctx->shown_url);
  ctx->shown_url = NULL;
  if (ctx->client) {
    sluice_client_free(ctx->client);
    ctx->client = NULL;
  }
  if (ctx->base) {
    event_base_dispatch(ctx->base); /* returns once nothing is pending */
    event_base_free(ctx->base);
    ctx->base = NULL;
  }
}

void cli_fds_note(cli_fds *f) {
  DIR *d = opendir("/proc/self/fd");
  if (!d) return;
  struct dirent *e;
  while ((e = readdir(d)) != NULL) {
    int fd = atoi(e->d_name);
    if (e->d_name[0] == '.' || fd == dirfd(d)) continue;
    if (fd >= f->n) {
      int n = fd + 64;
      unsigned char *m = realloc(f->open, (size_t)n);
      if (!m) break; /* a child may then miss some fds: better than failing */
      memset(m + f->n, 0, (size_t)(n - f->n));
      f->open = m;
      f->n = n;
    }
    f->open[fd] = 1;
  }
  closedir(d);
}

void cli_fds_close_others(const cli_fds *f, int keep) {
  if (!f->open) return;
  DIR *d = opendir("/proc/self/fd");
  if (!d) return;
  struct dirent *e;
  while ((e = readdir(d)) != NULL) {
    int fd = atoi(e->d_name);
    if (e->d_name[0] == '.' || fd <= 2 || fd == keep || fd == dirfd(d)) continue;
    if (fd >= f->n || !f->open[fd]) close(fd);
  }
  closedir(d);
}

void cli_fds_free(cli_fds *f) {
  free(f->open);
  f->open = NULL;
  f->n = 0;
}
