-- Re-assert permits a handle holds, on a node that may not have seen their
-- grants or renewals (a failover or a restart: the client's node changed).
-- A permit still held there gets the rest of its lease; a missing one is
-- restored with its id and the rest of its lease (what its holder still
-- counts on: never more, so a permit that is not renewed still ends when
-- its holder's lease does) while the semaphore has room, and the fence is raised
-- to at least its token, so that every later grant still gets a higher
-- one; a missing one while the semaphore is full is lost (someone else was
-- granted its place meanwhile). Nothing is removed: no key may be emptied.
-- A restore notes the attempt's number under the permit's id, so that when
-- its answer never reached the client, the next attempt (which finds the
-- permit held) still answers "restored": the client counts it once.
-- KEYS: 1 holders, 2 meta, 3 restored (id -> attempt)
-- ARGV: 1 permits, 2 ttl_ms, 3 keep_ms, then per permit: id, fencing token,
-- lease left (ms, at most ttl_ms), attempt (increasing per client handle),
-- first attempt since the client's last answer (0: none went unanswered)
-- Returns per permit: 1 renewed, 2 restored, 0 lost.
-- Work: at most 256 permits (the client's batch).
--@include _sem_common.lua
local H, M, R = KEYS[1], KEYS[2], KEYS[3]
local permits, ttl, keep = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
if (#ARGV - 3) % 5 ~= 0 or #ARGV > 3 + 5 * 256 then
  return redis.error_reply('ERR sluice: bad reassert')
end
local held = redis.call('ZCOUNT', H, '(' .. now_s, '+inf')
local out, fence, leases, marks = {}, nil, {}, {}
for i = 4, #ARGV, 5 do
  local id, token = ARGV[i], ARGV[i + 1]
  local left = math.min(math.max(tonumber(ARGV[i + 2]), 1), ttl)
  local since = tonumber(ARGV[i + 4])
  local r = 0
  if live_lease(H, id) then
    r = 1
    if since > 0 and tonumber(redis.call('HGET', R, id) or '0') >= since then r = 2 end
  elseif held < permits then
    held = held + 1
    if not fence or token_less(fence, token) then fence = token end
    marks[#marks + 1] = id
    marks[#marks + 1] = ARGV[i + 3]
    r = 2
  end
  if r > 0 then
    leases[#leases + 1] = n2s(now + left)
    leases[#leases + 1] = id
  end
  out[#out + 1] = r
end
if #leases > 0 then
  call_in_slices('ZADD', H, leases)
  touch(H, keep)
end
if #marks > 0 then
  call_in_slices('HSET', R, marks)
  touch(R, keep)
end
if fence then
  -- (Its era stays the old master's: the next grant here starts a new one.)
  if token_less(redis.call('HGET', M, 'fence') or '0', fence) then
    redis.call('HSET', M, 'fence', fence)
  end
  touch(M, keep)
end
return out
