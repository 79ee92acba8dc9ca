/* The example of README.md ("Example"): hold one of three permits of the
 * semaphore "db-writers", then release it. With permits = 1 it is a mutex.
 *
 *   mutex [URL]    (default redis://127.0.0.1:6379)
 */
#include <stdio.h>

#include <event2/event.h>
#include <sluice/sluice.h>

static int failed;

static void on_released(sluice_sem *sem, int status, void *client) {
  printf("released: %s\n", sluice_strerror(status));
  failed |= status != SLUICE_OK;
  sluice_sem_free(sem);
  sluice_client_close(client, NULL, NULL); /* the loop ends once it has closed */
}

static void on_acquired(sluice_sem *sem, int status, sluice_permit *permit, void *client) {
  if (status != SLUICE_OK) {
    fprintf(stderr, "acquire: %s\n", sluice_strerror(status));
    failed = 1;
    sluice_sem_free(sem);
    sluice_client_close(client, NULL, NULL);
    return;
  }
  printf("holding permit %s, fencing token %llu\n", sluice_permit_id(permit),
         (unsigned long long)sluice_permit_fence(permit));
  /* ... the work the semaphore protects; the lease is renewed meanwhile ... */
  int rc = sluice_permit_release(permit, on_released, client);
  if (rc != SLUICE_OK) on_released(sem, rc, client); /* then it won't be called */
}

int main(int argc, char **argv) {
  /* sluice's deadlines and leases are libevent timers: without the precise
   * clock libevent on Linux reads a coarse one (~4 ms steps). */
  struct event_base *base = NULL;
  struct event_config *cfg = event_config_new();
  if (cfg) {
    event_config_set_flag(cfg, EVENT_BASE_FLAG_PRECISE_TIMER);
    base = event_base_new_with_config(cfg);
    event_config_free(cfg);
  }

  sluice_client_options copts;
  sluice_client_options_init(&copts);
  copts.url = argc > 1 ? argv[1] : "redis://127.0.0.1:6379";
  sluice_client *client;
  if (!base || sluice_client_new(base, &copts, &client) != SLUICE_OK) return 1;

  sluice_sem_options sopts;
  sluice_sem_options_init(&sopts);
  sopts.permits = 3;    /* at most three holders at a time, across all processes */
  sopts.ttl_ms = 10000; /* a holder that dies frees its permit after 10 s */
  sluice_sem *sem = NULL;
  int rc = sluice_sem_new(client, "db-writers", &sopts, &sem);
  if (rc == SLUICE_OK) /* wait up to 5 s for a permit */
    rc = sluice_sem_acquire(sem, 5000, on_acquired, client, NULL);
  if (rc != SLUICE_OK) { /* the callback will not run: clean up here */
    fprintf(stderr, "%s\n", sluice_strerror(rc));
    failed = 1;
    sluice_sem_free(sem);
    sluice_client_close(client, NULL, NULL);
  }

  event_base_dispatch(base);
  event_base_free(base);
  return failed;
}
