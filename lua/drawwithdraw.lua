-- DrawWithdraw withdraws a buyer's pending or entered entry in a draw sale
-- until the close; the entry's card hold is then the provider side's to
-- release. Withdrawing again answers the withdrawn entry, changing nothing.
-- A withdrawal of an entry with a hold puts the entry on the read path's
-- list (KEYS[5]) in the same step, due at ARGV[3] (or sooner, if it is
-- there already): the hold is released by the caller's release, which
-- takes it off the list, or else by the read path, even when the caller
-- stops between the two; and an entry off the list holds nothing to
-- release any more (controlplane/drawhold).
--
-- KEYS[1] sale hash       fg:{<sale>}:sale
-- KEYS[2] entries hash    fg:{<sale>}:draw
-- KEYS[3] journal stream  fg:{<sale>}:djournal
-- KEYS[4] holds hash      fg:{<sale>}:dholds
--         (lua.DrawHoldKey)
-- KEYS[5] checks zset     fg:{<sale>}:dcheck
--         (lua.DrawCheckKey)
-- ARGV[1] user id
-- ARGV[2] now, unix milliseconds
-- ARGV[3] when the read path looks at the hold of an entry withdrawn now,
--         unix milliseconds (after the caller's own release has had its
--         time)
--
-- Returns {code, entry, changed}:
--   {0, entry, 1|0}  withdrawn now (1) or before (0); entry as in
--                    lua.DrawKey, in state "withdrawn"
--   {1, "", 0}       no such sale
--   {3, entry, 0}    the window has closed (draw_close reached, the close
--                    began: draw_shut "1", or the sale closed): the entry
--                    stands as it is
--   {4, "", 0}       the sale is not sold by a draw
--   {11, "", 0}      the buyer has no entry
-- A withdrawal moves one from draw_<old state> to draw_withdrawn in the
-- sale hash, and joins the journal stream.
local f = redis.call('HMGET', KEYS[1], 'total', 'queue', 'draw_close', 'closed', 'draw_shut')
if not f[1] then
  return {1, '', 0}
end
if f[2] ~= 'draw' then
  return {4, '', 0}
end
local user = ARGV[1]
local old = redis.call('HGET', KEYS[2], user)
if not old then
  return {11, '', 0}
end
local st, rest = string.match(old, '^(%S+) (.*)$')
if st == 'withdrawn' then
  return {0, old, 0}
end
local close = tonumber(f[3] or '')
if f[4] == '1' or f[5] == '1' or not close or (tonumber(ARGV[2]) or 0) >= close or (st ~= 'pending' and st ~= 'entered') then
  return {3, old, 0}
end
local e = 'withdrawn ' .. rest
redis.call('HSET', KEYS[2], user, e)
redis.call('HINCRBY', KEYS[1], 'draw_' .. st, -1)
redis.call('HINCRBY', KEYS[1], 'draw_withdrawn', 1)
redis.call('XADD', KEYS[3], '*', 'e', e .. ' ' .. user)
local id = string.match(rest, '^(%S+)')
if redis.call('HEXISTS', KEYS[4], id) == 1 then
  redis.call('ZADD', KEYS[5], 'LT', ARGV[3], id)
end
return {0, e, 1}
