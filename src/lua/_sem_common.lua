-- Shared by the semaphore scripts (inlined at build time by embed_lua.py).
-- Keys: H holders (zset id -> lease expiry ms), Q queue (zset waiter ->
-- arrival seq), B beats (zset waiter -> heartbeat deadline ms).
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local now_us = tonumber(t[1]) * 1000000 + tonumber(t[2])
local function n2s(x) return string.format('%.0f', x) end

-- Drop expired leases and waiters that stopped heart-beating.
local function evict(H, Q, B)
  redis.call('ZREMRANGEBYSCORE', H, '-inf', now)
  local dead = redis.call('ZRANGEBYSCORE', B, '-inf', now, 'LIMIT', 0, 1000)
  if #dead > 0 then
    redis.call('ZREM', B, unpack(dead))
    redis.call('ZREM', Q, unpack(dead))
  end
end

-- Nudge the first n queued waiters: push each one's id onto its handle's
-- wake list ("<wake_base><handle id>"), which that handle's blocking
-- connection waits on. Queue members are "<handle id>:<waiter id>".
local function wake(Q, n, wake_base, hb)
  if n <= 0 then return end
  for _, m in ipairs(redis.call('ZRANGE', Q, 0, n - 1)) do
    local sep = string.find(m, ':', 1, true)
    if sep then
      local wk = wake_base .. string.sub(m, 1, sep - 1)
      redis.call('LPUSH', wk, string.sub(m, sep + 1))
      redis.call('LTRIM', wk, 0, 63)
      redis.call('PEXPIRE', wk, hb * 2 + 1000)
    end
  end
end
