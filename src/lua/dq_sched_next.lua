-- The next occurrences of a canonical schedule spec (src/dq/dq_spec.h)
-- after a time, as the schedules compute them; touches no key.
-- ARGV: canonical spec, after (unix ms), count (1..20).
-- Work: count searches of sched_next (20 of the rarest, February 29th on a
-- Sunday: about 4 ms).
-- Returns the occurrences (ms), fewer when the spec stops occurring.
--@no-wait
--@include _dq_common.lua
--@include _dq_sched.lua
local spec, t, count = spec_read(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
if not (spec and t and count and t >= 0 and count >= 1 and count <= 20) then
  return redis.error_reply('ERR sluice: bad schedule spec')
end
local out = {}
for i = 1, count do
  t = sched_next(spec, t)
  if not t then break end
  out[i] = t
end
return out
