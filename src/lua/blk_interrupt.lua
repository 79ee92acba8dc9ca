-- Interrupt a client's blocking BRPOP so it re-reads its key set.
-- KEYS[1] the client's control list; ARGV[1] its idle expiry in ms.
--@no-wait
redis.call('LPUSH', KEYS[1], '1')
redis.call('LTRIM', KEYS[1], 0, 0)
redis.call('PEXPIRE', KEYS[1], ARGV[1])
return 1
