-- ReleaseBatch gives the units of many cancelled, refunded or expired orders
-- of one sale back, each once, in one step: like Release, per order.
--
-- KEYS[1] sale hash     fg:{<sale>}:sale
-- KEYS[2] buyers hash   fg:{<sale>}:buyers
-- KEYS[3] released set  fg:{<sale>}:released
-- ARGV[1] "" for releases made as orders change. A re-sync delivering the
--         database's pending releases passes the count of releases it
--         delivered before these (d): the batch is refused when the hash's
--         delivered is below d (Redis lost releases it had), else the hash's
--         delivered becomes max(delivered, d + number of orders).
--         It passes "d:t" (or ":t" without a count), t its fencing token:
--         the batch is refused when t is below the hash's fence field,
--         which it raises.
-- ARGV[2 ..] quadruples order id, user id, quantity, variant id ("" none:
--         the variant's booked is given back too, never below 0)
--
-- Returns {code, released, units}:
--   {0, n, u}  done: n orders released now (booked -= their units, never
--              below 0, u units in all; the hash's releases counter,
--              lua.FieldReleases, += n), the others were released before
--   {-1, 0, 0} no such sale in Redis (no total); nothing changed
--   {-2, 0, 0} the hash's delivered is below ARGV[1]; nothing changed
--   {-3, 0, 0} refused: a newer writer's token is in the hash; nothing
--              changed
-- A quantity that is not a whole number >= 1 is an error reply, before any
-- write.
for i = 4, #ARGV, 4 do
  local n = tonumber(ARGV[i])
  if not n or n < 1 or n ~= math.floor(n) then
    return redis.error_reply('ERR release: bad quantity')
  end
end
if redis.call('HEXISTS', KEYS[1], 'total') == 0 then
  return {-1, 0, 0}
end
local base, token = string.match(ARGV[1], '^(%d*):(%d+)$')
if token then
  local fence = tonumber(redis.call('HGET', KEYS[1], 'fence') or '0') or 0
  if tonumber(token) < fence then
    return {-3, 0, 0}
  end
  if tonumber(token) > fence then
    redis.call('HSET', KEYS[1], 'fence', token)
  end
  base = tonumber(base)
else
  base = tonumber(ARGV[1])
end
if base then
  local d = tonumber(redis.call('HGET', KEYS[1], 'delivered') or '0') or 0
  if d < base then
    return {-2, 0, 0}
  end
end
local booked = tonumber(redis.call('HGET', KEYS[1], 'booked') or '0') or 0
local released, units = 0, 0
local vgive, vorder = {}, {} -- variant → units given back, in first order
for i = 2, #ARGV, 4 do
  local order, user = ARGV[i], ARGV[i + 1]
  if redis.call('SADD', KEYS[3], order) == 1 then
    released = released + 1
    local n = tonumber(ARGV[i + 2])
    local v = ARGV[i + 3] or ''
    if v ~= '' then
      if not vgive[v] then
        vgive[v] = 0
        vorder[#vorder + 1] = v
      end
      vgive[v] = vgive[v] + n
    end
    if n > booked then
      n = booked
    end
    booked = booked - n
    units = units + n
    if redis.call('HGET', KEYS[2], user) == order then
      redis.call('HDEL', KEYS[2], user)
    end
  end
end
if units > 0 then
  redis.call('HINCRBY', KEYS[1], 'booked', -units)
end
if released > 0 then
  redis.call('HINCRBY', KEYS[1], 'releases', released)
end
for _, v in ipairs(vorder) do
  give_back(KEYS[1], 'variant:' .. v .. ':booked', vgive[v]) -- fragments/giveback.lua
end
if base then
  local want = base + (#ARGV - 1) / 4
  local d = tonumber(redis.call('HGET', KEYS[1], 'delivered') or '0') or 0
  if want > d then
    redis.call('HSET', KEYS[1], 'delivered', want)
  end
end
return {0, released, units}
