-- DrawState reads a buyer's entry in a draw sale, with the draw's window,
-- so that one call answers "where do I stand".
--
-- KEYS[1] sale hash     fg:{<sale>}:sale
-- KEYS[2] entries hash  fg:{<sale>}:draw
-- KEYS[3] checks zset   fg:{<sale>}:dcheck
-- ARGV[1] user id
--
-- Returns {code, entry, open ms, close ms, out}:
--   {0, entry, open, close, out}  the buyer's entry, as in lua.DrawKey;
--                            out 1 when it is pending, the close has
--                            finished (draw_done) and its hold is off the
--                            read path's list (released, or none made):
--                            an entry out of the draw, settled; else 0
--   {1, "", "", ""}          no such sale
--   {4, "", "", ""}          the sale is not sold by a draw
--   {11, "", open, close}    the buyer has no entry
local f = redis.call('HMGET', KEYS[1], 'total', 'queue', 'draw_open', 'draw_close', 'draw_done')
if not f[1] then
  return {1, '', '', ''}
end
if f[2] ~= 'draw' then
  return {4, '', '', ''}
end
local e = redis.call('HGET', KEYS[2], ARGV[1])
if not e then
  return {11, '', f[3] or '', f[4] or ''}
end
local out = 0
local st, id = string.match(e, '^(%S+) (%S+)')
if st == 'pending' and f[5] == '1' and not redis.call('ZSCORE', KEYS[3], id) then
  out = 1
end
return {0, e, f[3] or '', f[4] or '', out}
