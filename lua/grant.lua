-- Grant credits one bucket of a bucketed sale with the units move seq of
-- its ledger freed from another bucket (lua.Shrink's answer). It is
-- versioned and idempotent: a move is credited once, however often a leader
-- (or its successor) retries it, and a grant from a leader whose fencing
-- token is below the highest this bucket has seen is refused. A move of a
-- sale sold in variants credits the variant's total with the bucket's.
--
-- KEYS[1] bucket hash  fg:{<sale>~<b>.<salt>}:sale
-- ARGV[1] the caller's fencing token
-- ARGV[2] move seq
-- ARGV[3] units to credit (>= 0)
-- ARGV[4] optional: the variant the move is of ('' or absent: one stock)
--
-- Returns 1 credited, 0 this move (or a later one) was credited before,
-- -1 refused (stale token), -2 the bucket is missing (nothing written; a
-- re-sync rebuilds it with its share of what no bucket holds).
local token = tonumber(ARGV[1]) or 0
local seq = tonumber(ARGV[2]) or 0
local f = redis.call('HMGET', KEYS[1], 'total', 'fence', 'gseq')
if not f[1] then
  return -2
end
local fence = tonumber(f[2] or '0') or 0
if token < fence or token < 1 then
  return -1
end
if token > fence then
  redis.call('HSET', KEYS[1], 'fence', token)
end
if seq <= (tonumber(f[3] or '0') or 0) then
  return 0
end
local n = tonumber(ARGV[3]) or 0
if n > 0 then
  redis.call('HINCRBY', KEYS[1], 'total', n)
  local variant = ARGV[4] or ''
  if variant ~= '' then
    redis.call('HINCRBY', KEYS[1], 'variant:' .. variant .. ':total', n)
  end
end
redis.call('HSET', KEYS[1], 'gseq', seq)
return 1
