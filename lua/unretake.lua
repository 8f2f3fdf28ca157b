-- Unretake gives back the units a late payment took again (lua/retake.lua)
-- when an admin refunds its honoured order, or when the late payment is
-- refunded after its retake was recorded (the sale closed in the database
-- before the honour step, or a settler stopped between the retake and the
-- honour step): the order is in the released
-- set (the retake keeps it there so that its own release stays a no-op),
-- so Release cannot give them back, and the buyer entry that names the
-- order would keep its buyer from buying in the sale again.
--
-- KEYS[1] sale hash     fg:{<sale>}:sale
-- KEYS[2] buyers hash   fg:{<sale>}:buyers
-- KEYS[3] retaken set   fg:{<sale>}:retaken
-- KEYS[4] refusals hash (order id -> code) fg:{<sale>}:retakerefused
-- ARGV[1] order id
-- ARGV[2] user id
-- ARGV[3] quantity
-- ARGV[4] optional: the order's variant id ("" none): its booked is given
--         back too (never below 0)
-- ARGV[5] optional: "1" when no retakes row counts the units among the
--         persisted ones (the retake was never honoured and the late
--         payment is refunded; or the admin refund of the honoured order
--         marked its row owed back, flashgate.PaymentStep.OweRetake), so
--         reserved (the variant's too) is given back as well (never below
--         0); "" or absent while an honoured retakes row counts them
--
-- The order leaves the retaken set and its refusal is recorded as sold out
-- (3), so a retake asked about it again takes nothing.
--
-- Returns:
--   1  given back: booked -= qty (never below 0), reserved -= qty with
--      ARGV[5] = "1", the buyer entry removed
--      if it still names this order, the releases counter raised by 1 (a
--      re-sync whose snapshot still counts the order live keeps the lower
--      figure, as after a Release)
--   0  the order was not retaken here (or was given back before); no
--      figure changed. Its refusal is recorded as sold out (3) all the
--      same: a rebuild under way that read its retake as pending, or
--      honoured, and whose hash this call found (written by a concurrent
--      rebuild), then does not hold it again (reviewers' windows: the
--      hold counted a unit nobody gave back; or put a refunded order back
--      in the retaken set, and a later give-back freed its unit twice)
--  -1  no such sale in Redis (no total; a re-sync from the database
--      rebuilds it without the order). The refusal is recorded as sold
--      out (3) whatever it was: a rebuild under way that read the retake
--      as pending before the refund dropped its row then does not hold
--      it (lua/retakehold.lua skips any code but 6; before, it held the
--      order and its final Resync counted a unit nobody would give back).
--      An order that rebuild already held (refusal 6) also leaves the
--      retaken set and its buyer entry goes if it names the order: the
--      final Resync counts a held order only while its refusal is 6, so
--      it does not take the units again (explorer seed 20263050: the
--      refund between the hold and the final Resync found no total, and
--      the unit stayed hidden)
local n = tonumber(ARGV[3])
if not n or n < 1 or n ~= math.floor(n) then
  return redis.error_reply('ERR unretake: bad quantity')
end
if redis.call('HEXISTS', KEYS[1], 'total') == 0 then
  if redis.call('HGET', KEYS[4], ARGV[1]) == '6' then
    redis.call('SREM', KEYS[3], ARGV[1])
    if redis.call('HGET', KEYS[2], ARGV[2]) == ARGV[1] then
      redis.call('HDEL', KEYS[2], ARGV[2])
    end
  end
  redis.call('HSET', KEYS[4], ARGV[1], 3)
  return -1
end
if redis.call('SREM', KEYS[3], ARGV[1]) == 0 then
  redis.call('HSET', KEYS[4], ARGV[1], 3)
  return 0
end
-- give_back: fragments/giveback.lua
give_back(KEYS[1], 'booked', n)
local v = ARGV[4] or ''
if v ~= '' then
  give_back(KEYS[1], 'variant:' .. v .. ':booked', n)
end
if ARGV[5] == '1' then
  give_back(KEYS[1], 'reserved', n)
  if v ~= '' then
    give_back(KEYS[1], 'variant:' .. v .. ':reserved', n)
  end
end
if redis.call('HGET', KEYS[2], ARGV[2]) == ARGV[1] then
  redis.call('HDEL', KEYS[2], ARGV[2])
end
redis.call('HSET', KEYS[4], ARGV[1], 3)
redis.call('HINCRBY', KEYS[1], 'releases', 1)
return 1
