-- QueueRestore gives a fair queue back to a sale hash from its journal
-- (the database), after Redis lost it (FLUSHALL: the re-sync rebuilt the
-- hash without the queue) or came back older (a failover to a lagging
-- replica): the same epoch and commitment, every journaled entrant with
-- the entry it was given, the frontiers and windows. It merges: what Redis
-- holds stays, the frontiers only grow. A pre-start entrant added while the
-- queue had started unmarks queue_ranked, so that the leader ranks the queue
-- again (the same seed gives everyone the same rank). queue_prequeued and
-- queue_late are counted again from what the queue holds then (its
-- entries less the late list's, and the late list's), so a hash that kept
-- its counters while its queue went (an archived sale, reopened) counts
-- each entrant once. A windows list that is gone while
-- positions are admitted and not ended takes the journal's windows, so
-- those positions' windows end.
--
-- KEYS[1] sale hash     fg:{<sale>}:sale
-- KEYS[2] queue hash    fg:{<sale>}:queue
-- KEYS[3] late list     fg:{<sale>}:qlate
-- KEYS[4] windows list  fg:{<sale>}:qwin
-- ARGV[1] the leader's fencing token (refused when below queue_fence)
-- ARGV[2] epoch
-- ARGV[3] hex SHA-256 of the seed
-- ARGV[4] queue_maxnumber
-- ARGV[5] admit_seconds
-- ARGV[6] the seed, hex, when the queue has started; "" before the start
-- ARGV[7] queue_admitted, ARGV[8] queue_expired from the journal
-- ARGV[9] the journal's windows, "<k> <ms> <theta>" a line
-- ARGV[10 ..] pairs user id, entry ("p", or "l<n>" in ascending n)
--
-- Returns {pre-start entrants added, late entrants added, late entrants
-- not restored (their arrival number was given to another since), queue_admitted},
-- or {-1} stale fencing token, {-2} no such sale, {-3} Redis holds
-- another epoch's queue (nothing changed).
local f = redis.call('HMGET', KEYS[1], 'total', 'queue_fence', 'queue_epoch', 'queue_admitted', 'queue_expired', 'queue_started',
  'queue_prequeued', 'queue_late')
if not f[1] then
  return {-2}
end
local token = tonumber(ARGV[1]) or 0
if token < (tonumber(f[2] or '0') or 0) then
  return {-1}
end
if f[3] and f[3] ~= ARGV[2] then
  return {-3}
end
redis.call('HSET', KEYS[1], 'queue_fence', token, 'queue', 'fair', 'queue_open', 1, 'queue_epoch', ARGV[2], 'queue_seed_sha256', ARGV[3],
  'queue_maxnumber', ARGV[4], 'queue_window', ARGV[5])
local started = f[6] == '1'
if ARGV[6] ~= '' and not started then
  redis.call('HSET', KEYS[1], 'queue_started', 1, 'queue_seed', ARGV[6])
  started = true
end
local pre, late, lost = 0, 0, 0
local n = redis.call('LLEN', KEYS[3])
for i = 10, #ARGV - 1, 2 do
  local user, entry = ARGV[i], ARGV[i + 1]
  if entry == 'p' then
    if redis.call('HSETNX', KEYS[2], user, 'p') == 1 then
      pre = pre + 1
    end
  else
    local a = tonumber(string.sub(entry, 2))
    if redis.call('HEXISTS', KEYS[2], user) == 0 then
      if a == n + 1 then
        redis.call('RPUSH', KEYS[3], user)
        redis.call('HSET', KEYS[2], user, entry)
        n, late = n + 1, late + 1
      else
        lost = lost + 1
      end
    end
  end
end
local npre = redis.call('HLEN', KEYS[2]) - n
if pre > 0 or npre ~= (tonumber(f[7] or '0') or 0) then
  redis.call('HSET', KEYS[1], 'queue_prequeued', npre, 'queue_ranked', 0)
end
if late > 0 or n ~= (tonumber(f[8] or '0') or 0) then
  redis.call('HSET', KEYS[1], 'queue_late', n)
end
local k, e = tonumber(f[4] or '0') or 0, tonumber(f[5] or '0') or 0
local jk, je = tonumber(ARGV[7]) or 0, tonumber(ARGV[8]) or 0
if jk > k or (jk == k and k > e and redis.call('EXISTS', KEYS[4]) == 0) then
  redis.call('DEL', KEYS[4])
  for line in string.gmatch(ARGV[9], '[^\n]+') do
    redis.call('RPUSH', KEYS[4], line)
  end
end
if jk > k then
  k = jk
  -- The rank keys at the frontiers are the leader's to write again.
  redis.call('HSET', KEYS[1], 'queue_admitted', k, 'queue_ranked', 0)
end
if je > e then
  redis.call('HSET', KEYS[1], 'queue_expired', je)
end
if not f[4] then
  redis.call('HSETNX', KEYS[1], 'queue_admitted', 0)
  redis.call('HSETNX', KEYS[1], 'queue_expired', 0)
end
return {pre, late, lost, k}
