-- Remove one message wherever it is. KEYS: z f d h w as in dq_push.lua.
-- ARGV: id. Returns 1 if removed, 0 if there was no such message.
local z, f, d, h = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local id = ARGV[1]
if redis.call('HEXISTS', h, 'p' .. id) == 0 then return 0 end
local s = redis.call('HGET', h, 's' .. id)
if s then redis.call('ZREM', z, s .. id) end
redis.call('ZREM', f, id)
redis.call('ZREM', d, id)
redis.call('HDEL', h, 'p' .. id, 'a' .. id, 's' .. id)
return 1
