-- Sliding-window log: never more than limit units in any span of period ms.
-- Each key: sorted set, one entry per admitted unit, scored by its admission
-- time in microseconds of Redis's clock. Members are unique ("<us>" or
-- "<us>.<i>" for the i-th unit of one request) and admission times strictly
-- increase per key, so two requests in one microsecond (or in one call, which
-- reads the clock once, or a clock stepping back) never collapse into one
-- entry. Denied requests are not recorded.
-- KEYS/ARGV/reply: a list of requests, see _rl_common.lua (burst unused).
--@include _rl_common.lua
local span = period * 1000
local function ms_until(us) return math.ceil(us / 1000) end
return each(function(key, cost, peek)
  if cost > limit then return 0, 0, -1, 0 end -- never passes; clients refuse it
  local now = now_us
  local last = rcall('ZRANGE', key, -1, -1, 'WITHSCORES')
  if last[2] and tonumber(last[2]) >= now then now = tonumber(last[2]) + 1 end
  -- An entry admitted at s counts while now < s + span.
  local floor = format('%d', now - span)
  -- The expired entries are dropped only once the new ones are in (or when
  -- refused, n > 0 live ones stay): on a migrating cluster slot a script may
  -- not touch a key it emptied, and the key may come again in this call.
  local n = rcall('ZCOUNT', key, '(' .. floor, '+inf')
  if n + cost > limit then
    if not peek then rcall('ZREMRANGEBYSCORE', key, '-inf', floor) end
    -- The (n + cost - limit)-th oldest live entry has to leave first.
    local first = rcall('ZRANGEBYSCORE', key, '(' .. floor, '+inf', 'WITHSCORES',
                             'LIMIT', n + cost - limit - 1, 1)
    local newest = tonumber(last[2])
    return 0, limit - n, ms_until(tonumber(first[2]) + span - now), ms_until(newest + span - now)
  end
  if not peek then
    local stamp = format('%d', now)
    local i = 1
    while i <= cost do
      local args = {}
      for j = i, math.min(cost, i + 999) do
        args[#args + 1] = stamp
        args[#args + 1] = j == 1 and stamp or (stamp .. '.' .. j)
      end
      rcall('ZADD', key, unpack(args))
      i = i + 1000
    end
    rcall('ZREMRANGEBYSCORE', key, '-inf', floor) -- cost >= 1: the new entries stay
    rcall('PEXPIRE', key, period + 100)
  end
  return 1, limit - n - cost, 0, period
end)
