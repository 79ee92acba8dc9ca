-- Release a batch of permits: each removes only its own permit id (never
-- another holder's); then, if anyone waits, hand the freed permits to the
-- queue's heads in this same step (see hand_off).
-- KEYS: 1 holders, 2 queue, 3 beats, 4 meta
-- ARGV: 1 permits, 2 ttl_ms, 3 heartbeat_ms, 4 fair (0/1), 5 wake list base,
--       6 keep_ms, then permit ids
-- Returns {r1, r2, ...}: 1 if that permit was held, 0 if it had already
-- expired or gone.
--@include _sem_common.lua
local H, Q, B, M = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local permits, hb, fair = tonumber(ARGV[1]), tonumber(ARGV[3]), ARGV[4] == '1'
local wake_base, keep = ARGV[5], tonumber(ARGV[6])
-- One ZREM and one HDEL for the whole batch (a call costs Redis more than
-- an argument, and this step delays the hand-off's grant).
local out, held, handed, seen = {}, {}, {}, {}
for i = 7, #ARGV do
  local score = not seen[ARGV[i]] and redis.call('ZSCORE', H, ARGV[i])
  seen[ARGV[i]] = true -- an id twice in a batch: the second finds it gone
  if score then held[#held + 1] = ARGV[i] end
  out[#out + 1] = (score and tonumber(score) > now) and 1 or 0
  handed[#handed + 1] = 'g:' .. ARGV[i]
end
if #held > 0 then redis.call('ZREM', H, unpack(held)) end
if #handed > 0 then redis.call('HDEL', M, unpack(handed)) end
if redis.call('ZCARD', Q) > 0 then
  redis.call('ZREMRANGEBYSCORE', H, '-inf', now)
  evict_waiters(Q, B)
  if hand_off(H, Q, B, M, permits - redis.call('ZCARD', H), wake_base, hb, fair) > 0 then
    save_fence(M, permits)
    touch(H, keep)
    touch(M, keep)
  end
end
return out
