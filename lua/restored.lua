-- Restored records in a sale's (or bucket's) hash that a re-sync's restore
-- wrote every page of the released set and the buyers (lua/restore.lua),
-- under the restore's id (field restored). The rebuild's final Resync
-- (lua/resync.lua, ARGV[9] "1:<id>") rebuilds a missing hash only while
-- a restore's id is there: a Redis loss between the restore and that
-- Resync took the pages with it (and the id), and a hash rebuilt over an
-- empty released set let a release still queued in the database give its
-- unit back a second time (a reviewer's window: booked below the live
-- units). The first final Resync to write the hash deletes the id.
--
-- KEYS[1] sale hash  fg:{<sale>}:sale
-- ARGV[1] the caller's fencing token: refused below the hash's fence
--         field, which it raises
-- ARGV[2] the restore's id
-- ARGV[3] the id its pages carried (lua/restorebegin.lua): refused when
--         the hash's restoring field holds another or none (Redis lost the
--         sale after the pages, or during them, and this id written into
--         the empty hash let the final Resync rebuild it over nothing).
--         Optionally followed by "|<rebuild>|<n>": the rebuild wrote n
--         pages in this hash (lua/restore.lua's ARGV[2]), refused unless
--         its field restorepage:<rebuild> holds n (none for 0), which goes:
--         a failover to a lagging replica lost some of them
--
-- Returns 1 recorded, -1 refused (a newer writer's token is in the hash;
-- nothing changed), or -2 refused (restoring is not ARGV[3]'s id, or the
-- rebuild's page count is not ARGV[3]'s; nothing changed).
local token = tonumber(ARGV[1]) or 0
local fence = tonumber(redis.call('HGET', KEYS[1], 'fence') or '0') or 0
if token < fence then
  return -1
end
local id, rebuild, n = string.match(ARGV[3], '^(.*)|([^|]*)|(%d+)$')
if not id then
  id = ARGV[3]
end
if redis.call('HGET', KEYS[1], 'restoring') ~= id then
  return -2
end
if rebuild then
  local field = 'restorepage:' .. rebuild
  if (tonumber(redis.call('HGET', KEYS[1], field) or '0') or 0) ~= tonumber(n) then
    return -2
  end
  redis.call('HDEL', KEYS[1], field)
end
if token > fence then
  redis.call('HSET', KEYS[1], 'fence', ARGV[1])
end
redis.call('HSET', KEYS[1], 'restored', ARGV[2])
return 1
