-- Shrink takes up to a number of unheld units out of one bucket of a
-- bucketed sale for move seq of its ledger, and returns what it really
-- freed: never more than total - booked, so a bucket never holds less than
-- its live orders. Once per move: a second call with the same seq changes
-- nothing and returns the first call's answer; an older seq frees nothing.
-- A move of a sale sold in variants moves units of one variant: never more
-- than that variant's total - booked in the bucket, taken from its total
-- and the bucket's.
--
-- KEYS[1] bucket hash  fg:{<sale>~<b>.<salt>}:sale
-- ARGV[1] move seq
-- ARGV[2] units wanted (>= 0)
-- ARGV[3] optional: the variant the move is of ('' or absent: one stock);
--         recorded in the bucket (svar) with the move's seq and freed units
--
-- Returns the units freed (0 when the bucket is missing).
local seq = tonumber(ARGV[1])
local variant = ARGV[3] or ''
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
if variant ~= '' then
  local vf = redis.call('HMGET', KEYS[1], 'variant:' .. variant .. ':total', 'variant:' .. variant .. ':booked')
  local vfree = (tonumber(vf[1] or '0') or 0) - (tonumber(vf[2] or '0') or 0)
  if vfree < free then
    free = vfree
  end
end
local n = tonumber(ARGV[2]) or 0
if n > free then
  n = free
end
if n < 0 then
  n = 0
end
if n > 0 then
  redis.call('HINCRBY', KEYS[1], 'total', -n)
  if variant ~= '' then
    redis.call('HINCRBY', KEYS[1], 'variant:' .. variant .. ':total', -n)
  end
end
if variant ~= '' then
  redis.call('HSET', KEYS[1], 'sseq', seq, 'sfreed', n, 'svar', variant)
else
  redis.call('HSET', KEYS[1], 'sseq', seq, 'sfreed', n)
end
return n
