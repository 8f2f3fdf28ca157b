-- Claim is the first step of a spill (a bucketed sale's buyer whose home
-- bucket is sold out reserving in another bucket): it places a claim marker
-- for the user in the home bucket's buyers hash, atomically with the check
-- that the user holds nothing there, so that two attempts of one user
-- never spill at once, and notes the claim's time for the leader, which
-- settles claims left by a crash (lua.SpillCheck, lua.Finalize,
-- lua.Unclaim).
--
-- KEYS[1] sale hash     fg:{<sale>}:sale
-- KEYS[2] buyers hash   fg:{<sale>}:buyers
-- KEYS[3] claims zset   fg:{<sale>}:claims
-- ARGV[1] user id
-- ARGV[2] order id (minted by the caller; the spill reserves it)
-- ARGV[3] now, unix milliseconds
--
-- Returns {code, value}:
--   {0, ""}       claimed: buyers[user] = "~<order>", claims[user] = now
--                 (or this order's claim was there already)
--   {1, ""}       no such sale (bucket)
--   {2, ""}       not started
--   {3, ""}       closed
--   {5, existing} the user's entry: an order id, a final marker
--                 "~<order>@<bucket>" or another order's claim "~<order>"
--   {7, ""}       paused while a re-sync rebuilds it
local f = redis.call('HMGET', KEYS[1], 'total', 'start', 'closed', 'resume')
if not f[1] then
  return {1, ''}
end
if f[2] ~= '1' then
  if f[3] == '1' then
    return {3, ''}
  end
  if f[4] then
    return {7, ''}
  end
  return {2, ''}
end
local claim = '~' .. ARGV[2]
local existing = redis.call('HGET', KEYS[2], ARGV[1])
if existing == claim then
  return {0, ''}
end
if existing then
  return {5, existing}
end
redis.call('HSET', KEYS[2], ARGV[1], claim)
redis.call('ZADD', KEYS[3], ARGV[3], ARGV[1])
return {0, ''}
