-- AckTrim acknowledges entries of an order stream whose orders the order
-- sink has committed to the database, and removes from the stream every
-- entry that is acknowledged, so that the stream's length stays its backlog
-- of orders not yet committed. Most entries go by one exact
-- `XTRIM MINID`, which cuts whole stream nodes and costs a fraction of an
-- XDEL, which seeks each id.
--
-- The trim point: `>` delivers a group's entries in id order and its
-- last-delivered-id only grows (the sink creates its group at 0 and never
-- moves it), so every entry at or below last-delivered-id was delivered, and
-- every delivered entry not pending is acknowledged. The trim point is then
-- the group's oldest pending id (XPENDING … - + 1), or, with nothing
-- pending, the id right after last-delivered-id (XINFO GROUPS): every entry
-- below it is acknowledged. Entries of ARGV at or above the trim point (a
-- batch committed while an older one, of another sink, is still pending)
-- are deleted one by one (XDEL).
--
-- KEYS[1] orders stream  fg:{<sale>}:orders
-- ARGV[1] the sink's consumer group (lua.SinkGroup)
-- ARGV[2…] ids of the entries whose orders are committed, as Redis writes
--          them ("<ms>-<seq>", or "<ms>" for "<ms>-0")
--
-- Returns {acked, removed}: how many of the ids XACK acknowledged (an id
-- acknowledged before does not count), and how many entries left the stream
-- (by the trim and by XDEL). Without the stream or the group it only
-- acknowledges (nothing, then) and returns {0, 0}.

-- chunk bounds the ids passed to one command (unpack's stack holds 8000).
local chunk = 4000

-- split returns the two parts of a stream id; "<ms>" alone is "<ms>-0".
local function split(id)
  local ms, seq = string.match(id, '^(%d+)%-(%d+)$')
  if ms then
    return ms, seq
  end
  return string.match(id, '^(%d+)$'), '0'
end

-- less compares two stream ids "<ms>-<seq>" (canonical decimals, as Redis
-- writes them) without turning them into numbers, which lose digits past
-- 2^53: the longer decimal is the larger, and decimals of one length
-- compare as strings.
local function less(a, b)
  local i, j = string.find(a, '-', 1, true), string.find(b, '-', 1, true)
  if not i then
    a, i = a .. '-0', #a + 1
  end
  if i ~= j then
    return i < j
  end
  local ams, bms = string.sub(a, 1, i - 1), string.sub(b, 1, j - 1)
  if ams ~= bms then
    return ams < bms
  end
  if #a ~= #b then
    return #a < #b
  end
  return a < b
end

-- incr adds 1 to a decimal.
local function incr(s)
  local i = #s
  while i > 0 and string.sub(s, i, i) == '9' do
    i = i - 1
  end
  if i == 0 then
    return '1' .. string.rep('0', #s)
  end
  return string.sub(s, 1, i - 1) .. string.char(string.byte(s, i) + 1) .. string.rep('0', #s - i)
end

-- after returns the smallest id above id.
local function after(id)
  local ms, seq = split(id)
  if seq == '18446744073709551615' then
    return incr(ms) .. '-0'
  end
  return ms .. '-' .. incr(seq)
end

-- XACK checks every id before it writes anything.
local acked = 0
for i = 2, #ARGV, chunk do
  acked = acked + redis.call('XACK', KEYS[1], ARGV[1], unpack(ARGV, i, math.min(i + chunk - 1, #ARGV)))
end
if redis.call('EXISTS', KEYS[1]) == 0 then
  return {acked, 0}
end
local pending, last
for _, g in ipairs(redis.call('XINFO', 'GROUPS', KEYS[1])) do
  local f = {}
  for i = 1, #g, 2 do
    f[g[i]] = g[i + 1]
  end
  if f['name'] == ARGV[1] then
    pending, last = tonumber(f['pending']), f['last-delivered-id']
  end
end
if not pending then
  return {acked, 0}
end
if pending == 0 then
  -- Every id of ARGV, delivered, is at or below last-delivered-id.
  return {acked, redis.call('XTRIM', KEYS[1], 'MINID', '=', after(last))}
end
local mark = redis.call('XPENDING', KEYS[1], ARGV[1], '-', '+', 1)[1][1]
local removed = redis.call('XTRIM', KEYS[1], 'MINID', '=', mark)
local late = {}
for i = 2, #ARGV do
  if not less(ARGV[i], mark) then
    late[#late + 1] = ARGV[i]
  end
end
for i = 1, #late, chunk do
  removed = removed + redis.call('XDEL', KEYS[1], unpack(late, i, math.min(i + chunk - 1, #late)))
end
return {acked, removed}
