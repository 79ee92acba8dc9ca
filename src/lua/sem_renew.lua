-- Extend leases, each only if it is still ours and not yet expired: a
-- renewal must never re-create a permit that lapsed (it may be someone
-- else's now). Renewals due in the same loop turn come in one call.
-- KEYS: 1 holders; ARGV: 1 ttl_ms, 2 keep_ms, then permit ids
-- Returns {r1, r2, ...}: ttl_ms when that lease was extended, 0 when gone.
--@confirm
--@include _sem_common.lua
local H, ttl, keep = KEYS[1], tonumber(ARGV[1]), tonumber(ARGV[2])
local out, extended, expired = {}, false, {}
for i = 3, #ARGV do
  local id = ARGV[i]
  local score = redis.call('ZSCORE', H, id)
  if not score then
    out[#out + 1] = 0
  elseif tonumber(score) <= now then
    expired[#expired + 1] = id
    out[#out + 1] = 0
  else
    redis.call('ZADD', H, 'XX', n2s(now + ttl), id)
    out[#out + 1] = ttl
    extended = true
  end
end
if extended then touch(H, keep) end
-- Last: removing the expired ones may empty H (see _sem_common.lua).
if #expired > 0 then redis.call('ZREM', H, unpack(expired)) end
return out
