-- Extend the visibility of in-flight messages to `ms` from now (a later
-- deadline stays), each only
-- while it is still the caller's delivery: in f, its deadline not passed
-- (a message past it may be handed to another consumer at any moment, so a
-- lapsed one is never revived), and the attempt and delivery token it was
-- taken with still current. Extensions due in one loop turn come in one
-- call (a consumer renewing many messages).
-- KEYS: z f d h c (see _dq_common.lua).
-- ARGV: retention ms, then per message: id, attempt, delivery token (0:
-- none known), ms (1..2^42).
-- Returns {now ms, then per message: the new deadline (ms on Redis's
-- clock), -1 lost (deadline passed, or delivered again since), -2 not
-- found (acknowledged or cancelled)}.
-- Only raises deadlines, so the earliest takeable time E only grows: no
-- consumer needs waking (see _dq_common.lua).
-- Work: at most 1000 messages.
--@include _dq_common.lua
local f, h = KEYS[2], KEYS[4]
local n = (#ARGV - 1) / 4
if n ~= math.floor(n) or n < 1 or n > 1000 then return redis.error_reply('ERR sluice: bad extend') end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local ret = tonumber(ARGV[1])
local fields, dls = {}, {}
for k = 1, n do
  local i = 4 * k - 2
  local ms = tonumber(ARGV[i + 3])
  if not (ms and ms >= 1 and ms <= 4398046511104) then
    return redis.error_reply('ERR sluice: bad extend')
  end
  fields[k] = 'a' .. ARGV[i]
  dls[k] = redis.call('ZSCORE', f, ARGV[i])
end
local v = redis.call('HMGET', h, unpack(fields))
local out, zargs, maxdl = {now}, {}, now
for k = 1, n do
  local i = 4 * k - 2
  local id, dl = ARGV[i], dls[k]
  local code
  if not dl then
    code = v[k] and -1 or -2
  elseif tonumber(dl) < now or not is_delivery(v[k], ARGV[i + 1], ARGV[i + 2]) then
    code = -1
  else
    code = math.max(now + tonumber(ARGV[i + 3]), tonumber(dl)) -- never shortens
    zargs[#zargs + 1] = code
    zargs[#zargs + 1] = id
    if code > maxdl then maxdl = code end
  end
  out[k + 1] = code
end
if #zargs > 0 then
  redis.call('ZADD', f, 'XX', unpack(zargs))
  dq_expire(h, maxdl + ret, ret, {[f] = true})
end
return out
