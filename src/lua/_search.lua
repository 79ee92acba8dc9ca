-- Shared by rl_sliding_log.lua and rl_sliding_counter.lua (inlined at build
-- time by embed_lua.py).
-- first_true(lo, hi, ok, from): the smallest i in [lo, hi] with ok(i), for
-- ok false then true as i grows and ok(hi) true (hi itself is never asked).
-- It starts at from (default lo), gallops away from it, then halves: about
-- 2 log2(|i - from|) calls of ok, whatever the range.
local function first_true(lo, hi, ok, from)
  if not from or from ~= from then from = lo end -- none, or NaN
  from = math.min(math.max(from, lo), hi)
  local step = 1
  if from < hi and not ok(from) then -- further up
    lo = from + 1
    local probe = math.min(from + step, hi)
    while probe < hi and not ok(probe) do
      lo, step = probe + 1, step * 2
      probe = math.min(from + step, hi)
    end
    hi = probe
  else -- here or further down
    hi = from
    local probe = from - step
    while probe >= lo and ok(probe) do
      hi, step = probe, step * 2
      probe = from - step
    end
    lo = math.max(lo, probe + 1)
  end
  while lo < hi do
    local mid = math.floor((lo + hi) / 2)
    if ok(mid) then hi = mid else lo = mid + 1 end
  end
  return lo
end
