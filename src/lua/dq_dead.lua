-- List dead letters, oldest first. KEYS: z f d h c (see _dq_common.lua).
-- ARGV: offset, limit (1..1000). Returns {total, then per message: id, died
-- ms, attempts, payload}.
--@no-wait
--@include _dq_common.lua
local d, h = KEYS[3], KEYS[4]
local off, lim = tonumber(ARGV[1]), tonumber(ARGV[2])
if not (off >= 0 and lim >= 1 and lim <= 1000) then return redis.error_reply('ERR sluice: bad page') end
local ids = redis.call('ZRANGE', d, off, off + lim - 1, 'WITHSCORES')
local out = {redis.call('ZCARD', d)}
for i = 1, #ids, 2 do
  local id = ids[i]
  local v = redis.call('HMGET', h, 'a' .. id, 'p' .. id)
  local seq, a = attempts_split(v[1])
  local p = v[2] or ''
  if seq then p = pv_payload(p) end
  out[#out + 1] = id
  out[#out + 1] = tonumber(ids[i + 1])
  out[#out + 1] = a
  out[#out + 1] = p
end
return out
