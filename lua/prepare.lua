-- Prepare creates a sale's hash in Redis, closed and empty, unless it exists.
-- It touches the sale's own key only (Redis Cluster: one slot); the caller
-- adds the sale to fg:sales (lua.SalesKey) first, with SADD.
--
-- KEYS[1] sale hash  fg:{<sale>}:sale
-- ARGV[1] total units
-- ARGV[2] admission cap (count)
-- ARGV[3] per_user
-- ARGV[4] price in cents
-- ARGV[5] optional: the layout of a bucketed sale (lua.FieldLayout), written
--         with the rest so that no reader sees the hash without it; "" none
-- ARGV[6] optional: "fair" for a sale sold through a fair queue
--         (lua.FieldQueue), so that reserves check admission from the start;
--         "draw:<open ms>:<close ms>" for a sale sold by a draw, with its
--         entry window (lua.DrawQueueArg), so that no purchase is taken
-- ARGV[7] optional: the variants of a sale sold in several, "id:total,..."
--         in the sale's order ('' none); ARGV[1] is then their sum
--
-- The static fields (total, per_user, price, layout, queue, variants and
-- each variant:<id>:total) are written by write_sale_static
-- (fragments/salestatic.lua), as Resync writes them; each variant's
-- variant:<id>:booked and variant:<id>:reserved start at 0.
--
-- Returns 1 created, 0 it existed already (nothing changed). A hash without
-- total (what a Redis loss leaves once some other field was written) does not
-- count as existing.
if redis.call('HEXISTS', KEYS[1], 'total') == 1 then
  return 0
end
redis.call('HSET', KEYS[1], 'booked', 0, 'reserved', 0, 'start', 0, 'closed', 0,
  'count', ARGV[2], 'access', 0)
local variants = write_sale_static(KEYS[1], ARGV[1], ARGV[3], ARGV[4], ARGV[5], ARGV[6], ARGV[7]) -- fragments/salestatic.lua
for _, v in ipairs(variants) do
  redis.call('HSET', KEYS[1], 'variant:' .. v[1] .. ':booked', 0, 'variant:' .. v[1] .. ':reserved', 0)
end
return 1
