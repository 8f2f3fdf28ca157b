-- SpillCheck looks for a spilled order in one bucket of a bucketed sale for
-- the leader settling a stale claim, and fences it there: an order that is
-- not live in the bucket joins its released set, so that a spill reserve of
-- it arriving late (lua.Reserve with ARGV[7]) is refused. Once every other
-- bucket answered 0, the order is live nowhere and never will be.
--
-- KEYS[1] sale hash     fg:{<sale>}:sale
-- KEYS[2] buyers hash   fg:{<sale>}:buyers
-- KEYS[3] released set  fg:{<sale>}:released
-- ARGV[1] user id
-- ARGV[2] order id
--
-- Returns 1 the order is live here (buyers[user] names it), 0 it is not
-- (now fenced, or released before), -1 no such bucket (nothing written).
if redis.call('HEXISTS', KEYS[1], 'total') == 0 then
  return -1
end
if redis.call('HGET', KEYS[2], ARGV[1]) == ARGV[2] then
  return 1
end
redis.call('SADD', KEYS[3], ARGV[2])
return 0
