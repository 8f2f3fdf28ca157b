-- Prepare creates a sale's hash in Redis, closed and empty, unless it exists.
--
-- KEYS[1] sale hash  fg:{<sale>}:sale
-- KEYS[2] sales set  fg:sales
-- ARGV[1] sale id
-- ARGV[2] total units
-- ARGV[3] admission cap (count)
-- ARGV[4] per_user
-- ARGV[5] price in cents
--
-- Returns 1 created, 0 it existed already (nothing changed).
if redis.call('EXISTS', KEYS[1]) == 1 then
  return 0
end
redis.call('HSET', KEYS[1], 'total', ARGV[2], 'booked', 0, 'reserved', 0,
  'start', 0, 'closed', 0, 'count', ARGV[3], 'access', 0,
  'per_user', ARGV[4], 'price', ARGV[5])
redis.call('SADD', KEYS[2], ARGV[1])
return 1
