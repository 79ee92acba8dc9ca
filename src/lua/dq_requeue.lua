-- Move dead letters back to the queue, due now, attempt count reset.
-- KEYS: z f d h c (see _dq_common.lua). ARGV: retention ms, id ('' = the
-- oldest, up to ARGV[3]), limit (1..1000). Returns how many were moved.
-- Work: at most 1000 messages, plus dq_wake's bound.
--@include _dq_common.lua
local z, d, h, c = KEYS[1], KEYS[3], KEYS[4], KEYS[5]
local lim = tonumber(ARGV[3])
if not (lim >= 1 and lim <= 1000) then return redis.error_reply('ERR sluice: bad limit') end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local ret = tonumber(ARGV[1])
local ids
if ARGV[2] ~= '' then
  ids = redis.call('ZSCORE', d, ARGV[2]) and {ARGV[2]} or {}
else
  ids = redis.call('ZRANGE', d, 0, lim - 1)
end
if #ids == 0 then return 0 end
local fields = {}
for i, id in ipairs(ids) do fields[i] = 'a' .. id end
local avs = redis.call('HMGET', h, unpack(fields))
for i, id in ipairs(ids) do
  set_attempts(h, id, avs[i], 0)
  local m = member_of(h, id, avs[i])
  redis.call('ZADD', z, zscore(m, now), m)
end
dq_wake(c, now)
dq_expire(h, now + ret, ret, {[z] = true})
-- Last: this may empty d (see _dq_common.lua).
redis.call('ZREM', d, unpack(ids))
return #ids
