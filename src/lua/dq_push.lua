-- Push messages. KEYS: z f d h c (see _dq_common.lua).
-- ARGV: retention ms, then per message: id, mode, ms, payload.
-- mode: 'd' (ms is a delay) or 'a' (ms is an absolute due time), then
-- optionally the priority (one digit, 0..9), then optionally what to do
-- with a message of this id that is already queued and not taken:
--   'r' replace it: payload, due time and priority become this push's, and
--       it counts as pushed now (a new sequence number); '@' .. version may
--       follow (a replay from the client's record: applied only if the
--       message's version, in front of its p<id> (_dq_common.lua), is
--       older);
--   'l' push its due time later: to this push's due time if that is later;
--       payload and priority stay.
-- Without 'r' or 'l' an existing id is refused, as is, with 'r' or 'l', a
-- message in flight or dead. Last, '~' .. the sequence number a first
-- push of it got (a replay from the client's record): if its tombstone
-- with that number is here (dq_tomb, _dq_common.lua), this node kept that
-- push and the message was settled since: refused.
-- Returns per message its due ms, -1 if the id is already queued (refused),
-- -2 if it is in flight or dead ('r', 'l'); when any message has 'r'
-- without a version, then per message the version it now has (0 for
-- others), which the client's record replays it with (core/record.c);
-- then the sequence number before the first message's (the k-th got this
-- + k), which the record replays with '~'.
-- Work: at most 10,000 messages of at most 1 MiB each (the client's limits,
-- checked here too), plus dq_wake's bound.
--@include _dq_common.lua
local z, f, d, h, c = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local n = (#ARGV - 1) / 4
if n ~= math.floor(n) or n > 10000 then return redis.error_reply('ERR sluice: bad push') end
for i = 0, n - 1 do
  if #ARGV[2 + 4 * i] > 128 or #ARGV[5 + 4 * i] > 1048576 or #ARGV[3 + 4 * i] > 40 then
    return redis.error_reply('ERR sluice: message too large')
  end
end
-- Delays count from the next whole ms, so nothing is ever due early.
local t = redis.call('TIME')
local now_us = tonumber(t[1]) * 1000000 + tonumber(t[2])
local now = tonumber(t[1]) * 1000 + math.ceil(tonumber(t[2]) / 1000)
local ret = tonumber(ARGV[1])
local seq = redis.call('HINCRBY', h, '#seq', n) - n
local seq0 = seq
local out, maxdue, mindue, pmax = {}, 0, nil, 0

-- A mode beyond 'd' / 'a' -> priority, 'r' | 'l' | nil, version | nil,
-- first sequence number | nil.
local function parse_mode(m)
  local p, op, at, ver, first = string.match(m, '^[ad](%d?)([rl]?)(@?)(%d*)~?(%d*)$')
  if not p then return nil end
  if (ver ~= '') ~= (at == '@') or (ver ~= '' and op ~= 'r') then return nil end
  return tonumber(p) or 0, op ~= '' and op or nil, tonumber(ver), tonumber(first)
end

-- Message id, already in h (pv = p<id>, av = a<id>, sv = s<id>: only in
-- the old layout): replace it or move its due time later, as op says (s:
-- this push's sequence prefix). Returns its due time (-2: in flight or
-- dead), its version, and whether z changed.
local function change(id, op, due, s, payload, ver, pv, av, sv)
  if redis.call('ZSCORE', f, id) or redis.call('ZSCORE', d, id) then return -2, 0, false end
  local old = (sv or attempts_split(av) or pv_seq(pv)) .. id
  local sc = redis.call('ZSCORE', z, old)
  if not sc then return -2, 0, false end
  local cur = tonumber(sc) - seq_pri(old) * DQ_BAND
  if op == 'l' then
    if due <= cur then return cur, 0, false end
    redis.call('ZADD', z, zscore(old, due), old)
    return due, 0, true
  end
  local have = sv and 0 or pv_version(pv)
  if ver and ver <= have then return cur, have, false end -- a newer write is there
  ver = ver or math.max(now_us, have + 1)
  local _, a = attempts_split(av)
  local hargs = {'p' .. id, ver_enc(ver) .. s .. payload}
  if av then hargs[3], hargs[4] = 'a' .. id, s .. a end
  redis.call('HSET', h, unpack(hargs))
  redis.call('ZADD', z, zscore(s, due), s .. id)
  redis.call('ZREM', z, old) -- after the ZADD: z is never emptied here
  if sv then redis.call('HDEL', h, 's' .. id) end
  return due, ver, true
end

-- z's new entries go in slices of 1000 through one table (Lua's unpack is
-- limited to a few thousand values), not one table of them all that grows
-- by copies: garbage Redis 8 counts as used memory until Lua collects it.
local zargs, zn, vers, anyr = {}, 0, {}, false
for i = 0, n - 1 do
  local id, mode, v = ARGV[2 + 4 * i], ARGV[3 + 4 * i], tonumber(ARGV[4 + 4 * i])
  local pri, op, ver, first = 0, nil, nil, nil
  if #mode > 1 then
    pri, op, ver, first = parse_mode(mode)
    if not pri then return redis.error_reply('ERR sluice: bad push') end
  end
  local due = string.byte(mode, 1) == 97 and v or now + v -- 97: 'a'
  seq = seq + 1
  local s = seq_enc(seq, pri)
  local payload = ARGV[5 + 4 * i]
  local res, version, add, changed = -1, 0, false, false
  -- (A later push of the id that is here now is newer than this replay:
  -- refused or left alone either way.)
  local settled = first and
                    type(redis.pcall('ZSCORE', h .. ':x', id .. '~' .. first)) == 'string'
  if settled then -- nothing to do: refused as if queued (-1)
  elseif not op then
    add = redis.call('HSETNX', h, 'p' .. id, s .. payload) == 1
  else
    anyr = anyr or (op == 'r' and not ver)
    local cur = redis.call('HMGET', h, 'p' .. id, 'a' .. id, 's' .. id)
    if cur[1] then
      res, version, changed = change(id, op, due, s, payload, ver, cur[1], cur[2], cur[3])
      if op == 'l' then pri = 0 end -- kept: no higher than #pmax already
    else
      version = ver or now_us
      redis.call('HSET', h, 'p' .. id, ver_enc(version) .. s .. payload)
      add = true
    end
  end
  if add then
    res, changed = due, true
    zargs[zn + 1], zargs[zn + 2], zn = pri > 0 and zscore(s, due) or due, s .. id, zn + 2
    if zn == 2000 then
      redis.call('ZADD', z, unpack(zargs, 1, zn))
      zn = 0
    end
  end
  if changed then
    if pri > pmax then pmax = pri end
    if due > maxdue then maxdue = due end
    if not mindue or due < mindue then mindue = due end
  end
  out[i + 1] = res
  if op == 'r' then vers[i + 1] = version end
end
if anyr then
  for i = 1, n do out[n + i] = vers[i] or 0 end
end
out[#out + 1] = seq0
if not mindue then return out end
if zn > 0 then redis.call('ZADD', z, unpack(zargs, 1, zn)) end
if pmax > 0 and pmax > tonumber(redis.call('HGET', h, '#pmax') or '0') then
  redis.call('HSET', h, '#pmax', pmax)
end
dq_wake(c, mindue)
dq_expire(h, math.max(maxdue, now) + ret, ret, {[z] = true, [h] = true})
return out
