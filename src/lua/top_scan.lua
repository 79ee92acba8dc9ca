-- Read-only discovery for monitors (sluice top): one SCAN step over the
-- keys of one kind of object under the key prefix. SCAN is not a key
-- access, so this runs on a single Redis only (no KEYS).
-- ARGV: 1 cursor, 2 MATCH pattern, 3 COUNT, 4 kind ('sem', 'dq', 'rl'),
--       5 what every such key starts with: "<prefix><kind>:{".
-- Returns {next cursor, then per key: name, limited key, algo, state, ttl ms}
-- ('' where a field does not apply; ttl -1 for none). For 'rl' the tag is
-- "<name length>:<name>:<key>" and the suffix names the algorithm.
--@no-wait
local page = redis.call('SCAN', ARGV[1], 'MATCH', ARGV[2], 'COUNT', tonumber(ARGV[3]))
local kind, head = ARGV[4], ARGV[5]
local out = {page[1]}
local algos = {fw = 'fixed', log = 'sliding-log', swc = 'sliding-counter', gcra = 'gcra'}
local t = redis.call('TIME')
local now_us = tonumber(t[1]) * 1000000 + tonumber(t[2])

local function add(name, key, algo, state, ttl)
  out[#out + 1], out[#out + 2], out[#out + 3] = name, key, algo
  out[#out + 1], out[#out + 2] = state, ttl
end

for _, k in ipairs(page[2]) do
  if string.sub(k, 1, #head) == head then
    local rest = string.sub(k, #head + 1)
    if kind ~= 'rl' then
      -- Names may hold '}': the name ends where the known suffix begins.
      local name = string.match(rest, kind == 'sem' and '^(.*)}:meta$' or '^(.*)}:h$')
      if name then add(name, '', '', '', -1) end
    else
      -- The suffix follows the last "}:"; the tag may itself hold '}'.
      local tag, suffix = string.match(rest, '^(.*)}:([%w]+)$')
      local len, after
      if tag then len, after = string.match(tag, '^(%d+):(.*)$') end
      local algo = suffix and algos[suffix]
      if len and algo and #after > tonumber(len) then
        local name = string.sub(after, 1, tonumber(len))
        local key = string.sub(after, tonumber(len) + 2)
        -- A key of a slot being imported here is refused to a script (the
        -- slot is not this node's yet): such a key is listed without state.
        local state, ttl = '', redis.pcall('PTTL', k)
        if type(ttl) ~= 'number' then
          ttl = -1
        elseif suffix == 'gcra' then
          local tat = tonumber(redis.call('GET', k) or '0') or 0
          if tat > now_us then state = string.format('tat +%.1fms', (tat - now_us) / 1000)
          else state = 'idle' end
        elseif suffix == 'fw' then
          local st = redis.call('HMGET', k, 'w', 'n')
          state = string.format('n=%s in window %s', st[2] or '0', st[1] or '-')
        elseif suffix == 'swc' then
          local st = redis.call('HMGET', k, 'c', 'p')
          state = string.format('cur=%s prev=%s', st[1] or '0', st[2] or '0')
        else
          -- Requests logged: a list {base, time, sum, ...}, or a sorted set
          -- of one member per unit as older versions wrote it.
          local n = redis.pcall('LLEN', k)
          if type(n) == 'number' then n = math.max(0, (n - 1) / 2)
          elseif string.find(n.err or '', 'WRONGTYPE', 1, true) then n = redis.call('ZCARD', k)
          else redis.call('LLEN', k) end -- another error (NOPERM): raised as it is
          state = string.format('entries=%d', n)
        end
        add(name, key, algo, state, ttl)
      end
    end
  end
end
return out
