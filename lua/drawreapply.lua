-- DrawReapply puts a draw sale's database rows, as a journal's flush read
-- them back after its write, into its entries and holds, when a rebuild's
-- restore began after the flush read the journal (lua.DrawTrim answered
-- -1): that restore may have read the rows before the write, and put the
-- entries back as the database held them then (a withdrawn entry entered,
-- its hold off the read path's list). The rows go in by the restore's own
-- rule (put_draw_rows, lua/fragments/drawrows.lua: an entry only goes
-- forward), so a page of the restore sent after this, read before the
-- write, takes no entry back, and running it again changes nothing.
--
-- It carries no fencing token: the flush may be an old leader's, whose
-- write reached the database all the same, and it only moves entries to
-- the rows' states, read after that write (the database's rows only go
-- forward too). It changes nothing while the sale hash has no
-- draw_restore (Redis lost the sale again since: the next rebuild reads
-- the rows after the write).
--
-- KEYS[1] sale hash       fg:{<sale>}:sale
-- KEYS[2] entries hash    fg:{<sale>}:draw
-- KEYS[3] holds hash      fg:{<sale>}:dholds
-- KEYS[4] checks zset     fg:{<sale>}:dcheck
-- ARGV[1] when the read path looks at a hold it lists, unix milliseconds
-- ARGV[2 ..] seven values per row: user id, state, entry id, quantity,
--         variant ("" on a sale of one stock), payment intent ("" without
--         a hold), and the ids (space separated) of the withdrawn entries
--         of another id the row may replace: those the database holds rows
--         of (the user's entry in Redis, as the caller read it before the
--         rows, when it has a row; the user's rows sent); an entry with no
--         row is newer than every row of its buyer; the withdrawn rows of
--         a user before the user's live one
--
-- Returns the number of rows read, or -1 (no draw_restore: nothing
-- changed).
if not redis.call('HGET', KEYS[1], 'draw_restore') then
  return -1
end
return put_draw_rows(2, ARGV[1], true)
