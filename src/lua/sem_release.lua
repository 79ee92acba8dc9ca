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
local out, handed, rel, seen, freed = {}, {}, {}, {}, 0
for i = 7, #ARGV do
  local id = ARGV[i]
  local score = not seen[id] and redis.call('ZSCORE', H, id)
  seen[id] = true
  if score then rel[#rel + 1] = id end
  local live = score and tonumber(score) > now
  if live then freed = freed + 1 end
  out[#out + 1] = live and 1 or 0
  handed[#handed + 1] = 'g:' .. id
end
if #handed > 0 then redis.call('HDEL', M, unpack(handed)) end
-- The released and expired leases leave H last (it may become empty), so
-- the hand-off counts without them and adds its grants first. It also
-- drops the dead waiters it meets (last, as Q and B's last access); the
-- other steps sweep the rest of the queue.
local given, got = nil, {}
if redis.call('ZCARD', Q) > 0 then
  queue_init()
  local held = redis.call('ZCOUNT', H, '(' .. now_s, '+inf') - freed
  given = hand_off(H, Q, B, M, permits - held, wake_base, hb, fair, got)
  if given > 0 then
    save_fence(M, permits)
    touch(H, keep)
    touch(M, keep)
  end
  remove_gone(Q, B)
end
local left = {}
for _, id in ipairs(rel) do
  if not got[id] then left[#left + 1] = id end
end
if given and given > 0 then
  -- H holds the live grants just made: neither removal can empty it.
  if #left > 0 then redis.call('ZREM', H, unpack(left)) end
  redis.call('ZREMRANGEBYSCORE', H, '-inf', now_s)
elseif given then
  local n = redis.call('ZCARD', H)
  if #left > 0 then n = n - redis.call('ZREM', H, unpack(left)) end
  if n > 0 then redis.call('ZREMRANGEBYSCORE', H, '-inf', now_s) end
elseif #left > 0 then
  redis.call('ZREM', H, unpack(left))
end
return out
