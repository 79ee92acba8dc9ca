-- Push messages. KEYS: z (delayed: member = 12-hex sequence .. id, score =
-- due ms), f (in flight), d (dead), h (per message: p<id> payload, a<id>
-- attempts, s<id> sequence; #seq counter, #exp key horizon), w (wake list).
-- ARGV: retention ms, then per message: id, 'd' (delay) | 'a' (at), ms, payload.
-- Returns per message its due ms, or -1 if the id is already queued.
--@include _dq_common.lua
local z, h, w = KEYS[1], KEYS[4], KEYS[5]
-- Delays count from the next whole ms, so nothing is ever due early.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.ceil(tonumber(t[2]) / 1000)
local ret = tonumber(ARGV[1])
local n = (#ARGV - 1) / 4
local head = redis.call('ZRANGE', z, 0, 0, 'WITHSCORES')
local old = tonumber(head[2])
local seq = redis.call('HINCRBY', h, '#seq', n) - n
local out, maxdue, mindue, zargs, hargs = {}, 0, nil, {}, {}
for i = 0, n - 1 do
  local id, v = ARGV[2 + 4 * i], tonumber(ARGV[4 + 4 * i])
  local due = ARGV[3 + 4 * i] == 'a' and v or now + v
  if redis.call('HSETNX', h, 'p' .. id, ARGV[5 + 4 * i]) == 1 then
    seq = seq + 1
    local s = string.format('%012x', seq)
    hargs[#hargs + 1] = 's' .. id
    hargs[#hargs + 1] = s
    zargs[#zargs + 1] = due
    zargs[#zargs + 1] = s .. id
    if due > maxdue then maxdue = due end
    if not mindue or due < mindue then mindue = due end
    out[i + 1] = due
  else
    out[i + 1] = -1
  end
end
if not mindue then return out end
-- In slices: Lua's unpack is limited to a few thousand values.
for i = 1, #zargs, 2000 do
  local j = math.min(i + 1999, #zargs)
  redis.call('HSET', h, unpack(hargs, i, j))
  redis.call('ZADD', z, unpack(zargs, i, j))
end
dq_wake(w, mindue, old)
dq_expire(h, math.max(maxdue, now) + ret, ret, {[z] = true, [h] = true})
return out
