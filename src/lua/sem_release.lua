-- Release a permit: removes only this permit id (never another holder's),
-- then wakes as many queued waiters as there are free permits.
-- KEYS: 1 holders, 2 queue, 3 beats
-- ARGV: 1 permit id, 2 permits, 3 wake list base, 4 heartbeat_ms
-- Returns 1 if the permit was held, 0 if it had already expired or gone.
--@include _sem_common.lua
local H, Q, B = KEYS[1], KEYS[2], KEYS[3]
local id, permits, wake_base, hb = ARGV[1], tonumber(ARGV[2]), ARGV[3], tonumber(ARGV[4])
local score = redis.call('ZSCORE', H, id)
local held = score and tonumber(score) > now
if score then redis.call('ZREM', H, id) end
evict(H, Q, B)
wake(Q, permits - redis.call('ZCARD', H), wake_base, hb)
if held then return 1 end
return 0
