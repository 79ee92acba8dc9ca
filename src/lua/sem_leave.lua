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
-- Removals last (a key this step empties is not touched again): the waiter
-- leaves Q and B with the dead ones, after the hand-off read them; its
-- handed permit and the expired leases leave H after the hand-off's grants.
local was = redis.call('ZSCORE', Q, waiter)
local had = redis.call('ZSCORE', H, wid)
if had then redis.call('HDEL', M, 'g:' .. wid) end
if not was and not had then
  redis.call('ZREM', B, waiter)
  return 0
end
queue_init()
leave(waiter)
sweep(B)
local got = {}
local held = redis.call('ZCOUNT', H, '(' .. now_s, '+inf')
if had and tonumber(had) > now then held = held - 1 end
if hand_off(H, Q, B, M, permits - held, wake_base, hb, fair, got) > 0 then
  save_fence(M, permits)
  touch(H, keep)
  touch(M, keep)
end
remove_gone(Q, B)
local n = redis.call('ZCARD', H)
if had and not got[wid] then n = n - redis.call('ZREM', H, wid) end
if n > 0 then redis.call('ZREMRANGEBYSCORE', H, '-inf', now_s) end
return 1
