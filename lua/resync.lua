-- Resync gives a sale's stock back to Redis from one database snapshot, and
-- rebuilds the sale's keys when Redis lost them.
--
-- KEYS[1] sale hash     fg:{<sale>}:sale
-- KEYS[2] buyers hash   fg:{<sale>}:buyers
-- KEYS[3] released set  fg:{<sale>}:released
-- KEYS[4] sales set     fg:sales
-- ARGV[1] sale id
-- ARGV[2] L: units held by live rows (pending_payment, paid) in the snapshot
-- ARGV[3] P: units of all rows, any status, in the same snapshot
-- ARGV[4] total units (from the sale row)
-- ARGV[5] per_user
-- ARGV[6] price in cents
-- ARGV[7] state from the sale row: "upcoming", "open" or "closed" (used only
--         when the hash is rebuilt)
-- ARGV[8] admit ratio (> 0)
-- ARGV[9] r: how many released orders follow
-- ARGV[10] "1" when the live rows follow the released ones, else "0"
-- ARGV[11 .. 10+2r] pairs user id, order id of released rows (cancelled,
--         expired, refunded): the buyer entry goes if it still names that
--         order, and the order id joins the released set so that a late
--         Release of it changes nothing
-- ARGV[11+2r ..]    pairs user id, order id of live rows: the buyer entry is
--         added if the user has none and the order was not released. They
--         are needed only to rebuild a lost sale, or the buyers of a Redis
--         older than the database (reserved < P: restored from an earlier
--         snapshot, it lacks the buyers of rows persisted since), so callers
--         send them only when the script asks (return {-1}): a re-sync of a
--         healthy sale costs O(released), not O(orders).
--
-- booked := L + max(0, reserved - P), clamped to [0, total]. Then, if
-- remaining = total - booked > 0, count := max(count, access +
-- ceil(remaining * ratio)); with nothing remaining count is never raised.
--
-- Returns {-1} and changes nothing when the live rows were not sent and the
-- sale hash is missing or its reserved is below P; else {rebuilt, before booked, before reserved, before count, before
-- access, after booked, after reserved, after count, after access, total}:
-- rebuilt is 1 when the sale hash was missing (its "before" figures are 0).
local L = tonumber(ARGV[2])
local P = tonumber(ARGV[3])
local total = tonumber(ARGV[4])
local ratio = tonumber(ARGV[8])
if not ratio or ratio <= 0 then
  ratio = 1.5
end

local rebuilt = 0
if redis.call('EXISTS', KEYS[1]) == 0 then
  if ARGV[10] ~= '1' then
    return {-1}
  end
  rebuilt = 1
  -- A rebuilt open sale stays paused until the next pass: an order sink may
  -- hold a batch it read before Redis lost the sale and commit it after this
  -- snapshot; the next pass counts it in L before anyone can buy again.
  local closed, resume = 0, 0
  if ARGV[7] == 'open' then
    resume = 1
  elseif ARGV[7] == 'closed' then
    closed = 1
  end
  redis.call('HSET', KEYS[1], 'total', total, 'booked', 0, 'reserved', P,
    'start', 0, 'closed', closed, 'count', 0, 'access', 0,
    'per_user', ARGV[5], 'price', ARGV[6], 'resume', resume)
elseif redis.call('HGET', KEYS[1], 'resume') == '1' then
  -- The pass after a rebuild: booked is recomputed below from this newer
  -- snapshot, then the sale opens again.
  redis.call('HSET', KEYS[1], 'start', 1)
  redis.call('HDEL', KEYS[1], 'resume')
end
if rebuilt == 0 and ARGV[10] ~= '1' and (tonumber(redis.call('HGET', KEYS[1], 'reserved') or '0') or 0) < P then
  return {-1}
end
redis.call('SADD', KEYS[4], ARGV[1])

local f = redis.call('HMGET', KEYS[1], 'booked', 'reserved', 'count', 'access', 'total')
local bBooked = tonumber(f[1] or '0') or 0
local bReserved = tonumber(f[2] or '0') or 0
local bCount = tonumber(f[3] or '0') or 0
local access = tonumber(f[4] or '0') or 0
if f[5] then
  total = tonumber(f[5]) or total
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
if booked < 0 then
  booked = 0
end
if booked > total then
  booked = total
end
redis.call('HSET', KEYS[1], 'booked', booked)

local r = tonumber(ARGV[9]) or 0
local i = 11
for _ = 1, r do
  local user, order = ARGV[i], ARGV[i + 1]
  redis.call('SADD', KEYS[3], order)
  if redis.call('HGET', KEYS[2], user) == order then
    redis.call('HDEL', KEYS[2], user)
  end
  i = i + 2
end
while i + 1 <= #ARGV do
  local user, order = ARGV[i], ARGV[i + 1]
  if redis.call('SISMEMBER', KEYS[3], order) == 0 then
    redis.call('HSETNX', KEYS[2], user, order)
  end
  i = i + 2
end

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
