-- DrawRestoreMark records in a draw sale's hash that the rebuild's restore
-- of its entries (lua/drawrestore.lua) begins, under a fresh id (field
-- draw_restore), before the restore reads the database's rows: a journal's
-- flush (controlplane/drawjournal) reads the field with the journal, and
-- one whose write reached the database after the restore read the rows
-- (its read came before Redis lost the sale, its write after the rebuild
-- began) finds another id at its trim (lua.DrawTrim) and puts the rows it
-- wrote into Redis itself (lua.DrawReapply). Without it the restore put
-- the entry back as the database held it before that write: a withdrawn
-- entry showed entered, its hold never released.
--
-- KEYS[1] sale hash  fg:{<sale>}:sale
-- ARGV[1] the caller's fencing token: refused below the hash's fence
--         field, which it raises (creating the hash as Restore does)
-- ARGV[2] the restore's id
--
-- Returns 1 recorded, -1 refused (a newer writer's token is in the hash;
-- nothing changed).
local token = tonumber(ARGV[1]) or 0
local fence = tonumber(redis.call('HGET', KEYS[1], 'fence') or '0') or 0
if token < fence then
  return -1
end
if token > fence then
  redis.call('HSET', KEYS[1], 'fence', ARGV[1])
end
redis.call('HSET', KEYS[1], 'draw_restore', ARGV[2])
return 1
