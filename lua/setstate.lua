-- SetState opens or closes an existing sale.
--
-- KEYS[1] sale hash  fg:{<sale>}:sale
-- ARGV[1] "open" or "close"
--
-- Returns 1 done, -1 no such sale (no total; nothing created).
if redis.call('HEXISTS', KEYS[1], 'total') == 0 then
  return -1
end
-- A hand-made open or close overrides a re-sync's pending resume.
redis.call('HDEL', KEYS[1], 'resume')
if ARGV[1] == 'open' then
  redis.call('HSET', KEYS[1], 'start', 1, 'closed', 0)
else
  redis.call('HSET', KEYS[1], 'start', 0, 'closed', 1)
end
return 1
