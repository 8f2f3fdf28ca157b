-- Unlock deletes the control plane's leader lock, only for its holder.
--
-- KEYS[1] leader lock  fg:leader
-- ARGV[1] the holder's token
--
-- Returns 1 deleted, 0 someone else holds it or it lapsed.
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
