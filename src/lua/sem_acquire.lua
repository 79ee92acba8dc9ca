-- Try to grant permits to a batch of acquire requests, in order (one atomic
-- step; all times from Redis TIME, in ms). The client sends every attempt
-- that is ready at the same moment in one call: Redis pays for TIME, the
-- expiry sweep and the bookkeeping once per batch instead of once per permit.
-- KEYS: 1 holders, 2 queue, 3 beats, 4 meta (hash: permits, fence, seq)
-- ARGV: 1 permits, 2 ttl_ms, 3 heartbeat_ms, 4 fair (0/1), 5 wake list base
--       ("<prefix>sem:{name}:wake:"), 6 keep_ms (idle expiry), then three per
--       request: permit id; waiter ("" for try_acquire, else
--       "<handle id>:<waiter id>"); "1" if an earlier attempt with this id
--       may have been granted (its reply was lost), else "0".
-- Returns {wait, g1, v1, g2, v2, ...}: wait is ms until the earliest lease
-- expires (-1: none); gi is 1 when request i was granted (vi: its fencing
-- token) or 0 (vi: its queue position).
--@include _sem_common.lua
local H, Q, B, M = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local permits, ttl, hb = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local fair, wake_base, keep = ARGV[4] == '1', ARGV[5], tonumber(ARGV[6])

redis.call('ZREMRANGEBYSCORE', H, '-inf', now)
local held = redis.call('ZCARD', H)
local qlen = redis.call('ZCARD', Q)
if qlen > 0 then qlen = qlen - evict_waiters(Q, B) end

local out = {-1}
local fence, queued, refused = nil, false, false
for i = 7, #ARGV, 3 do
  local id, waiter = ARGV[i], ARGV[i + 1]
  local pos = qlen -- a try_acquire arrives last
  if waiter ~= '' then
    queued = true
    if not redis.call('ZSCORE', Q, waiter) then
      redis.call('ZADD', Q, redis.call('HINCRBY', M, 'seq', 1), waiter)
      qlen = qlen + 1
    end
    redis.call('ZADD', B, n2s(now + hb), waiter)
    pos = redis.call('ZRANK', Q, waiter)
  end
  -- Idempotent per permit id: a retried attempt gets its own earlier grant
  -- (lease refreshed) instead of a second permit.
  local mine = ARGV[i + 2] == '1' and redis.call('ZSCORE', H, id)
  -- Fair: only the first `free` in arrival order may take a permit.
  -- Non-fair: anyone may while one is free.
  if mine or (held < permits and (not fair or pos < permits - held)) then
    redis.call('ZADD', H, n2s(now + ttl), id)
    if not mine then held = held + 1 end
    if waiter ~= '' then
      redis.call('ZREM', Q, waiter)
      redis.call('ZREM', B, waiter)
      qlen = qlen - 1
    end
    -- Fencing token: strictly increasing, and never below the server's
    -- clock in microseconds, so it keeps increasing even after the meta key
    -- expired or Redis restarted empty.
    if not fence then fence = tonumber(redis.call('HGET', M, 'fence') or '0') end
    fence = fence + 1
    if fence < now_us then fence = now_us end
    out[#out + 1] = 1
    out[#out + 1] = n2s(fence)
  else
    refused = true
    out[#out + 1] = 0
    out[#out + 1] = pos
  end
end

if fence then
  redis.call('HSET', M, 'fence', n2s(fence), 'permits', permits)
  touch(H, keep)
end
if fence or queued then touch(M, keep) end
if queued then
  touch(Q, keep)
  touch(B, keep)
end
-- Free permits nobody in this batch could take belong to the queue's heads.
if qlen > 0 and held < permits then wake(Q, B, permits - held, wake_base, hb, fair) end
if refused then
  local first = redis.call('ZRANGE', H, 0, 0, 'WITHSCORES')
  if first[2] then out[1] = tonumber(first[2]) - now end
end
return out
