-- QueueAdvance moves a fair queue's frontiers in one atomic step: positions
-- 1..queue_admitted are admitted, 1..queue_expired have had their window end. It ends the
-- windows that passed (their start times live in the windows list, KEYS[3],
-- so a new leader keeps every window), counts the admitted buyers still
-- promised a unit (positions in (queue_expired, queue_admitted] whose user holds no order in the
-- buyers hash) and admits at most as many new positions as units remain
-- that nobody was promised: stock, buyers and windows are read together,
-- so a reserve between the leader's reads cannot make it promise more
-- units than exist. Both frontiers only grow, and only the leader with the
-- newest fencing token moves them (a compare-and-set on queue_admitted and queue_expired keeps
-- a second writer from skipping positions). It records how many admitted
-- buyers are promised a unit (queue_promised), which a late payment's
-- retake keeps for them.
--
-- KEYS[1] sale hash     fg:{<sale>}:sale
-- KEYS[2] buyers hash   fg:{<sale>}:buyers
-- KEYS[3] windows list  fg:{<sale>}:qwin
-- ARGV[1] the leader's fencing token (refused when below queue_fence)
-- ARGV[2] queue_admitted the leader read (nothing is written if it changed)
-- ARGV[3] queue_expired the leader read (nothing is written if it changed)
-- ARGV[4] now, unix milliseconds
-- ARGV[5] at most this many new positions (admit_per_minute, back-pressure)
-- ARGV[6] queue_maxnumber, the proof-of-work's maxnumber
-- ARGV[7] U: how many users follow
-- ARGV[8 .. 7+U] the users at positions queue_expired+1 .. queue_admitted, in order
-- ARGV[8+U ..] the rank keys of pre-start positions queue_admitted+1, queue_admitted+2, ... (as
--         many as may be admitted now, up to queue_prequeued)
--
-- Returns {code, queue_admitted, queue_expired}: code 1 written (or nothing to change), 0 queue_admitted or
-- queue_expired changed meanwhile, -1 stale fencing token, -3 not ranked yet, -4 the
-- users passed do not cover (queue_expired, queue_admitted].
local f = redis.call('HMGET', KEYS[1], 'queue_fence', 'queue_admitted', 'queue_expired', 'queue_ranked', 'total', 'booked', 'per_user',
  'queue_window', 'queue_prequeued', 'queue_late', 'queue_threshold')
local fence = tonumber(f[1] or '0') or 0
local token = tonumber(ARGV[1]) or 0
if token < fence then
  return {-1, 0, 0}
end
if f[4] ~= '1' then
  return {-3, 0, 0}
end
local k, e = tonumber(f[2] or '0') or 0, tonumber(f[3] or '0') or 0
if k ~= tonumber(ARGV[2]) or e ~= tonumber(ARGV[3]) then
  return {0, k, e}
end
local u = tonumber(ARGV[7]) or 0
if u ~= k - e then
  return {-4, k, e}
end
local now = tonumber(ARGV[4])
local window = (tonumber(f[8] or '0') or 0) * 1000
local fields = {'queue_fence', token, 'queue_maxnumber', ARGV[6]}

-- Windows that ended: each list entry is "<k> <ms> <theta>", positions up
-- to k admitted at ms, oldest first.
local ne, netheta = e, nil
while true do
  local b = redis.call('LINDEX', KEYS[3], 0)
  if not b then
    break
  end
  local bk, bms, bt = string.match(b, '^(%d+) (%d+) ?(.*)$')
  bk, bms = tonumber(bk), tonumber(bms)
  if bk and bms and bms + window > now and bk > ne then
    break
  end
  redis.call('LPOP', KEYS[3])
  if bk and bk > ne then
    ne, netheta = math.min(bk, k), bt
  end
end
if ne > e then
  table.insert(fields, 'queue_expired')
  table.insert(fields, ne)
  table.insert(fields, 'queue_expired_threshold')
  table.insert(fields, netheta or '')
end

-- Admitted buyers still promised a unit.
local pending = 0
for i = ne - e + 1, u do
  if redis.call('HEXISTS', KEYS[2], ARGV[7 + i]) == 0 then
    pending = pending + 1
  end
end
local total, booked = tonumber(f[5] or '0') or 0, tonumber(f[6] or '0') or 0
local perUser = math.max(tonumber(f[7] or '1') or 1, 1)
local free = math.floor(math.max(total - booked, 0) / perUser) - pending
local pre = tonumber(f[9] or '0') or 0
local n = math.min(math.max(free, 0), tonumber(ARGV[5]) or 0, pre + (tonumber(f[10] or '0') or 0) - k)
local nk = k
if n > 0 then
  nk = k + n
  local theta = f[11] or ''
  local i = math.min(nk, pre) - k
  if i > 0 then
    theta = ARGV[7 + u + i]
    if not theta then
      return {-4, k, e}
    end
  end
  table.insert(fields, 'queue_admitted')
  table.insert(fields, nk)
  table.insert(fields, 'queue_threshold')
  table.insert(fields, theta)
  redis.call('RPUSH', KEYS[3], nk .. ' ' .. now .. ' ' .. theta)
end

-- queue_rate: positions admitted in the last minute, from the newest windows.
local rate = 0
local tail = redis.call('LRANGE', KEYS[3], -64, -1)
for i = #tail, 1, -1 do
  local bk, bms = string.match(tail[i], '^(%d+) (%d+)')
  bk, bms = tonumber(bk), tonumber(bms)
  if not bk or bms <= now - 60000 then
    break
  end
  local before = ne
  if i > 1 then
    before = tonumber(string.match(tail[i - 1], '^(%d+)')) or ne
  end
  rate = rate + math.max(bk - math.max(before, ne), 0)
end
table.insert(fields, 'queue_rate')
table.insert(fields, rate)
-- queue_promised: the admitted buyers promised a unit now, which a late
-- payment's retake (lua/retake.lua) leaves to them.
table.insert(fields, 'queue_promised')
table.insert(fields, pending + math.max(nk - k, 0))
redis.call('HSET', KEYS[1], unpack(fields))
return {1, nk, ne}
