-- Sliding-window counter: the previous and current fixed windows, weighted.
-- estimate = prev * (period - elapsed) / period + cur, with elapsed the time
-- since the current window (aligned to Redis's clock) began. O(1) memory; an
-- approximation that assumes the previous window's units were spread evenly.
-- Each key: hash {w = current window number, c = its units, p = previous window's}.
-- KEYS/ARGV/reply: a list of requests, see _rl_common.lua (burst unused).
--@include _rl_common.lua
--@include _search.lua
local now = now_ms
local w = math.floor(now / period)
local e = now - w * period
return each(function(key, cost, peek)
  if cost > limit then return 0, 0, -1, 0 end -- never passes; clients refuse it
  local st = rcall('HMGET', key, 'w', 'c', 'p')
  local sw, c, p = tonumber(st[1]), 0, 0
  if sw == w then
    c, p = tonumber(st[2]) or 0, tonumber(st[3]) or 0
  elseif sw == w - 1 then
    p = tonumber(st[2]) or 0
  end
  -- Does cost fit with prev weight pp, current cc, elapsed el? (scaled by period)
  local function fits(pp, cc, el)
    return pp * (period - el) + (cc + cost) * period <= limit * period
  end
  local function room(cc)
    return math.max(0, math.floor((limit * period - p * (period - e) - cc * period) / period))
  end
  if not fits(p, c, e) then
    local wait
    if c + cost <= limit then
      -- Later in this window, once the previous window weighs little enough
      -- (the formula's answer is right unless the products passed 2^53).
      local guess = period - math.floor((limit - c - cost) * period / p)
      wait = first_true(e, period, function(el) return fits(p, c, el) end, guess) - e
    else
      -- In the next window, where this window's count becomes the previous one.
      local guess = period - math.floor((limit - cost) * period / c)
      wait = period - e + first_true(0, period, function(el) return fits(c, 0, el) end, guess)
    end
    local reset = c > 0 and (2 * period - e) or (period - e)
    return 0, room(c), wait, reset
  end
  if not peek then
    rcall('HSET', key, 'w', format('%d', w), 'c', c + cost, 'p', p)
    rcall('PEXPIRE', key, 2 * period - e + 100)
  end
  return 1, room(c + cost), 0, 2 * period - e
end)
