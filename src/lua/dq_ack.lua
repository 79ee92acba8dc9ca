-- Settle in-flight messages: acknowledge, retry later, or release (put back
-- uncounted). KEYS: z f d h c (see _dq_common.lua).
-- ARGV: retention ms, max attempts (0 = no limit), then per message: id,
-- attempt it was delivered as, 'a' | 'r' | 'x', delay ms (for 'r'), its
-- delivery token (dq_take.lua; 0: none known, the attempt alone decides).
-- Returns per message: 1 done, 2 dead-lettered (retry past max attempts),
-- -1 late (deadline passed or delivered again since), -2 not found.
-- An acknowledged message leaves a tombstone (dq_tomb, _dq_common.lua).
-- Work: at most 1000 messages (the client's batch, checked here too), plus
-- dq_wake's and dq_tomb's bounds.
--@include _dq_common.lua
local z, f, d, h, c = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local n = (#ARGV - 2) / 5
if n ~= math.floor(n) or n > 1000 then return redis.error_reply('ERR sluice: bad settle') end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local later = tonumber(t[1]) * 1000 + math.ceil(tonumber(t[2]) / 1000)
local ret, maxa = tonumber(ARGV[1]), tonumber(ARGV[2])
local out, mindue, maxdue, wrote = {}, nil, now, {}

local function requeue(id, av, due)
  local m = member_of(h, id, av)
  redis.call('ZADD', z, zscore(m, due), m)
  wrote[z] = true
  if not mindue or due < mindue then mindue = due end
  if due > maxdue then maxdue = due end
end

-- Deadlines one by one, attempt counts (and tokens) in one HMGET; removals
-- batched.
local afields, dls = {}, {}
for i = 3, #ARGV, 5 do
  afields[#afields + 1] = 'a' .. ARGV[i]
  dls[#dls + 1] = redis.call('ZSCORE', f, ARGV[i])
end
local atts = #afields > 0 and redis.call('HMGET', h, unpack(afields)) or {}
local gone, hdel, tombs = {}, {}, {}
for k = 1, #dls do
  local i = 5 * k - 2
  local id, op, dl, av = ARGV[i], ARGV[i + 2], dls[k], atts[k]
  local code = 1
  if not dl then
    -- Delivered again and waiting (a<id> stays until acked or cancelled),
    -- or gone: acked by whoever got it after the deadline, or cancelled.
    code = av and -1 or -2
  elseif tonumber(dl) < now or not is_delivery(av, ARGV[i + 1], ARGV[i + 4]) then
    code = -1
  else
    local a = tonumber(ARGV[i + 1]) -- the stored attempts, as is_delivery found
    gone[#gone + 1] = id
    if op == 'a' then
      hdel[#hdel + 1] = 'p' .. id
      hdel[#hdel + 1] = 'a' .. id
      local sn = seq_num(av)
      if sn then tombs[#tombs + 1] = id .. '~' .. dec(sn)
      else hdel[#hdel + 1] = 's' .. id end
    elseif op == 'x' then
      set_attempts(h, id, av, a - 1)
      requeue(id, av, now)
    elseif maxa > 0 and a >= maxa then
      redis.call('ZADD', d, now, id)
      wrote[d] = true
      code = 2
    else
      requeue(id, av, later + tonumber(ARGV[i + 3]))
    end
  end
  out[k] = code
end
if #hdel > 0 then redis.call('HDEL', h, unpack(hdel)) end
dq_tomb(h, tombs, now, ret)

if mindue then dq_wake(c, mindue) end
if next(wrote) then dq_expire(h, maxdue + ret, ret, wrote) end
-- Last: this may empty f (see _dq_common.lua).
if #gone > 0 then redis.call('ZREM', f, unpack(gone)) end
return out
