/*
 * The in-process limiter behind SLUICE_RL_FAIL_LOCAL, plus the string map the
 * limiter module shares. Same algorithms and rounding as src/lua/rl_*.lua,
 * on the local monotonic clock; per-key state is dropped once it is idle
 * (equal to a fresh key), swept as new keys arrive.
 */
#include <string.h>

#include "limiter/limiter.h"
#include "core/engine.h"

/* ---- map ----------------------------------------------------------------- */

static uint64_t hash_key(const char *key, size_t klen) {
  uint64_t h = 14695981039346656037ull; /* FNV-1a */
  for (size_t i = 0; i < klen; i++) {
    h ^= (unsigned char)key[i];
    h *= 1099511628211ull;
  }
  return h;
}

sluice__rl_entry *sluice__rl_map_find(const sluice__rl_map *m, const char *key, size_t klen) {
  if (!m->nslots) return NULL;
  uint64_t h = hash_key(key, klen);
  for (sluice__rl_entry *e = m->slots[h & (m->nslots - 1)]; e; e = e->next)
    if (e->hash == h && e->klen == klen && memcmp(e->key, key, klen) == 0) return e;
  return NULL;
}

static int map_grow(sluice__rl_map *m) {
  size_t n = m->nslots ? m->nslots * 2 : 16;
  sluice__rl_entry **slots = sluice__calloc(n, sizeof *slots);
  if (!slots) return SLUICE_ENOMEM;
  for (size_t i = 0; i < m->nslots; i++) {
    for (sluice__rl_entry *e = m->slots[i], *next; e; e = next) {
      next = e->next;
      e->next = slots[e->hash & (n - 1)];
      slots[e->hash & (n - 1)] = e;
    }
  }
  sluice__free(m->slots);
  m->slots = slots;
  m->nslots = n;
  return SLUICE_OK;
}

int sluice__rl_map_insert(sluice__rl_map *m, sluice__rl_entry *e) {
  if (m->count >= m->nslots && map_grow(m) != 0) return SLUICE_ENOMEM;
  e->hash = hash_key(e->key, e->klen);
  sluice__rl_entry **slot = &m->slots[e->hash & (m->nslots - 1)];
  e->next = *slot;
  *slot = e;
  m->count++;
  return SLUICE_OK;
}

void sluice__rl_map_remove(sluice__rl_map *m, sluice__rl_entry *e) {
  sluice__rl_entry **p = &m->slots[e->hash & (m->nslots - 1)];
  while (*p && *p != e) p = &(*p)->next;
  if (!*p) return;
  *p = e->next;
  e->next = NULL;
  m->count--;
}

void sluice__rl_map_clear(sluice__rl_map *m) {
  sluice__free(m->slots);
  memset(m, 0, sizeof *m);
}

/* ---- per-key state ------------------------------------------------------- */

/* One admitted request of a sliding log: its time (us) and the units
 * admitted on the key up to and including it. */
typedef struct log_entry {
  int64_t t, s;
} log_entry;

typedef struct local_key {
  sluice__rl_entry e;
  int64_t w, c, p; /* fixed: w, c; counter: w, c, p; gcra: c = TAT (us);
                          sliding log: c = the sum before the log's first entry */
  log_entry *log;  /* sliding log: a ring, as rl_sliding_log.lua's list */
  size_t cap, head, len;
  char key[];
} local_key;

struct sluice__rl_local {
  sluice__rl_params p;
  int64_t T; /* GCRA emission interval, us */
  sluice__rl_map keys;
  size_t next_sweep;
};

static int64_t ceil_div(int64_t a, int64_t b) { return a > 0 ? (a + b - 1) / b : a / b; }
static int64_t max64(int64_t a, int64_t b) { return a > b ? a : b; }

static log_entry *log_at(const local_key *k, size_t i) { return &k->log[(k->head + i) % k->cap]; }

static int key_idle(const sluice__rl_local *l, const local_key *k, int64_t now_us) {
  int64_t now_ms = now_us / 1000, w = now_ms / l->p.period_ms;
  switch (l->p.algo) {
    case SLUICE_RL_FIXED: return k->w < w;
    case SLUICE_RL_SLIDING_COUNTER: return k->w < w - 1;
    case SLUICE_RL_GCRA: return k->c <= now_us;
    default: return !k->len || log_at(k, k->len - 1)->t <= now_us - l->p.period_ms * 1000;
  }
}

static void key_free(local_key *k) {
  sluice__free(k->log);
  sluice__free(k);
}

