-- Release a batch of permits: each removes only its own permit id (never
-- another holder's); then, if anyone waits, wake as many queued waiters as
-- there are free permits.
-- KEYS: 1 holders, 2 queue, 3 beats
-- ARGV: 1 permits, 2 wake list base, 3 heartbeat_ms, 4 fair (0/1), then
--       permit ids
-- Returns {r1, r2, ...}: 1 if that permit was held, 0 if it had already
-- expired or gone.
--@include _sem_common.lua
local H, Q, B = KEYS[1], KEYS[2], KEYS[3]
local permits, wake_base, hb = tonumber(ARGV[1]), ARGV[2], tonumber(ARGV[3])
local out = {}
for i = 5, #ARGV do
  local score = redis.call('ZSCORE', H, ARGV[i])
  if score then redis.call('ZREM', H, ARGV[i]) end
  out[#out + 1] = (score and tonumber(score) > now) and 1 or 0
end
if redis.call('ZCARD', Q) > 0 then
  redis.call('ZREMRANGEBYSCORE', H, '-inf', now)
  evict_waiters(Q, B)
  wake(Q, B, permits - redis.call('ZCARD', H), wake_base, hb, ARGV[4] == '1')
end
return out
