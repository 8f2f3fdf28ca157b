-- DrawTrim deletes from a draw sale's journal the stream entries a flush
-- (controlplane/drawjournal) has written to the database, unless the sale
-- hash's draw_restore (lua.DrawRestoreMark) is not the one the flush read
-- with the entries: then a rebuild's restore began after that read (Redis
-- lost the sale, the entries with it), and it may have read the rows
-- before the flush's write; nothing is deleted (the ids are of a stream
-- Redis lost: a new stream's entry of the same id is another change, not
-- yet written), and the flush puts its rows into Redis (lua.DrawReapply).
--
-- KEYS[1] sale hash       fg:{<sale>}:sale
-- KEYS[2] journal stream  fg:{<sale>}:djournal
-- ARGV[1] the sale hash's draw_restore as the flush read it, in one step
--         with the journal ("" when it had none)
-- ARGV[2 ..] the ids of the stream entries written
--
-- Returns the number of stream entries deleted, or -1 (the restore's id
-- is another; nothing deleted).
local mark = redis.call('HGET', KEYS[1], 'draw_restore') or ''
if mark ~= ARGV[1] then
  return -1
end
local n = 0
local i = 2
while i <= #ARGV do
  local j = math.min(i + 999, #ARGV)
  n = n + redis.call('XDEL', KEYS[2], unpack(ARGV, i, j))
  i = j + 1
end
return n
