-- giveback.lua is put in front of the scripts that give units back to a
-- sale (release.lua, releasebatch.lua: see lua/scripts.go), so that one
-- definition says how a booked figure goes down. It only defines a
-- function; the header of each script that uses it is its own.

-- give_back lowers the integer field of hash key by up to n, never below
-- 0 (a figure a re-sync already lowered gives back only what it holds),
-- and returns what it took.
local function give_back(key, field, n)
  local have = tonumber(redis.call('HGET', key, field) or '0') or 0
  if n > have then
    n = have
  end
  if n > 0 then
    redis.call('HINCRBY', key, field, -n)
  end
  return n
end
