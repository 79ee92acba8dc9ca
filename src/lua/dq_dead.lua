-- List dead letters, oldest first. KEYS: z f d h w as in dq_push.lua.
-- ARGV: offset, limit. Returns {total, then per message: id, died ms,
-- attempts, payload}.
local d, h = KEYS[3], KEYS[4]
local off = tonumber(ARGV[1])
local ids = redis.call('ZRANGE', d, off, off + tonumber(ARGV[2]) - 1, 'WITHSCORES')
local out = {redis.call('ZCARD', d)}
for i = 1, #ids, 2 do
  local id = ids[i]
  local v = redis.call('HMGET', h, 'a' .. id, 'p' .. id)
  out[#out + 1] = id
  out[#out + 1] = tonumber(ids[i + 1])
  out[#out + 1] = tonumber(v[1] or '0')
  out[#out + 1] = v[2] or ''
end
return out
