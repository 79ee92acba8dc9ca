-- Shared by the rl_*.lua scripts (inlined at build time by embed_lua.py).
-- One call carries the requests of one limiter that were ready in one loop
-- turn of the client, decided in order: a key may appear more than once, and
-- each request sees what the requests before it took. All of them are
-- decided at the one time read here (Redis's clock, never the client's).
-- KEYS: one per request, the state of that request's key.
-- ARGV: 1 limit, 2 period_ms, 3 burst (GCRA's capacity; the others ignore
--       it), then per request i: ARGV[1 + 3i] cost, ARGV[2 + 3i] peek ('1':
--       decide only, write nothing; '0': take the units if they fit),
--       ARGV[3 + 3i] deadline (ms on Redis's clock: a request read at or
--       after it is not decided and takes nothing -- its caller gave up).
-- Returns a flat array: Redis's clock in ms, then four numbers per request,
-- in order: allowed (1/0; -1 past its deadline), remaining,
-- retry_after_ms, reset_after_ms.
-- The layout is built by sluice__rl_check_* in src/core/script_args.c. On
-- a cluster a call may carry requests of several slots of one node, with
-- its keys among ARGV: see _spread.lua.
--@include _spread.lua
-- Locals, not globals: the per-request loop looks these up on every request.
local rcall, tonumber, format = redis.call, tonumber, string.format
local limit, period, burst = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local t = redis.call('TIME')
local now_us = tonumber(t[1]) * 1000000 + tonumber(t[2])
local now_ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)

local now_s = format('%d', now_ms)

-- decide(key, cost, peek) returns the four numbers of one request. A
-- request's deadline is ahead when its digits are more than now's: the
-- strings compare as the numbers do (the client writes plain decimals),
-- sparing a number conversion per request.
local function each(decide)
  local out, n = {now_ms}, 1
  for i = 1, #KEYS do
    local a, r, w, z = -1, 0, 0, 0
    local d = ARGV[3 + 3 * i]
    if #d > #now_s or (#d == #now_s and d > now_s) then
      a, r, w, z = decide(KEYS[i], tonumber(ARGV[1 + 3 * i]), ARGV[2 + 3 * i] == '1')
    end
    out[n + 1], out[n + 2], out[n + 3], out[n + 4] = a, r, w, z
    n = n + 4
  end
  return out
end
