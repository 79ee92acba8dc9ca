-- Shared by the semaphore scripts (inlined at build time by embed_lua.py).
-- Keys: H holders (zset permit id -> lease expiry ms), Q queue (zset waiter
-- -> arrival seq), B beats (zset waiter -> heartbeat deadline ms), M meta
-- (hash: permits, fence, seq; "t:<handle>" the first lease of a permit
-- handed to one of that handle's waiters; "g:<waiter>" the fence of a permit
-- handed to a waiter).
--
-- Redis Cluster rule: while the slot migrates, its source node runs a script
-- only when all declared keys exist there, and then refuses any later access
-- to a key the script itself emptied (deleted) -- without undoing the writes
-- before it. So in every script a removal that may empty a key is that key's
-- last access: reads, additions and expiry first, removals last (the
-- expired leases and dead waiters are skipped until then). M is never
-- emptied: a "g:" field is only ever written with "fence" beside it.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local now_us = tonumber(t[1]) * 1000000 + tonumber(t[2])
local function n2s(x) return string.format('%.0f', x) end

-- Waiters that stopped heart-beating (at most 1000 per step).
local function dead_waiters(B)
  return redis.call('ZRANGEBYSCORE', B, '-inf', now, 'LIMIT', 0, 1000)
end

-- Remove the waiters in list from Q and B (the last removals from them before
-- hand_off); true when both still hold someone, i.e. hand_off may read them.
local function drop_waiters(Q, B, list)
  if #list == 0 then return true end
  local nq, nb = redis.call('ZCARD', Q), redis.call('ZCARD', B)
  nb = nb - redis.call('ZREM', B, unpack(list))
  nq = nq - redis.call('ZREM', Q, unpack(list))
  return nq > 0 and nb > 0
end

-- A lease's expiry if it is live, else nil (expired ones are removed last).
local function live_lease(H, id)
  local s = redis.call('ZSCORE', H, id)
  if s and tonumber(s) > now then return s end
  return nil
end

-- Extend k's idle expiry to keep ms once half of it has passed, never
-- shorten it (handles with longer leases may share the semaphore). Waiting
-- for the half spares a write in almost every step, and an abandoned key
-- still outlives every lease: keep is twice the longest plus a minute.
local function touch(k, keep)
  if redis.call('PTTL', k) < keep / 2 then redis.call('PEXPIRE', k, keep) end
end

-- The next fencing token: strictly increasing, and never below the
-- server's clock in microseconds, so it keeps increasing even after the
-- meta key expired or Redis restarted empty. `last_fence` caches the stored
-- one within a script; save_fence writes it back once, with the "g:" fields
-- the hand-off queued in `fence_fields` (one write to M per step).
local last_fence, fence_fields = nil, {}
local function next_fence(M)
  if not last_fence then last_fence = tonumber(redis.call('HGET', M, 'fence') or '0') end
  last_fence = last_fence + 1
  if last_fence < now_us then last_fence = now_us end
  return last_fence
end

