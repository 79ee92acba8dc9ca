-- Fixed window: at most limit units per window of period ms, windows aligned
-- to Redis's clock (window w covers [w*period, (w+1)*period) ms).
-- Each key: hash {w = window number, n = units taken in it}.
-- KEYS/ARGV/reply: a list of requests, see _rl_common.lua.
--
-- The window number is stored beside the count because expiry alone cannot
-- tell windows apart: inside a script Redis judges expiry on the script's
-- start time, not on TIME, so at a boundary millisecond the old window's key
-- may still exist. Expiry here is only garbage collection (+100 ms margin).
--@include _rl_common.lua
local w = math.floor(now_ms / period)
local reset = (w + 1) * period - now_ms
local ws = format('%d', w)
return each(function(key, cost, peek)
  if cost > limit then return 0, 0, -1, 0 end -- never passes; clients refuse it
  local st = rcall('HMGET', key, 'w', 'n')
  local n = 0
  if tonumber(st[1]) == w then n = tonumber(st[2]) or 0 end
  if n + cost > limit then return 0, limit - n, reset, reset end
  if not peek then
    if n == 0 then
      rcall('HSET', key, 'w', ws, 'n', cost)
      rcall('PEXPIRE', key, reset + 100)
    else
      rcall('HINCRBY', key, 'n', cost)
    end
  end
  return 1, limit - n - cost, 0, reset
end)
