-- hold.lua is put in front of the scripts that hold a pending retake's
-- units in a sale being rebuilt (retakehold.lua, resync.lua: see
-- lua/scripts.go), so that one definition says what a hold is. It only
-- defines a function; the header of each script that uses it is its own.

-- hold_retake holds order (of user) unless its refusal is recorded with
-- another code than 6 (its retake was refused, or an unretake gave its
-- units back): the order joins the retaken set and the released set (as
-- a retake keeps it), its refusal is recorded as held (6), and its buyer
-- entry is set when the buyer has none. It reports whether it held it.
local function hold_retake(buyers, retaken, refusals, released, user, order)
  local code = redis.call('HGET', refusals, order)
  if code and code ~= '6' then
    return false
  end
  redis.call('SADD', retaken, order)
  redis.call('SADD', released, order)
  redis.call('HSET', refusals, order, 6)
  redis.call('HSETNX', buyers, user, order)
  return true
end
