-- DrawEnter puts one buyer's entry in a draw sale (the sale's queue field
-- is "draw"), once: one entry per buyer across the sale's variants, within
-- the entry window, for a variant the sale sells and a quantity in
-- 1..per_user. The entry starts pending: it counts in the draw only once
-- its card hold is authorised (lua.DrawSet to "entered"). Entering again
-- while an entry is pending or entered answers that entry, changing
-- nothing (whatever variant the call names); a withdrawn entry may be
-- replaced by a new one until the close. A proof-of-work solution is marked
-- used (KEYS[3], as lua.QueueEnter marks it). A new entry joins the
-- journal stream (KEYS[4]) in the same step.
--
-- KEYS[1] sale hash        fg:{<sale>}:sale
-- KEYS[2] entries hash     fg:{<sale>}:draw
--         (lua.DrawKey: user id → entry, "<state> <entry id> <quantity>
--         <variant>", variant "" for a sale of one stock)
-- KEYS[3] solution marker  fg:{<sale>}:pow:<challenge>
--         (any key of the sale when ARGV[6] is "0")
-- KEYS[4] journal stream   fg:{<sale>}:djournal
--         (lua.DrawJournalKey): one field "e" = "<state> <entry id>
--         <quantity> <variant> <user id>" per change of an entry
-- ARGV[1] user id
-- ARGV[2] entry id (minted by the caller; flashgate.ValidID)
-- ARGV[3] variant id ("" on a sale of one stock)
-- ARGV[4] quantity
-- ARGV[5] now, unix milliseconds
-- ARGV[6] the life of the solution's mark in milliseconds; "0": no
--         solution to mark
--
-- The window is the hash's draw_open and draw_close (unix milliseconds,
-- written with the sale's static fields): open from draw_open, until (not
-- at) draw_close; a sale whose closed field is "1", or whose draw_shut is
-- "1" (the close began, lua.FieldDrawShut), takes none either.
--
-- Returns {code, entry, new}:
--   {0, entry, 1|0}  entered now (1), or an entry pending or entered before (0)
--   {1, "", 0}       no such sale
--   {2, "", 0}       the window is not open yet
--   {3, "", 0}       the window has closed (or the sale is closed)
--   {4, "", 0}       the sale is not sold by a draw
--   {5, "", 0}       the solution was used already
--   {6, "", 0}       quantity not a whole number in 1..per_user
--   {10, "", 0}      the variant is not one the sale sells
-- On a new entry the hash's draw_pending (entries per state: draw_<state>)
-- and draw_entries (entries ever made) grow by one, and on a sale of
-- variants variant:<id>:draw_entries.
local f = redis.call('HMGET', KEYS[1], 'total', 'queue', 'draw_open', 'draw_close', 'closed', 'per_user', 'variants', 'draw_shut')
if not f[1] then
  return {1, '', 0}
end
if f[2] ~= 'draw' then
  return {4, '', 0}
end
local user = ARGV[1]
local old = redis.call('HGET', KEYS[2], user)
if old then
  local st = string.match(old, '^(%S+)')
  if st == 'pending' or st == 'entered' then
    return {0, old, 0}
  end
end
local now = tonumber(ARGV[5]) or 0
local open, close = tonumber(f[3] or ''), tonumber(f[4] or '')
if f[5] == '1' or f[8] == '1' or (close and now >= close) then
  return {3, '', 0}
end
if not open or not close or now < open then
  return {2, '', 0}
end
if old then
  -- A final entry (won, lost, captured, released) is one of a drawn sale.
  local st = string.match(old, '^(%S+)')
  if st ~= 'withdrawn' then
    return {3, '', 0}
  end
end
local variant = ARGV[3]
if f[7] then
  if variant == '' or not redis.call('HGET', KEYS[1], 'variant:' .. variant .. ':total') then
    return {10, '', 0}
  end
elseif variant ~= '' then
  return {10, '', 0}
end
local q = tonumber(ARGV[4])
local per = tonumber(f[6] or '1') or 1
if not q or q < 1 or q > per or q ~= math.floor(q) then
  return {6, '', 0}
end
local ttl = tonumber(ARGV[6]) or 0
if ttl > 0 and not redis.call('SET', KEYS[3], '1', 'NX', 'PX', ttl) then
  return {5, '', 0}
end
if old then
  redis.call('HINCRBY', KEYS[1], 'draw_withdrawn', -1)
end
local e = 'pending ' .. ARGV[2] .. ' ' .. string.format('%d', q) .. ' ' .. variant
redis.call('HSET', KEYS[2], user, e)
redis.call('HINCRBY', KEYS[1], 'draw_pending', 1)
redis.call('HINCRBY', KEYS[1], 'draw_entries', 1)
if variant ~= '' then
  redis.call('HINCRBY', KEYS[1], 'variant:' .. variant .. ':draw_entries', 1)
end
redis.call('XADD', KEYS[4], '*', 'e', e .. ' ' .. user)
return {0, e, 1}
