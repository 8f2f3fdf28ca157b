-- Retake decides, once per order, whether a payment that succeeded after
-- its order left its live status (expired or cancelled) takes the order's
-- units again, and takes them when it does: the late payment is then
-- honoured, else refunded. The decision is recorded (the retaken set, or
-- the refusals hash), so every later call about the order, by any settler,
-- answers the same and changes nothing: two settlers of one payment never
-- decide differently. A recorded take is answered only once the pause and
-- restore checks pass: a rebuild (lua/restore.lua) drops the take of an
-- order the database holds released, so a retake asked after it decides
-- anew against the rebuilt stock. A recorded refusal is answered at once
-- (it only ever leads to a refund).
--
-- KEYS[1] sale hash     fg:{<sale>}:sale
-- KEYS[2] buyers hash   fg:{<sale>}:buyers
-- KEYS[3] released set  fg:{<sale>}:released
-- KEYS[4] retaken set   fg:{<sale>}:retaken
-- KEYS[5] refusals hash (order id -> code) fg:{<sale>}:retakerefused
-- ARGV[1] order id
-- ARGV[2] user id
-- ARGV[3] quantity
-- ARGV[4] optional: the order's variant id ("" none): taken anew, the units
--         need the variant's stock too (variant booked + qty <= its total)
--
-- When the order's release reached Redis (it is in the released set) the
-- units are taken anew, booked += qty, if booked + qty <= total and, on a
-- fair sale, the units the fair queue promised its admitted buyers
-- (queue_promised x per_user, as of the leader's last advance) stay free;
-- the order stays in the released set, so that a redelivered release of it
-- stays a no-op. When the release has not reached Redis yet (a re-sync
-- delivers it later) the units are still booked: the order joins the
-- released set, which makes that delivery a no-op. Either way the buyer
-- entry names the order again, and reserved += qty (the variant's too): the
-- units count as reserved and not yet persisted, so a re-sync before the
-- database records the honour (its retakes row, counted among the
-- persisted units) counts them, and one after counts them once.
--
-- Returns:
--   0  taken (or taken by an earlier call still in the retaken set)
--   1  no such sale in Redis (no total; retry after the re-sync; not recorded)
--   2  the buyer holds another order of the sale (recorded)
--   3  sold out: no unit left for the order (recorded)
--   4  retry later (not recorded, nothing taken): the sale's hash cannot be
--      trusted to decide now: it is paused for a rebuild (start = 0 with
--      resume = 1 after a Redis loss, resume = 2 after a failover), marked
--      for the restore path (reserved < 0, the sale's or the variant's), or
--      a fair sale whose queue_promised is unknown (lost with the hash, not
--      yet written by the leader's next advance)
--   5  the sale has closed: nothing is taken after the close (recorded)
local n = tonumber(ARGV[3])
if not n or n < 1 or n ~= math.floor(n) then
  return redis.error_reply('ERR retake: bad quantity')
end
local decided = redis.call('HGET', KEYS[5], ARGV[1])
if decided then
  return tonumber(decided)
end
if redis.call('HEXISTS', KEYS[1], 'total') == 0 then
  return 1
end
local v = ARGV[4] or ''
local g = redis.call('HMGET', KEYS[1], 'start', 'resume', 'reserved', 'queue', 'queue_promised',
  'variant:' .. v .. ':reserved', 'closed')
if (g[1] ~= '1' and (g[2] == '1' or g[2] == '2')) or (tonumber(g[3] or '0') or 0) < 0
  or (v ~= '' and (tonumber(g[6] or '0') or 0) < 0) then
  return 4
end
if redis.call('SISMEMBER', KEYS[4], ARGV[1]) == 1 then
  return 0
end
if g[7] == '1' then
  redis.call('HSET', KEYS[5], ARGV[1], 5)
  return 5
end
if g[4] == 'fair' and not g[5] then
  return 4
end
local cur = redis.call('HGET', KEYS[2], ARGV[2])
if cur and cur ~= ARGV[1] then
  redis.call('HSET', KEYS[5], ARGV[1], 2)
  return 2
end
if redis.call('SISMEMBER', KEYS[3], ARGV[1]) == 1 then
  local f = redis.call('HMGET', KEYS[1], 'total', 'booked', 'queue', 'queue_promised', 'per_user')
  local total = tonumber(f[1] or '0') or 0
  local booked = tonumber(f[2] or '0') or 0
  local promised = 0
  if f[3] == 'fair' then
    promised = (tonumber(f[4] or '0') or 0) * math.max(tonumber(f[5] or '1') or 1, 1)
  end
  if booked + n + promised > total then
    redis.call('HSET', KEYS[5], ARGV[1], 3)
    return 3
  end
  if v ~= '' then
    local vf = redis.call('HMGET', KEYS[1], 'variant:' .. v .. ':total', 'variant:' .. v .. ':booked')
    if (tonumber(vf[2] or '0') or 0) + n > (tonumber(vf[1] or '0') or 0) then
      redis.call('HSET', KEYS[5], ARGV[1], 3)
      return 3
    end
    redis.call('HINCRBY', KEYS[1], 'variant:' .. v .. ':booked', n)
  end
  redis.call('HINCRBY', KEYS[1], 'booked', n)
else
  redis.call('SADD', KEYS[3], ARGV[1])
end
redis.call('HINCRBY', KEYS[1], 'reserved', n)
if v ~= '' then
  redis.call('HINCRBY', KEYS[1], 'variant:' .. v .. ':reserved', n)
end
redis.call('HSET', KEYS[2], ARGV[2], ARGV[1])
redis.call('SADD', KEYS[4], ARGV[1])
return 0
