-- RetakeHold holds, in a sale Redis lost and a re-sync is rebuilding (or
-- restoring from an older snapshot), the units of the late payments whose
-- retake the database records as pending (a retakes row written before
-- the retake in Redis, not yet honoured or dropped): the retake may have
-- taken them before Redis lost the sale, and a settler past it may still
-- honour it. This is the hold alone: a rebuild holds its pending retakes
-- in its final Resync (lua/resync.lua's ARGV[14 ..], the same
-- fragments/hold.lua), which counts their units in the same step (a hold
-- no count followed, a rebuild stopped between two calls, let the refund
-- give back a unit no hash had taken); tests use this script to place a
-- hold at a chosen step. A held order is in the retaken set, so the refund of
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
  -- hold_retake: fragments/hold.lua
  if hold_retake(KEYS[1], KEYS[3], KEYS[4], KEYS[5], ARGV[i], ARGV[i + 1]) then
    out[#out + 1] = 1
  else
    out[#out + 1] = 0
  end
  i = i + 2
end
return out