/* Drop idle keys; amortised: runs when the map doubled since the last sweep. */
static void sweep(sluice__rl_local *l, int64_t now_us) {
  sluice__rl_map *m = &l->keys;
  for (size_t i = 0; i < m->nslots; i++) {
    for (sluice__rl_entry *e = m->slots[i], *next; e; e = next) {
      next = e->next;
      if (key_idle(l, (local_key *)e, now_us)) {
        sluice__rl_map_remove(m, e);
        key_free((local_key *)e);
      }
    }
  }
  l->next_sweep = m->count * 2 > 64 ? m->count * 2 : 64;
}

static local_key *key_get(sluice__rl_local *l, const char *key, int64_t now_us) {
  size_t klen = strlen(key);
  local_key *k = (local_key *)sluice__rl_map_find(&l->keys, key, klen);
  if (k) return k;
  if (l->keys.count >= l->next_sweep) sweep(l, now_us);
  k = sluice__calloc(1, sizeof *k + klen + 1);
  if (!k) return NULL;
  memcpy(k->key, key, klen + 1);
  k->e.key = k->key;
  k->e.klen = klen;
  k->w = INT64_MIN / 2;
  if (sluice__rl_map_insert(&l->keys, &k->e) != 0) {
    sluice__free(k);
    return NULL;
  }
  return k;
}

/* ---- algorithms (mirror src/lua/rl_*.lua) --------------------------------- */

static void set_res(sluice_rl_result *r, int allowed, int64_t limit, int64_t remaining,
                    int64_t retry, int64_t reset) {
  r->allowed = allowed;
  r->source = SLUICE_RL_LOCAL;
  r->limit = limit;
  r->remaining = remaining;
  r->retry_after_ms = retry;
  r->reset_after_ms = reset;
}

static int fixed(const sluice__rl_local *l, local_key *k, int64_t cost, int peek, int64_t now_us,
                 sluice_rl_result *r) {
  int64_t period = l->p.period_ms, limit = l->p.limit, now = now_us / 1000;
  int64_t w = now / period, reset = (w + 1) * period - now;
  int64_t n = k->w == w ? k->c : 0;
  if (n + cost > limit) {
    set_res(r, 0, limit, limit - n, reset, reset);
    return SLUICE_OK;
  }
  if (!peek) k->w = w, k->c = n + cost;
  set_res(r, 1, limit, limit - n - cost, 0, reset);
  return SLUICE_OK;
}

static int counter_fits(const sluice__rl_local *l, int64_t p, int64_t c, int64_t el, int64_t cost) {
  int64_t period = l->p.period_ms;
  return p * (period - el) + (c + cost) * period <= l->p.limit * period;
}

static int64_t counter_wait(const sluice__rl_local *l, int64_t p, int64_t c, int64_t e,
                            int64_t cost) {
  int64_t period = l->p.period_ms, limit = l->p.limit, el;
  if (c + cost <= limit) {
    el = max64(e, period - (limit - c - cost) * period / p);
    while (!counter_fits(l, p, c, el, cost)) el++;
    return el - e;
  }
  el = max64(0, period - (limit - cost) * period / c);
  while (!counter_fits(l, c, 0, el, cost)) el++;
  return period - e + el;
}

static int counter(const sluice__rl_local *l, local_key *k, int64_t cost, int peek, int64_t now_us,
                   sluice_rl_result *r) {
  int64_t period = l->p.period_ms, limit = l->p.limit, now = now_us / 1000;
  int64_t w = now / period, e = now - w * period, c = 0, p = 0;
  if (k->w == w) c = k->c, p = k->p;
  else if (k->w == w - 1) p = k->c;
  int ok = counter_fits(l, p, c, e, cost);
  int64_t cc = ok ? c + cost : c;
  int64_t room = max64(0, (limit * period - p * (period - e) - cc * period) / period);
  if (!ok) {
    set_res(r, 0, limit, room, counter_wait(l, p, c, e, cost), c > 0 ? 2 * period - e : period - e);
    return SLUICE_OK;
  }
  if (!peek) k->w = w, k->c = cc, k->p = p;
  set_res(r, 1, limit, room, 0, 2 * period - e);
  return SLUICE_OK;
}

static int gcra(const sluice__rl_local *l, local_key *k, int64_t cost, int peek, int64_t now,
                sluice_rl_result *r) {
  int64_t T = l->T, cap = l->p.burst * T;
  int64_t tat = max64(k->c, now), ahead = tat + cost * T - now;
  if (ahead > cap) {
    set_res(r, 0, l->p.burst, max64(0, (cap - (tat - now)) / T), ceil_div(ahead - cap, 1000),
            ceil_div(tat - now, 1000));
    return SLUICE_OK;
  }
  if (!peek) k->c = now + ahead;
  set_res(r, 1, l->p.burst, (cap - ahead) / T, 0, ceil_div(ahead, 1000));
  return SLUICE_OK;
}

