-- Shrink takes up to a number of unheld units out of one bucket of a
-- bucketed sale for move seq of its ledger, and returns what it really
-- freed: never more than total - booked, so a bucket never holds less than
-- its live orders. Once per move: a second call with the same seq changes
-- nothing and returns the first call's answer; an older seq frees nothing.
--
-- KEYS[1] bucket hash  fg:{<sale>~<b>.<salt>}:sale
-- ARGV[1] move seq
-- ARGV[2] units wanted (>= 0)
--
-- Returns the units freed (0 when the bucket is missing).
local seq = tonumber(ARGV[1])
local f = redis.call('HMGET', KEYS[1], 'total', 'booked', 'sseq', 'sfreed')
if not f[1] then
  return 0
end
local last = tonumber(f[3] or '0') or 0
if seq == last then
  return tonumber(f[4] or '0') or 0
end
if seq < last then
  return 0
end
local free = tonumber(f[1]) - (tonumber(f[2] or '0') or 0)
local n = tonumber(ARGV[2]) or 0
if n > free then
  n = free
end
if n < 0 then
  n = 0
end
if n > 0 then
  redis.call('HINCRBY', KEYS[1], 'total', -n)
end
redis.call('HSET', KEYS[1], 'sseq', seq, 'sfreed', n)
return n
