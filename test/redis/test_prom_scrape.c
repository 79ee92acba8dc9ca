/*
 * Prometheus scrapes examples/gateway. The gateway's GET /metrics must pass
 * promtool and prom_check.h's checks; then a Prometheus server of the
 * test's own (a temporary directory for its config and storage, a private
 * loopback port, scraping the gateway every second; never the system's
 * service) is asked through its HTTP API for a sluice series until it
 * returns it with the gateway's value.
 *
 * Needs prometheus and promtool (Debian 12's package): without them the
 * binary reports SKIP, or fails under CI=true.
 */
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include "gateway_proc.h"
#include "harness.h"
#include "prom_check.h"

#define GRANTS "sluice_sem_grants_total{name=\"gateway-work\"}"

typedef struct prom_server {
  pid_t pid;
  int port;
  char dir[64];
} prom_server;

static void write_config(const prom_server *p, int target_port) {
  char path[128];
  snprintf(path, sizeof path, "%s/prometheus.yml", p->dir);
  FILE *f = fopen(path, "w");
  TH_ASSERT(f != NULL);
  fprintf(f,
          "global:\n"
          "  scrape_interval: 1s\n"
          "  evaluation_interval: 1s\n"
          "scrape_configs:\n"
          "  - job_name: sluice-gateway\n"
          "    static_configs:\n"
          "      - targets: ['127.0.0.1:%d']\n",
          target_port);
  TH_ASSERT_EQ(fclose(f), 0);
}

/* Prometheus on a free port, its log in its directory; dies with the case. */
static void prom_start(prom_server *p, int target_port) {
  TH_ASSERT_EQ(th_mkdtemp(p->dir, sizeof p->dir, "prom"), 0);
  write_config(p, target_port);
  p->port = th_free_port();
  TH_ASSERT(p->port > 0);
  char config[128], storage[128], listen[64], log[128];
  snprintf(config, sizeof config, "--config.file=%s/prometheus.yml", p->dir);
  snprintf(storage, sizeof storage, "--storage.tsdb.path=%s/data", p->dir);
  snprintf(listen, sizeof listen, "--web.listen-address=127.0.0.1:%d", p->port);
  snprintf(log, sizeof log, "%s/prometheus.log", p->dir);
  p->pid = fork();
  TH_ASSERT(p->pid >= 0);
  if (p->pid == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (!freopen(log, "w", stderr) || !freopen("/dev/null", "w", stdout)) _exit(126);
    execlp("prometheus", "prometheus", config, storage, listen, "--log.level=warn", (char *)NULL);
    _exit(127);
  }
  th_note("prometheus (pid %d) on 127.0.0.1:%d scraping 127.0.0.1:%d\n", (int)p->pid, p->port,
          target_port);
}

static void print_log(const prom_server *p) {
  char cmd[192];
  snprintf(cmd, sizeof cmd, "sed 's/^/# prometheus: /' '%s/prometheus.log' | tail -n 20", p->dir);
  if (system(cmd) != 0) th_note("(no prometheus log)\n");
}

static void prom_stop(prom_server *p) {
  int st;
  kill(p->pid, SIGTERM);
  uint64_t end = th_now_ms() + 10000;
  while (waitpid(p->pid, &st, WNOHANG) == 0 && th_now_ms() < end) poll(NULL, 0, 20);
  if (kill(p->pid, 0) == 0) kill(p->pid, SIGKILL), waitpid(p->pid, &st, 0);
  char cmd[96];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", p->dir);
  TH_ASSERT_EQ(system(cmd), 0);
}

/* Some requests through the gateway, then its /metrics, checked; returns
 * the grants the semaphore counted. */
static long long drive_gateway(const gateway *gw) {
  char *s = th_http_wait(gw->port, "/metrics",
                         "sluice_client_connection_up{connection=\"command\"} 1\n",
                         gw->wrapped ? 60000 : 10000); /* valgrind starts slowly */
  TH_ASSERT(s != NULL);
  free(s);
  for (int i = 0; i < 5; i++) {
    char *body = th_http_get(gw->port, "/");
    TH_ASSERT(body != NULL); /* a 200 */
    free(body);
  }
  char *text = th_http_get(gw->port, "/metrics");
  TH_ASSERT(text != NULL);
  prom_check_text(text);
  TH_ASSERT(prom_check_promtool(text));
  long long grants = prom_value(text, GRANTS);
  TH_ASSERT_CMP(grants, >=, 5);
  TH_ASSERT_EQ(
      prom_value(text, "sluice_limiter_allowed_total{name=\"gateway\",algorithm=\"gcra\"}"),
      grants);
  free(text);
  return grants;
}

static void test_scraped_by_prometheus(void) {
  signal(SIGPIPE, SIG_IGN);
  gateway gw;
  prom_server p;
  gateway_start(&gw, NULL);
  long long grants = drive_gateway(&gw);
  prom_start(&p, gw.port);
  char *ready = th_http_wait(p.port, "/-/ready", "Ready", 60000);
  if (!ready) print_log(&p);
  TH_ASSERT(ready != NULL);
  free(ready);
  /* The instant query answers once a scrape stored the series. */
  char want[64];
  snprintf(want, sizeof want, ",\"%lld\"]", grants);
  uint64_t t0 = th_now_ms();
  char *answer = th_http_wait(p.port, "/api/v1/query?query=sluice_sem_grants_total", want, 30000);
  if (!answer) print_log(&p);
  TH_ASSERT(answer != NULL);
  th_note("answered %llu ms after ready: %.300s\n", (unsigned long long)(th_now_ms() - t0), answer);
  TH_ASSERT(strstr(answer, "\"status\":\"success\""));
  TH_ASSERT(strstr(answer, "\"name\":\"gateway-work\""));
  TH_ASSERT(strstr(answer, "\"job\":\"sluice-gateway\""));
  free(answer);
  /* The scrape parsed (a text Prometheus refuses makes its target down). */
  answer = th_http_get(p.port, "/api/v1/query?query=up");
  TH_ASSERT(answer != NULL);
  TH_ASSERT(strstr(answer, "\"job\":\"sluice-gateway\"") && strstr(answer, ",\"1\"]"));
  free(answer);
  prom_stop(&p);
  TH_ASSERT_EQ(gateway_stop(&gw), 0);
}

static int have(const char *tool) {
  char cmd[96];
  snprintf(cmd, sizeof cmd, "command -v %s >/dev/null 2>&1", tool);
  return system(cmd) == 0;
}

int main(int argc, char **argv) {
  static const th_case cases[] = {
      TH_CASE(scraped_by_prometheus, 120),
      {NULL, NULL, 0},
  };
  if (!have("prometheus") || !have("promtool")) return th_missing("prometheus or promtool");
  return th_main(argc, argv, cases);
}
