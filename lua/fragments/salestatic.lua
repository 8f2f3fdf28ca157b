-- salestatic.lua is put in front of the scripts that create a sale's hash
-- (prepare.lua, resync.lua: see lua/scripts.go), so that one definition
-- says which static fields a sale hash holds (lua.SaleStaticFields). It only
-- defines functions; the header of each script that uses them is its own.

-- parse_variants reads a variants spec, "id:total,id:total" (resync.lua's
-- "id:total:L:P" entries read the same: fields after the total are left to
-- the caller), into a list of {id, total, fields}; '' or nil is an empty
-- list. fields holds every ':'-separated value of the entry, id first.
local function parse_variants(spec)
  local out = {}
  if not spec or spec == '' then
    return out
  end
  for entry in string.gmatch(spec, '[^,]+') do
    local fields = {}
    for f in string.gmatch(entry, '[^:]+') do
      fields[#fields + 1] = f
    end
    out[#out + 1] = {fields[1], tonumber(fields[2]) or 0, fields}
  end
  return out
end

-- write_sale_static sets the static fields of the sale hash key: total,
-- per_user and price always; layout (a bucketed sale's) unless it is '' or
-- nil; queue = 'fair' when queue is 'fair'; queue = 'draw' when queue is
-- "draw:<open ms>:<close ms>" (a sale sold by a draw: its entry window, unix
-- milliseconds, in draw_open and draw_close); with a variants spec
-- ("id:total, ..."; '' or nil none), variants = "id,id" and each
-- variant:<id>:total. It returns the parsed variants (parse_variants).
local function write_sale_static(key, total, per_user, price, layout, queue, variants)
  redis.call('HSET', key, 'total', total, 'per_user', per_user, 'price', price)
  if layout and layout ~= '' then
    redis.call('HSET', key, 'layout', layout)
  end
  if queue == 'fair' then
    redis.call('HSET', key, 'queue', 'fair')
  elseif queue and string.sub(queue, 1, 5) == 'draw:' then
    -- A malformed window still makes a draw sale (no purchase), one that
    -- takes no entry (no window).
    redis.call('HSET', key, 'queue', 'draw')
    local open, close = string.match(queue, '^draw:(%d+):(%d+)$')
    if open then
      redis.call('HSET', key, 'draw_open', open, 'draw_close', close)
    end
  end
  local vs = parse_variants(variants)
  if #vs > 0 then
    local ids = {}
    for i, v in ipairs(vs) do
      ids[i] = v[1]
      redis.call('HSET', key, 'variant:' .. v[1] .. ':total', v[2])
    end
    redis.call('HSET', key, 'variants', table.concat(ids, ','))
  end
  return vs
end
