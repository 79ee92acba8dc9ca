-- Shared by the rl_*.lua scripts (inlined at build time by embed_lua.py).
-- One call carries the requests of one limiter that were ready in one loop
-- turn of the client, decided in order: a key may appear more than once, and
-- each request sees what the requests before it took. All of them are
-- decided at the one time read here (Redis's clock, never the client's).
-- KEYS: one per request, the state of that request's key.
-- ARGV: 1 limit, 2 period_ms, 3 burst (GCRA's capacity; the others ignore
--       it), then per request i: ARGV[2 + 2i] cost, ARGV[3 + 2i] peek ('1':
--       decide only, write nothing; '0': take the units if they fit).
-- Returns a flat array, four numbers per request, in order:
--   allowed (1/0), remaining, retry_after_ms, reset_after_ms.
-- The layout is built by sluice__rl_check_* in src/core/script_args.c.
-- Locals, not globals: the per-request loop looks these up on every request.
local rcall, tonumber, format = redis.call, tonumber, string.format
local limit, period, burst = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local t = redis.call('TIME')
local now_us = tonumber(t[1]) * 1000000 + tonumber(t[2])
local now_ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)

-- decide(key, cost, peek) returns the four numbers of one request.
local function each(decide)
  local out, n = {}, 0
  for i = 1, #KEYS do
    local a, r, w, z = decide(KEYS[i], tonumber(ARGV[2 + 2 * i]), ARGV[3 + 2 * i] == '1')
    out[n + 1], out[n + 2], out[n + 3], out[n + 4] = a, r, w, z
    n = n + 4
  end
  return out
end
