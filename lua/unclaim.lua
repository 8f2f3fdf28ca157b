-- Unclaim removes a user's claim marker of one order from the home bucket
-- of a bucketed sale: when the spill found no unit in any bucket, or when
-- the leader settles a stale claim whose order exists nowhere (and can no
-- longer be reserved: lua.SpillCheck fenced it in every other bucket). A
-- claims entry whose marker is gone or final is dropped too.
--
-- KEYS[1] buyers hash   fg:{<sale>}:buyers
-- KEYS[2] claims zset   fg:{<sale>}:claims
-- ARGV[1] user id
-- ARGV[2] order id
--
-- Returns 1 when the claim was removed, 0 otherwise.
local v = redis.call('HGET', KEYS[1], ARGV[1])
if v == '~' .. ARGV[2] then
  redis.call('HDEL', KEYS[1], ARGV[1])
  redis.call('ZREM', KEYS[2], ARGV[1])
  return 1
end
if not v or string.sub(v, 1, 1) ~= '~' or string.find(v, '@', 1, true) then
  -- No claim of this user is pending: the entry is stale.
  redis.call('ZREM', KEYS[2], ARGV[1])
end
return 0
