-- Tally adds the requests a gateway admitted and turned away to a sale's
-- hash, only while the sale exists there: counters must never recreate a
-- hash that Redis lost, or the re-sync would take the part for the whole.
--
-- KEYS[1] sale hash  fg:{<sale>}:sale
-- ARGV[1] admitted requests to add to access
-- ARGV[2] rejected requests to add to rejected
--
-- Returns 1 added, 0 no sale (the hash has no total; nothing written).
if redis.call('HEXISTS', KEYS[1], 'total') == 0 then
  return 0
end
local a, r = tonumber(ARGV[1]) or 0, tonumber(ARGV[2]) or 0
if a ~= 0 then
  redis.call('HINCRBY', KEYS[1], 'access', a)
end
if r ~= 0 then
  redis.call('HINCRBY', KEYS[1], 'rejected', r)
end
return 1
