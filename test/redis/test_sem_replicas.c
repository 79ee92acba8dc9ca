/* Leases a promoted replica honours: on a master seen with a replica, a
 * grant is answered only once a replica has it, and a renewal extends the
 * holder's lease only once a replica has it (sluice_client_set_replica_ack
 * turns it off: as before).
 * Each case starts its own master and replica (TCP); pausing the replica
 * (SIGSTOP) makes it stop acknowledging while its link stays up, as a
 * partition or a stalled replica does. Tokens of a promoted replica: see
 * test_sem's fence_outranks_deposed_master. */
#include <string.h>

#include "sem_util.h"

typedef struct pair {
  th_redis m, r;
  struct event_base *base;
} pair;

/* A master, its replica in sync, and a loop. */
static void pair_start(pair *p) {
  th_redis_start_pair(&p->m, &p->r, NULL);
  p->base = th_precise_base();
}

static void pair_stop(pair *p) {
  TH_ASSERT(th_loop_drain(p->base, 5000));
  event_base_free(p->base);
  th_redis_stop(&p->r);
  th_redis_stop(&p->m);
}

/* A client of the master (its handshake sees the replica online). */
static sluice_client *pair_client(pair *p, int ack_off) {
  sluice_client_options o;
  th_client_quick_options(&o, p->m.url, 3000);
  sluice_client *c = th_client_with(p->base, &o);
  TH_ASSERT_EQ(sluice_client_set_replica_ack(c, !ack_off), SLUICE_OK);
  TH_LOOP_UNTIL(p->base, sluice_client_is_connected(c), 5000);
  return c;
}

/* One client of the pair's master and a 1-permit semaphore on it. */
typedef struct fx {
  pair p;
  sluice_client *c;
  sluice_sem *s;
} fx;

static void fx_open(fx *f, const char *name, unsigned ttl_ms, int ack_off) {
  pair_start(&f->p);
  f->c = pair_client(&f->p, ack_off);
  f->s = sem_test_new(f->c, name, 1, ttl_ms, 0);
}

static void fx_close(fx *f) {
  sluice_sem_free(f->s);
  sluice_client_free(f->c);
  pair_stop(&f->p);
}

static long long holders(pair *p, const char *name) {
  char cmd[128];
  snprintf(cmd, sizeof cmd, "ZCARD sluice:sem:{%s}:holders", name);
  return th_redis_int(&p->m, cmd);
}

/* Holders in Redis drop to 0 (a grant given back), within 3 s. */
static void loop_until_no_holder(pair *p, const char *name) {
  uint64_t end = th_now_ms() + 3000;
  while (holders(p, name) > 0 && th_now_ms() < end) th_loop_for(p->base, 20);
  TH_ASSERT_EQ(holders(p, name), 0);
}

static void test_grant_waits_for_replica(void) {
  fx f;
  fx_open(&f, "g", 5000, 0);
  acq_result a = sem_hold(f.p.base, f.s);
  TH_ASSERT_EQ(sluice_permit_replicated(a.permit), 1);
  th_status rel = {0};
  TH_ASSERT_EQ(sluice_permit_release(a.permit, rel_cb, &rel), SLUICE_OK);
  TH_ASSERT(th_loop_until(f.p.base, &rel.done, 3000));

  th_redis_pause(&f.p.r); /* connected, acknowledging nothing */
  uint64_t t0 = th_now_ms();
  a = sem_try(f.p.base, f.s);
  TH_ASSERT_EQ(a.status, SLUICE_ENOREPLICA);
  TH_ASSERT_CMP(a.at_ms - t0, <, 2500);
  loop_until_no_holder(&f.p, "g"); /* Redis had granted it: given back */

  acq_result w = {0};
  t0 = th_now_ms();
  TH_ASSERT_EQ(sluice_sem_acquire(f.s, 1500, acq_cb, &w, NULL), SLUICE_OK);
  TH_ASSERT(th_loop_until(f.p.base, &w.done, 5000));
  TH_ASSERT_EQ(w.status, SLUICE_ENOREPLICA);
  TH_ASSERT_CMP(w.at_ms - t0, >=, 1400);
  loop_until_no_holder(&f.p, "g");

  th_redis_resume(&f.p.r);
  a = sem_hold(f.p.base, f.s);
  TH_ASSERT_EQ(sluice_permit_replicated(a.permit), 1);
  sluice_permit_release(a.permit, NULL, NULL);
  fx_close(&f);
}

