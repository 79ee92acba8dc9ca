-- Read-only view of a semaphore: live holders with lease left (the LIST
-- soonest to expire), live waiters in arrival order (of the first LIST in
-- the queue), declared permits, the last fencing token, and how many live
-- holders and queued waiters there are in all. LIST bounds the work and
-- the reply whatever the semaphore's size (SLUICE_SEM_INSPECT_MAX).
-- KEYS: 1 holders, 2 queue, 3 beats, 4 meta
-- Returns {permits, last fence, {id, ms left, ...}, {waiter, ...}, holders,
-- queued}
--@no-wait
local H, Q, B, M = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local LIST = 1000
--@include _sem_common.lua
queue_init()
local holders = {}
local h = redis.call('ZRANGEBYSCORE', H, '(' .. now_s, '+inf', 'WITHSCORES', 'LIMIT', 0, LIST)
for i = 1, #h, 2 do
  holders[#holders + 1] = h[i]
  holders[#holders + 1] = n2s(tonumber(h[i + 1]) - now)
end
local waiters = {}
for _, w in ipairs(redis.call('ZRANGE', Q, 0, LIST - 1)) do
  if waiter_state(B, M, w, 0) ~= 'dead' then waiters[#waiters + 1] = w end
end
local meta = redis.call('HMGET', M, 'permits', 'fence')
return {meta[1] or '0', meta[2] or '0', holders, waiters,
        redis.call('ZCOUNT', H, '(' .. now_s, '+inf'), redis.call('ZCARD', Q)}
