-- Reserve atomically checks a sale and takes units from it for one user, and
-- enqueues the order on the sale's stream in the same step, so a reservation
-- can never exist without its order entry.
--
-- KEYS[1] sale hash     fg:{<sale>}:sale
-- KEYS[2] buyers hash   fg:{<sale>}:buyers
-- KEYS[3] orders stream fg:{<sale>}:orders
-- KEYS[4] primary mark  fg:{<sale>}:primary
--         (lua.PrimaryKey: the failover fence, see below)
-- KEYS[5] released set  fg:{<sale>}:released
--         (read only with ARGV[7])
-- KEYS[6] queue hash    (read in a fair queue only) fg:{<sale>}:queue
-- ARGV[1] order id (minted by the caller)
-- ARGV[2] user id
-- ARGV[3] quantity
-- ARGV[4] now, unix milliseconds
-- ARGV[5] sale id
-- ARGV[6] optional: the bucket index, when KEYS are a bucket's of a bucketed
--         sale; the entry then carries it; "" none
-- ARGV[7] optional: "spill" when the bucket is not the user's home (the
--         home holds the user's claim, lua.Claim): an order the leader
--         fenced in KEYS[5] (lua.SpillCheck) is refused, and a sold-out
--         answer counts no want; "" none
-- ARGV[8] optional: the variant id, on a sale sold in variants (the hash's
--         variants field, lua.FieldVariants); "" none. The units come from
--         the variant's own stock (variant:<id>:total, :booked) as well as
--         the sale's, whose figures stay the sums over its variants
-- ARGV[9] optional: "draw" when the draw's own close path reserves a
--         winner's order; "" none. A sale sold by a draw (queue = "draw")
--         answers every other reserve {2, ""} (not started), whatever its
--         state; with "draw" it needs no start flag (the sale stays shut to
--         buyers) nor an open sale (the close charged the winner before it
--         reserves: an admin's stop during the close must not leave a
--         charged winner without the order), but is still refused paused
--         {7}
--
-- The failover fence: before it takes units the script compares KEYS[4],
-- the replication id the control plane last checked the sale on, with this
-- primary's own (INFO replication, master_replid). A replica promoted by a
-- failover carries the old primary's marker but has an id of its own, and
-- may lack reserves whose orders already are rows: the script pauses the
-- sale as lua.Pause does (start = 0, resume = 2) and answers {7, ""}; the
-- control plane rebuilds it from the database, sets the marker to the new
-- id and reopens it. No marker (a sale the control plane has not looked at
-- yet), or a store that cannot tell its replication id (no INFO
-- replication, as miniredis), is no fence. Answers that take nothing are
-- given before the fence is looked at.
--
-- Returns {code, order id}:
--   {0, order}    reserved: booked += qty, reserved += qty, buyer set, entry
--                 added (one field, "e": lua.EntryCompact)
--   {1, ""}       no such sale
--   {2, ""}       not started
--   {3, ""}       closed
--   {4, ""}       sold out (booked + qty > total, or the variant's booked
--                 + qty > its total); with ARGV[6] and without ARGV[7],
--                 want += 1, and the variant's variant:<id>:want += 1
--   {5, existing} the user already holds a live order (its id)
--   {6, ""}       quantity not a whole number in 1..per_user
--   {7, ""}       paused while a re-sync rebuilds it (resume set), or
--                 fenced (see above): an open sale that sells again
--                 shortly, so the buyer should retry
--   {8, ""}       spill only: the order was fenced here by the leader
--                 settling its stale claim; nothing changed
--   {9, ""}       fair queue: the user's position is not admitted, or its
--                 window ended (lua.ReserveNotAdmitted)
--   {10, ""}      the variant is not one the sale sells: "" or unknown on a
--                 sale with variants, or given on a sale without
--                 (lua.ReserveBadVariant)
-- On success the entry also has the field "variant" (lua.EntryVariant)
-- when the order names one, and the variant's booked and reserved grow by
-- qty with the sale's.
-- A named variant's figures (f[13..15]: total, booked, reserved) are read
-- with the sale's.
local variant = ARGV[8] or ''
local vf = nil -- the names of the variant's fields
local f
if variant ~= '' then
  vf = {'variant:' .. variant .. ':total', 'variant:' .. variant .. ':booked', 'variant:' .. variant .. ':reserved'}
  f = redis.call('HMGET', KEYS[1], 'total', 'booked', 'start', 'closed', 'per_user', 'price', 'resume', 'queue', 'queue_prequeued', 'queue_admitted', 'queue_expired', 'variants', vf[1], vf[2], vf[3])
