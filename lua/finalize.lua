-- Finalize is the last step of a spill: the home bucket's claim marker of
-- the user becomes the final marker "~<order>@<bucket>", which names the
-- order and the bucket that holds its units and keeps the user from buying
-- again in the home bucket until the order is released (lua.Unmark). It is
-- idempotent, and it restores a marker a rebuild or a settled claim left
-- absent, unless the order was released already.
--
-- KEYS[1] buyers hash   fg:{<sale>}:buyers
-- KEYS[2] claims zset   fg:{<sale>}:claims
-- KEYS[3] released set  fg:{<sale>}:released
-- ARGV[1] user id
-- ARGV[2] order id
-- ARGV[3] the bucket the order was reserved in
--
-- Returns {code, existing}:
--   {1, ""}        finalised now
--   {0, ""}        the final marker was there already
--   {-1, ""}       the order was released (its final marker is in the
--                  released set); no marker is set
--   {-2, existing} the user's entry is another order's or another claim;
--                  nothing changed
local final = '~' .. ARGV[2] .. '@' .. ARGV[3]
local v = redis.call('HGET', KEYS[1], ARGV[1])
if v == final then
  return {0, ''}
end
if redis.call('SISMEMBER', KEYS[3], final) == 1 then
  if v == '~' .. ARGV[2] then
    redis.call('HDEL', KEYS[1], ARGV[1])
    redis.call('ZREM', KEYS[2], ARGV[1])
  end
  return {-1, ''}
end
if v and v ~= '~' .. ARGV[2] then
  return {-2, v}
end
redis.call('HSET', KEYS[1], ARGV[1], final)
redis.call('ZREM', KEYS[2], ARGV[1])
return {1, ''}
