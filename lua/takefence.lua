-- TakeFence hands out the next leader fencing token. A counter Redis lost
-- starts again above every token it gave before (at the caller's clock in
-- unix milliseconds, which only moves on), so that a token taken after the
-- loss is never refused by a fence written before it.
--
-- KEYS[1] fence counter  fg:fence
-- ARGV[1] the caller's clock, unix milliseconds
--
-- Returns the token (the counter after its increment).
if redis.call('EXISTS', KEYS[1]) == 0 then
  redis.call('SET', KEYS[1], ARGV[1])
end
return redis.call('INCR', KEYS[1])
