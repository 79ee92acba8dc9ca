-- Take up to ARGV[2] due messages into the in-flight set with a visibility
-- deadline, after requeueing (or dead-lettering) in-flight messages whose
-- deadline passed; then record when this consumer looks next.
-- KEYS: z f d h c (see _dq_common.lua).
-- ARGV: retention ms, batch (1..1000), visibility ms, max attempts (0 = no
-- limit), consumer id, its longest sleep (max_poll_ms).
-- Returns {now us, next wake-up ms or -1, count, first delivery token,
-- then per message: id, attempt, priority * 2^43 + due ms (its score in z),
-- payload}. The k-th message's
-- delivery token is the first + k - 1: tokens come from the queue's counter
-- h['#dlv'] (gaps allowed) and are kept in a<id> until the ack, so a later
-- delivery of any message of the queue, hence of this one, always has a
-- larger one (dq_extend and dq_ack refuse an older one). The next wake-up is the earliest of the next
-- due time and the next in-flight deadline (+1 ms: expiry is deadline < now).
-- A consumer that found fewer due messages than it asked for is idle: its
-- entry in c says when it looks next (the next wake-up, or now + its
-- longest sleep), so a later step that makes something takeable sooner
-- wakes it (dq_wake). One that found as many leaves c: it takes again at
-- once, or it is full and takes again when it has room. The new deadlines
-- wake the idle consumers that would look later, so whoever holds a message
-- its deadline is watched by every idle consumer.
-- Priorities (see _dq_common.lua): the due messages of the highest
-- priority go first, then by due time, then in push order; one range read
-- per priority up to h['#pmax'] (at most 10).
-- A take whose answer was lost (the connection broke first, or the answer
-- came too late) is sent again with the same number (ARGV[7], per
-- consumer, growing) and ARGV[8] = '1'. If the first run happened, the
-- retry hands its messages back, still in flight, with new tokens and
-- deadlines (their due time reads as the first run's take time): without
-- this they would sit unseen until their visibility deadline. The
-- consumer's take record c:<cid>:t (alive for the visibility time) holds
-- the last run's number, deadline, first token and count, so they are the
-- members of f at that deadline whose token is in that range. A first run
-- that arrives after its retry, or after a later take, does nothing and
-- answers count -1 (it should reach nobody; a consumer that hears it
-- anyway sends its take again). Number 0: no record (a caller that never
-- retries).
-- Work: at most 100 late messages, 1000 taken, 10 range reads of z, 16
-- stale entries of c removed, plus dq_wake's bound; a retry reads at most
-- 1064 members of f more.
--@include _dq_common.lua
local z, f, d, h, c = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local t = redis.call('TIME')
local now_us = tonumber(t[1]) * 1000000 + tonumber(t[2])
local now = math.floor(now_us / 1000)
local ret, batch = tonumber(ARGV[1]), tonumber(ARGV[2])
local vis, maxa = tonumber(ARGV[3]), tonumber(ARGV[4])
local cid, poll = ARGV[5], tonumber(ARGV[6])
local tseq, retry = tonumber(ARGV[7] or '0'), ARGV[8] == '1'
if not (batch >= 1 and batch <= 1000) then return redis.error_reply('ERR sluice: bad batch') end
if not (tseq and tseq >= 0) then return redis.error_reply('ERR sluice: bad take number') end
local wrote = {}
local tkey = c .. ':' .. cid .. ':t'
local out = {now_us, -1, 0, 0}
local deadline = now + vis

-- The take record; a retry's messages handed back (out, from out[5]).
local handed = 0
if tseq > 0 then
  -- pcall: while the slot migrates, a key the node lacks is refused.
  local rv = redis.pcall('HGET', tkey, 'r')
  local rs, rdl, rtok, rn = string.match(type(rv) == 'string' and rv or '',
                                         '^(%d+) (%d+) (%d+) (%d+)$')
  rs, rdl, rtok, rn = tonumber(rs), tonumber(rdl), tonumber(rtok), tonumber(rn)
  if rs and (rs > tseq or (rs == tseq and not retry)) then
    out[3] = -1 -- stale: nothing done
    return out
  end
  if rs == tseq and rn > 0 and rdl >= now then
    local ids = redis.call('ZRANGEBYSCORE', f, rdl, rdl, 'LIMIT', 0, rn + 64)
    local fields = {}
    for i, id in ipairs(ids) do fields[i], fields[#ids + i] = 'a' .. id, 'p' .. id end
    fields[2 * #ids + 1] = '#dlv'
    local v = #ids > 0 and redis.call('HMGET', h, unpack(fields)) or {}
    local base = tonumber(v[2 * #ids + 1]) or 0
    local zargs, hargs = {}, {}
    for i, id in ipairs(ids) do
      local av, pv = v[i], v[#ids + i]
      local slash = av and string.find(av, '/', 1, true)
      local tok = slash and tonumber(string.sub(av, slash + 1))
      if pv and tok and tok >= rtok and tok < rtok + rn and handed < batch then
        handed = handed + 1
        local seq, a = attempts_split(av)
        zargs[2 * handed - 1], zargs[2 * handed] = deadline, id
        hargs[2 * handed - 1] = 'a' .. id
        hargs[2 * handed] = (seq or '') .. a .. '/' .. dec(base + handed)
        local o = 4 * handed
        out[o + 1], out[o + 2] = id, a
        out[o + 3] = seq_pri(av) * DQ_BAND + rdl - vis
        out[o + 4] = seq and pv_payload(pv) or pv
      end
    end
    if handed > 0 then
      out[4] = base + 1
      hargs[2 * handed + 1], hargs[2 * handed + 2] = '#dlv', dec(base + handed)
      redis.call('ZADD', f, unpack(zargs))
      redis.call('HSET', h, unpack(hargs))
      wrote[f] = true
    end
  end
end

-- Removals come last, after every read, addition and dq_expire (a removal
-- may empty z, f or c: see _dq_common.lua): the late ones leave f at the
-- end, but for those taken again here, whose new deadline replaced theirs.
local fh = redis.call('ZRANGE', f, 0, 0, 'WITHSCORES')
local late = {}
if fh[2] and tonumber(fh[2]) < now then
  late = redis.call('ZRANGEBYSCORE', f, '-inf', '(' .. now, 'LIMIT', 0, 100)
end
if #late > 0 then
  local fields = {}
  for i, id in ipairs(late) do fields[i] = 'a' .. id end
  local avs = redis.call('HMGET', h, unpack(fields))
  for i, id in ipairs(late) do
    local _, a = attempts_split(avs[i])
    if maxa > 0 and a >= maxa then
      redis.call('ZADD', d, now, id)
      wrote[d] = true
    else
      local m = member_of(h, id, avs[i])
      redis.call('ZADD', z, zscore(m, now), m)
      wrote[z] = true
    end
  end
end

batch = batch - handed
-- The first n due members (cand: member, score: priority * DQ_BAND + due
-- time), highest priority first, and the earliest due time after them
-- (nextdue).
-- '#exp' with it: dq_expire then reads nothing more (an idle consumer's
-- take costs Redis the same commands as before priorities).
local hv = redis.call('HMGET', h, '#pmax', '#exp')
local pmax = tonumber(hv[1] or '0')
local cand, n, nextdue
if pmax == 0 then
  cand, n = redis.call('ZRANGE', z, 0, batch, 'WITHSCORES'), 0
  while n < batch and cand[2 * n + 2] and tonumber(cand[2 * n + 2]) <= now do n = n + 1 end
  nextdue = tonumber(cand[2 * n + 2])
else
  cand, n = {}, 0
  for p = pmax, 0, -1 do
    local lo = p * DQ_BAND
    local r = redis.call('ZRANGEBYSCORE', z, lo, '(' .. (lo + DQ_BAND), 'WITHSCORES', 'LIMIT', 0,
                         batch - n + 1)
    local k = 0
    while n < batch and r[2 * k + 2] and tonumber(r[2 * k + 2]) - lo <= now do
      cand[2 * n + 1], cand[2 * n + 2] = r[2 * k + 1], r[2 * k + 2]
      n, k = n + 1, k + 1
    end
    local due = r[2 * k + 2] and tonumber(r[2 * k + 2]) - lo
    if due and (not nextdue or due < nextdue) then nextdue = due end
  end
end
local taken, count = {}, 0
if n > 0 then
  -- Payloads, attempt counts and the token counter in one HMGET; new
  -- counts (with their tokens) and the counter in one HSET.
  local fields, seqs = {}, {}
  for i = 1, n do
    local seq, id = member_split(cand[2 * i - 1])
    seqs[i] = seq_len(seq) and seq or ''
    fields[i], fields[n + i] = 'p' .. id, 'a' .. id
  end
  fields[2 * n + 1] = '#dlv'
  local v = redis.call('HMGET', h, unpack(fields))
  local base = tonumber(v[2 * n + 1]) or 0
  if handed == 0 then out[4] = base + 1 end
  local zargs, hargs = {}, {}
  for i = 1, n do
    if v[i] then
      local id = string.sub(fields[i], 2)
      local _, a = attempts_split(v[n + i])
      local payload = v[i]
      if seqs[i] ~= '' then payload = pv_payload(payload) end
      zargs[#zargs + 1] = deadline
      zargs[#zargs + 1] = id
      hargs[#hargs + 1] = fields[n + i]
      count = count + 1
      hargs[#hargs + 1] = seqs[i] .. (a + 1) .. '/' .. dec(base + count)
      out[#out + 1] = id
      out[#out + 1] = a + 1
      out[#out + 1] = tonumber(cand[2 * i])
      out[#out + 1] = payload
      if #late > 0 then taken[id] = true end -- only the late ones ask
    end
  end
  if count > 0 then
    hargs[#hargs + 1] = '#dlv'
    hargs[#hargs + 1] = dec(base + count)
    redis.call('ZADD', f, unpack(zargs))
    redis.call('HSET', h, unpack(hargs))
    wrote[f] = true
  end
end
out[3] = handed + count
local drop = {}
for _, id in ipairs(late) do
  if not taken[id] then drop[#drop + 1] = id end
end

-- The earliest deadline that stays in f: without late ones, the one read
-- first or this take's; else the lowest entry that is not leaving (the late
-- ones still in f are its lowest entries, new deadlines are later than now).
local first = tonumber(fh[2])
if #late == 0 then
  if count > 0 and (not first or deadline < first) then first = deadline end
else
  first = nil
  local dropping = {}
  for _, id in ipairs(drop) do dropping[id] = true end
  local fl = redis.call('ZRANGE', f, 0, #drop, 'WITHSCORES')
  for i = 1, #fl, 2 do
    if not dropping[fl[i]] then
      first = tonumber(fl[i + 1])
      break
    end
  end
end
if first and (not nextdue or first + 1 < nextdue) then nextdue = first + 1 end
if nextdue then out[2] = nextdue end

if handed + count > 0 then dq_wake(c, deadline + 1) end
-- An empty first run needs no record (nothing to hand back; an idle
-- consumer's take costs no more commands); a retry always leaves one, so a
-- first run arriving after it does nothing.
if tseq > 0 and (handed + count > 0 or retry) then
  local r = redis.pcall('HSET', tkey, 'r', dec(tseq) .. ' ' .. dec(deadline) .. ' ' ..
                        dec(out[4]) .. ' ' .. (handed + count))
  if type(r) == 'number' then redis.pcall('PEXPIRE', tkey, vis) end
end
local stale = {}
if n < batch then
  local at = now + poll
  if nextdue and nextdue < at then at = nextdue end
  if redis.call('ZADD', c, at, cid) == 1 then
    stale = redis.call('ZRANGEBYSCORE', c, '-inf', '(' .. (now - DQ_STALE_MS), 'LIMIT', 0, 16)
  end
  wrote[c] = true
end
if next(wrote) then dq_expire(h, now + vis + ret, ret, wrote, hv[2] or '0') end
if n > 0 and pmax == 0 then redis.call('ZREMRANGEBYRANK', z, 0, n - 1) end
if n > 0 and pmax > 0 then
  local ms = {}
  for i = 1, n do ms[i] = cand[2 * i - 1] end
  redis.call('ZREM', z, unpack(ms))
end
if #drop > 0 then redis.call('ZREM', f, unpack(drop)) end
-- c last: this consumer's own entry is in it, or leaving it may empty it.
if #stale > 0 then redis.call('ZREM', c, unpack(stale)) end
if n >= batch then redis.call('ZREM', c, cid) end
return out
