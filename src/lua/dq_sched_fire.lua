-- Renew the declarations of the schedules a handle runs, and queue the
-- next message of every schedule of the queue whose queued occurrence is
-- due (see _dq_sched.lua). KEYS: z f d h c s n.
-- ARGV: retention ms (how long a declaration holds), then the names the
-- caller declares (at most 64).
-- Missed occurrences: if the occurrence after the queued one is past too
-- (nothing fired since), it is queued once as a catch-up, due at once, and
-- the schedule goes on at its first occurrence after now: those between
-- are skipped. A schedule no one declared for retention ms is removed when
-- it is next due (its queued message, already due, is delivered).
-- Returns {now ms, the earliest queued occurrence or -1, then the declared
-- names that are not in s (the caller sets them again)}.
-- Work: 64 declarations, 16 due schedules (two sched_next and two pushes
-- each), dq_wake's bound per push.
--@include _dq_common.lua
--@include _dq_sched.lua
local s, n = KEYS[6], KEYS[7]
local ret = tonumber(ARGV[1])
if not ret or #ARGV > 65 then return redis.error_reply('ERR sluice: bad schedule fire') end
local now = time_ms()
local out = {now, -1}
local renew = {}
for i = 2, #ARGV do
  if redis.call('HEXISTS', s, 'k' .. ARGV[i]) == 1 then
    renew[#renew + 1] = 'u' .. ARGV[i]
    renew[#renew + 1] = now + ret
  else
    out[#out + 1] = ARGV[i]
  end
end
if #renew > 0 then
  redis.call('HSET', s, unpack(renew))
  sched_expire(now + ret)
end

local due = redis.call('ZRANGEBYSCORE', n, '-inf', now, 'WITHSCORES', 'LIMIT', 0, 16)
local moved, gone = {}, {}
for i = 1, #due, 2 do
  local name, queued = due[i], tonumber(due[i + 1])
  local v = redis.call('HMGET', s, 'k' .. name, 'p' .. name, 'u' .. name, 't' .. name)
  local spec = v[1] and spec_read(v[1])
  local at = spec and tonumber(v[3] or '0') >= now and sched_next(spec, queued)
  if at and at <= now then
    sched_queue(name, at, v[2], now, ret) -- the one catch-up
    at = sched_next(spec, now)
  end
  if at then
    sched_queue(name, at, v[2], now, ret)
    moved[#moved + 1] = at
    moved[#moved + 1] = name
  else
    gone[#gone + 1] = name
    if v[1] then redis.call('HDEL', s, 'k' .. name, 'p' .. name, 'u' .. name, 't' .. name) end
  end
end
if #moved > 0 then redis.call('ZADD', n, unpack(moved)) end
local head = redis.call('ZRANGE', n, 0, #gone, 'WITHSCORES')
local leaving = {}
for _, name in ipairs(gone) do leaving[name] = true end
for i = 1, #head, 2 do
  if not leaving[head[i]] then
    out[2] = tonumber(head[i + 1])
    break
  end
end
if #gone > 0 then redis.call('ZREM', n, unpack(gone)) end
return out
