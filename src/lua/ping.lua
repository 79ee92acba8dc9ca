-- Round-trip probe used by tests and benchmarks: returns Redis's time in ms.
--@no-wait
local t = redis.call('TIME')
return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
