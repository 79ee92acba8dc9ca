-- Count messages by state and peek at the earliest delayed one.
-- KEYS: z f d h c (see _dq_common.lua).
-- Returns {now ms, delayed, ready, in flight, expired, dead, next id | false,
-- next due ms | -1, next priority}. The earliest delayed one: the lowest
-- due time, of the highest priority among equal ones.
-- Work: two reads of z per priority up to h['#pmax'] (at most 20).
--@no-wait
--@include _dq_common.lua
local z, f, d, h = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local pmax = tonumber(redis.call('HGET', h, '#pmax') or '0')
local ready, head, due, pri = 0, nil, -1, 0
for p = pmax, 0, -1 do
  local lo = p * DQ_BAND
  ready = ready + redis.call('ZCOUNT', z, lo, lo + now)
  local r = redis.call('ZRANGEBYSCORE', z, lo, '(' .. (lo + DQ_BAND), 'WITHSCORES', 'LIMIT', 0, 1)
  if r[1] and (not head or tonumber(r[2]) - lo < due) then
    head, due, pri = r[1], tonumber(r[2]) - lo, p
  end
end
local _, id = member_split(head or '')
return {now, redis.call('ZCARD', z), ready, redis.call('ZCARD', f),
        redis.call('ZCOUNT', f, '-inf', '(' .. now), redis.call('ZCARD', d), head and id or false,
        due, pri}
