-- Take up to ARGV[2] due messages into the in-flight set with a visibility
-- deadline, after requeueing (or dead-lettering) in-flight messages whose
-- deadline passed. KEYS: z f d h w as in dq_push.lua.
-- ARGV: retention ms, batch, visibility ms, max attempts (0 = no limit).
-- Returns {now us, next wake-up ms or -1, count, then per message: id,
-- attempt, due ms, payload}. The next wake-up is the earliest of the next
-- due time and the next in-flight deadline (+1 ms: expiry is deadline < now).
--@include _dq_common.lua
local z, f, d, h = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local t = redis.call('TIME')
local now_us = tonumber(t[1]) * 1000000 + tonumber(t[2])
local now = math.floor(now_us / 1000)
local ret, batch = tonumber(ARGV[1]), tonumber(ARGV[2])
local vis, maxa = tonumber(ARGV[3]), tonumber(ARGV[4])
local wrote = {}

-- Removals come last, after every read, addition and dq_expire (a removal
-- may empty z or f: see _dq_common.lua): the late ones leave f at the end,
-- but for those taken again here, whose new deadline replaced theirs.
local late = redis.call('ZRANGEBYSCORE', f, '-inf', '(' .. now, 'LIMIT', 0, 100)
if #late > 0 then
  local seq = redis.call('HINCRBY', h, '#seq', #late) - #late
  for _, id in ipairs(late) do
    local a = tonumber(redis.call('HGET', h, 'a' .. id) or '0')
    if maxa > 0 and a >= maxa then
      redis.call('ZADD', d, now, id)
      wrote[d] = true
    else
      seq = seq + 1
      local s = string.format('%012x', seq)
      redis.call('HSET', h, 's' .. id, s)
      redis.call('ZADD', z, now, s .. id)
      wrote[z] = true
    end
  end
end

local out = {now_us, -1, 0}
local cand = redis.call('ZRANGE', z, 0, batch, 'WITHSCORES')
local n = 0
while n < batch and cand[2 * n + 2] and tonumber(cand[2 * n + 2]) <= now do n = n + 1 end
local nextdue = tonumber(cand[2 * n + 2])
local taken = {}
if n > 0 then
  -- Payloads and attempt counts in one HMGET, new counts in one HSET.
  local fields = {}
  for i = 1, n do
    local id = string.sub(cand[2 * i - 1], 13)
    fields[i], fields[n + i] = 'p' .. id, 'a' .. id
  end
  local v = redis.call('HMGET', h, unpack(fields))
  local deadline, zargs, hargs, count = now + vis, {}, {}, 0
  for i = 1, n do
    if v[i] then
      local id, a = string.sub(fields[i], 2), (tonumber(v[n + i]) or 0) + 1
      zargs[#zargs + 1] = deadline
      zargs[#zargs + 1] = id
      hargs[#hargs + 1] = fields[n + i]
      hargs[#hargs + 1] = a
      out[#out + 1] = id
      out[#out + 1] = a
      out[#out + 1] = tonumber(cand[2 * i])
      out[#out + 1] = v[i]
      count = count + 1
      taken[id] = true
    end
  end
  if count > 0 then
    redis.call('ZADD', f, unpack(zargs))
    redis.call('HSET', h, unpack(hargs))
    wrote[f] = true
  end
  out[3] = count
end
local drop = {}
for _, id in ipairs(late) do
  if not taken[id] then drop[#drop + 1] = id end
end
-- The earliest deadline that stays: the late ones still in f are its
-- lowest entries (new deadlines are later than now).
local fh = redis.call('ZRANGE', f, 0, #drop, 'WITHSCORES')
local dropping = {}
for _, id in ipairs(drop) do dropping[id] = true end
for i = 1, #fh, 2 do
  if not dropping[fh[i]] then
    local dl = tonumber(fh[i + 1]) + 1
    if not nextdue or dl < nextdue then nextdue = dl end
    break
  end
end
if nextdue then out[2] = nextdue end

if next(wrote) then dq_expire(h, now + vis + ret, ret, wrote) end
if n > 0 then redis.call('ZREMRANGEBYRANK', z, 0, n - 1) end
if #drop > 0 then redis.call('ZREM', f, unpack(drop)) end
return out
