-- Try to grant permits to a batch of acquire requests, in order, and beat
-- the handle's heartbeat (one atomic step; all times from Redis TIME, in
-- ms). The client sends every attempt that is ready at the same moment in
-- one call: Redis pays for TIME, the sweep and the bookkeeping once per
-- batch instead of once per permit. With no requests it is the handle's
-- heartbeat alone: it keeps all the handle's queued waiters alive (one
-- step however many wait) and hands free permits to the queue's heads.
-- KEYS: 1 holders, 2 queue, 3 beats, 4 meta
-- ARGV: 1 permits, 2 ttl_ms, 3 heartbeat_ms, 4 fair (0/1), 5 wake list base
--       ("<prefix>sem:{name}:wake:"), 6 keep_ms (idle expiry), 7 the handle
--       whose heartbeat this is ("": none), 8 the heartbeat's deadline (a
--       step run at or after it beats nothing: its process may be gone),
--       then five per request: permit id; waiter ("" for try_acquire, else
--       "<handle id>:<waiter id>"); "1" if an earlier attempt with this id
--       may have been granted (its reply was lost), else "0"; the
--       request's deadline (its caller wants nothing from a step run at or
--       after it); the waiter's own deadline in the queue (0: none).
-- Returns {wait, now, beat, then g, v, r per request}: wait is ms until the
-- earliest lease expires (-1: none), now Redis's clock in ms, beat 0 when no
-- heartbeat was beaten (none asked, or too late), 1 when it was, 2 when it
-- was but the handle's heartbeat had stopped (its waiters may have left the
-- queue: they must queue again), 3 when it was and a permit free for the
-- handle's waiters could not be handed to them (their wake list was refused:
-- a slot migrating), so they must ask for it; g is 1 when the request was
-- granted (v: its fencing token, r: its lease in ms), 2 when a release
-- already handed this waiter a permit whose id is the waiter id (v: its
-- fencing token, r: its lease in ms, now a whole one), 0 when refused, 3 when its deadline
-- had passed: nothing was done for it, and it left the queue.
--@confirm
--@include _sem_common.lua
local H, Q, B, M = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local permits, ttl, hb = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local fair, wake_base, keep = ARGV[4] == '1', ARGV[5], tonumber(ARGV[6])
local handle, beat_until = ARGV[7], tonumber(ARGV[8])

-- The heartbeat: 1 if it was still running, 2 if it had stopped. A stopped
-- one, or a heartbeat alone, is beaten first (the sweep then keeps it); a
-- running one carried by attempts only once one of them is queued: an
-- attempt granted at once needs no heartbeat.
local beat, beaten = 0, false
local function beat_now()
  queue_init()
  redis.call('ZADD', B, n2s(now + hb), handle)
  beats[handle], legacy[handle], beaten = now + hb, false, true
end
if handle ~= '' and now < beat_until then
  local prev = tonumber(redis.call('ZSCORE', B, handle) or '0')
  beat = prev > now and 1 or 2
  if beat == 2 or #ARGV < 9 then beat_now() end
end
-- Expired leases and leaving waiters are only skipped here and removed at
-- the end (see _sem_common.lua).
local held = redis.call('ZCOUNT', H, '(' .. now_s, '+inf')
-- With nobody queued (the common case) the hand-off would read nothing, and
-- the sweep only heartbeats of handles without waiters: it runs when one is
-- written, so they never pile up. (ZCARD, not EXISTS: the ACL rule `sluice
-- acl` prints grants no more.)
local waiting = redis.call('ZCARD', Q) > 0
if waiting or beaten then
  queue_init()
  sweep(B)
end

-- Fair mode: only the first (permits - held) waiters in arrival order may
-- take a permit (weak ones count: nobody passes them). rank[m] is a queued
-- waiter's place among them, read once per step; ranked counts the places
-- given, all says the queue ended within them (then newcomers are ranked
-- too), and taken lists the places granted in this step.
local rank, ranked, all, taken = nil, 0, false, nil
local function read_ranks()
  queue_init()
  rank, taken = {}, {}
  local want = permits - held
  all = walk(Q, B, M, hb, function(m)
    if ranked >= want then return false end
    ranked = ranked + 1
    rank[m] = ranked
    return true
  end)
end
-- Whether waiter m (nil: a try_acquire, which comes after every waiter)
-- may take one of the free permits now.
local function entitled(m)
  if not rank then read_ranks() end
  local place = m and rank[m] or (all and ranked + 1)
  if not place then return false end
  for _, p in ipairs(taken) do
    if p < place then place = place - 1 end
  end
  return place <= permits - held
end