/* A holder whose renewals no replica confirms hears on_lost while its lease
 * is still Redis's last confirmed one. */
static void test_unconfirmed_renewals_lose(void) {
  fx f;
  fx_open(&f, "r", 1500, 0);
  acq_result a = sem_hold(f.p.base, f.s);
  lost_result l = {0};
  sluice_permit_set_lost_cb(a.permit, lost_cb, &l);
  th_loop_for(f.p.base, 1200); /* renewals confirmed meanwhile */
  TH_ASSERT_EQ(l.done, 0);
  uint64_t t0 = th_now_ms();
  th_redis_pause(&f.p.r);
  TH_ASSERT(th_loop_until(f.p.base, &l.done, 4000));
  TH_ASSERT_EQ(l.reason, SLUICE_LOST_UNCERTAIN);
  TH_ASSERT_CMP(l.at_ms - t0, <=, 1500);
  th_redis_resume(&f.p.r);
  sluice_permit_release(a.permit, NULL, NULL);
  fx_close(&f);
}

/* A hand-off through the wake list is another client's write: the woken
 * waiter has it confirmed by an attempt of its own before it is answered. */
static void test_hand_off_confirmed(void) {
  pair p;
  pair_start(&p);
  sluice_client *c1 = pair_client(&p, 0), *c2 = pair_client(&p, 0);
  sluice_sem *s1 = sem_test_new(c1, "h", 1, 5000, 0), *s2 = sem_test_new(c2, "h", 1, 5000, 0);
  acq_result w;
  acq_result h = sem_hold_with_waiter(p.base, s1, s2, 5000, &w);
  th_loop_for(p.base, 100); /* w queued */
  uint64_t fence = sluice_permit_fence(h.permit);
  sem_handoff_ms(p.base, h.permit, &w, 3000);
  TH_ASSERT_EQ(sluice_permit_replicated(w.permit), 1);
  TH_ASSERT_CMP(sluice_permit_fence(w.permit), >, fence);
  th_status rel = {0};
  TH_ASSERT_EQ(sluice_permit_release(w.permit, rel_cb, &rel), SLUICE_OK);
  TH_ASSERT(th_loop_until(p.base, &rel.done, 3000));

  /* Now no replica confirms: the handed permit goes back at the deadline. */
  h = sem_hold_with_waiter(p.base, s1, s2, 1500, &w);
  th_loop_for(p.base, 100);
  th_redis_pause(&p.r);
  sluice_permit_release(h.permit, NULL, NULL);
  TH_ASSERT(th_loop_until(p.base, &w.done, 5000));
  TH_ASSERT_EQ(w.status, SLUICE_ENOREPLICA);
  th_redis_resume(&p.r);
  loop_until_no_holder(&p, "h");
  sluice_sem_free(s1);
  sluice_sem_free(s2);
  sluice_client_free(c1);
  sluice_client_free(c2);
  pair_stop(&p);
}

/* Opted out, or no replica ever seen: answered at once, nothing asked. */
static void test_ack_off_and_no_replica(void) {
  fx f;
  TH_ASSERT_EQ(sluice_client_set_replica_ack(NULL, 0), SLUICE_EINVAL);
  fx_open(&f, "o", 5000, 1);
  th_redis_pause(&f.p.r);
  acq_result a = sem_hold(f.p.base, f.s);
  TH_ASSERT_EQ(sluice_permit_replicated(a.permit), -1);
  sluice_permit_release(a.permit, NULL, NULL);
  th_redis_resume(&f.p.r);

  sluice_client *c = sem_test_client(f.p.base); /* th_server: no replica */
  sluice_sem *s = sem_test_new(c, "o", 1, 5000, 0);
  a = sem_hold(f.p.base, s);
  TH_ASSERT_EQ(sluice_permit_replicated(a.permit), -1);
  sluice_permit_release(a.permit, NULL, NULL);
  sluice_sem_free(s);
  sluice_client_free(c);
  fx_close(&f);
}

static const th_case cases[] = {
    TH_CASE(grant_waits_for_replica, 0, .standalone_only = "starts a master and replica"),
    TH_CASE(unconfirmed_renewals_lose, 0, .standalone_only = "starts a master and replica"),
    TH_CASE(hand_off_confirmed, 0, .standalone_only = "starts a master and replica"),
    TH_CASE(ack_off_and_no_replica, 0, .standalone_only = "starts a master and replica"),
};
TH_MAIN(cases)
