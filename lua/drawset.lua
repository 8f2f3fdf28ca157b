-- DrawSet moves a buyer's entry in a draw sale from one of the states the
-- caller allows to another: the provider side's steps (a hold authorised:
-- pending → entered; the close: entered → won or lost; a capture: won →
-- captured; a release: lost, withdrawn or won → released). It names the
-- entry by id as well as by user, so that a late step of an entry the
-- buyer has since replaced changes nothing. Moving an entry to the state it
-- is in answers it, changing nothing, so steps may be retried.
--
-- KEYS[1] sale hash       fg:{<sale>}:sale
-- KEYS[2] entries hash    fg:{<sale>}:draw
-- KEYS[3] journal stream  fg:{<sale>}:djournal
-- ARGV[1] user id
-- ARGV[2] entry id
-- ARGV[3] the new state (flashgate.DrawEntryState)
-- ARGV[4] now, unix milliseconds: a move to "entered" at or after
--         draw_close, once the close began (draw_shut "1"), or on a closed
--         sale is refused, so that no hold authorised after the close
--         counts in the draw
-- ARGV[5..] the states the entry may be moved from
--
-- Returns {code, entry, changed}:
--   {0, entry, 1|0}  moved now (1), or already in the new state (0)
--   {1, "", 0}       no such sale
--   {3, entry, 0}    a move to "entered" after the close; nothing changed
--   {4, "", 0}       the sale is not sold by a draw
--   {11, "", 0}      the buyer has no entry of that id
--   {12, entry, 0}   the entry is in a state the caller does not allow
-- A move takes one from draw_<old state> and adds one to draw_<new state>
-- in the sale hash, and joins the journal stream.
local f = redis.call('HMGET', KEYS[1], 'total', 'queue', 'draw_close', 'closed', 'draw_shut')
if not f[1] then
  return {1, '', 0}
end
if f[2] ~= 'draw' then
  return {4, '', 0}
end
local user, to = ARGV[1], ARGV[3]
local old = redis.call('HGET', KEYS[2], user)
if not old then
  return {11, '', 0}
end
local st, id, rest = string.match(old, '^(%S+) (%S+) (.*)$')
if id ~= ARGV[2] then
  return {11, '', 0}
end
if st == to then
  return {0, old, 0}
end
local allowed = false
for i = 5, #ARGV do
  if ARGV[i] == st then
    allowed = true
  end
end
if not allowed then
  return {12, old, 0}
end
if to == 'entered' then
  local close = tonumber(f[3] or '')
  if f[4] == '1' or f[5] == '1' or not close or (tonumber(ARGV[4]) or 0) >= close then
    return {3, old, 0}
  end
end
local e = to .. ' ' .. id .. ' ' .. rest
redis.call('HSET', KEYS[2], user, e)
redis.call('HINCRBY', KEYS[1], 'draw_' .. st, -1)
redis.call('HINCRBY', KEYS[1], 'draw_' .. to, 1)
redis.call('XADD', KEYS[3], '*', 'e', e .. ' ' .. user)
return {0, e, 1}
