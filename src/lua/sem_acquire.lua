-- Try to grant permits to a batch of acquire requests, in order (one atomic
-- step; all times from Redis TIME, in ms). The client sends every attempt
-- that is ready at the same moment in one call: Redis pays for TIME, the
-- expiry sweep and the bookkeeping once per batch instead of once per permit.
-- KEYS: 1 holders, 2 queue, 3 beats, 4 meta
-- ARGV: 1 permits, 2 ttl_ms, 3 heartbeat_ms, 4 fair (0/1), 5 wake list base
--       ("<prefix>sem:{name}:wake:"), 6 keep_ms (idle expiry), then three per
--       request: permit id; waiter ("" for try_acquire, else
--       "<handle id>:<waiter id>"); "1" if an earlier attempt with this id
--       may have been granted (its reply was lost), else "0".
-- Returns {wait, now, then g, v, r per request}: wait is ms until the
-- earliest lease expires (-1: none), now Redis's clock in ms; g is 1 when the
-- request was granted (v: its fencing token, r: its lease in ms), 2 when a
-- release already handed this waiter a permit whose id is the waiter id
-- (v: its fencing token, r: the lease left), 0 when refused (v: its queue
-- position).
--@include _sem_common.lua
local H, Q, B, M = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local permits, ttl, hb = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local fair, wake_base, keep = ARGV[4] == '1', ARGV[5], tonumber(ARGV[6])

-- Expired leases and dead waiters are only skipped here and removed at the
-- end, as are the waiters granted now: a removal may empty its key, which
-- must not be touched after (see _sem_common.lua). `gone`: Q and B members
-- to remove (true; false once queued again), `glist` lists each one once.
local held = redis.call('ZCOUNT', H, '(' .. n2s(now), '+inf')
local qlen = redis.call('ZCARD', Q)
local gone, glist, gscore = {}, {}, {}
local function leave(m)
  if gone[m] == nil then glist[#glist + 1] = m end
  gone[m] = true
end
if qlen > 0 then
  local dead = dead_waiters(B)
  for _, m in ipairs(dead) do leave(m) end
  qlen = qlen - #dead
end
-- The waiter's place among those that stay: its rank less the leaving ones
-- ahead of it (queue scores are unique sequence numbers).
local function place(waiter)
  local r = redis.call('ZRANK', Q, waiter)
  if #glist == 0 then return r end
  local mine = tonumber(redis.call('ZSCORE', Q, waiter))
  for _, m in ipairs(glist) do
    if gone[m] then
      if gscore[m] == nil then gscore[m] = tonumber(redis.call('ZSCORE', Q, m)) or false end
      if gscore[m] and gscore[m] < mine then r = r - 1 end
    end
  end
  return r
end

local out = {-1, now}
local granted, queued, refused = false, false, false
for i = 7, #ARGV, 3 do
  local id, waiter = ARGV[i], ARGV[i + 1]
  local wid = waiter ~= '' and string.sub(waiter, 34) or nil
  local handed = wid and live_lease(H, wid)
  if handed then
    -- A release handed this waiter a permit while this attempt was on its
    -- way: that grant is the answer (it is also on the wake list).
    out[#out + 1] = 2
    out[#out + 1] = redis.call('HGET', M, 'g:' .. wid) or '0'
    out[#out + 1] = n2s(tonumber(handed) - now)
  else
    local pos = qlen -- a try_acquire arrives last
    if wid then
      -- A hand-off's first lease: one heartbeat, so a waiter that died just
      -- now strands a permit no longer than it would have blocked the queue;
      -- the woken waiter renews it to a full lease at once.
      if not queued then
        redis.call('HSET', M, 't:' .. string.sub(waiter, 1, 32), math.min(ttl, hb))
      end
      queued = true
      if gone[waiter] or not redis.call('ZSCORE', Q, waiter) then
        -- New, or leaving (dead, or granted earlier in this batch): queued
        -- again at the back, and it stays.
        redis.call('ZADD', Q, redis.call('HINCRBY', M, 'seq', 1), waiter)
        if gone[waiter] then gone[waiter], gscore[waiter] = false, nil end
        qlen = qlen + 1
      end
      redis.call('ZADD', B, n2s(now + hb), waiter)
      pos = place(waiter)
    end
    -- Idempotent per permit id: a retried attempt gets its own earlier
    -- grant (lease refreshed) instead of a second permit.
    local mine = ARGV[i + 2] == '1' and live_lease(H, id)
    -- Fair: only the first `free` in arrival order may take a permit.
    -- Non-fair: anyone may while one is free.
    if mine or (held < permits and (not fair or pos < permits - held)) then
      redis.call('ZADD', H, n2s(now + ttl), id)
      if not mine then held = held + 1 end
      if wid then
        leave(waiter)
        qlen = qlen - 1
      end
      granted = true
      out[#out + 1] = 1
      out[#out + 1] = n2s(next_fence(M))
      out[#out + 1] = ttl
    else
      refused = true
      out[#out + 1] = 0
      out[#out + 1] = pos
      out[#out + 1] = 0
    end
  end
end

if queued then
  touch(Q, keep)
  touch(B, keep)
end
-- The leaving waiters go now, before the hand-off reads the queue.
local list = {}
for _, m in ipairs(glist) do
  if gone[m] then list[#list + 1] = m end
end
-- Free permits nobody in this batch could take belong to the queue's heads.
if drop_waiters(Q, B, list) and qlen > 0 and held < permits then
  if hand_off(H, Q, B, M, permits - held, wake_base, hb, fair) > 0 then granted = true end
end
save_fence(M, permits)
if granted then touch(H, keep) end
if granted or queued then touch(M, keep) end
if refused then
  local first = redis.call('ZRANGEBYSCORE', H, '(' .. n2s(now), '+inf', 'WITHSCORES', 'LIMIT', 0, 1)
  if first[2] then out[1] = tonumber(first[2]) - now end
end
-- Last: expired leases (this may empty H).
redis.call('ZREMRANGEBYSCORE', H, '-inf', now)
return out
