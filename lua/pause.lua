-- Pause stops an open sale from selling without closing it: the control
-- plane pauses a sale whose Redis primary changed (a failover) until it has
-- rebuilt the sale from the database.
--
-- KEYS[1] sale hash  fg:{<sale>}:sale
--
-- A paused sale has start = 0 and resume = 2: gateways answer it as open
-- but unavailable (503, which buyers retry), never "not started"; a re-sync
-- reopens only resume = 1, which the control plane sets once the sale is
-- rebuilt; a hand-made open or close clears it.
--
-- Returns 1 paused (it was open), 0 nothing changed (missing, not open).
if redis.call('EXISTS', KEYS[1]) == 1 and redis.call('HGET', KEYS[1], 'start') == '1' then
  redis.call('HSET', KEYS[1], 'start', 0, 'resume', 2)
  return 1
end
return 0