static int log_reserve(local_key *k, size_t need) {
  if (need <= k->cap) return SLUICE_OK;
  size_t cap = k->cap ? k->cap * 2 : 8;
  if (cap > SLUICE_RL_LOG_ENTRIES_MAX) cap = SLUICE_RL_LOG_ENTRIES_MAX;
  log_entry *log = sluice__calloc(cap, sizeof *log);
  if (!log) return SLUICE_ENOMEM;
  for (size_t i = 0; i < k->len; i++) log[i] = *log_at(k, i);
  sluice__free(k->log);
  k->log = log;
  k->cap = cap;
  k->head = 0;
  return SLUICE_OK;
}

/* The first entry whose leaving takes the live units below n - need + 1:
 * the first with s - base >= need (one exists: the last has s - base = n). */
static const log_entry *log_freeing(const local_key *k, int64_t need) {
  size_t lo = 0, hi = k->len - 1;
  while (lo < hi) {
    size_t mid = lo + (hi - lo) / 2;
    if (log_at(k, mid)->s - k->c >= need) hi = mid;
    else lo = mid + 1;
  }
  return log_at(k, lo);
}

static int sliding_log(const sluice__rl_local *l, local_key *k, int64_t cost, int peek, int64_t now,
                       sluice_rl_result *r) {
  int64_t limit = l->p.limit, span = l->p.period_ms * 1000;
  if (k->len && log_at(k, k->len - 1)->t > now) now = log_at(k, k->len - 1)->t;
  while (k->len && log_at(k, 0)->t <= now - span) { /* forget what left the window */
    k->c = log_at(k, 0)->s;
    k->head = (k->head + 1) % k->cap;
    k->len--;
  }
  int64_t last_s = k->len ? log_at(k, k->len - 1)->s : k->c, n = last_s - k->c;
  int full = k->len >= SLUICE_RL_LOG_ENTRIES_MAX;
  if (n + cost > limit || full) {
    const log_entry *freeing = log_freeing(k, max64(n + cost - limit, 1));
    set_res(r, 0, limit, full ? 0 : limit - n, ceil_div(freeing->t + span - now, 1000),
            ceil_div(log_at(k, k->len - 1)->t + span - now, 1000));
    return SLUICE_OK;
  }
  if (!peek) {
    if (log_reserve(k, k->len + 1) != 0) return SLUICE_ENOMEM;
    *log_at(k, k->len++) = (log_entry){now, last_s + cost};
  }
  set_res(r, 1, limit, limit - n - cost, 0, l->p.period_ms);
  return SLUICE_OK;
}

/* ---- public (to limiter.c) ----------------------------------------------- */

sluice__rl_local *sluice__rl_local_new(const sluice__rl_params *p) {
  sluice__rl_local *l = sluice__calloc(1, sizeof *l);
  if (!l) return NULL;
  l->p = *p;
  l->T = ceil_div(p->period_ms * 1000, p->limit);
  l->next_sweep = 64;
  return l;
}

void sluice__rl_local_free(sluice__rl_local *l) {
  if (!l) return;
  sluice__rl_map *m = &l->keys;
  for (size_t i = 0; i < m->nslots; i++) {
    for (sluice__rl_entry *e = m->slots[i], *next; e; e = next) {
      next = e->next;
      key_free((local_key *)e);
    }
  }
  sluice__rl_map_clear(m);
  sluice__free(l);
}

int sluice__rl_local_check(sluice__rl_local *l, const char *key, unsigned cost, int peek,
                           uint64_t now_us, sluice_rl_result *res) {
  int64_t now = (int64_t)now_us;
  local_key *k = key_get(l, key, now);
  if (!k) return SLUICE_ENOMEM;
  switch (l->p.algo) {
    case SLUICE_RL_FIXED: return fixed(l, k, cost, peek, now, res);
    case SLUICE_RL_SLIDING_COUNTER: return counter(l, k, cost, peek, now, res);
    case SLUICE_RL_GCRA: return gcra(l, k, cost, peek, now, res);
    default: return sliding_log(l, k, cost, peek, now, res);
  }
}

size_t sluice__rl_local_keys(const sluice__rl_local *l) { return l->keys.count; }
