-- Repeating schedules of a queue (included after _dq_common.lua; see
-- docs/delay-queue.md, "Repeating schedules"). KEYS[6] s is a hash: per
-- schedule <name>, k<name> its canonical spec (src/dq/dq_spec.h), p<name>
-- the payload of its messages, u<name> the time (ms) until which it counts
-- as declared, t<name> the spec as the user wrote it (for lists); '#exp' the expiry s and n were last given. KEYS[7] n is a
-- sorted set: name -> the occurrence (ms) whose message is queued.
--
-- Exactly once: a schedule's next message is pushed ahead, as a delayed
-- message with the id <name>@<occurrence> due at the occurrence, and n
-- holds that occurrence; the only step that queues another is a fire
-- (dq_sched_fire.lua), once the queued one is due, for the occurrence
-- after it. n's score only grows, so however many processes call fire, an
-- occurrence is queued once; the delay queue delivers it on time, whoever
-- fires and however late.

-- Days since 1970-01-01 of a date (proleptic Gregorian), and back.
local function days_from_civil(y, m, d)
  if m <= 2 then y = y - 1 end
  local era = math.floor(y / 400)
  local yoe = y - era * 400
  local doy = math.floor((153 * ((m + 9) % 12) + 2) / 5) + d - 1
  return era * 146097 + yoe * 365 + math.floor(yoe / 4) - math.floor(yoe / 100) + doy - 719468
end

local function civil_from_days(z)
  z = z + 719468
  local era = math.floor(z / 146097)
  local doe = z - era * 146097
  local yoe = math.floor((doe - math.floor(doe / 1460) + math.floor(doe / 36524)
    - math.floor(doe / 146096)) / 365)
  local doy = doe - (365 * yoe + math.floor(yoe / 4) - math.floor(yoe / 100))
  local mp = math.floor((5 * doy + 2) / 153)
  local d = doy - math.floor((153 * mp + 2) / 5) + 1
  local m = mp < 10 and mp + 3 or mp - 9
  local y = yoe + era * 400
  if m <= 2 then y = y + 1 end
  return y, m, d
end

local function month_days(y, m)
  if m == 2 then return (y % 4 == 0 and (y % 100 ~= 0 or y % 400 == 0)) and 29 or 28 end
  if m == 4 or m == 6 or m == 9 or m == 11 then return 30 end
  return 31
end

