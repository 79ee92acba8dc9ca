-- List a queue's repeating schedules, the earliest queued occurrence first.
-- KEYS: z f d h c s n (see _dq_sched.lua). ARGV: offset, limit (1..100).
-- Returns {now ms, count, then per schedule: name, spec as written, queued
-- occurrence ms, declared until ms, payload}.
--@no-wait
--@include _dq_common.lua
--@include _dq_sched.lua
local s, n = KEYS[6], KEYS[7]
local off, lim = tonumber(ARGV[1]), tonumber(ARGV[2])
if not (off and lim and off >= 0 and lim >= 1 and lim <= 100) then
  return redis.error_reply('ERR sluice: bad schedule list')
end
local out = {time_ms(), redis.call('ZCARD', n)}
local rows = redis.call('ZRANGE', n, off, off + lim - 1, 'WITHSCORES')
for i = 1, #rows, 2 do
  local name = rows[i]
  local v = redis.call('HMGET', s, 't' .. name, 'u' .. name, 'p' .. name)
  out[#out + 1] = name
  out[#out + 1] = v[1] or ''
  out[#out + 1] = tonumber(rows[i + 1])
  out[#out + 1] = tonumber(v[2] or '0')
  out[#out + 1] = v[3] or ''
end
return out
