-- QueueOpen opens a sale's fair queue once: it stores the queue's epoch,
-- the SHA-256 of its seed (published from now on; the seed itself stays
-- with the control plane, which derives it from a secret of its own, until
-- QueueStart) and the queue's settings, and from then on QueueEnter takes
-- entries. Opening an open queue changes nothing.
--
-- KEYS[1] sale hash  fg:{<sale>}:sale
-- ARGV[1] the queue's epoch (what the control plane derives the seed from,
--         with the sale id)
-- ARGV[2] hex SHA-256 of the seed's 32 bytes
-- ARGV[3] the proof-of-work's maxnumber (0: none)
-- ARGV[4] admit_seconds
--
-- Returns 1 opened, 0 open already, -1 no such sale.
local f = redis.call('HMGET', KEYS[1], 'total', 'queue_open')
if not f[1] then
  return -1
end
if f[2] == '1' then
  return 0
end
redis.call('HSET', KEYS[1], 'queue', 'fair', 'queue_open', 1, 'queue_epoch', ARGV[1], 'queue_seed_sha256', ARGV[2],
  'queue_maxnumber', ARGV[3], 'queue_window', ARGV[4], 'queue_admitted', 0, 'queue_expired', 0, 'queue_threshold', '', 'queue_expired_threshold', '')
return 1
