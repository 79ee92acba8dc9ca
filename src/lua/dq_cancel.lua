-- Remove one message wherever it is. KEYS: z f d h c (see _dq_common.lua).
-- ARGV: id. Returns 1 if removed, 0 if there was no such message.
-- A removed message leaves a tombstone (dq_tomb, _dq_common.lua).
--@include _dq_common.lua
local z, f, d, h = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local id = ARGV[1]
local v = redis.call('HMGET', h, 'p' .. id, 'a' .. id, 's' .. id)
if not v[1] then return 0 end
-- Its member in z: from a<id> once delivered, else from its payload's
-- sequence prefix; an old-layout message's is s<id> .. id.
local seq = v[3] or attempts_split(v[2]) or pv_seq(v[1])
redis.call('HDEL', h, 'p' .. id, 'a' .. id, 's' .. id)
redis.call('ZREM', z, seq .. id)
redis.call('ZREM', f, id)
redis.call('ZREM', d, id)
local sn = not v[3] and seq_num(seq)
if sn then
  local t = redis.call('TIME')
  local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  local exp = tonumber(redis.call('HGET', h, '#exp') or '0')
  dq_tomb(h, {id .. '~' .. dec(sn)}, now, exp > now and exp - now or DQ_TOMB_MS)
end
return 1
