-- Shared by the scripts whose calls may carry requests of several hash
-- slots of one cluster node (inlined at build time by embed_lua.py; first
-- in the script, before anything reads KEYS or ARGV). Such a call declares
-- no keys: ARGV[1] is the number of keys k, ARGV[2..k+1] the keys, then
-- the script's own ARGV; the rest of the script sees KEYS and ARGV as a
-- call by slot would pass them. Redis runs a call without keys on the node
-- it was sent to, and a script without a shebang may touch keys of several
-- slots of that node (every version from 5.0 on). A key the node does not
-- serve now (its slot moved, or migrating with the key gone, or importing)
-- fails the command that touches it, and writes made before that stay. So
-- every key is read first: a refused one ends the call before anything was
-- written, answering {false (a nil), Redis's words}, and the client sends
-- the requests again slot by slot (src/core/batcher.c).
local KEYS, ARGV = KEYS, ARGV
if #KEYS == 0 then
  local k = tonumber(ARGV[1]) or 0
  local keys, args = {}, {}
  for i = 1, k do
    keys[i] = ARGV[i + 1]
    local r = redis.pcall('EXISTS', keys[i])
    if type(r) == 'table' and r.err then return {false, r.err} end
  end
  for i = k + 2, #ARGV do args[#args + 1] = ARGV[i] end
  KEYS, ARGV = keys, args
end
