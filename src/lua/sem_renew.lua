-- Extend a lease only if it is still ours and not yet expired: a renewal
-- must never re-create a permit that lapsed (it may be someone else's now).
-- KEYS: 1 holders; ARGV: 1 permit id, 2 ttl_ms, 3 keep_ms
-- Returns ttl_ms when extended, 0 when the permit is gone.
--@include _sem_common.lua
local H, id, ttl, keep = KEYS[1], ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3])
local score = redis.call('ZSCORE', H, id)
if not score then return 0 end
if tonumber(score) <= now then
  redis.call('ZREM', H, id)
  return 0
end
redis.call('ZADD', H, 'XX', n2s(now + ttl), id)
touch(H, keep)
return ttl
