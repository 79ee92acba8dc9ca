-- Shared by the semaphore scripts (inlined at build time by embed_lua.py).
-- Keys: H holders (zset permit id -> lease expiry ms), Q queue (zset waiter
-- "<handle id>:<waiter id>" -> arrival seq), B beats (zset, below), M meta
-- (hash: permits, fence, seq; "g:<waiter>" the fence of a permit handed to
-- a waiter). All times are Redis's, in ms.
--
-- B holds one heartbeat per handle with waiters queued, "<handle id>" ->
-- the moment its process promised to be alive until (one entry however
-- many of its waiters wait), and per waiter "<handle id>:<waiter id>" ->
-- the moment its caller stops wanting a permit (FOREVER: no limit). A
-- waiter is served only while both lie ahead: a stalled Redis, a paused or
-- dead process can delay a grant, but never hand one to a caller that gave
-- up. Waiters queued by an earlier sluice (a rolling upgrade) are told
-- apart by "t:<handle>" in M, that version's first lease of a hand-off:
-- their B entry is their own heartbeat, as that version keeps it.
--
-- Redis Cluster rule: while the slot migrates, its source node runs a script
-- only when all declared keys exist there, and then refuses any later access
-- to a key the script itself emptied (deleted) -- without undoing the writes
-- before it. So in every script a removal that may empty a key is that key's
-- last access: reads, additions and expiry first, removals last (the
-- expired leases and leaving waiters are skipped until then). M is never
-- emptied: a "g:" field is only ever written with "fence" beside it.

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local now_us = tonumber(t[1]) * 1000000 + tonumber(t[2])
-- Numbers go to Redis as integer text: '%d' is exact for every value here
-- (integers below 2^53) and much cheaper than a float format.
local function n2s(x) return string.format('%d', x) end
local now_s = n2s(now)

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

-- Fencing tokens: era * 2^22 + n, kept in M as decimal text ("fence"),
-- exact beyond Lua's 2^53. n counts the grants of an era (1 .. 2^22 - 1).
-- An era is a moment of Redis's clock in ms since 2020 that only grows,
-- and a new one starts whenever the node's replication history (INFO's
-- master_replid, in M as "rid") is not the one that wrote the last token:
-- a promoted replica, or a restart that lost it. A newer master therefore
-- outranks every token of the one it replaced, however long that one goes
-- on granting while cut off, and a Redis that restarted empty starts above
-- every token it gave before (an era never runs ahead of the clock). Tokens
-- of an earlier sluice (microseconds) read as an era long past.
local ERA_BASE_MS, ERA_N = 1577836800000, 4194304
local era, era_n, era_rid, era_new = nil, nil, nil, false
local fence_fields = nil

local function token_text(e, n)
  local low = (e % 1000000) * ERA_N + n
  local hi = math.floor(e / 1000000) * ERA_N + math.floor(low / 1000000)
  if hi == 0 then return n2s(low) end
  return string.format('%d%06d', hi, low % 1000000)
end

-- (era, n) of a token's text (at most 20 digits; "" or junk reads as 0).
local function token_parts(s)
  if not string.find(s, '^%d+$') or #s > 20 then return 0, 0 end
  local hi, low6 = tonumber(string.sub(s, 1, -7)) or 0, tonumber(string.sub(s, -6))
  local m = (hi % ERA_N) * 1000000 + low6
  return math.floor(hi / ERA_N) * 1000000 + math.floor(m / ERA_N), m % ERA_N
end

local function token_less(s, t)
  local e1, n1 = token_parts(s)
  local e2, n2 = token_parts(t)
  return e1 < e2 or (e1 == e2 and n1 < n2)
end

local function replication_id()
  local info = redis.pcall('INFO', 'replication')
  if type(info) ~= 'string' then return nil end -- refused: nothing learnt
  return string.match(info, 'master_replid:(%w+)')
end

local function start_era()
  era, era_n = math.max(era + 1, now - ERA_BASE_MS), 0
end

