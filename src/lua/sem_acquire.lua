-- Acquire a permit (one atomic step; all times from Redis TIME, in ms).
-- KEYS: 1 holders, 2 queue, 3 beats, 4 meta (hash: permits, fence, seq)
-- ARGV: 1 permits, 2 ttl_ms, 3 permit id, 4 waiter ("" for try_acquire, else
--       "<handle id>:<waiter id>"), 5 heartbeat_ms, 6 fair (0/1),
--       7 wake list base ("<prefix>sem:{name}:wake:"), 8 keep_ms (idle expiry)
-- Returns {1, fence, ttl_ms} when granted, or
--         {0, ms until the earliest lease expires (-1: none), queue position}.
-- Idempotent per permit id: retrying an attempt whose reply was lost returns
-- the grant (with its lease refreshed) instead of taking a second permit.
--@include _sem_common.lua
local H, Q, B, M = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local permits, ttl = tonumber(ARGV[1]), tonumber(ARGV[2])
local id, waiter, hb = ARGV[3], ARGV[4], tonumber(ARGV[5])
local fair, wake_base, keep = ARGV[6] == '1', ARGV[7], tonumber(ARGV[8])

local function touch(k)
  if redis.call('PTTL', k) < keep then redis.call('PEXPIRE', k, keep) end
end

evict(H, Q, B)
if waiter ~= '' then
  if not redis.call('ZSCORE', Q, waiter) then
    redis.call('ZADD', Q, redis.call('HINCRBY', M, 'seq', 1), waiter)
  end
  redis.call('ZADD', B, n2s(now + hb), waiter)
end

local free = permits - redis.call('ZCARD', H)
local pos
if waiter ~= '' then pos = redis.call('ZRANK', Q, waiter) else pos = redis.call('ZCARD', Q) end
-- Fair: only the first `free` in arrival order may take a permit, and a
-- try_acquire counts as arriving last. Non-fair: anyone may.
local mine = redis.call('ZSCORE', H, id)
if mine or (free > 0 and (not fair or pos < free)) then
  redis.call('ZADD', H, n2s(now + ttl), id)
  if waiter ~= '' then
    redis.call('ZREM', Q, waiter)
    redis.call('ZREM', B, waiter)
  end
  -- Fencing token: strictly increasing, and never below the server's clock
  -- in microseconds, so it keeps increasing even after the meta key expired
  -- or Redis restarted empty (no two grants run within one microsecond).
  local fence = tonumber(redis.call('HGET', M, 'fence') or '0') + 1
  if fence < now_us then fence = now_us end
  redis.call('HSET', M, 'fence', n2s(fence), 'permits', permits)
  touch(H)
  touch(M)
  if redis.call('ZCARD', Q) > 0 then wake(Q, free - 1, wake_base, hb) end
  return {1, n2s(fence), ttl}
end

if waiter ~= '' then
  touch(Q)
  touch(B)
  touch(M)
end
-- Free permits this caller may not take belong to the queue's heads.
if free > 0 then wake(Q, free, wake_base, hb) end
local first = redis.call('ZRANGE', H, 0, 0, 'WITHSCORES')
local wait = -1
if first[2] then wait = tonumber(first[2]) - now end
return {0, wait, pos}
