-- Release gives the units of a cancelled, refunded or expired order back to
-- its sale, once: releasing the same order again changes nothing.
--
-- KEYS[1] sale hash     fg:{<sale>}:sale
-- KEYS[2] buyers hash   fg:{<sale>}:buyers
-- KEYS[3] released set  fg:{<sale>}:released
-- ARGV[1] order id
-- ARGV[2] user id
-- ARGV[3] quantity
-- ARGV[4] optional: the order's variant id ("" none): its booked is given
--         back too (never below 0)
--
-- Returns:
--   1  released: booked -= qty (never below 0), the buyer entry removed if it
--      still names this order, the order id remembered, and the hash's
--      releases counter (lua.FieldReleases) raised by 1
--   0  this order was released before; nothing changed
--  -1  no such sale in Redis (no total; a re-sync from the database
--      rebuilds it)
-- A quantity that is not a whole number >= 1 is an error reply, before any
-- write (a failing call must not mark the order released).
local n = tonumber(ARGV[3])
if not n or n < 1 or n ~= math.floor(n) then
  return redis.error_reply('ERR release: bad quantity')
end
if redis.call('HEXISTS', KEYS[1], 'total') == 0 then
  return -1
end
if redis.call('SADD', KEYS[3], ARGV[1]) == 0 then
  return 0
end
redis.call('HINCRBY', KEYS[1], 'releases', 1)
-- give_back: fragments/giveback.lua
give_back(KEYS[1], 'booked', n)
local v = ARGV[4] or ''
if v ~= '' then
  give_back(KEYS[1], 'variant:' .. v .. ':booked', n)
end
if redis.call('HGET', KEYS[2], ARGV[2]) == ARGV[1] then
  redis.call('HDEL', KEYS[2], ARGV[2])
end
return 1
