-- QueueEnter puts one user in a sale's fair queue, once: the one Redis
-- write of an entrant. Before the start (queue_started unset) the entry is "p"
-- and queue_prequeued counts it; after it, the entry is "l<n>" with n the next
-- arrival number (queue_late), and the user joins the late list. Entering
-- again returns the entry there is, changing nothing. A proof-of-work
-- solution is marked used (KEYS[4], until its salt expires) with the
-- entry it bought. A new entry joins the journal stream (KEYS[5]) in the
-- same step.
--
-- KEYS[1] sale hash        fg:{<sale>}:sale
-- KEYS[2] queue hash       fg:{<sale>}:queue
-- KEYS[3] late list        fg:{<sale>}:qlate
-- KEYS[4] solution marker  fg:{<sale>}:pow:<challenge>
-- KEYS[5] journal stream   fg:{<sale>}:qjournal
--         (lua.QueueJournalKey): each new entry is added as one field
--         "e" = "<entry> <user id>", which the leader writes to the
--         database in batches and then deletes
-- ARGV[1] user id
-- ARGV[2] the life of the solution's mark in milliseconds
--         (fairqueue.MarkLife: its challenge's remaining life rounded up,
--         plus a margin, so the mark outlives the challenge); "0": no
--         solution to mark (KEYS[4] is not touched)
--
-- Returns {code, entry, new, commitment}:
--   {0, entry, 1|0, seed_sha}  entered now (1) or before (0); entry as in
--                    lua.QueueKey; seed_sha (queue_seed_sha256) the commitment of the queue
--                    the entry is in ("" if none yet)
--   {1, "", 0}       no such sale
--   {2, "", 0}       the queue is not open yet
--   {3, "", 0}       the sale is closed
--   {4, "", 0}       the sale has no fair queue
--   {5, "", 0}       the solution was used already
local f = redis.call('HMGET', KEYS[1], 'total', 'queue', 'queue_open', 'queue_started', 'closed', 'queue_seed_sha256')
if not f[1] then
  return {1, '', 0}
end
if f[2] ~= 'fair' then
  return {4, '', 0}
end
local v = redis.call('HGET', KEYS[2], ARGV[1])
if v then
  return {0, v, 0, f[6] or ''}
end
if f[5] == '1' then
  return {3, '', 0}
end
if f[3] ~= '1' then
  return {2, '', 0}
end
local ttl = tonumber(ARGV[2]) or 0
if ttl > 0 and not redis.call('SET', KEYS[4], '1', 'NX', 'PX', ttl) then
  return {5, '', 0}
end
if f[4] == '1' then
  v = 'l' .. redis.call('HINCRBY', KEYS[1], 'queue_late', 1)
  redis.call('RPUSH', KEYS[3], ARGV[1])
else
  v = 'p'
  redis.call('HINCRBY', KEYS[1], 'queue_prequeued', 1)
end
redis.call('HSET', KEYS[2], ARGV[1], v)
if KEYS[5] then
  redis.call('XADD', KEYS[5], '*', 'e', v .. ' ' .. ARGV[1])
end
return {0, v, 1, f[6] or ''}
