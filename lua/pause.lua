-- Pause stops an open sale from selling without closing it: the control
-- plane pauses a sale whose Redis primary changed (a failover) until it has
-- rebuilt the sale from the database.
--
-- KEYS[1] sale hash  fg:{<sale>}:sale
-- ARGV[1] the caller's fencing token: refused below the hash's fence field,
--         which it raises
--
-- A paused sale has start = 0 and resume = 2: gateways answer it as open
-- but unavailable (503, which buyers retry), never "not started"; a re-sync
-- reopens only resume = 1, which the control plane sets once the sale is
-- rebuilt; a hand-made open or close clears it.
--
-- Returns 1 paused (it was open), 0 nothing changed (missing, not open),
-- -1 refused (a newer writer's token is in the hash; nothing changed).
local token = tonumber(ARGV[1]) or 0
local fence = tonumber(redis.call('HGET', KEYS[1], 'fence') or '0') or 0
if token < fence then
  return -1
end
if token > fence and redis.call('EXISTS', KEYS[1]) == 1 then
  redis.call('HSET', KEYS[1], 'fence', ARGV[1])
end
if redis.call('EXISTS', KEYS[1]) == 1 and redis.call('HGET', KEYS[1], 'start') == '1' then
  redis.call('HSET', KEYS[1], 'start', 0, 'resume', 2)
  return 1
end
return 0
