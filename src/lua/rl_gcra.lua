-- GCRA (generic cell rate algorithm): a token bucket of burst units refilled
-- at limit per period, kept as one number — the theoretical arrival time
-- (TAT, microseconds of Redis's clock) at which the bucket is full again.
-- A request of cost units passes if max(TAT, now) + cost*T - now <= burst*T,
-- with T = period/limit the emission interval (whole microseconds, rounded up).
-- KEYS[1]: string, the TAT. ARGV: limit, period_ms, cost, peek ('1': decide
-- only), burst (>= 1).
-- Returns {allowed, remaining, retry_after_ms, reset_after_ms}.
local limit, period, cost = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local burst = tonumber(ARGV[5])
if cost > burst then return {0, 0, -1, 0} end -- never passes; clients refuse it
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local T = math.ceil(period * 1000 / limit)
local cap = burst * T
local tat = tonumber(redis.call('GET', KEYS[1]) or '0') or 0
if tat < now then tat = now end
local ahead = tat + cost * T - now
if ahead > cap then
  return {0, math.max(0, math.floor((cap - (tat - now)) / T)), math.ceil((ahead - cap) / 1000),
          math.ceil((tat - now) / 1000)}
end
if ARGV[4] ~= '1' then
  redis.call('SET', KEYS[1], string.format('%d', now + ahead), 'PX', math.ceil(ahead / 1000) + 100)
end
return {1, math.floor((cap - ahead) / T), 0, math.ceil(ahead / 1000)}
