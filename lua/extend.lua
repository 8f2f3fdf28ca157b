-- Extend renews the control plane's leader lease, only for its holder.
--
-- KEYS[1] leader lock  fg:leader
-- ARGV[1] the holder's token
-- ARGV[2] lease in milliseconds
--
-- Returns 1 renewed (the caller still leads), 0 someone else holds it or it
-- lapsed.
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return 1
end
return 0