-- The next token, as text. The stored one is read once per script and
-- written back once by save_fence, with the "g:" fields the hand-off
-- queued in `fence_fields` (one write to M per step).
local function next_fence(M)
  if not era then
    local v = redis.call('HMGET', M, 'fence', 'rid')
    era, era_n = token_parts(v[1] or '')
    era_rid = replication_id() or v[2]
    if not v[1] or era_rid ~= v[2] then
      start_era()
      era_new = true
    end
  end
  era_n = era_n + 1
  if era_n >= ERA_N then
    start_era()
    era_n = 1
  end
  return token_text(era, era_n)
end

-- redis.call(cmd, key, ...) over list, at most 1000 arguments a call (unpack
-- has a limit); an even slice keeps (score, member) and (field, value) pairs.
local function call_in_slices(cmd, key, list)
  for i = 1, #list, 1000 do
    redis.call(cmd, key, unpack(list, i, math.min(i + 999, #list)))
  end
end

local function save_fence(M, permits)
  if not era then return end
  fence_fields = fence_fields or {}
  local f = fence_fields
  f[#f + 1], f[#f + 2], f[#f + 3], f[#f + 4] = 'fence', token_text(era, era_n), 'permits', permits
  if era_new and era_rid then f[#f + 1], f[#f + 2] = 'rid', era_rid end
  call_in_slices('HSET', M, f)
end


-- ---- the queue -------------------------------------------------------------

-- A waiter's deadline when its caller set none (2^53 - 1: exact in Lua).
local FOREVER = 9007199254740991

-- The queue's functions and tables are made by queue_init, on the first
-- use in a step: most steps (a try_acquire, a renewal) queue nobody, and
-- making them costs every call. Scripts call it before any of them.
local gone, glist, beats, legacy, unpushed
local leave, stay, sweep, remove_gone, handle_beat, waiter_state, walk, hand_off
local function queue_init()
  if gone then return end
  -- Q and B members that leave, removed by remove_gone as the last access to
  -- Q and B: gone[m] is true while m leaves, false once it was queued again;
  -- glist lists each one once.
  gone, glist = {}, {}
  function leave(m)
    if gone[m] == nil then glist[#glist + 1] = m end
    gone[m] = true
  end
  function stay(m)
    if gone[m] then gone[m] = false end
  end

  -- Every B entry whose moment passed leaves (waiters whose caller gave up,
  -- heartbeats that stopped; at most 1000 a step): linear in what leaves.
  function sweep(B)
    for _, m in ipairs(redis.call('ZRANGEBYSCORE', B, '-inf', now_s, 'LIMIT', 0, 1000)) do leave(m) end
  end

  function remove_gone(Q, B)
    local list = {}
    for _, m in ipairs(glist) do
      if gone[m] then list[#list + 1] = m end
    end
    if #list == 0 then return end
    call_in_slices('ZREM', B, list)
    call_in_slices('ZREM', Q, list)
  end

  -- A handle's heartbeat deadline, and for an earlier version's handle its
  -- first lease (else false); read once per step.
  beats, legacy = {}, {}
  function handle_beat(B, M, h)
    if beats[h] == nil then
      local b = redis.call('ZSCORE', B, h)
      local t = not b and redis.call('HGET', M, 't:' .. h)
      beats[h], legacy[h] = tonumber(b or '0'), t and tonumber(t) or false
    end
    return beats[h], legacy[h]
  end

  -- A queued waiter is 'dead' (it leaves), 'weak' (its heartbeat ends within
  -- half a beat: fair mode may not pass it, others skip it) or 'live', with
  -- the expiry of a permit handed to it now: its handle's heartbeat (the woken
  -- waiter renews it to a full lease at once; one that died meanwhile holds it
  -- no longer than it would have held its place).
  function waiter_state(B, M, m, hb)
    local beat, old = handle_beat(B, M, string.sub(m, 1, 32))
    local own = tonumber(redis.call('ZSCORE', B, m) or '0')
    if old then beat = own end
    if own <= now or beat <= now then return 'dead' end
    if beat < now + hb / 2 then return 'weak' end
    return 'live', old and now + old or beat
  end

  -- Visit the queue from its head, in order, past the leaving: each waiter
  -- not dead goes to visit(m, state, expiry) until that returns false; the
  -- dead ones met leave. At most 1024 members are read a step. True when it
  -- reached the end of the queue.
  function walk(Q, B, M, hb, visit)
    for from = 0, 1023, 64 do
      local page = redis.call('ZRANGE', Q, from, from + 63)
      for _, m in ipairs(page) do
        if not gone[m] then
          local st, expiry = waiter_state(B, M, m, hb)
          if st == 'dead' then
            leave(m)
          elseif not visit(m, st, expiry) then
            return false
          end
        end
      end
      if #page < 64 then return true end
    end
    return false
  end

  -- Hand up to n free permits to queued waiters, oldest first, in this same
  -- step: the permit's id is the waiter's id, its first lease ends with the
  -- waiter's heartbeat (see waiter_state), and the grant itself goes onto the
  -- handle's wake list ("<wake_base><handle id>", which that handle's blocking
  -- connection waits on) as "<waiter id>:<fence>:<lease expiry ms>", so the
  -- woken waiter owns the permit without another round trip and no permit
  -- sits idle between a release and the next grant. The grants of one handle
  -- go as one element, joined by ",": one BRPOP wakes all of them.
  -- Only live waiters are served (a wake-up sent to a process that is gone
  -- would strand the permit): non-fair mode skips a weak one; fair mode stops
  -- there, since nobody may pass the head. Granted and dead waiters leave.
  --
  -- The wake list is the one key a script computes instead of declaring (the
  -- handle that gets the grant is only known here). It shares the declared
  -- keys' hash tag, hence their slot, so Redis Cluster runs it on the node
  -- that owns them -- except while that slot migrates, when a node refuses a
  -- key it does not hold ("non local key"). So the wake-up is pushed first,
  -- by pcall, and only a handle whose push landed is granted anything: a
  -- refused push grants nothing (scripts are not rolled back, so granting
  -- first would leave a permit nobody is woken for); the permit stays free
  -- and the waiters take it with their next step, within a heartbeat.
  -- In fair mode a refused head stops the hand-off, so nobody passes it. The
  -- handles refused go into `unpushed` (a set): their waiters are told to ask
  -- themselves (see sem_acquire.lua).
  -- Callers run it before removing anything from H (it adds there). The ids
  -- it grants go into `got` (a set) if given; callers that hand anything run
  -- save_fence afterwards (it writes the grants' fences). The grants' writes
  -- go as one call per key after the pushes, not one per waiter: this step
  -- delays the grant it hands. Returns how many were handed.
  unpushed = {}
  function hand_off(H, Q, B, M, n, wake_base, hb, fair, got)
    if n <= 0 then return 0 end
    local picked, byhandle, order = 0, {}, {}
    walk(Q, B, M, hb, function(m, st, expiry)
      if st == 'weak' then return not fair end
      local h = string.sub(m, 1, 32)
      if not byhandle[h] then
        byhandle[h] = {}
        order[#order + 1] = h
      end
      local g = byhandle[h]
      g[#g + 1] = {m, string.sub(m, 34), expiry}
      picked = picked + 1
      return picked < n
    end)
    local given, holders = 0, {} -- written with few calls
    fence_fields = fence_fields or {}
    for _, h in ipairs(order) do
      local texts = {}
      for _, g in ipairs(byhandle[h]) do
        g[4], g[5] = next_fence(M), n2s(g[3])
        texts[#texts + 1] = g[2] .. ':' .. g[4] .. ':' .. g[5]
      end
      local wk = wake_base .. h
      local len = redis.pcall('LPUSH', wk, table.concat(texts, ','))
      if type(len) == 'number' then
        if len > 64 then redis.call('LTRIM', wk, 0, 63) end
        redis.call('PEXPIRE', wk, hb * 2 + 1000)
        for _, g in ipairs(byhandle[h]) do
          holders[#holders + 1] = g[5]
          holders[#holders + 1] = g[2]
          leave(g[1])
          fence_fields[#fence_fields + 1] = 'g:' .. g[2]
          fence_fields[#fence_fields + 1] = g[4]
          if got then got[g[2]] = true end
        end
        given = given + #byhandle[h]
      else
        unpushed[h] = true
        if fair then break end
      end
    end
    if given > 0 then call_in_slices('ZADD', H, holders) end
    return given
  end
end
