-- QueueRank writes the ranks of pre-start entrants in the seed's order
-- (their entries become "r<rank>"), a chunk at a time, in one HSET; the
-- last chunk marks the queue ranked, and only then does the leader admit
-- positions. The caller passes pre-start entrants only.
--
-- KEYS[1] sale hash   fg:{<sale>}:sale
-- KEYS[2] queue hash  fg:{<sale>}:queue
-- ARGV[1] the leader's fencing token (refused when below queue_fence)
-- ARGV[2] "1" when this chunk is the last
-- ARGV[3] with the last chunk: queue_threshold, the rank key of pre-start position
--         min(queue_admitted, queue_prequeued) ("-": leave it; a queue ranked again after a
--         restore has admitted positions)
-- ARGV[4] likewise queue_expired_threshold, for min(queue_expired, queue_prequeued)
-- ARGV[5+2i], ARGV[6+2i]: user id, "r<rank>" of the i-th entrant
--
-- Returns the entries written, or -1 when the fencing token is stale.
local fence = tonumber(redis.call('HGET', KEYS[1], 'queue_fence') or '0') or 0
local token = tonumber(ARGV[1]) or 0
if token < fence then
  return -1
end
if token > fence then
  redis.call('HSET', KEYS[1], 'queue_fence', token)
end
local n = (#ARGV - 4) / 2
if n > 0 then
  redis.call('HSET', KEYS[2], unpack(ARGV, 5))
end
if ARGV[2] == '1' then
  redis.call('HSET', KEYS[1], 'queue_ranked', 1)
  if ARGV[3] ~= '-' then
    redis.call('HSET', KEYS[1], 'queue_threshold', ARGV[3], 'queue_expired_threshold', ARGV[4])
  end
end
return n
