-- Remove repeating schedule ARGV[1] and take back its queued message if no
-- consumer took it yet. KEYS: z f d h c s n (see _dq_sched.lua).
-- Returns 1 if removed, 0 if there was no such schedule.
--@include _dq_common.lua
--@include _dq_sched.lua
local s, n = KEYS[6], KEYS[7]
local name = ARGV[1]
if redis.call('HDEL', s, 'k' .. name, 'p' .. name, 'u' .. name, 't' .. name) == 0 then return 0 end
local queued = tonumber(redis.call('ZSCORE', n, name))
if queued then
  sched_unqueue(name, queued)
  redis.call('ZREM', n, name)
end
return 1
