-- A blocking acquirer gives up (timeout or cancel): leave the queue, and if
-- that frees a head position, wake the waiters now entitled to a permit.
-- KEYS: 1 holders, 2 queue, 3 beats
-- ARGV: 1 waiter, 2 permits, 3 wake list base, 4 heartbeat_ms, 5 fair (0/1)
-- Returns 1 if the waiter was queued.
--@include _sem_common.lua
local H, Q, B = KEYS[1], KEYS[2], KEYS[3]
local waiter, permits, wake_base, hb = ARGV[1], tonumber(ARGV[2]), ARGV[3], tonumber(ARGV[4])
local was = redis.call('ZREM', Q, waiter)
redis.call('ZREM', B, waiter)
if was == 0 then return 0 end
redis.call('ZREMRANGEBYSCORE', H, '-inf', now)
evict_waiters(Q, B)
wake(Q, B, permits - redis.call('ZCARD', H), wake_base, hb, ARGV[5] == '1')
return 1
