-- QueueStart ends a fair queue's pre-queue: from now on entries are late
-- ones (arrival order), and the seed is revealed in q_seed. Once only: a
-- second call changes nothing and answers the same.
--
-- KEYS[1] sale hash  fg:{<sale>}:sale
--
-- Returns {pre-start entrants, seed hex}, or {-1, ""} when the queue was
-- never opened.
local f = redis.call('HMGET', KEYS[1], 'q_open', 'q_started', 'q_secret', 'q_pre', 'q_seed')
if f[1] ~= '1' then
  return {-1, ''}
end
if f[2] ~= '1' then
  redis.call('HSET', KEYS[1], 'q_started', 1, 'q_seed', f[3])
  return {tonumber(f[4] or '0'), f[3]}
end
return {tonumber(f[4] or '0'), f[5] or f[3]}
