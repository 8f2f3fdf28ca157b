-- DrawRestore puts a page of a draw sale's database rows (draw_entries)
-- back into its entries and holds, for a re-sync that rebuilds a sale
-- Redis lost (or holds from an older snapshot), so that a buyer whose
-- entry the database holds live (pending or entered) is answered that
-- entry by lua.DrawEnter, as before the loss, and is not entered twice.
-- It runs before the rebuild's final Resync writes the sale hash's stock
-- (while the hash has no total field, the entry scripts answer "no sale"
-- and change nothing). Every page may be restored again (a restore cut
-- short is run again from its first page): an entry in place is left.
--
-- KEYS[1] sale hash       fg:{<sale>}:sale
--         (its fence field, the counts draw_<state>, draw_entries and
--         variant:<id>:draw_entries)
-- KEYS[2] entries hash    fg:{<sale>}:draw
--         (lua.DrawKey)
-- KEYS[3] holds hash      fg:{<sale>}:dholds
--         (lua.DrawHoldKey)
-- KEYS[4] checks zset     fg:{<sale>}:dcheck
--         (lua.DrawCheckKey)
-- ARGV[1] the caller's fencing token: refused below the sale hash's fence
--         field, which it raises (creating the field when Redis lost the
--         hash, as lua/restore.lua does)
-- ARGV[2] the restore's id, which lua.DrawRestoreMark wrote into the sale
--         hash's draw_restore before the rows were read: refused when the
--         hash holds another or none (Redis lost the sale since, the mark
--         with it, and a journal's flush whose write came after the rows
--         were read could no longer tell; or another restore began)
-- ARGV[3] when the read path looks at a restored hold, unix milliseconds
-- ARGV[4] c: how many count pairs follow (0 on every page but the last)
-- ARGV[5 .. 4+2c] pairs field, count: the entries the database holds
--         (draw_entries, and variant:<id>:draw_entries per variant), and
--         draw_shut 1 once the draw's close recorded its read of the rows
--         (the close's shut, lost with the sale: lua.FieldDrawShut); a
--         field below its count is raised to it (never lowered: an entry
--         made meanwhile counts)
-- ARGV[5+2c ..] six values per row: user id, state, entry id, quantity,
--         variant ("" on a sale of one stock), payment intent ("" without
--         a hold)
--
-- The rows go in by put_draw_rows (lua/fragments/drawrows.lua): a row
-- becomes its user's entry (lua.DrawKey's "<state> <entry id> <quantity>
-- <variant>") when the user has none, or when the user's entry is another
-- one, withdrawn, and the row is not (a buyer's live or drawn entry is
-- the one that stands; of two live ones, the one in Redis, newer than the
-- database's, stays: the journal's flush supersedes the other), or when
-- the user's entry is the row's own in a state the row has gone past (a
-- Redis from an older snapshot, as a lagging replica promoted); an entry
-- never goes back (a row read before a journal's flush withdrew the entry
-- and sent after lua.DrawReapply put the withdrawal in leaves it
-- withdrawn). The sale hash's draw_<state> counts follow each change of
-- the entries hash. A row with an intent gets its hold record
-- (lua.DrawHoldKey, "<intent> <user>") unless one is there; a pending or
-- withdrawn one is also put on the read path's list (lua.DrawCheckKey) at
-- ARGV[3] unless it is there, so that the read path enters an authorised
-- pending entry or releases a hold nobody wants (a provider's cancel of a
-- released hold changes nothing).
--
-- Returns the number of rows read, -1 refused (a newer writer's token is
-- in the sale hash; nothing changed), or -2 refused (the sale hash's
-- draw_restore is not ARGV[2]; nothing changed).
local token = tonumber(ARGV[1]) or 0
local fence = tonumber(redis.call('HGET', KEYS[1], 'fence') or '0') or 0
if token < fence then
  return -1
end
if redis.call('HGET', KEYS[1], 'draw_restore') ~= ARGV[2] then
  return -2
end
if token > fence then
  redis.call('HSET', KEYS[1], 'fence', ARGV[1])
end
local at = ARGV[3]
local c = tonumber(ARGV[4]) or 0
local i = 5
for _ = 1, c do
  local field, n = ARGV[i], tonumber(ARGV[i + 1]) or 0
  if (tonumber(redis.call('HGET', KEYS[1], field) or '0') or 0) < n then
    redis.call('HSET', KEYS[1], field, n)
  end
  i = i + 2
end
return put_draw_rows(i, at)
