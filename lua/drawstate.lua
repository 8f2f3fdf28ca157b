-- DrawState reads a buyer's entry in a draw sale, with the draw's window,
-- so that one call answers "where do I stand".
--
-- KEYS[1] sale hash     fg:{<sale>}:sale
-- KEYS[2] entries hash  fg:{<sale>}:draw
-- ARGV[1] user id
--
-- Returns {code, entry, open ms, close ms}:
--   {0, entry, open, close}  the buyer's entry, as in lua.DrawKey
--   {1, "", "", ""}          no such sale
--   {4, "", "", ""}          the sale is not sold by a draw
--   {11, "", open, close}    the buyer has no entry
local f = redis.call('HMGET', KEYS[1], 'total', 'queue', 'draw_open', 'draw_close')
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
return {0, e, f[3] or '', f[4] or ''}
