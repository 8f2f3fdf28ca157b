-- RetakeHold holds, in a sale Redis lost and a re-sync is rebuilding (or
-- restoring from an older snapshot), the units of the late payments whose
-- retake the database records as pending (a retakes row written before
-- the retake in Redis, not yet honoured or dropped): the retake may have
-- taken them before Redis lost the sale, and a settler past it may still
-- honour it. It runs after Restore's pages and before the final Resync,
-- which counts the held units as reserved and booked (the caller adds
-- them to L and P). A held order is in the retaken set, so the refund of
-- its payment gives its units back (lua/unretake.lua) and an honour step
-- finds them counted; its refusal is recorded as held (6), so a retake
-- asked about it again takes nothing: the late payment is refunded unless
-- the settler past the first retake honours it first.
--
-- KEYS[1] buyers hash   fg:{<sale>}:buyers
-- KEYS[2] sale hash (only its fence field)  fg:{<sale>}:sale
-- KEYS[3] retaken set   fg:{<sale>}:retaken
-- KEYS[4] refusals hash (order id -> code) fg:{<sale>}:retakerefused
-- KEYS[5] released set  fg:{<sale>}:released
-- ARGV[1] the caller's fencing token: refused below the sale hash's fence
--         field, which it raises
-- ARGV[2 ..] pairs user id, order id of the pending retakes
--
-- An order whose refusal is recorded with another code than 6 is not
-- held (its retake was refused, or its units were given back by
-- lua/unretake.lua): its payment is refunded.
--
-- Returns -1 refused (a newer writer's token; nothing changed), else one
-- value per pair: 1 held (count its units), 0 not.
local token = tonumber(ARGV[1]) or 0
local fence = tonumber(redis.call('HGET', KEYS[2], 'fence') or '0') or 0
if token < fence then
  return -1
end
if token > fence then
  redis.call('HSET', KEYS[2], 'fence', ARGV[1])
end
local out = {}
local i = 2
while i + 1 <= #ARGV do
  local user, order = ARGV[i], ARGV[i + 1]
  local code = redis.call('HGET', KEYS[4], order)
  if code and code ~= '6' then
    out[#out + 1] = 0
  else
    redis.call('SADD', KEYS[3], order)
    redis.call('SADD', KEYS[5], order)
    redis.call('HSET', KEYS[4], order, 6)
    redis.call('HSETNX', KEYS[1], user, order)
    out[#out + 1] = 1
  end
  i = i + 2
end
return out
