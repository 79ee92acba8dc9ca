-- Shared by the semaphore scripts (inlined at build time by embed_lua.py).
-- Keys: H holders (zset permit id -> lease expiry ms), Q queue (zset waiter
-- -> arrival seq), B beats (zset waiter -> heartbeat deadline ms).
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local now_us = tonumber(t[1]) * 1000000 + tonumber(t[2])
local function n2s(x) return string.format('%.0f', x) end

-- Drop waiters that stopped heart-beating; returns how many went.
local function evict_waiters(Q, B)
  local dead = redis.call('ZRANGEBYSCORE', B, '-inf', now, 'LIMIT', 0, 1000)
  if #dead > 0 then
    redis.call('ZREM', B, unpack(dead))
    redis.call('ZREM', Q, unpack(dead))
  end
  return #dead
end

-- Extend k's idle expiry to keep ms, never shorten it (handles with longer
-- leases may share the semaphore).
local function touch(k, keep)
  if redis.call('PTTL', k) < keep then redis.call('PEXPIRE', k, keep) end
end

-- Nudge n queued waiters, oldest first: push each one's id onto its handle's
-- wake list ("<wake_base><handle id>"), which that handle's blocking
-- connection waits on. Queue members are "<handle id>:<waiter id>".
-- Non-fair: skip waiters that missed a heartbeat (their process is probably
-- gone, and a wake-up sent to it would be lost); fair: only the heads may
-- take a permit, so they are woken regardless.
local function wake(Q, B, n, wake_base, hb, fair)
  if n <= 0 then return end
  local stale = now + hb / 2
  local sent = 0
  for _, m in ipairs(redis.call('ZRANGE', Q, 0, fair and n - 1 or n + 7)) do
    if sent >= n then break end
    local live = fair or tonumber(redis.call('ZSCORE', B, m) or '0') >= stale
    local sep = string.find(m, ':', 1, true)
    if sep and live then
      local wk = wake_base .. string.sub(m, 1, sep - 1)
      redis.call('LPUSH', wk, string.sub(m, sep + 1))
      redis.call('LTRIM', wk, 0, 63)
      redis.call('PEXPIRE', wk, hb * 2 + 1000)
      sent = sent + 1
    end
  end
end
