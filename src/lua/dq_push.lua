-- Push messages. KEYS: z (delayed: member = 12-hex sequence .. id, score =
-- due ms), f (in flight), d (dead), h (per message: p<id> payload, a<id>
-- attempts, s<id> sequence; #seq counter, #exp key horizon), w (wake list).
-- ARGV: retention ms, then per message: id, 'd' (delay) | 'a' (at), ms, payload.
-- Returns per message its due ms, or -1 if the id is already queued.
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
-- Wake idle consumers only when the earliest due time moved earlier: their
-- timers are armed for the old head. At most 4 tokens wait in the list.
if (not old or mindue < old) and redis.call('LLEN', w) < 4 then
  redis.call('LPUSH', w, mindue)
  redis.call('PEXPIRE', w, 60000)
end
-- Keys live RETENTION past the latest due time; the horizon only grows.
local need = math.max(maxdue, now) + ret
local exp = tonumber(redis.call('HGET', h, '#exp') or '0')
if need > exp then
  exp = need + math.floor(ret / 8)
  redis.call('HSET', h, '#exp', exp)
  for i = 1, 4 do redis.call('PEXPIREAT', KEYS[i], exp) end
else
  redis.call('PEXPIREAT', z, exp)
  redis.call('PEXPIREAT', h, exp)
end
return out
