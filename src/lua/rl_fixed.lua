-- Fixed window: at most limit units per window of period ms, windows aligned
-- to Redis's clock (window w covers [w*period, (w+1)*period) ms).
-- KEYS[1]: hash {w = window number, n = units taken in it}.
-- ARGV: limit, period_ms, cost, peek ('1': decide only), burst (unused).
-- Returns {allowed, remaining, retry_after_ms, reset_after_ms}.
--
-- The window number is stored beside the count because expiry alone cannot
-- tell windows apart: inside a script Redis judges expiry on the script's
-- start time, not on TIME, so at a boundary millisecond the old window's key
-- may still exist. Expiry here is only garbage collection (+100 ms margin).
local limit, period, cost = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
if cost > limit then return {0, 0, -1, 0} end -- never passes; clients refuse it
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local w = math.floor(now / period)
local reset = (w + 1) * period - now
local st = redis.call('HMGET', KEYS[1], 'w', 'n')
local n = 0
if tonumber(st[1]) == w then n = tonumber(st[2]) or 0 end
if n + cost > limit then
  return {0, limit - n, reset, reset}
end
if ARGV[4] ~= '1' then
  if n == 0 then
    redis.call('HSET', KEYS[1], 'w', string.format('%d', w), 'n', cost)
    redis.call('PEXPIRE', KEYS[1], reset + 100)
  else
    redis.call('HINCRBY', KEYS[1], 'n', cost)
  end
end
return {1, limit - n - cost, 0, reset}
