-- Move dead letters back to the queue, due now, attempt count reset.
-- KEYS: z f d h w as in dq_push.lua. ARGV: retention ms, id ('' = the
-- oldest, up to ARGV[3]), limit. Returns how many were moved.
--@include _dq_common.lua
local z, d, h, w = KEYS[1], KEYS[3], KEYS[4], KEYS[5]
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local ret = tonumber(ARGV[1])
local ids
if ARGV[2] ~= '' then
  ids = redis.call('ZSCORE', d, ARGV[2]) and {ARGV[2]} or {}
else
  ids = redis.call('ZRANGE', d, 0, tonumber(ARGV[3]) - 1)
end
if #ids == 0 then return 0 end
local old = tonumber(redis.call('ZRANGE', z, 0, 0, 'WITHSCORES')[2])
local seq = redis.call('HINCRBY', h, '#seq', #ids) - #ids
for _, id in ipairs(ids) do
  seq = seq + 1
  local s = string.format('%012x', seq)
  redis.call('HSET', h, 's' .. id, s, 'a' .. id, 0)
  redis.call('ZADD', z, now, s .. id)
end
dq_wake(w, now, old)
dq_expire(h, now + ret, ret, {[z] = true})
-- Last: this may empty d (see _dq_common.lua).
redis.call('ZREM', d, unpack(ids))
return #ids
