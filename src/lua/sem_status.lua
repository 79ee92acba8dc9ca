-- Read-only view of a semaphore: live holders with lease left, live waiters
-- in arrival order, declared permits and the last fencing token.
-- KEYS: 1 holders, 2 queue, 3 beats, 4 meta
-- Returns {permits, last fence, {id, ms left, ...}, {waiter, ...}}
local H, Q, B, M = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
--@include _sem_common.lua
local holders = {}
local h = redis.call('ZRANGEBYSCORE', H, '(' .. n2s(now), '+inf', 'WITHSCORES')
for i = 1, #h, 2 do
  holders[#holders + 1] = h[i]
  holders[#holders + 1] = n2s(tonumber(h[i + 1]) - now)
end
local waiters = {}
for _, w in ipairs(redis.call('ZRANGE', Q, 0, -1)) do
  if waiter_state(B, M, w, 0) ~= 'dead' then waiters[#waiters + 1] = w end
end
local meta = redis.call('HMGET', M, 'permits', 'fence')
return {meta[1] or '0', meta[2] or '0', holders, waiters}
