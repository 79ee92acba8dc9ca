-- Sliding-window log: never more than limit units in any span of period ms.
-- Each key: a list {base, t1, s1, t2, s2, ...}, one entry per admitted
-- request, oldest first: t its admission time in microseconds of Redis's
-- clock (never decreasing per key), s the units admitted on the key up to
-- and including it, modulo 2^31 (a 4-byte integer; the live units never
-- reach 2^31), and base the s before the first entry kept. So the live units
-- are s_last - s_before_the_first_live_one, and any entry is one LINDEX
-- away: a request costs a few commands whatever its cost or the log's
-- length, and an entry about 16 bytes. base is never removed, so trimming
-- never empties the key (see the Cluster rule in _sem_common.lua). Denied
-- requests are not recorded; an entry admitted at t counts while now < t + span.
-- At most ENTRIES_MAX live entries (SLUICE_RL_LOG_ENTRIES_MAX): a cost below
-- limit / ENTRIES_MAX is refused (clients refuse it first), and a full log
-- denies until its oldest entry leaves, whatever limits callers pass.
-- A key left by an older sluice (a sorted set, one member per admitted unit
-- scored by its time) is converted on first use, see convert().
-- KEYS/ARGV/reply: a list of requests, see _rl_common.lua (burst unused).
--@include _rl_common.lua
--@include _search.lua
local span, WRAP, ENTRIES_MAX, CONVERT_MAX = period * 1000, 2147483648, 100000, 256
local min_cost = math.max(1, math.ceil(limit / ENTRIES_MAX))
local function ms_until(us) return math.ceil(us / 1000) end
local function num(key, i) return tonumber(rcall('LINDEX', key, i)) end
local function t_of(key, i) return num(key, 2 * i - 1) end -- entry i's time
local function s_of(key, i) return num(key, 2 * i) end     -- its sum; i = 0: base

-- The old sorted set's live units as entries (exactly for the oldest
-- CONVERT_MAX - 1 requests, the units of one request sharing its time; any
-- newer ones merged into one entry at the newest time, which can only make
-- them count longer), then the key rewritten as a list in place: SORT ...
-- STORE replaces the set by a one-element list without emptying the key.
local function convert(key)
  local total = rcall('ZCARD', key)
  local r = total - rcall('ZCOUNT', key, format('(%d', now_us - span), '+inf')
  local out, s = {}, 0
  while r < total do
    local e = rcall('ZRANGE', key, r, r, 'WITHSCORES')
    local c = rcall('ZCOUNT', key, e[2], e[2])
    if #out >= 2 * (CONVERT_MAX - 1) then
      e, c = rcall('ZRANGE', key, -1, -1, 'WITHSCORES'), total - r
    end
    s = s + c
    out[#out + 1], out[#out + 2] = e[2], s
    r = r + c
  end
  rcall('SORT', key, 'BY', 'nosort', 'LIMIT', 0, 1, 'STORE', key)
  rcall('LSET', key, 0, 0)
  if #out > 0 then rcall('RPUSH', key, unpack(out)) end
  rcall('PEXPIRE', key, period + 100)
  return 1 + #out
end

-- The live part of a key's log of k >= 1 entries: the index of its first
-- live entry (k + 1 if none), the sum before it, the newest entry's time
-- and sum, and now (never before the newest entry, so times never go back).
local function live_part(key, k)
  local head, tail = rcall('LRANGE', key, 0, 1), rcall('LRANGE', key, -2, -1)
  local last_t, last_s = tonumber(tail[1]), tonumber(tail[2])
  local now = math.max(now_us, last_t)
  local floor = now - span
  if last_t <= floor then return k + 1, last_s, last_t, last_s, now end
  if tonumber(head[2]) > floor then return 1, tonumber(head[1]), last_t, last_s, now end
  local first = first_true(2, k, function(i) return t_of(key, i) > floor end)
  return first, s_of(key, first - 1), last_t, last_s, now
end

return each(function(key, cost, peek)
  if cost > limit or cost < min_cost then return 0, 0, -1, 0 end -- clients refuse it
  local len = redis.pcall('LLEN', key)
  if type(len) ~= 'number' then -- the old layout, or another error (NOPERM):
    if not string.find(len.err or '', 'WRONGTYPE', 1, true) then rcall('LLEN', key) end -- raise it
    len = convert(key)
  end
  local k, first, before, last_t, last_s, now = 0, 1, 0, nil, 0, now_us
  if len > 1 then
    k = (len - 1) / 2
    first, before, last_t, last_s, now = live_part(key, k)
  elseif len == 1 then
    before = num(key, 0)
    last_s = before
  end
  local n, live = (last_s - before) % WRAP, k - first + 1
  local t_free -- if denied: when the live entry whose leaving frees enough units leaves
  if n + cost > limit or live >= ENTRIES_MAX then
    local need = math.max(n + cost - limit, 1)
    t_free = t_of(key, first_true(first, k, function(i)
      return (s_of(key, i) - before) % WRAP >= need
    end))
  end
  if not peek and first > 1 then rcall('LTRIM', key, 2 * (first - 1), -1) end
  if t_free then
    return 0, live >= ENTRIES_MAX and 0 or limit - n, ms_until(t_free + span - now),
           ms_until(last_t + span - now)
  end
  if not peek then
    if len == 0 then rcall('RPUSH', key, 0) end
    rcall('RPUSH', key, format('%d', now), (last_s + cost) % WRAP)
    rcall('PEXPIRE', key, period + 100)
  end
  return 1, limit - n - cost, 0, period
end)
