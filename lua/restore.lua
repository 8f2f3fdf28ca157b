-- Restore puts a page of database rows back into a sale's released set and
-- buyers hash, for a re-sync that rebuilds a sale Redis lost (or holds from
-- an older snapshot). It never touches the sale hash: stock is the final
-- Resync call's job, once every page is in.
--
-- KEYS[1] buyers hash   fg:{<sale>}:buyers
-- KEYS[2] released set  fg:{<sale>}:released
-- KEYS[3] sale hash (only its fence field)  fg:{<sale>}:sale
-- KEYS[4] retaken set   fg:{<sale>}:retaken
-- KEYS[5] refusals hash (order id -> code) fg:{<sale>}:retakerefused
-- ARGV[1] the caller's fencing token: refused below the sale hash's fence
--         field, which it raises (lua/restorebegin.lua raised it first,
--         creating the field when Redis lost the hash: a stale restore
--         then stops at its next page)
-- ARGV[2] the restore's id (lua/restorebegin.lua): refused when the sale
--         hash's restoring field holds another or none (Redis lost the
--         sale since the restore began, the pages before this one with it).
--         Optionally followed by "|<rebuild>|<n>": this page is the n-th
--         (from 1) the rebuild <rebuild> (a fresh id of its own) writes in
--         this hash, refused unless the hash's field restorepage:<rebuild>
--         holds n - 1 (none for 0), which it then holds n: a failover to a
--         replica that had the restore's id but not the rebuild's last
--         pages (a lagging replica promoted) lost them, and the id alone
--         let the rest of the rebuild reopen the sale without them (a
--         reviewer's window: a buyer's entry lost, who then bought twice)
-- ARGV[3] r: how many released pairs follow
-- ARGV[4 .. 3+2r] pairs user id, order id of released rows (cancelled,
--         expired, refunded): the order joins the released set, so that a
--         late Release of it changes nothing, the buyer entry goes if it
--         names that order, and the order leaves the retaken set: the
--         database has not honoured a retake of it (a late payment's honour
--         makes the order paid), and the stock rebuilt after the restore
--         counts none of its units, so a retake asked about it again
--         decides anew (lua/retake.lua); but an order a rebuild held
--         (lua/retakehold.lua: its refusal recorded as held, 6) stays in
--         the retaken set: that rebuild counts its units, and the refund
--         of its late payment gives them back through it (lua/unretake.lua;
--         explorer seeds 2953 and 20261464: a concurrent rebuild's page
--         after the hold dropped it, the unretake was a no-op and the unit
--         stayed hidden)
-- ARGV[4+2r ..] pairs user id, order id of live rows (pending_payment,
--         paid): the buyer entry is set if the user has none and the order
--         was not released
--
-- Returns the number of pairs read, -1 refused (a newer writer's token is
-- in the sale hash; nothing changed), or -2 refused (the hash's restoring
-- is not ARGV[2]'s id, or its page count of the rebuild is not the one
-- before this page; nothing changed).
local token = tonumber(ARGV[1]) or 0
local fence = tonumber(redis.call('HGET', KEYS[3], 'fence') or '0') or 0
if token < fence then
  return -1
end
local id, rebuild, n = string.match(ARGV[2], '^(.*)|([^|]*)|(%d+)$')
if not id then
  id = ARGV[2]
end
if redis.call('HGET', KEYS[3], 'restoring') ~= id then
  return -2
end
if rebuild then
  local field = 'restorepage:' .. rebuild
  if (tonumber(redis.call('HGET', KEYS[3], field) or '0') or 0) ~= tonumber(n) - 1 then
    return -2
  end
  redis.call('HSET', KEYS[3], field, n)
end
if token > fence then
  redis.call('HSET', KEYS[3], 'fence', ARGV[1])
end
local r = tonumber(ARGV[3]) or 0
local i = 4
for _ = 1, r do
  local user, order = ARGV[i], ARGV[i + 1]
  redis.call('SADD', KEYS[2], order)
  if redis.call('HGET', KEYS[5], order) ~= '6' then
    redis.call('SREM', KEYS[4], order)
  end
  if redis.call('HGET', KEYS[1], user) == order then
    redis.call('HDEL', KEYS[1], user)
  end
  i = i + 2
end
while i + 1 <= #ARGV do
  local user, order = ARGV[i], ARGV[i + 1]
  if redis.call('SISMEMBER', KEYS[2], order) == 0 then
    redis.call('HSETNX', KEYS[1], user, order)
  end
  i = i + 2
end
return (#ARGV - 3) / 2
