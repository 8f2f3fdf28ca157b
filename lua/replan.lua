-- Replan gives a bucket of a bucketed sale that sells nothing now (paused
-- for its rebuild, or a sale not open) its share of the sale again, from one
-- re-sync pass's plan: the passes of one sale that rebuilt its buckets at
-- once each wrote the shares of its own plan, and the totals of two plans
-- can add up to more (or less) than the sale's (controlplane/buckets'
-- Resync). It writes the bucket's total, each variant's, and a fresh rebuild
-- mark (the server's TIME), so that no pass that read the bucket before
-- reopens it; booked (and each variant's) is clamped to the new total until
-- the next pass sets it from the rows.
--
-- KEYS[1] bucket hash  fg:{<sale>~<b>.<salt>}:sale
-- ARGV[1] the caller's fencing token: refused below the hash's fence field,
--         which it raises
-- ARGV[2] the bucket's rebuild mark (lua.FieldRebuild) as the caller read it
--         before its database snapshot ('' when it had none): the bucket is
--         left alone unless it still has that mark
-- ARGV[3] the bucket's new total
-- ARGV[4 ..] pairs variant id, the variant's new total in the bucket
--
-- Returns 1 set; 0 left alone: no such bucket (no total), the bucket sells
-- (start = 1) or is paused after a failover (resume = 2, its rebuild is the
-- failover's), or its rebuild mark is not ARGV[2]; -1 refused (a newer
-- writer's token is in the hash; nothing changed).
local f = redis.call('HMGET', KEYS[1], 'total', 'start', 'resume', 'rebuild', 'fence', 'booked')
if not f[1] then
  return 0
end
local token = tonumber(ARGV[1]) or 0
local fence = tonumber(f[5] or '0') or 0
if token < fence then
  return -1
end
if token > fence then
  redis.call('HSET', KEYS[1], 'fence', ARGV[1])
end
if f[2] == '1' or f[3] == '2' or (f[4] or '') ~= ARGV[2] then
  return 0
end
local total = tonumber(ARGV[3]) or 0
local now = redis.call('TIME')
redis.call('HSET', KEYS[1], 'total', total, 'rebuild', now[1] .. '.' .. now[2])
if (tonumber(f[6] or '0') or 0) > total then
  redis.call('HSET', KEYS[1], 'booked', total)
end
local i = 4
while i + 1 <= #ARGV do
  local vt = tonumber(ARGV[i + 1]) or 0
  local bf = 'variant:' .. ARGV[i] .. ':booked'
  redis.call('HSET', KEYS[1], 'variant:' .. ARGV[i] .. ':total', vt)
  if (tonumber(redis.call('HGET', KEYS[1], bf) or '0') or 0) > vt then
    redis.call('HSET', KEYS[1], bf, vt)
  end
  i = i + 2
end
return 1
