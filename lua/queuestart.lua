-- QueueStart ends a fair queue's pre-queue: from now on entries are late
-- ones (arrival order), and the seed, which reaches Redis only now, is
-- revealed in queue_seed. Once only: a second call changes nothing and answers
-- the same.
--
-- KEYS[1] sale hash  fg:{<sale>}:sale
-- ARGV[1] the seed, 64 hex characters (the caller checked that it hashes
--         to queue_seed_sha256)
--
-- Returns {pre-start entrants, seed hex}, or {-1, ""} when the queue was
-- never opened.
local f = redis.call('HMGET', KEYS[1], 'queue_open', 'queue_started', 'queue_prequeued', 'queue_seed')
if f[1] ~= '1' then
  return {-1, ''}
end
if f[2] ~= '1' then
  redis.call('HSET', KEYS[1], 'queue_started', 1, 'queue_seed', ARGV[1] or '')
  return {tonumber(f[3] or '0'), ARGV[1] or ''}
end
return {tonumber(f[3] or '0'), f[4] or ''}
