-- Unmark clears the home bucket's markers of released spilled orders (a
-- cancel, expiry or refund of an order reserved outside its buyer's home
-- bucket): each marker goes only if it still names that order, and the
-- order's final marker joins the home bucket's released set, so that a late
-- lua.Finalize of the order sets no marker again. Idempotent.
--
-- KEYS[1] buyers hash   fg:{<sale>}:buyers
-- KEYS[2] claims zset   fg:{<sale>}:claims
-- KEYS[3] released set  fg:{<sale>}:released
-- ARGV[1 ..] triples user id, order id, the order's bucket
--
-- Returns the number of markers removed.
local n = 0
for i = 1, #ARGV, 3 do
  local user, order = ARGV[i], ARGV[i + 1]
  local final = '~' .. order .. '@' .. ARGV[i + 2]
  redis.call('SADD', KEYS[3], final)
  local v = redis.call('HGET', KEYS[1], user)
  if v == final or v == '~' .. order then
    redis.call('HDEL', KEYS[1], user)
    redis.call('ZREM', KEYS[2], user)
    n = n + 1
  end
end
return n