else
  f = redis.call('HMGET', KEYS[1], 'total', 'booked', 'start', 'closed', 'per_user', 'price', 'resume', 'queue', 'queue_prequeued', 'queue_admitted', 'queue_expired', 'variants')
end
if not f[1] then
  return {1, ''}
end
-- A draw sale (f[8]) sells only through its draw's close path.
local drawing = f[8] == 'draw'
if drawing and ARGV[9] ~= 'draw' then
  return {2, ''}
end
if f[3] ~= '1' then
  if f[4] == '1' and not drawing then
    return {3, ''}
  end
  -- A draw is paused only by a resume of 1 or more (lua.PauseOf): the
  -- rebuild of a draw not started leaves resume = 0, and such a draw,
  -- never started, must still reserve its winners.
  if f[7] and (not drawing or (tonumber(f[7]) or 0) >= 1) then
    return {7, ''}
  end
  if not drawing then
    return {2, ''}
  end
end
if ARGV[7] == 'spill' and redis.call('SISMEMBER', KEYS[5], ARGV[1]) == 1 then
  return {8, ''}
end
local existing = redis.call('HGET', KEYS[2], ARGV[2])
if existing then
  return {5, existing}
end
-- A fair queue (lua/queueenter.lua): only a buyer whose position is
-- admitted and whose window has not ended buys.
local fq = {f[8], f[9], f[10], f[11]} -- read with the sale's other fields
if fq[1] == 'fair' then
  local v = redis.call('HGET', KEYS[6], ARGV[2]) or ''
  local kind, pos = string.sub(v, 1, 1), tonumber(string.sub(v, 2))
  if pos and kind == 'l' then
    pos = pos + (tonumber(fq[2] or '0') or 0)
  elseif kind ~= 'r' then
    pos = nil
  end
  if not pos or pos > (tonumber(fq[3] or '0') or 0) or pos <= (tonumber(fq[4] or '0') or 0) then
    return {9, ''}
  end
end
local n = tonumber(ARGV[3])
local perUser = tonumber(f[5] or '1') or 1
if not n or n < 1 or n > perUser or n ~= math.floor(n) then
  return {6, ''}
end
-- A sale sold in variants (f[12]) takes from the named variant's stock too.
local vtotal, vbooked = nil, 0
if f[12] then
  if variant == '' then
    return {10, ''}
  end
  vtotal = tonumber(f[13] or '')
  if not vtotal then
    return {10, ''}
  end
  vbooked = tonumber(f[14] or '0') or 0
elseif variant ~= '' then
  return {10, ''}
end
if tonumber(f[2] or '0') + n > tonumber(f[1]) or (vtotal and vbooked + n > vtotal) then
  if (ARGV[6] or '') ~= '' and ARGV[7] ~= 'spill' then
    -- A bucket turning a buyer away tells the leader's rebalancing that it
    -- has buyers while it is empty (of this variant, on a variant sale).
    redis.call('HINCRBY', KEYS[1], 'want', 1)
    if vtotal then
      redis.call('HINCRBY', KEYS[1], 'variant:' .. variant .. ':want', 1)
    end
  end
  return {4, ''}
end
local marker = redis.call('GET', KEYS[4])
if marker then
  local info = redis.pcall('INFO', 'replication')
  if type(info) == 'string' and string.find(info, 'master_replid:', 1, true)
    and not string.find(info, 'master_replid:' .. marker .. '\r', 1, true) then
    -- Paused as lua.Pause pauses it, so gateways answer 503 without
    -- admitting anyone until the control plane has rebuilt it.
    redis.call('HSET', KEYS[1], 'start', 0, 'resume', 2)
    return {7, ''}
  end
end
redis.call('HINCRBY', KEYS[1], 'booked', n)
redis.call('HINCRBY', KEYS[1], 'reserved', n)
redis.call('HSET', KEYS[2], ARGV[2], ARGV[1])
-- The entry is compact (lua.EntryCompact): order, qty, price, ts, bucket
-- ("" unbucketed), then the user id, which may hold spaces; the variant is
-- a field of its own.
local e = ARGV[1] .. ' ' .. string.format('%d', n) .. ' ' .. (f[6] or '0') .. ' ' .. ARGV[4] .. ' ' .. (ARGV[6] or '') .. ' ' .. ARGV[2]
if vtotal then
  -- Whole numbers far below 2^53: Redis writes them as integers.
  redis.call('HSET', KEYS[1], vf[2], vbooked + n, vf[3], (tonumber(f[15] or '0') or 0) + n)
  redis.call('XADD', KEYS[3], '*', 'e', e, 'variant', variant)
else
  redis.call('XADD', KEYS[3], '*', 'e', e)
end
return {0, ARGV[1]}
