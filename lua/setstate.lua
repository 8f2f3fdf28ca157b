-- SetState opens or closes an existing sale.
--
-- KEYS[1] sale hash  fg:{<sale>}:sale
-- ARGV[1] "open" or "close"
-- ARGV[2] the caller's fencing token (the leader's, or an admin call's; see
--         docs/internals.md): refused below the highest the hash has seen
--         (its fence field), which it raises
--
-- Returns 1 done, -1 no such sale (no total; nothing created), -2 refused
-- (a newer writer's token is in the hash; nothing changed).
if redis.call('HEXISTS', KEYS[1], 'total') == 0 then
  return -1
end
local token = tonumber(ARGV[2]) or 0
local fence = tonumber(redis.call('HGET', KEYS[1], 'fence') or '0') or 0
if token < fence then
  return -2
end
if token > fence then
  redis.call('HSET', KEYS[1], 'fence', ARGV[2])
end
-- A hand-made open or close overrides a re-sync's pending resume.
redis.call('HDEL', KEYS[1], 'resume')
if ARGV[1] == 'open' then
  redis.call('HSET', KEYS[1], 'start', 1, 'closed', 0)
else
  redis.call('HSET', KEYS[1], 'start', 0, 'closed', 1)
end
return 1
