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
-- the group's oldest pending id (XPENDING), or, with nothing pending, the id
-- right after last-delivered-id (XINFO GROUPS): every entry below it is
-- acknowledged. Entries of ARGV at or above the trim point (a batch
-- committed while an older one, of another sink, is still pending) are
-- deleted one by one (XDEL).
--
-- KEYS[1] orders stream  fg:{<sale>}:orders
-- ARGV[1] the sink's consumer group (lua.SinkGroup)
-- ARGV[2…] ids of the entries whose orders are committed
--
-- Returns {acked, removed}: how many of the ids XACK acknowledged (an id
-- acknowledged before does not count), and how many entries left the stream
-- (by the trim and by XDEL). Without the stream or the group it only
-- acknowledges (nothing, then) and returns {0, 0}.

-- chunk bounds the ids passed to one command (unpack's stack).
local chunk = 1000

-- num_less compares two canonical decimals (no leading zeros) without
-- turning them into numbers, which lose digits past 2^53.
local function num_less(a, b)
  if #a ~= #b then
    return #a < #b
  end
  return a < b
end

-- split returns the two parts of a stream id; "<ms>" alone is "<ms>-0".
local function split(id)
  local ms, seq = string.match(id, '^(%d+)%-(%d+)$')
  if ms then
    return ms, seq
  end
  ms = string.match(id, '^(%d+)$')
  if ms then
    return ms, '0'
  end
end

-- less compares two stream ids "<ms>-<seq>".
local function less(a, b)
  local ams, aseq = split(a)
  local bms, bseq = split(b)
  if ams ~= bms then
    return num_less(ams, bms)
  end
  return num_less(aseq, bseq)
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

-- run sends cmd KEYS[1] head… ids[i…j] for ids in chunks and sums the
-- answers.
local function run(cmd, head, ids)
  local n = 0
  for i = 1, #ids, chunk do
    local args = {}
    for _, v in ipairs(head) do
      args[#args + 1] = v
    end
    for j = i, math.min(i + chunk - 1, #ids) do
      args[#args + 1] = ids[j]
    end
    n = n + redis.call(cmd, KEYS[1], unpack(args))
  end
  return n
end

local ids = {}
for i = 2, #ARGV do
  if not split(ARGV[i]) then
    return redis.error_reply('ERR acktrim: bad stream id ' .. ARGV[i])
  end
  ids[#ids + 1] = ARGV[i]
end
local acked = run('XACK', {ARGV[1]}, ids)
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
local mark
if pending > 0 then
  mark = redis.call('XPENDING', KEYS[1], ARGV[1])[2]
else
  mark = after(last)
end
local removed = redis.call('XTRIM', KEYS[1], 'MINID', '=', mark)
local late = {}
for _, id in ipairs(ids) do
  if not less(id, mark) then
    late[#late + 1] = id
  end
end
return {acked, removed + run('XDEL', {}, late)}
