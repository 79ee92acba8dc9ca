/* The gateway as a child process, and GET on loopback; see gateway_proc.h. */
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <event2/buffer.h>
#include <event2/event.h>
#include <event2/http.h>

#include "gateway_proc.h"
#include "harness.h"

/* Start the gateway (extra: one more option, or NULL) and read "gateway
 * listening on 127.0.0.1:PORT" from it. */
void gateway_start(gateway *gw, const char *extra) {
  const char *bin = getenv("SLUICE_GATEWAY");
  if (!bin || !*bin) th_fail(__FILE__, __LINE__, "SLUICE_GATEWAY not set");
  const char *wrap = getenv("SLUICE_GATEWAY_WRAPPER");
  char *wrapcopy = strdup(wrap ? wrap : "");
  const char *argv[64];
  int n = 0;
  for (char *t = strtok(wrapcopy, " "); t && n < 40; t = strtok(NULL, " ")) argv[n++] = t;
  gw->wrapped = n > 0;
  const char *args[] = {bin,
                        "--redis",
                        th_server.url,
                        "--port",
                        "0",
                        "--quiet",
                        "--rate",
                        "1000000",
                        "--permits",
                        "4",
                        "--work-ms",
                        "1",
                        "--op-timeout",
                        "100",
                        "--queue-timeout",
                        "200",
                        "--followup-every",
                        "5",
                        "--followup-delay",
                        "20",
                        NULL};
  for (int i = 0; args[i]; i++) argv[n++] = args[i];
  if (extra) argv[n++] = extra;
  argv[n] = NULL;
  int fds[2];
  TH_ASSERT(pipe(fds) == 0);
  pid_t pid = fork();
  TH_ASSERT(pid >= 0);
  if (pid == 0) {
    /* Dies with the test case, even when an assertion ends it early. */
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    dup2(fds[1], 1);
    close(fds[0]);
    close(fds[1]);
    execvp(argv[0], (char *const *)argv);
    _exit(127);
  }
  free(wrapcopy);
  close(fds[1]);
  gw->pid = pid;
  char line[256];
  size_t len = 0;
  uint64_t end = th_now_ms() + 60000; /* valgrind starts slowly */
  while (len < sizeof line - 1 && th_now_ms() < end) {
    struct pollfd p = {fds[0], POLLIN, 0};
    if (poll(&p, 1, 100) <= 0) continue;
    ssize_t k = read(fds[0], line + len, 1);
    if (k <= 0) break;
    if (line[len] == '\n') break;
    len++;
  }
  line[len] = '\0';
  close(fds[0]);
  const char *colon = strrchr(line, ':');
  gw->port = colon ? atoi(colon + 1) : 0;
  if (gw->port <= 0) th_fail(__FILE__, __LINE__, "gateway did not start: '%s'", line);
}

int gateway_stop(gateway *gw) {
  kill(gw->pid, SIGTERM);
  int st = 0;
  uint64_t end = th_now_ms() + (gw->wrapped ? 60000 : 10000);
  while (th_now_ms() < end) {
    pid_t w = waitpid(gw->pid, &st, WNOHANG);
    if (w == gw->pid) return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
    usleep(10000);
  }
  kill(gw->pid, SIGKILL);
  waitpid(gw->pid, &st, 0);
  return -1;
}

typedef struct get_req {
  struct event_base *base;
  char *text;
} get_req;

static void get_done(struct evhttp_request *req, void *arg) {
  get_req *gr = arg;
  if (req && evhttp_request_get_response_code(req) == 200) {
    struct evbuffer *in = evhttp_request_get_input_buffer(req);
    size_t n = evbuffer_get_length(in);
    gr->text = malloc(n + 1);
    if (gr->text) {
      evbuffer_remove(in, gr->text, n);
      gr->text[n] = '\0';
    }
  }
  /* The kept-alive connection would keep the loop running. */
  event_base_loopexit(gr->base, NULL);
}

char *th_http_get(int port, const char *path) {
  get_req gr = {event_base_new(), NULL};
  TH_ASSERT(gr.base != NULL);
  struct evhttp_connection *con = evhttp_connection_base_new(gr.base, NULL, "127.0.0.1",
                                                             (ev_uint16_t)port);
  TH_ASSERT(con != NULL);
  evhttp_connection_set_timeout(con, 10);
  struct evhttp_request *req = evhttp_request_new(get_done, &gr);
  evhttp_add_header(evhttp_request_get_output_headers(req), "Host", "127.0.0.1");
  if (evhttp_make_request(con, req, EVHTTP_REQ_GET, path) == 0) event_base_dispatch(gr.base);
  evhttp_connection_free(con);
  event_base_free(gr.base);
  return gr.text;
}

char *th_http_wait(int port, const char *path, const char *needle, unsigned timeout_ms) {
  uint64_t end = th_now_ms() + timeout_ms;
  for (;;) {
    char *body = th_http_get(port, path);
    if (body && strstr(body, needle)) return body;
    free(body);
    if (th_now_ms() >= end) return NULL;
    poll(NULL, 0, 50);
  }
}
