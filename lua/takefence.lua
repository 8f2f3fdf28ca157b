-- TakeFence hands out the next leader fencing token. A counter Redis lost
-- starts again above every token it gave before (at the caller's clock in
-- unix milliseconds, which only moves on), so that a token taken after the
-- loss is never refused by a fence written before it. A counter below the
-- caller's floor (a failover lost its last increments, and the caller, a
-- leader whose lease outlived them, holds a token above it) is raised to
-- the floor first, so that the token is above the caller's and every token
-- after it too.
--
-- KEYS[1] fence counter  fg:fence
-- ARGV[1] the caller's clock, unix milliseconds
-- ARGV[2] optional: the floor, a token the caller holds (0: none)
--
-- Returns the token (the counter after its increment).
if redis.call('EXISTS', KEYS[1]) == 0 then
  redis.call('SET', KEYS[1], ARGV[1])
end
if ARGV[2] and tonumber(redis.call('GET', KEYS[1])) < tonumber(ARGV[2]) then
  redis.call('SET', KEYS[1], ARGV[2])
end
return redis.call('INCR', KEYS[1])
