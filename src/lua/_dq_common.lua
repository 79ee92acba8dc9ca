-- Shared by the delay-queue scripts (inlined at build time by embed_lua.py).
-- KEYS[1..5] are a queue's z (delayed), f (in flight), d (dead), h
-- (per-message data, counters and the key horizon '#exp') and c (idle
-- consumers: consumer id -> the time, ms on Redis's clock, at which it will
-- look at the queue next). Consumer <cid>'s wake list is c .. ':' .. cid, its
-- take record (dq_take.lua) c .. ':' .. cid .. ':t': they carry c's hash
-- tag, hence its slot.
-- Redis Cluster rule: while the slot migrates, its source node runs a script
-- only when all declared keys exist there, then refuses any later access to
-- a key the script emptied, keeping the writes before it. So a removal that
-- may empty z, f, d or c is that key's last access (after dq_expire too); h
-- keeps its counters (#seq) and is never emptied.
--
-- Message layout. z's member is seq .. id, seq being the message's push
-- sequence number encoded as one length byte (1..8) and that many bytes,
-- big-endian: byte order is numeric order, so equal due times sort in push
-- order. h holds p<id> = seq .. payload and, once delivered, a<id> = seq ..
-- attempts (decimal), so a requeue or cancel finds the member without
-- another field, then, once taken, '/' .. its delivery token (decimal,
-- dq_take.lua; in the same field, so a take writes and a settlement reads
-- no more fields than before tokens). Queues written before this layout
-- have members of 12 hex digits .. id, raw payloads, a<id> = attempts (this
-- release adds the token there too) and s<id> = the 12 digits;
-- such a message keeps that layout until it is acknowledged (a hex digit is
-- never below '0', a length byte always is).
--
-- Priorities (0..9). A message's priority is in its sequence prefix's first
-- byte: k (the length, 1..8) for priority 0, as before, and
-- 128 + 8 (p - 1) + k - 1 for priority p >= 1 (above every hex digit, and
-- still numeric order within one priority). In z a message is scored
-- p * DQ_BAND + its due time: each priority is a band of the one sorted set,
-- so a requeue (late, retry, release, dead letter), which keeps the prefix,
-- keeps the priority. h['#pmax'] is the highest priority ever pushed (it
-- only grows): a take reads the bands from it down to 0, one range read
-- each, and a queue that never had one reads z as before.

-- Why no consumer's fate stalls another (liveness). Let E be the earliest
-- time anything becomes takeable: the head of z, or the first deadline of
-- f + 1. Invariant: every consumer in c looks at the queue no later than E
-- (its timer is armed for its score), or an unread wake-up for a time no
-- later than E waits on its own list. A take registers its consumer with
-- min(E, now + its poll) (dq_take.lua); steps that only remove raise E; a
-- step that adds a time X (push, retry, release, requeue, a take's new
-- deadlines) calls dq_wake(c, X), which in the same script tells every
-- consumer scored later than X. Wake-ups are never shared: one that a
-- consumer pops and then cannot use (it died, stopped, is full) was its
-- own, and the others got theirs. A full consumer (its take found as many
-- due messages as it asked for) leaves c and takes again once it has room.
-- Left to the poll: writes lost to eviction, more than DQ_WAKE_MAX
-- consumers scored later than one X, a push refused while the slot migrates.

local DQ_WAKE_MAX = 100  -- idle consumers told per call
local DQ_STALE_MS = 10000 -- an entry of c this far in the past is a gone consumer

-- The encoded sequence number n. A push encodes one per message, so the
-- bytes go through one table kept for the script's run, not a new one each:
-- garbage Redis 8 counts as used memory until Lua collects it.
-- With priority p (0..9, default 0) in the first byte (above).
local seq_bytes = {}
local function seq_enc(n, p)
  local k, m = 0, n
  repeat
    k, m = k + 1, math.floor(m / 256)
  until m == 0
  for i = k, 1, -1 do
    seq_bytes[i] = n % 256
    n = math.floor(n / 256)
  end
  local b = k
  if p and p > 0 then b = 127 + 8 * (p - 1) + k end
  return string.char(b, unpack(seq_bytes, 1, k))
end

local DQ_BAND = 8796093022208 -- 2^43: one priority's band of scores in z

-- Length of the encoded sequence number that starts s; nil for the old
-- layout (or an empty s).
local function seq_len(s)
  local b = string.byte(s, 1)
  if b and b <= 8 then return b + 1 end
  if b and b >= 128 and b < 200 then return (b - 128) % 8 + 2 end
  return nil
end

-- The priority in a sequence prefix (or a member or value it starts).
local function seq_pri(s)
  local b = string.byte(s, 1)
  if b and b >= 128 and b < 200 then return math.floor((b - 128) / 8) + 1 end
  return 0
end

-- z's score for member m due at `due`.
local function zscore(m, due) return seq_pri(m) * DQ_BAND + due end

-- A message a push replaced (dq_push.lua) has a version in front of its
-- p<id>: byte 255, then 16 decimal digits (Redis's clock in us), then the
-- sequence prefix and payload as usual; in p<id>, so an ack or cancel has
-- no field more to delete. pv: a p<id> value of the new layout.
local function pv_version(pv)
  if string.byte(pv, 1) ~= 255 then return 0, pv end
  return tonumber(string.sub(pv, 2, 17)), string.sub(pv, 18)
end

local function pv_payload(pv)
  if string.byte(pv, 1) == 255 then pv = string.sub(pv, 18) end
  return string.sub(pv, (seq_len(pv) or 0) + 1)
end

local function pv_seq(pv)
  local _, rest = pv_version(pv)
  return string.sub(rest, 1, seq_len(rest) or 0)
end

local function ver_enc(v) return '\255' .. string.format('%016d', v) end

-- Integer x in decimal: Lua prints numbers with %.14g, exact below 1e14.
local function dec(x)
  if x < 1e14 then return x end
  return string.format('%d', x)
end

-- A member of z -> its sequence prefix, the id.
local function member_split(m)
  local n = seq_len(m) or 12
  return string.sub(m, 1, n), string.sub(m, n + 1)
end

-- An a<id> value -> its sequence prefix (nil: old layout), the attempts
-- (a delivery token after them is left out).
local function attempts_split(v)
  if not v then return nil, 0 end
  local n = seq_len(v)
  local seq, rest = nil, v
  if n then seq, rest = string.sub(v, 1, n), string.sub(v, n + 1) end
  local s = string.find(rest, '/', 1, true)
  if s then rest = string.sub(rest, 1, s - 1) end
  return seq, tonumber(rest) or 0
end

-- The member of z for message id, delivered before (a<id> = av).
local function member_of(h, id, av)
  local seq = attempts_split(av)
  return (seq or redis.call('HGET', h, 's' .. id) or string.format('%012x', 0)) .. id
end

-- Set message id's attempts to att, keeping a<id>'s layout (av: its value);
-- the token goes (the message is no longer taken).
local function set_attempts(h, id, av, att)
  redis.call('HSET', h, 'a' .. id, (attempts_split(av) or '') .. att)
end

-- Whether a<id> = av is still the delivery a caller holds, by its attempt
-- and token (ARGV text; token '0': none known, the attempt alone decides).
-- A take since wrote a larger token (or, by a release without tokens, none).
-- One comparison, no parsing: this runs for every settlement.
local function is_delivery(av, attempt, token)
  if not av then return false end
  local n = seq_len(av)
  local rest = n and string.sub(av, n + 1) or av
  if token ~= '0' then return rest == attempt .. '/' .. token end
  local _, a = attempts_split(av)
  return a == tonumber(attempt)
end

-- The number a sequence prefix encodes (nil for the old layout).
local function seq_num(s)
  local k = seq_len(s)
  if not k then return nil end
  local n = 0
  for i = 2, k do n = n * 256 + string.byte(s, i) end
  return n
end

-- Tombstones: a message acknowledged or cancelled leaves `id~seq` (seq: its
-- push's sequence number, decimal) in the sorted set h .. ':x', scored by
-- the time, for DQ_TOMB_MS. A push the client's record sends again after
-- the node changed carries the number the first node gave it
-- (dq_push.lua): if the node kept that push and it has been settled since,
-- the tombstone says so and the replay does nothing, where it would queue
-- the message a second time. An id pushed again after its ack has another
-- number, so a lost later push of it is still restored. Not a declared key
-- (like a wake list): while the slot migrates a write may be refused
-- (pcall), which costs a duplicate at worst.
local DQ_TOMB_MS = 10000

-- Leave tombstones (members, decimal) at `now`, and drop at most #members +
-- 16 older than DQ_TOMB_MS. The set lives DQ_TOMB_MS, or `ttl` if shorter
-- (the queue's retention, or what is left of its keys' life: an idle
-- queue's keys all go by then).
local function dq_tomb(h, members, now, ttl)
  if #members == 0 then return end
  local x = h .. ':x'
  local args = {}
  for i, m in ipairs(members) do args[2 * i - 1], args[2 * i] = now, m end
  if type(redis.pcall('ZADD', x, unpack(args))) ~= 'number' then return end
  local old = redis.pcall('ZRANGEBYSCORE', x, '-inf', '(' .. (now - DQ_TOMB_MS), 'LIMIT', 0,
                          #members + 16)
  if type(old) == 'table' and #old > 0 then redis.pcall('ZREM', x, unpack(old)) end
  redis.pcall('PEXPIRE', x, math.max(1, math.min(DQ_TOMB_MS, ttl)))
end

-- Something became takeable at `at` (ms): every idle consumer that would
-- look later gets `at` on its wake list and its entry moves to `at`, at
-- most DQ_WAKE_MAX of them (the earliest first). The push may be refused
-- while the slot migrates (the list may live on the other node by now):
-- then that consumer hears of it when its blocking call is redirected.
local function dq_wake(c, at)
  local ids = redis.call('ZRANGEBYSCORE', c, '(' .. at, '+inf', 'LIMIT', 0, DQ_WAKE_MAX)
  local moved = {}
  for _, cid in ipairs(ids) do
    local w = c .. ':' .. cid
    local r = redis.pcall('LPUSH', w, at)
    if type(r) == 'number' then
      redis.pcall('PEXPIRE', w, 60000)
      moved[#moved + 1] = at
      moved[#moved + 1] = cid
    end
  end
  if #moved > 0 then redis.call('ZADD', c, 'XX', unpack(moved)) end
end

-- Keys live `ret` ms past the latest due time or deadline they hold. The
-- horizon only grows: when `need` passes it, all five keys move to the new
-- horizon; otherwise only the keys this script wrote (the set `wrote`: one
-- it re-created has no expiry yet) get the current one again.
-- `exp`: '#exp' as the caller read it already (nil: read it here).
local function dq_expire(h, need, ret, wrote, exp)
  exp = tonumber(exp or redis.call('HGET', h, '#exp') or '0')
  if need > exp then
    exp = need + math.floor(ret / 8)
    redis.call('HSET', h, '#exp', exp)
    for k = 1, 5 do redis.call('PEXPIREAT', KEYS[k], exp) end
  else
    for k in pairs(wrote) do redis.call('PEXPIREAT', k, exp) end
  end
end
