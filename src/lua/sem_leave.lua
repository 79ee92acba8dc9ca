-- A blocking acquirer gives up (timeout or cancel): leave the queue, return
-- a permit a release may have handed it meanwhile, and if either frees a
-- permit or a head position, hand permits to the waiters now entitled.
-- KEYS: 1 holders, 2 queue, 3 beats, 4 meta
-- ARGV: 1 permits, 2 ttl_ms, 3 heartbeat_ms, 4 fair (0/1), 5 wake list base,
--       6 keep_ms, 7 waiter ("<handle id>:<waiter id>")
-- Returns 1 if the waiter was queued or held a handed permit.
--@include _sem_common.lua
local H, Q, B, M = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local permits, hb, fair = tonumber(ARGV[1]), tonumber(ARGV[3]), ARGV[4] == '1'
local wake_base, keep, waiter = ARGV[5], tonumber(ARGV[6]), ARGV[7]
local wid = string.sub(waiter, 34)
local was = redis.call('ZREM', Q, waiter)
redis.call('ZREM', B, waiter)
local had = redis.call('ZREM', H, wid)
if had > 0 then redis.call('HDEL', M, 'g:' .. wid) end
if was == 0 and had == 0 then return 0 end
redis.call('ZREMRANGEBYSCORE', H, '-inf', now)
evict_waiters(Q, B)
if hand_off(H, Q, B, M, permits - redis.call('ZCARD', H), wake_base, hb, fair) > 0 then
  save_fence(M, permits)
  touch(H, keep)
  touch(M, keep)
end
return 1
