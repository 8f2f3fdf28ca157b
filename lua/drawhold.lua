-- DrawHold records the card hold of a buyer's entry in a draw sale: the
-- intent the provider made for it (payments' Hold, idempotency key per
-- entry), kept with the entry so that a webhook, the read path and a
-- withdrawal find it, and journaled so that the database's draw_entries
-- row names it (flashgate.DrawEntry.PaymentIntent). An entry holds once:
-- recording again answers the intent recorded first. The entry is put on
-- the read path's list (KEYS[5]), to be looked at from ARGV[4] on, until
-- its hold is authorised or released.
--
-- KEYS[1] sale hash       fg:{<sale>}:sale
-- KEYS[2] entries hash    fg:{<sale>}:draw
-- KEYS[3] journal stream  fg:{<sale>}:djournal
-- KEYS[4] holds hash      fg:{<sale>}:dholds
--         (lua.DrawHoldKey: entry id → "<intent id> <user id>")
-- KEYS[5] checks zset     fg:{<sale>}:dcheck
--         (lua.DrawCheckKey: entry id scored by when to look at its hold
--         next, unix milliseconds)
-- ARGV[1] user id
-- ARGV[2] entry id
-- ARGV[3] intent id
-- ARGV[4] when the read path first looks at the hold, unix milliseconds
--
-- Returns {code, entry, intent}:
--   {0, entry, intent}  recorded now or before (intent: the one recorded);
--                       entry as in lua.DrawKey, in whatever state it is
--   {1, "", ""}         no such sale
--   {4, "", ""}         the sale is not sold by a draw
--   {11, "", ""}        the buyer has no entry of that id (the hold is
--                       the caller's to cancel)
-- A new record adds a journal entry with the entry's current state and
-- the field "pi" = intent id.
local f = redis.call('HMGET', KEYS[1], 'total', 'queue')
if not f[1] then
  return {1, '', ''}
end
if f[2] ~= 'draw' then
  return {4, '', ''}
end
local user, id = ARGV[1], ARGV[2]
local old = redis.call('HGET', KEYS[2], user)
if not old or string.match(old, '^%S+ (%S+)') ~= id then
  return {11, '', ''}
end
local rec = redis.call('HGET', KEYS[4], id)
if rec then
  return {0, old, string.match(rec, '^(%S+)')}
end
redis.call('HSET', KEYS[4], id, ARGV[3] .. ' ' .. user)
redis.call('ZADD', KEYS[5], 'NX', ARGV[4], id)
redis.call('XADD', KEYS[3], '*', 'e', old .. ' ' .. user, 'pi', ARGV[3])
return {0, old, ARGV[3]}
