-- Sliding-window log: never more than limit units in any span of period ms.
-- KEYS[1]: sorted set, one entry per admitted unit, scored by its admission
-- time in microseconds of Redis's clock. Members are unique ("<us>" or
-- "<us>.<i>" for the i-th unit of one request) and admission times strictly
-- increase per key, so two requests in one microsecond (or a clock stepping
-- back) never collapse into one entry. Denied requests are not recorded.
-- ARGV: limit, period_ms, cost, peek ('1': decide only, write nothing), burst (unused).
-- Returns {allowed, remaining, retry_after_ms, reset_after_ms}.
local limit, period, cost = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local key, peek = KEYS[1], ARGV[4] == '1'
if cost > limit then return {0, 0, -1, 0} end -- never passes; clients refuse it
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local span = period * 1000
local last = redis.call('ZRANGE', key, -1, -1, 'WITHSCORES')
if last[2] and tonumber(last[2]) >= now then now = tonumber(last[2]) + 1 end
-- An entry admitted at s counts while now < s + span.
local floor = string.format('%d', now - span)
local n
if peek then
  n = redis.call('ZCOUNT', key, '(' .. floor, '+inf')
else
  redis.call('ZREMRANGEBYSCORE', key, '-inf', floor)
  n = redis.call('ZCARD', key)
end
local function ms_until(us) return math.ceil(us / 1000) end
if n + cost > limit then
  -- The (n + cost - limit)-th oldest live entry has to leave first.
  local first = redis.call('ZRANGEBYSCORE', key, '(' .. floor, '+inf', 'WITHSCORES',
                           'LIMIT', n + cost - limit - 1, 1)
  local newest = tonumber(last[2])
  return {0, limit - n, ms_until(tonumber(first[2]) + span - now),
          ms_until(newest + span - now)}
end
if not peek then
  local stamp = string.format('%d', now)
  local i = 1
  while i <= cost do
    local args = {}
    for j = i, math.min(cost, i + 999) do
      args[#args + 1] = stamp
      args[#args + 1] = j == 1 and stamp or (stamp .. '.' .. j)
    end
    redis.call('ZADD', key, unpack(args))
    i = i + 1000
  end
  redis.call('PEXPIRE', key, period + 100)
end
return {1, limit - n - cost, 0, period}
