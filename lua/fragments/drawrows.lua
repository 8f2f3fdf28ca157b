-- drawrows.lua is put in front of the scripts that put a draw sale's
-- database rows into its Redis entries (drawrestore.lua, drawreapply.lua:
-- see lua/drawhold.go), so that one definition says how a row moves an
-- entry. It only defines a function; the header of each script that uses
-- it is its own.

-- put_draw_rows puts the rows of ARGV from index i on, six values a row
-- (user id, state, entry id, quantity, variant, payment intent; a seventh
-- when guarded, below), into the entries hash KEYS[2], and returns how
-- many it read. A row becomes its user's entry ("<state> <entry id>
-- <quantity> <variant>") when the user has none; when the user's entry is
-- another entry, withdrawn, and the row is not withdrawn (a buyer's live
-- or drawn entry is the one that stands; of two live ones, the one in
-- Redis, newer than the database's, stays: the journal's flush supersedes
-- the other); or when the user's entry is the row's own in a state the
-- row has gone past. With guarded, a row's seventh value lists (space
-- separated) the only withdrawn entries of another id it may replace:
-- entries the database holds rows of (the user's entry in Redis as the
-- caller found it, with a row, before it read the rows; the user's rows it
-- sends). A withdrawn entry with no row is newer than every row of its
-- buyer (made on the rebuilt sale, its journal not flushed yet: the buyer
-- withdrew the row's entry before making it), and a row of an older entry,
-- read before the buyer's changes reached the database, must not replace
-- it (lua.DrawReapply of a flush that wrote that older entry while the
-- buyer withdrew it, entered again and withdrew again). An entry never goes back
-- to a state of a lower rank (flashgate.DrawEntryState.Rank): a withdrawn
-- entry stays withdrawn over a stale row of it still entered. The sale
-- hash KEYS[1]'s draw_<state> counts follow each change. A row with an
-- intent gets its hold record in KEYS[3] ("<intent> <user>") unless one is
-- there; a pending or withdrawn one is also put on the read path's list
-- KEYS[4] at `at` unless it is there.
local function put_draw_rows(i, at, guarded)
  -- rank is how far an entry in a state has gone: every move of an entry
  -- goes to a higher rank.
  local rank = {pending = 0, entered = 1, withdrawn = 2, won = 2, lost = 2, captured = 3, released = 3}
  local rows = 0
  local width = 6
  if guarded then
    width = 7
  end
  while i + width - 1 <= #ARGV do
    local user, st, id, q, variant, intent = ARGV[i], ARGV[i + 1], ARGV[i + 2], ARGV[i + 3], ARGV[i + 4], ARGV[i + 5]
    local cur = redis.call('HGET', KEYS[2], user)
    local curSt, curID
    if cur then
      curSt, curID = string.match(cur, '^(%S+) (%S+)')
    end
    if not cur or (curSt == 'withdrawn' and st ~= 'withdrawn' and curID ~= id
          and (not guarded or string.find(' ' .. ARGV[i + 6] .. ' ', ' ' .. curID .. ' ', 1, true)))
        or (curID == id and (rank[st] or -1) > (rank[curSt] or -1)) then
      redis.call('HSET', KEYS[2], user, st .. ' ' .. id .. ' ' .. q .. ' ' .. variant)
      redis.call('HINCRBY', KEYS[1], 'draw_' .. st, 1)
      if curSt then
        redis.call('HINCRBY', KEYS[1], 'draw_' .. curSt, -1)
      end
    end
    if intent ~= '' then
      redis.call('HSETNX', KEYS[3], id, intent .. ' ' .. user)
      if st == 'pending' or st == 'withdrawn' then
        redis.call('ZADD', KEYS[4], 'NX', at, id)
      end
    end
    rows = rows + 1
    i = i + width
  end
  return rows
end
