-- Mark sets fields of an existing sale (or bucket) hash for the leader's
-- loops (a failover's marks, a rebuilt bucket's counters), under its
-- fencing token.
--
-- KEYS[1] sale hash  fg:{<sale>}:sale
-- ARGV[1] the caller's fencing token: refused below the hash's fence field,
--         which it raises
-- ARGV[2 ..] pairs field, value
--
-- Returns 1 set, 0 no such sale (no total; nothing created), -1 refused (a
-- newer writer's token is in the hash; nothing changed).
if redis.call('HEXISTS', KEYS[1], 'total') == 0 then
  return 0
end
local token = tonumber(ARGV[1]) or 0
local fence = tonumber(redis.call('HGET', KEYS[1], 'fence') or '0') or 0
if token < fence then
  return -1
end
if token > fence then
  redis.call('HSET', KEYS[1], 'fence', ARGV[1])
end
if #ARGV >= 3 then
  redis.call('HSET', KEYS[1], unpack(ARGV, 2))
end
return 1
