-- GCRA (generic cell rate algorithm): a token bucket of burst units refilled
-- at limit per period, kept as one number — the theoretical arrival time
-- (TAT, microseconds of Redis's clock) at which the bucket is full again.
-- A request of cost units passes if max(TAT, now) + cost*T - now <= burst*T,
-- with T = period/limit the emission interval (whole microseconds, rounded up).
-- Each key: string, the TAT. burst >= 1.
-- KEYS/ARGV/reply: a list of requests, see _rl_common.lua.
--@include _rl_common.lua
local now = now_us
local T = math.ceil(period * 1000 / limit)
local cap = burst * T
return each(function(key, cost, peek)
  if cost > burst then return 0, 0, -1, 0 end -- never passes; clients refuse it
  local tat = tonumber(rcall('GET', key) or '0') or 0
  if tat < now then tat = now end
  local ahead = tat + cost * T - now
  if ahead > cap then
    return 0, math.max(0, math.floor((cap - (tat - now)) / T)), math.ceil((ahead - cap) / 1000),
           math.ceil((tat - now) / 1000)
  end
  if not peek then
    rcall('SET', key, format('%d', now + ahead), 'PX', math.ceil(ahead / 1000) + 100)
  end
  return 1, math.floor((cap - ahead) / T), 0, math.ceil(ahead / 1000)
end)