-- The grants' leases go to H in one call after the loop (no request reads
-- another's: permit ids are unique, and a waiter id names an earlier
-- hand-off's permit).
local out, lease, leases = {-1, now, beat}, n2s(now + ttl), {}
local granted, queued, refused = false, false, false
for i = 9, #ARGV, 5 do
  local id, waiter = ARGV[i], ARGV[i + 1]
  local wid = waiter ~= '' and string.sub(waiter, 34) or nil
  local handed = wid and live_lease(H, wid)
  -- Its deadline has passed when its digits are no more than now's:
  -- comparing the strings spares a number conversion per request (the
  -- client writes both as plain decimals).
  local dl = ARGV[i + 3]
  if #dl < #now_s or (#dl == #now_s and dl <= now_s) then
    -- Its caller gave up, or will before an answer reaches it.
    if wid then
      queue_init()
      leave(waiter)
    end
    out[#out + 1], out[#out + 2], out[#out + 3] = 3, 0, 0
  elseif handed then
    -- A release handed this waiter a permit while this attempt was on its
    -- way (or the waiter asks to have a hand-off confirmed): that grant is
    -- the answer (it is also on the wake list), now with a whole lease --
    -- the waiter is alive, and the write lets the WAIT behind this step
    -- confirm the hand-off too.
    leases[#leases + 1], leases[#leases + 2] = lease, wid
    granted = true
    out[#out + 1] = 2
    out[#out + 1] = redis.call('HGET', M, 'g:' .. wid) or '0'
    out[#out + 1] = ttl
  else
    -- Idempotent per permit id: a retried attempt gets its own earlier
    -- grant (lease refreshed) instead of a second permit.
    local mine = ARGV[i + 2] == '1' and live_lease(H, id)
    -- A waiter is queued unless it is granted at once without looking at
    -- the queue (non-fair, a permit free; fair mode ranks it there first).
    if wid and not (mine or (not fair and held < permits)) then
      queue_init()
      if gone[waiter] or not redis.call('ZSCORE', Q, waiter) then
        -- New, or leaving (dead, or granted earlier in this batch): queued
        -- again at the back, and it stays.
        redis.call('ZADD', Q, redis.call('HINCRBY', M, 'seq', 1), waiter)
        stay(waiter)
        if rank and all and not rank[waiter] then
          ranked = ranked + 1
          rank[waiter] = ranked
        end
      end
      local own = tonumber(ARGV[i + 4])
      redis.call('ZADD', B, n2s(own > 0 and own or FOREVER), waiter)
      queued = true
    end
    -- Non-fair: anyone may take a permit while one is free.
    if mine or (held < permits and (not fair or entitled(wid and waiter))) then
      leases[#leases + 1], leases[#leases + 2] = lease, id
      if not mine then held = held + 1 end
      if wid then
        queue_init()
        leave(waiter) -- queued by an earlier attempt, or now (fair mode)
        if rank and rank[waiter] then taken[#taken + 1] = rank[waiter] end
      end
      granted = true
      out[#out + 1] = 1
      out[#out + 1] = next_fence(M)
      out[#out + 1] = ttl
    else
      refused = true
      out[#out + 1], out[#out + 2], out[#out + 3] = 0, 0, 0
    end
  end
end

if #leases > 0 then call_in_slices('ZADD', H, leases) end
if queued and beat == 1 and not beaten then beat_now() end
-- Waiters and their heartbeats keep the queue's keys (and M, whose seq
-- orders them) from expiring, however long they wait without new arrivals.
if queued or beaten then
  touch(Q, keep)
  touch(B, keep)
end
-- Free permits nobody in this batch could take belong to the queue's heads.
if held < permits and (waiting or queued) and hand_off(H, Q, B, M, permits - held, wake_base, hb, fair) > 0 then
  granted = true
end
-- (Only from a heartbeat alone: attempts in this step had their answer.)
if #ARGV < 9 and beat == 1 and unpushed[handle] then out[3] = 3 end
save_fence(M, ARGV[1])
if granted then touch(H, keep) end
if granted or queued or beaten then touch(M, keep) end
-- (Read by refused attempts and by a heartbeat alone, which arms its timer.)
if refused or #ARGV < 9 then
  local first = redis.call('ZRANGEBYSCORE', H, '(' .. now_s, '+inf', 'WITHSCORES', 'LIMIT', 0, 1)
  if first[2] then out[1] = tonumber(first[2]) - now end
end
-- Last: the leaving waiters (this may empty Q and B), then expired leases
-- (this may empty H). Not when a hand-off was refused (a slot migrating):
-- the waiters' own attempts, which follow, need H still on this node, and
-- expired leases only count as free until then.
if gone then remove_gone(Q, B) end
if not (unpushed and next(unpushed)) then redis.call('ZREMRANGEBYSCORE', H, '-inf', now_s) end
return out
