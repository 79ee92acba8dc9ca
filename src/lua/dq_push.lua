-- Push messages. KEYS: z f d h c (see _dq_common.lua).
-- ARGV: retention ms, then per message: id, 'd' (delay) | 'a' (at), ms, payload.
-- Returns per message its due ms, or -1 if the id is already queued.
-- Work: at most 10,000 messages of at most 1 MiB each (the client's limits,
-- checked here too), plus dq_wake's bound.
--@include _dq_common.lua
local z, h, c = KEYS[1], KEYS[4], KEYS[5]
local n = (#ARGV - 1) / 4
if n ~= math.floor(n) or n > 10000 then return redis.error_reply('ERR sluice: bad push') end
for i = 0, n - 1 do
  if #ARGV[2 + 4 * i] > 128 or #ARGV[5 + 4 * i] > 1048576 then
    return redis.error_reply('ERR sluice: message too large')
  end
end
-- Delays count from the next whole ms, so nothing is ever due early.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.ceil(tonumber(t[2]) / 1000)
local ret = tonumber(ARGV[1])
local seq = redis.call('HINCRBY', h, '#seq', n) - n
local out, maxdue, mindue = {}, 0, nil
-- z's new entries go in slices of 1000 through one table (Lua's unpack is
-- limited to a few thousand values), not one table of them all that grows
-- by copies: garbage Redis 8 counts as used memory until Lua collects it.
local zargs, zn = {}, 0
for i = 0, n - 1 do
  local id, v = ARGV[2 + 4 * i], tonumber(ARGV[4 + 4 * i])
  local due = ARGV[3 + 4 * i] == 'a' and v or now + v
  seq = seq + 1
  local s = seq_enc(seq)
  if redis.call('HSETNX', h, 'p' .. id, s .. ARGV[5 + 4 * i]) == 1 then
    zargs[zn + 1], zargs[zn + 2], zn = due, s .. id, zn + 2
    if zn == 2000 then
      redis.call('ZADD', z, unpack(zargs, 1, zn))
      zn = 0
    end
    if due > maxdue then maxdue = due end
    if not mindue or due < mindue then mindue = due end
    out[i + 1] = due
  else
    out[i + 1] = -1
  end
end
if not mindue then return out end
if zn > 0 then redis.call('ZADD', z, unpack(zargs, 1, zn)) end
dq_wake(c, mindue)
dq_expire(h, math.max(maxdue, now) + ret, ret, {[z] = true, [h] = true})
return out
