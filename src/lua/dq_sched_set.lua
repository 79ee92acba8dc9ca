-- Create or update repeating schedule ARGV[2] (see _dq_sched.lua).
-- KEYS: z f d h c s n. ARGV: retention ms (how long the declaration
-- holds), name, canonical spec, payload, the spec as the user wrote it.
-- The same spec again only renews the declaration (and the payload of
-- later messages); another spec takes back the queued message if not yet
-- taken and queues the new spec's first occurrence after now.
-- Returns {now ms, the queued occurrence ms}.
-- Work: one sched_next, one message of at most 1 MiB, dq_wake's bound.
--@include _dq_common.lua
--@include _dq_sched.lua
local s, n = KEYS[6], KEYS[7]
local ret, name, canon, payload, text = tonumber(ARGV[1]), ARGV[2], ARGV[3], ARGV[4], ARGV[5]
if not ret or not text or #name < 1 or #name > 100 or #payload > 1048576 or #text > 256 then
  return redis.error_reply('ERR sluice: bad schedule')
end
local spec = spec_read(canon)
if not spec then return redis.error_reply('ERR sluice: bad schedule spec') end
local now = time_ms()
local old = redis.call('HGET', s, 'k' .. name)
local queued = tonumber(redis.call('ZSCORE', n, name))
redis.call('HSET', s, 'k' .. name, canon, 'p' .. name, payload, 'u' .. name, now + ret, 't' .. name,
  text)
sched_expire(now + ret)
if old == canon and queued then return {now, queued} end
local at = sched_next(spec, now)
if not at then return redis.error_reply('ERR sluice: schedule never occurs') end
sched_queue(name, at, payload, now, ret)
redis.call('ZADD', n, at, name)
if queued and queued > now and queued ~= at then sched_unqueue(name, queued) end
return {now, at}
