-- Shared by the delay-queue scripts (inlined at build time by embed_lua.py).
-- KEYS[1..4] are a queue's z (delayed), f (in flight), d (dead) and h
-- (per-message data, counters and the key horizon '#exp').
-- Redis Cluster rule: while the slot migrates, its source node runs a script
-- only when all declared keys exist there, then refuses any later access to
-- a key the script emptied, keeping the writes before it. So a removal that
-- may empty z, f or d is that key's last access (after dq_expire too); h
-- keeps its counters (#seq) and is never emptied.

-- Wake idle consumers only when the earliest due time moved earlier than
-- old: their timers are armed for the old head. At most 4 tokens wait.
local function dq_wake(w, due, old)
  if (not old or due < old) and redis.call('LLEN', w) < 4 then
    redis.call('LPUSH', w, due)
    redis.call('PEXPIRE', w, 60000)
  end
end

-- Keys live `ret` ms past the latest due time or deadline they hold. The
-- horizon only grows: when `need` passes it, all four keys move to the new
-- horizon; otherwise only the keys this script wrote (the set `wrote`: one
-- it re-created has no expiry yet) get the current one again.
local function dq_expire(h, need, ret, wrote)
  local exp = tonumber(redis.call('HGET', h, '#exp') or '0')
  if need > exp then
    exp = need + math.floor(ret / 8)
    redis.call('HSET', h, '#exp', exp)
    for k = 1, 4 do redis.call('PEXPIREAT', KEYS[k], exp) end
  else
    for k in pairs(wrote) do redis.call('PEXPIREAT', k, exp) end
  end
end
