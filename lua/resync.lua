-- Resync gives a sale's stock back to Redis from one database snapshot, and
-- rebuilds the sale's hash when Redis lost it. It touches the sale's hash
-- only and takes O(1) arguments: releases reach Redis before it, through
-- ReleaseBatch (the database's pending releases) or Restore (a rebuild).
--
-- KEYS[1] sale hash  fg:{<sale>}:sale
-- ARGV[1] L: units held by live rows (pending_payment, paid) in the snapshot
-- ARGV[2] P: units of all rows, any status, in the same snapshot
-- ARGV[3] total units (from the sale row)
-- ARGV[4] per_user
-- ARGV[5] price in cents
-- ARGV[6] state from the sale row: "upcoming", "open" or "closed" (used only
--         when the hash is rebuilt)
-- ARGV[7] admit ratio (> 0)
-- ARGV[8] D: releases the database counts as delivered to Redis; every
--         order released in the snapshot is among them or was delivered by
--         the caller just before this call
-- ARGV[9] "1" when the caller has just restored the released set and the
--         buyers from every row of the sale (Restore), else "0"; "1:<id>"
--         is "1" checked: a hash this call would rebuild (no total) must
--         still hold a restore's id (lua/restored.lua, field restored: this
--         restore's, or a concurrent one's that ended later), or Redis lost
--         the restored pages since (a second loss during the rebuild) and
--         the call returns {-1} with nothing changed; a hash another
--         rebuild wrote meanwhile is re-synced as with "1". The id goes
-- ARGV[10] the caller's fencing token (the leader's, or an admin call's):
--         refused below the hash's fence field, which it raises
-- ARGV[11] optional: "fair" for a sale sold through a fair queue
--         (lua.FieldQueue), written whenever the hash lacks it, so that a
--         rebuilt sale keeps checking admission in every reserve;
--         "draw:<open ms>:<close ms>" for a sale sold by a draw (as
--         Prepare's ARGV[6]), so that a rebuilt draw sale refuses purchases
-- ARGV[12] optional: the variants of a sale sold in several, in the sale's
--         order, "id:total:L:P,..." with L and P the variant's live units
--         and all-rows units from the same snapshot as ARGV[1] and ARGV[2]
--         ('' none); ARGV[3] is then the sum of their totals
-- ARGV[13] optional: the hash's releases counter (lua.FieldReleases) as the
--         caller read it before the snapshot of ARGV[1], ARGV[2] and
--         ARGV[12] were taken ('' or absent: not read, nothing compared),
--         optionally followed by ':' and the hash's rebuild mark
--         (lua.FieldRebuild, '' when it had none or no hash) read with it
--         ("3:1765000000.123456"): a rebuilt sale is then reopened only by
--         a pass that read the mark it has now, one whose snapshot was
--         taken after that rebuild (without ':', no mark compared)
-- ARGV[14 ..] optional, with ARGV[9] = "1" (or "1:<id>") only: quadruples
--         user id, order id, quantity, variant id ('' none) of the pending
--         retakes the caller holds in the rebuilt sale. Each one is held
--         here (fragments/hold.lua: the retaken and released sets, its
--         refusal recorded as held, 6, its buyer entry) unless its refusal
--         is recorded with another code (lua/unretake.lua records 3 when
--         it gives the units back: its late payment refunded), and the
--         units of each one held are added to L and P (and to its
--         variant's), in this one call: a hold the count did not follow (a
--         rebuild stopped between two calls) let the refund give back a
--         unit no hash had taken.
--
-- KEYS[2] optional, with ARGV[14 ..]: refusals  fg:{<sale>}:retakerefused
-- KEYS[3] optional, with ARGV[14 ..]: retaken set  fg:{<sale>}:retaken
-- KEYS[4] optional, with ARGV[14 ..]: released set  fg:{<sale>}:released
-- KEYS[5] optional, with ARGV[14 ..]: buyers hash  fg:{<sale>}:buyers
--
-- Returns {-2} refused (a newer writer's token is in the hash; nothing
-- changed).
--
-- With ARGV[9] "1:<id>", returns {-1} when the hash has no total and holds
-- no restore's id (see ARGV[9]).
--
-- Unless ARGV[9] is "1", returns {-1} when Redis cannot be trusted to hold
-- the sale's releases and buyers: the hash has no total (a Redis loss), or
-- its reserved is below P or its delivered below D (restored from an older
-- snapshot). Then an open sale is paused (start = 0, resume = 1) until the
-- restore is done, so that no buyer whose entry is missing buys twice, and
-- nothing else changes.
--
-- Otherwise booked := L + max(0, reserved - P), clamped to [0, total]. With
-- variants, each variant's booked := L_v + max(0, reserved_v - P_v), clamped
-- to [0, total_v], its reserved := max(reserved_v, P_v), and the sale's
-- booked is the sum of its variants' booked (clamped to [0, total]).
-- When the hash existed, ARGV[9] is "0" and its releases counter is no
-- longer ARGV[13], a release reached Redis after the caller read it: it may
-- be missing from the snapshot, which would count its units as live, while
-- the hash's booked has given them back. Then booked (and each variant's)
-- is the lesser of that figure and the hash's own: both count every live
-- unit, so neither hides a freed one nor sells a held one (see "Re-sync
-- without races" in docs/internals.md). If
-- remaining = total - booked > 0, count := max(count, access +
-- ceil(remaining * ratio)); with nothing remaining count is never raised.
-- delivered := max(delivered, D). Returns {rebuilt, before booked, before
-- reserved, before count, before access, after booked, after reserved,
-- after count, after access, total}: rebuilt is 1 when the hash had no
-- total (its "before" figures are 0). A rebuilt open sale stays paused
-- (resume = 1) until the next call, which reopens it, unless that call read
-- another rebuild mark than the hash's (ARGV[13]): its snapshot may predate
-- the rebuild, even the loss, and miss rows the lost hash counted in
-- reserved (two rebuilds at once, each from a snapshot taken before the
-- loss: the second one's script reopened the first one's hash with the
-- unit of an order stored between the snapshots and the loss free; explorer
-- seed 20261678). The rebuild writes a fresh mark (the server's TIME).
local L = tonumber(ARGV[1])
local P = tonumber(ARGV[2])
local total = tonumber(ARGV[3])
local ratio = tonumber(ARGV[7])
if not ratio or ratio <= 0 then
  ratio = 1.5
end
local D = tonumber(ARGV[8]) or 0
local restored = ARGV[9] == '1'
local restoreID = nil
if string.sub(ARGV[9] or '', 1, 2) == '1:' then
  restored, restoreID = true, string.sub(ARGV[9], 3)
end
-- ARGV[13]: the releases counter, and the rebuild mark (nil: not compared).
local relRead, markRead = ARGV[13], nil
if relRead then
  local r, m = string.match(relRead, '^([^:]*):(.*)$')
  if r then
    relRead, markRead = r, m
  end
end

local token = tonumber(ARGV[10]) or 0
local fence = tonumber(redis.call('HGET', KEYS[1], 'fence') or '0') or 0
if token < fence then
  return {-2}
end

local exists = redis.call('HEXISTS', KEYS[1], 'total') == 1
if restoreID then
  -- Any restore's id will do: one that ended after the last loss left
  -- every row's buyers and releases in Redis (a later loss takes the id
  -- with them). A concurrent rebuild that does not write the hash first
  -- then finds it written (and re-syncs it, as "1").
  if not exists and not redis.call('HGET', KEYS[1], 'restored') then
    return {-1}
  end
  redis.call('HDEL', KEYS[1], 'restored')
end
if token > fence and (exists or restored) then
  redis.call('HSET', KEYS[1], 'fence', ARGV[10])
end
if not restored then
  if not exists then
    return {-1}
  end
  local h = redis.call('HMGET', KEYS[1], 'reserved', 'delivered', 'start')
  if (tonumber(h[1] or '0') or 0) < P or (tonumber(h[2] or '0') or 0) < D then
    if h[3] == '1' then
      redis.call('HSET', KEYS[1], 'start', 0, 'resume', 1)
    end
    return {-1}
  end
end

-- The pending retakes (ARGV[14 ..]) are held here, in the call that
-- counts them, as live and persisted units (by variant in heldv): a hold
-- no final Resync counted (a rebuild stopped between the two) left an
-- order held whose refund then gave back a unit no hash had taken (a
-- reviewer's window: an oversell).
local heldv = {}
if restored and KEYS[5] then
  local i = 14
  while i + 3 <= #ARGV do
    local q = tonumber(ARGV[i + 2]) or 0
    -- hold_retake: fragments/hold.lua
    if q > 0 and hold_retake(KEYS[5], KEYS[3], KEYS[2], KEYS[4], ARGV[i], ARGV[i + 1]) then
      L = L + q
      P = P + q
      local vid = ARGV[i + 3]
      if vid ~= '' then
        heldv[vid] = (heldv[vid] or 0) + q
      end
    end
    i = i + 4
  end
end

if ARGV[11] == 'fair' and redis.call('HGET', KEYS[1], 'queue') ~= 'fair' then
  redis.call('HSET', KEYS[1], 'queue', 'fair')
end

local rebuilt = 0
if not exists then
  rebuilt = 1
  -- A rebuilt open sale stays paused until the next pass: an order sink may
  -- hold a batch it read before Redis lost the sale and commit it after this
  -- snapshot; the next pass counts it in L before anyone can buy again.
  local closed, resume = 0, 0
  if ARGV[6] == 'open' then
    resume = 1
  elseif ARGV[6] == 'closed' then
    closed = 1
  end
  local now = redis.call('TIME')
  redis.call('HSET', KEYS[1], 'booked', 0, 'reserved', P, 'start', 0,
    'closed', closed, 'count', 0, 'access', 0, 'resume', resume, 'delivered', D,
    'rebuild', now[1] .. '.' .. now[2])
  -- The static fields, as Prepare writes them (fragments/salestatic.lua);
  -- a bucketed sale's own hash is rebuilt by Prepare, so no layout here.
  -- The fragment reads ARGV[12]'s "id:total" and leaves L and P.
  write_sale_static(KEYS[1], total, ARGV[4], ARGV[5], '', ARGV[11], ARGV[12])
elseif redis.call('HGET', KEYS[1], 'resume') == '1' and
  (markRead == nil or markRead == (redis.call('HGET', KEYS[1], 'rebuild') or '')) then
  -- The pass after a rebuild (or the end of a restore): booked is
  -- recomputed below from this snapshot, then the sale opens again. A pass
  -- that read another mark before its snapshot (none, or an older
  -- rebuild's) leaves the sale paused for the next one.
  redis.call('HSET', KEYS[1], 'start', 1)
  redis.call('HDEL', KEYS[1], 'resume')
end

local f = redis.call('HMGET', KEYS[1], 'booked', 'reserved', 'count', 'access', 'total', 'delivered', 'releases')
local bBooked = tonumber(f[1] or '0') or 0
local bReserved = tonumber(f[2] or '0') or 0
local bCount = tonumber(f[3] or '0') or 0
local access = tonumber(f[4] or '0') or 0
if f[5] then
  total = tonumber(f[5]) or total
end
if (tonumber(f[6] or '0') or 0) < D then
  redis.call('HSET', KEYS[1], 'delivered', D)
end
-- raced: a release reached the hash since the caller read its counter, so
-- the snapshot may count its units as live where the hash does not.
local raced = false
if rebuilt == 0 and not restored and relRead and relRead ~= '' then
  raced = (tonumber(f[7] or '0') or 0) ~= (tonumber(relRead) or 0)
end

-- Units reserved in Redis but not yet persisted. A Redis older than the
-- database (restored from an old snapshot) has reserved < P: its unpersisted
-- count is 0 and reserved catches up with P.
local reserved = bReserved
local pending = reserved - P
if pending < 0 then
  pending = 0
  reserved = P
  redis.call('HSET', KEYS[1], 'reserved', reserved)
end
local booked = L + pending
if raced and booked > bBooked then
  booked = bBooked
end
local variants = parse_variants(ARGV[12]) -- fragments/salestatic.lua
if #variants > 0 then
  booked = 0
  for _, v in ipairs(variants) do
    local id = v[1]
    local lv = (tonumber(v[3][3]) or 0) + (heldv[id] or 0)
    local pv = (tonumber(v[3][4]) or 0) + (heldv[id] or 0)
    local vf = redis.call('HMGET', KEYS[1], 'variant:' .. id .. ':total', 'variant:' .. id .. ':reserved',
      'variant:' .. id .. ':booked')
    local vtotal = tonumber(vf[1] or '') or v[2]
    local vreserved = tonumber(vf[2] or '0') or 0
    local vpending = vreserved - pv
    if vpending < 0 then
      vpending = 0
      vreserved = pv
    end
    local vbooked = lv + vpending
    local vcur = tonumber(vf[3] or '')
    if raced and vcur and vbooked > vcur then
      vbooked = vcur
    end
    if vbooked < 0 then
      vbooked = 0
    end
    if vbooked > vtotal then
      vbooked = vtotal
    end
    redis.call('HSET', KEYS[1], 'variant:' .. id .. ':booked', vbooked, 'variant:' .. id .. ':reserved', vreserved)
    booked = booked + vbooked
  end
end
if booked < 0 then
  booked = 0
end
if booked > total then
  booked = total
end
redis.call('HSET', KEYS[1], 'booked', booked)

local count = bCount
local remaining = total - booked
if remaining > 0 then
  local want = access + math.ceil(remaining * ratio)
  if want > count then
    count = want
    redis.call('HSET', KEYS[1], 'count', count)
  end
end

if rebuilt == 1 then
  return {1, 0, 0, 0, 0, booked, reserved, count, access, total}
end
return {0, bBooked, bReserved, bCount, access, booked, reserved, count, access, total}
