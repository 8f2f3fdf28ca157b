-- RestoreBegin opens a rebuild's restore of a sale's (or bucket's) released
-- set and buyers (lua/restore.lua) under a restore id kept in the hash
-- (field restoring), before the first page: the id the hash holds, or,
-- when it holds none (Redis lost the hash, the id with it, or no restore
-- ever began), ARGV[2], written here. Every page of the restore and its
-- lua/restored.lua carry the id returned and are refused once the hash
-- holds another or none: Redis lost the sale again during the restore,
-- the pages written before with it, and a restored id written into the
-- empty hash let the final Resync rebuild it over no released set and no
-- buyers (a reviewer's window: a release still queued gave its unit back
-- a second time, and a buyer bought twice). Two rebuilds at once share
-- the id (the second joins the first's), so neither refuses the other;
-- the id stays in the hash after the rebuild (a later loss takes it).
--
-- KEYS[1] sale hash  fg:{<sale>}:sale
-- ARGV[1] the caller's fencing token: refused below the hash's fence
--         field, which it raises (creating the hash as Restore does)
-- ARGV[2] a fresh id, written when the hash holds none
--
-- Returns {1, id}: the restore's id, or {-1} refused (a newer writer's
-- token is in the hash; nothing changed).
local token = tonumber(ARGV[1]) or 0
local fence = tonumber(redis.call('HGET', KEYS[1], 'fence') or '0') or 0
if token < fence then
  return {-1}
end
if token > fence then
  redis.call('HSET', KEYS[1], 'fence', ARGV[1])
end
redis.call('HSETNX', KEYS[1], 'restoring', ARGV[2])
return {1, redis.call('HGET', KEYS[1], 'restoring')}
