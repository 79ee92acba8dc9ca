-- Count messages by state and peek at the earliest delayed one.
-- KEYS: z f d h c (see _dq_common.lua).
-- Returns {now ms, delayed, ready, in flight, expired, dead, next id | false,
-- next due ms | -1}.
--@include _dq_common.lua
local z, f, d = KEYS[1], KEYS[2], KEYS[3]
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local head = redis.call('ZRANGE', z, 0, 0, 'WITHSCORES')
local _, id = member_split(head[1] or '')
return {now, redis.call('ZCARD', z), redis.call('ZCOUNT', z, '-inf', now),
        redis.call('ZCARD', f), redis.call('ZCOUNT', f, '-inf', '(' .. now),
        redis.call('ZCARD', d), head[1] and id or false, tonumber(head[2]) or -1}