-- A comma list of integers lo..hi, ascending -> the array and a set; nil if
-- anything else (the canonical form is written by the client, but a script
-- never trusts its arguments).
local function list_read(s, lo, hi)
  local arr, set, last = {}, {}, lo - 1
  for x in string.gmatch(s, '[^,]+') do
    local v = tonumber(x)
    if not v or v ~= math.floor(v) or v <= last or v > hi then return nil end
    arr[#arr + 1], set[v], last = v, true, v
  end
  if #arr == 0 then return nil end
  return arr, set
end

-- Canonical spec -> a table, or nil if malformed. At most 512 bytes.
local function spec_read(canon)
  if #canon > 512 then return nil end
  local w = {}
  for x in string.gmatch(canon, '%S+') do
    if #w == 8 then return nil end
    w[#w + 1] = x
  end
  if w[1] == 'i' and #w == 3 then
    local every, start = tonumber(w[2]), tonumber(w[3])
    if not (every and start and every >= 100 and every <= 2 ^ 42 and start >= 0
      and start <= 2 ^ 42 and every == math.floor(every) and start == math.floor(start)) then
      return nil
    end
    return {every = every, start = start}
  end
  if w[1] ~= 'c' or #w ~= 8 then return nil end
  local s = {}
  s.min = list_read(w[2], 0, 59)
  s.hour = list_read(w[3], 0, 23)
  s.doms, s.dom = list_read(w[4], 1, 31)
  s.mon = select(2, list_read(w[5], 1, 12))
  s.dow = select(2, list_read(w[6], 0, 6))
  s.both = w[7] == '1' or w[8] == '1'
  if not (s.min and s.hour and s.doms and s.mon and s.dow) then return nil end
  return s
end

-- The first minute of day dn (days since 1970) at or after minute `from`
-- (0..1439) that s allows, as unix ms; nil if none.
local function day_first(s, dn, from)
  for _, h in ipairs(s.hour) do
    if h * 60 + 59 >= from then
      for _, mi in ipairs(s.min) do
        if h * 60 + mi >= from then return (dn * 1440 + h * 60 + mi) * 60000 end
      end
    end
  end
  return nil
end

-- The first day from day d (of month_days md; day number dn) that s
-- allows, searched from minute `from` on day d: its first occurrence, or
-- nil. When a day must match both day fields only the days of month listed
-- are looked at (February 29th on a Sunday costs one look a year).
local function month_first(s, d, md, dn, from)
  if s.both then
    for _, dd in ipairs(s.doms) do
      if dd >= d and dd <= md and s.dow[(dn + dd - d + 4) % 7] then
        local at = day_first(s, dn + dd - d, dd == d and from or 0)
        if at then return at end
      end
    end
    return nil
  end
  for dd = d, md do
    if s.dom[dd] or s.dow[(dn + 4) % 7] then
      local at = day_first(s, dn, from)
      if at then return at end
    end
    dn, from = dn + 1, 0
  end
  return nil
end

-- The first occurrence of spec s strictly after t (unix ms); nil if there
-- is none within 50 years (the longest gap of a cron expression that
-- occurs at all is 40 years: February 29th on one weekday, across 2100).
-- Work: at most 600 months, of at most 31 days each, one of which searches
-- its minutes.
local function sched_next(s, t)
  if s.every then
    if t < s.start then return s.start end
    return s.start + (math.floor((t - s.start) / s.every) + 1) * s.every
  end
  local m0 = math.floor(t / 60000) + 1
  local dn = math.floor(m0 / 1440)
  local from = m0 - dn * 1440
  local y, mo, d = civil_from_days(dn)
  for _ = 1, 600 do
    local md = month_days(y, mo)
    if s.mon[mo] then
      local at = month_first(s, d, md, dn, from)
      if at then return at end
    end
    dn = dn + md - d + 1
    from, d, mo = 0, 1, mo + 1
    if mo > 12 then mo, y = 1, y + 1 end
  end
  return nil
end

-- The message id of schedule name's occurrence at.
local function sched_id(name, at)
  return name .. '@' .. dec(at)
end

-- Queue schedule name's message for occurrence at (a push, as dq_push.lua's
-- of one message); a message of that id still queued stays.
local function sched_queue(name, at, payload, now, ret)
  local h, z = KEYS[4], KEYS[1]
  local id = sched_id(name, at)
  local s = seq_enc(redis.call('HINCRBY', h, '#seq', 1))
  if redis.call('HSETNX', h, 'p' .. id, s .. payload) == 1 then
    redis.call('ZADD', z, at, s .. id)
    dq_wake(KEYS[5], at)
  end
  dq_expire(h, math.max(at, now) + ret, ret, {[z] = true, [h] = true})
end

-- Take back schedule name's queued message for occurrence at if no
-- consumer took it yet (a removed or changed schedule). Removes from z:
-- call it after every other access to z.
local function sched_unqueue(name, at)
  local h = KEYS[4]
  local id = sched_id(name, at)
  local v = redis.call('HMGET', h, 'p' .. id, 'a' .. id)
  if not v[1] or v[2] then return end
  redis.call('HDEL', h, 'p' .. id)
  redis.call('ZREM', KEYS[1], string.sub(v[1], 1, seq_len(v[1]) or 0) .. id)
end

-- s and n live as long as the latest declaration in them.
local function sched_expire(upto)
  local s = KEYS[6]
  local exp = tonumber(redis.call('HGET', s, '#exp') or '0')
  if upto > exp then
    exp = upto
    redis.call('HSET', s, '#exp', exp)
  end
  redis.call('PEXPIREAT', s, exp)
  redis.call('PEXPIREAT', KEYS[7], exp)
end

local function time_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
