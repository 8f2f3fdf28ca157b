-- QueueAdvance moves a fair queue's frontiers: positions 1..q_k are
-- admitted, 1..q_e have had their window end. Both only grow, and only the
-- leader with the newest fencing token moves them (a compare-and-set on
-- q_k keeps a second writer from skipping positions).
--
-- KEYS[1] sale hash  fg:{<sale>}:sale
-- ARGV[1] the leader's fencing token (refused when below q_fence)
-- ARGV[2] q_k the leader read (the write is refused if it changed)
-- ARGV[3] new q_k
-- ARGV[4] new q_theta (rank key of pre-start position min(q_k, q_pre))
-- ARGV[5] new q_e (at most the new q_k)
-- ARGV[6] new q_etheta
-- ARGV[7] q_rate, positions admitted per minute
-- ARGV[8] q_maxnum, the proof-of-work's maxnumber
--
-- Returns 1 written, 0 q_k changed meanwhile, -1 stale fencing token,
-- -2 a frontier would move back, -3 not ranked yet.
local f = redis.call('HMGET', KEYS[1], 'q_fence', 'q_k', 'q_e', 'q_ranked')
local fence = tonumber(f[1] or '0') or 0
local token = tonumber(ARGV[1]) or 0
if token < fence then
  return -1
end
if f[4] ~= '1' then
  return -3
end
local k, e = tonumber(f[2] or '0'), tonumber(f[3] or '0')
if k ~= tonumber(ARGV[2]) then
  return 0
end
local nk, ne = tonumber(ARGV[3]), tonumber(ARGV[5])
if nk < k or ne < e or ne > nk then
  return -2
end
redis.call('HSET', KEYS[1], 'q_fence', token, 'q_k', nk, 'q_theta', ARGV[4], 'q_e', ne, 'q_etheta', ARGV[6],
  'q_rate', ARGV[7], 'q_maxnum', ARGV[8])
return 1