-- redis.call(cmd, key, ...) over list, at most 1000 arguments a call (unpack
-- has a limit); an even slice keeps (score, member) and (field, value) pairs.
local function call_in_slices(cmd, key, list)
  for i = 1, #list, 1000 do
    redis.call(cmd, key, unpack(list, i, math.min(i + 999, #list)))
  end
end

local function save_fence(M, permits)
  if not last_fence then return end
  fence_fields[#fence_fields + 1] = 'fence'
  fence_fields[#fence_fields + 1] = n2s(last_fence)
  fence_fields[#fence_fields + 1] = 'permits'
  fence_fields[#fence_fields + 1] = permits
  call_in_slices('HSET', M, fence_fields)
end

-- Hand up to n free permits to queued waiters, oldest first, in this same
-- step: the permit's id is the waiter's id, its first lease the waiter
-- handle's heartbeat ("t:<handle>"; the waiter renews it to a full lease at
-- once, and one that died meanwhile holds it no longer than it would have
-- held its place in the queue), and the grant itself goes onto the handle's wake list
-- ("<wake_base><handle id>", which that handle's blocking connection waits
-- on) as "<waiter id>:<fence>:<lease expiry ms>", so the woken waiter owns
-- the permit without another round trip and no permit sits idle between a
-- release and the next grant. The grants of one handle go as one element,
-- joined by ",": one BRPOP wakes all of them. Queue members are
-- "<handle id>:<waiter id>".
-- Only waiters that kept their heartbeat are served (a wake-up sent to a
-- process that is gone would strand the permit for a lease): non-fair mode
-- skips a stale one; fair mode stops there, since nobody may pass the head
-- (it is evicted after its heartbeat). A dead one met on the way (heartbeat
-- deadline passed) leaves the queue with the granted ones, so a release
-- need not sweep the whole queue first. Returns how many were handed.
--
-- The wake list is the one key a script computes instead of declaring (the
-- handle that gets the grant is only known here). It shares the declared
-- keys' hash tag, hence their slot, so Redis Cluster runs it on the node
-- that owns them -- except while that slot migrates, when a node refuses a
-- key it does not hold ("non local key"). So the wake-up is pushed first,
-- by pcall, and only a handle whose push landed is granted anything: a
-- refused push grants nothing (scripts are not rolled back, so granting
-- first would leave a permit nobody is woken for); the permit stays free
-- and the waiters take it with their next attempt, within a heartbeat.
-- In fair mode a refused head stops the hand-off, so nobody passes it.
-- Callers run it before removing anything from H (it adds there) and only
-- while Q and B hold someone; it may empty them, so they touch Q and B
-- before it, never after. The ids it grants go into `got` (a set) if given;
-- callers that hand anything run save_fence afterwards (it writes the
-- grants' fences). The grants' writes go as one call per key after the
-- pushes, not one per waiter: this step delays the grant it hands.
local function hand_off(H, Q, B, M, n, wake_base, hb, fair, got)
  if n <= 0 then return 0 end
  local stale = now + hb / 2
  local heads = redis.call('ZRANGE', Q, 0, n + 7)
  -- One read of M for the fence and the first lease of every handle here.
  local fields, asked = {'fence'}, {}
  for _, m in ipairs(heads) do
    local sep = string.find(m, ':', 1, true)
    local handle = sep and string.sub(m, 1, sep - 1)
    if handle and not asked[handle] then
      asked[handle] = true
      fields[#fields + 1] = 't:' .. handle
    end
  end
  local vals = redis.call('HMGET', M, unpack(fields))
  if not last_fence then last_fence = tonumber(vals[1] or '0') end
  local leases = {}
  for i = 2, #fields do leases[string.sub(fields[i], 3)] = tonumber(vals[i] or '0') end
  -- The heartbeats due within half a beat, usually none: one read instead
  -- of one per head (only past 1000 of them are heads looked up alone).
  local weak, wl = {}, redis.call('ZRANGEBYSCORE', B, '-inf', '(' .. n2s(math.ceil(stale)),
                                  'WITHSCORES', 'LIMIT', 0, 1000)
  for i = 1, #wl, 2 do weak[wl[i]] = tonumber(wl[i + 1]) end
  local picked, byhandle, order, members = 0, {}, {}, {}
  for _, m in ipairs(heads) do
    if picked >= n then break end
    local beat = weak[m] or stale
    if #wl >= 2000 and not weak[m] then beat = tonumber(redis.call('ZSCORE', B, m) or '0') end
    local sep = string.find(m, ':', 1, true)
    local handle = sep and string.sub(m, 1, sep - 1)
    local lease = handle and leases[handle]
    if beat <= now then
      members[#members + 1] = m
    elseif beat < stale then
      if fair then break end
    elseif lease and lease > 0 then
      if not byhandle[handle] then
        byhandle[handle] = {}
        order[#order + 1] = handle
      end
      local g = byhandle[handle]
      g[#g + 1] = {m, string.sub(m, sep + 1), lease}
      picked = picked + 1
    end
  end
  local given, holders = 0, {} -- written with few calls
  for _, handle in ipairs(order) do
    local texts = {}
    for _, g in ipairs(byhandle[handle]) do
      g[4] = n2s(next_fence(M))
      g[5] = n2s(now + g[3])
      texts[#texts + 1] = g[2] .. ':' .. g[4] .. ':' .. g[5]
    end
    local wk = wake_base .. handle
    local len = redis.pcall('LPUSH', wk, table.concat(texts, ','))
    if type(len) == 'number' then
      if len > 64 then redis.call('LTRIM', wk, 0, 63) end
      redis.call('PEXPIRE', wk, hb * 2 + 1000)
      for _, g in ipairs(byhandle[handle]) do
        holders[#holders + 1] = g[5]
        holders[#holders + 1] = g[2]
        members[#members + 1] = g[1]
        fence_fields[#fence_fields + 1] = 'g:' .. g[2]
        fence_fields[#fence_fields + 1] = g[4]
        if got then got[g[2]] = true end
      end
      given = given + #byhandle[handle]
    elseif fair then
      break
    end
  end
  if given > 0 then call_in_slices('ZADD', H, holders) end
  call_in_slices('ZREM', Q, members)
  call_in_slices('ZREM', B, members)
  return given
end
