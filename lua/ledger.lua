-- Ledger is the allocation ledger of a bucketed sale: it records the one
-- move of units between two buckets in flight, so that a leader that
-- crashes between shrinking one bucket and crediting another leaves a
-- record the next leader finishes (lua.Shrink, lua.Grant). It lives in a
-- slot of its own (fg:{<sale>~ledger}:ledger) and carries the highest
-- leader fencing token it has seen: a call with a lower token is refused.
--
-- KEYS[1] ledger hash  fg:{<sale>~ledger}:ledger
-- ARGV[1] op: "begin", "shrunk", "done" or "get"
-- ARGV[2] the caller's fencing token (a positive integer)
-- begin:  ARGV[3] from bucket, ARGV[4] to bucket, ARGV[5] units wanted,
--         ARGV[6] optional: the variant moved, on a sale sold in variants
--         ('' or absent: one stock)
-- shrunk: ARGV[3] move seq, ARGV[4] units the shrink freed
-- done:   ARGV[3] move seq
--
-- Returns:
--   {-1}                                 a newer leader wrote the ledger
--   {0, seq}                             begin: move seq recorded (phase shrink)
--   {0}                                  shrunk (phase grant) or done (no move)
--   {1, seq, phase, from, to, want, freed, variant}
--                                        begin or get: a move is in flight
--                                        (phase "shrink" or "grant"; variant
--                                        '' for one stock); begin records
--                                        nothing new
--   {2, seq}                             get: no move in flight; seq the last
--   {-2}                                 shrunk/done: seq or phase mismatch
local token = tonumber(ARGV[2]) or 0
local h = redis.call('HMGET', KEYS[1], 'fence', 'seq', 'phase', 'from', 'to', 'want', 'freed', 'variant')
local fence = tonumber(h[1] or '0') or 0
local seq = tonumber(h[2] or '0') or 0
local phase = h[3] or ''
local op = ARGV[1]
if op == 'get' then
  if phase ~= '' then
    return {1, seq, phase, tonumber(h[4]), tonumber(h[5]), tonumber(h[6]), tonumber(h[7] or '0'), h[8] or ''}
  end
  return {2, seq}
end
if token < fence or token < 1 then
  return {-1}
end
if token > fence then
  redis.call('HSET', KEYS[1], 'fence', token)
end
if op == 'begin' then
  if phase ~= '' then
    return {1, seq, phase, tonumber(h[4]), tonumber(h[5]), tonumber(h[6]), tonumber(h[7] or '0'), h[8] or ''}
  end
  seq = seq + 1
  redis.call('HSET', KEYS[1], 'seq', seq, 'phase', 'shrink', 'from', ARGV[3], 'to', ARGV[4],
    'want', ARGV[5], 'freed', 0, 'variant', ARGV[6] or '')
  return {0, seq}
end
if tonumber(ARGV[3]) ~= seq then
  return {-2}
end
if op == 'shrunk' then
  if phase ~= 'shrink' then
    return {-2}
  end
  redis.call('HSET', KEYS[1], 'phase', 'grant', 'freed', ARGV[4])
  return {0}
end
if op == 'done' then
  if phase == '' then
    return {0}
  end
  if phase ~= 'grant' then
    return {-2}
  end
  redis.call('HSET', KEYS[1], 'phase', '')
  return {0}
end
return redis.error_reply('ERR ledger: unknown op')
