-- Retake takes an expired (or cancelled) order's units again for a payment
-- that succeeded after the order left its live status, when the sale can
-- still give them to that buyer: the late payment is then honoured, else
-- refunded. It is idempotent: a second call for the same order answers 0
-- and changes nothing.
--
-- KEYS[1] sale hash     fg:{<sale>}:sale
-- KEYS[2] buyers hash   fg:{<sale>}:buyers
-- KEYS[3] released set  fg:{<sale>}:released
-- KEYS[4] retaken set   fg:{<sale>}:retaken
-- ARGV[1] order id
-- ARGV[2] user id
-- ARGV[3] quantity
-- ARGV[4] optional: the order's variant id ("" none): taken anew, the units
--         need the variant's stock too (variant booked + qty <= its total)
--
-- When the order's release reached Redis (it is in the released set) the
-- units are taken anew, booked += qty, if booked + qty <= total; the order
-- stays in the released set, so that a redelivered release of it stays a
-- no-op. When the release has not reached Redis yet (a re-sync delivers
-- it later) the units are still booked: the order joins the released set,
-- which makes that delivery a no-op. Either way the buyer entry names the
-- order again.
--
-- Returns:
--   0  taken (or taken by an earlier call)
--   1  no such sale in Redis (no total; retry after the re-sync)
--   2  the buyer holds another order of the sale
--   3  sold out: no unit left for the order
local n = tonumber(ARGV[3])
if not n or n < 1 or n ~= math.floor(n) then
  return redis.error_reply('ERR retake: bad quantity')
end
if redis.call('SISMEMBER', KEYS[4], ARGV[1]) == 1 then
  return 0
end
if redis.call('HEXISTS', KEYS[1], 'total') == 0 then
  return 1
end
local cur = redis.call('HGET', KEYS[2], ARGV[2])
if cur and cur ~= ARGV[1] then
  return 2
end
if redis.call('SISMEMBER', KEYS[3], ARGV[1]) == 1 then
  local total = tonumber(redis.call('HGET', KEYS[1], 'total') or '0') or 0
  local booked = tonumber(redis.call('HGET', KEYS[1], 'booked') or '0') or 0
  if booked + n > total then
    return 3
  end
  local v = ARGV[4] or ''
  if v ~= '' then
    local vf = redis.call('HMGET', KEYS[1], 'variant:' .. v .. ':total', 'variant:' .. v .. ':booked')
    if (tonumber(vf[2] or '0') or 0) + n > (tonumber(vf[1] or '0') or 0) then
      return 3
    end
    redis.call('HINCRBY', KEYS[1], 'variant:' .. v .. ':booked', n)
  end
  redis.call('HINCRBY', KEYS[1], 'booked', n)
else
  redis.call('SADD', KEYS[3], ARGV[1])
end
redis.call('HSET', KEYS[2], ARGV[2], ARGV[1])
redis.call('SADD', KEYS[4], ARGV[1])
return 0
