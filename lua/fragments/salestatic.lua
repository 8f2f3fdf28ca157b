-- salestatic.lua is put in front of the scripts that create a sale's hash
-- (prepare.lua, resync.lua: see lua/scripts.go), so that one definition
-- says which static fields a sale hash holds (lua.SaleStaticFields). It only
-- defines a function; the header of each script that uses it is its own.

-- write_sale_static sets the static fields of the sale hash key: total,
-- per_user and price always; layout (a bucketed sale's) unless it is '' or
-- nil; queue = 'fair' when queue is 'fair'.
local function write_sale_static(key, total, per_user, price, layout, queue)
  redis.call('HSET', key, 'total', total, 'per_user', per_user, 'price', price)
  if layout and layout ~= '' then
    redis.call('HSET', key, 'layout', layout)
  end
  if queue == 'fair' then
    redis.call('HSET', key, 'queue', 'fair')
  end
end

