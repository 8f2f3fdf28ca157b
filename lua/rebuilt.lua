-- Rebuilt records, in one step, that the control plane has rebuilt a sale
-- (or a bucket) from the database on a new primary: it names that primary
-- in the marker and marks an open sale to reopen. Done as two writes, a
-- buyer arriving between them met the old marker, and the reserve scripts'
-- failover fence paused the sale (start = 0, resume = 2) after it was
-- marked to reopen; the marker then named the primary, so the watch saw
-- nothing to recover and no re-sync reopens resume = 2: a pause nobody
-- owned, for good.
--
-- KEYS[1] sale hash       fg:{<sale>}:sale
-- KEYS[2] primary marker  fg:{<sale>}:primary
-- ARGV[1] the caller's fencing token: refused below the hash's fence field,
--         which it raises
-- ARGV[2] the replication id of the primary the sale was rebuilt on
-- ARGV[3] "1" to mark the sale to reopen at the next re-sync (resume = 1:
--         an open sale), "0" to leave resume alone
--
-- Returns 1 done, 0 no such sale (no total: the marker is set, nothing
-- else), -1 refused (a newer writer's token is in the hash; nothing
-- changed).
local token = tonumber(ARGV[1]) or 0
local fence = tonumber(redis.call('HGET', KEYS[1], 'fence') or '0') or 0
if token < fence then
  return -1
end
redis.call('SET', KEYS[2], ARGV[2])
if redis.call('HEXISTS', KEYS[1], 'total') == 0 then
  return 0
end
if token > fence then
  redis.call('HSET', KEYS[1], 'fence', ARGV[1])
end
if ARGV[3] == '1' then
  redis.call('HSET', KEYS[1], 'resume', 1)
end
return 1
