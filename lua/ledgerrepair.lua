-- LedgerRepair moves a bucketed sale's allocation ledger forward after the
-- primary holding it failed over and the promoted replica lost its last
-- records. The buckets keep the number of the last move that shrank or
-- credited them (sseq, gseq); a ledger behind them would number its next
-- move like one already made, and a bucket would answer that move's shrink
-- with units it freed before (lua.Shrink is idempotent per move), which a
-- second bucket would then be credited with: units sold twice. The control
-- plane reads the buckets and calls this script with the highest move
-- number they carry, and, when no bucket was credited with that move, the
-- move's units freed from its giver, to be credited back to it.
--
-- KEYS[1] ledger hash  fg:{<sale>~ledger}:ledger
-- ARGV[1] the caller's fencing token (a positive integer)
-- ARGV[2] seq: the highest move number a bucket carries
-- ARGV[3] phase: "" (the move is done) or "grant" (its units still to credit)
-- ARGV[4] from bucket, ARGV[5] to bucket, ARGV[6] units freed (for "grant")
-- ARGV[7] optional: the variant of those units, on a sale sold in variants
--         ('' or absent: one stock)
--
-- Returns 1 the ledger now records move seq, 0 it had seq or a later move
-- already (nothing changed), -1 a newer leader wrote the ledger.
local token = tonumber(ARGV[1]) or 0
local h = redis.call('HMGET', KEYS[1], 'fence', 'seq')
local fence = tonumber(h[1] or '0') or 0
if token < fence or token < 1 then
  return -1
end
if token > fence then
  redis.call('HSET', KEYS[1], 'fence', token)
end
local seq = tonumber(ARGV[2]) or 0
if (tonumber(h[2] or '0') or 0) >= seq then
  return 0
end
redis.call('HSET', KEYS[1], 'seq', seq, 'phase', ARGV[3], 'from', ARGV[4], 'to', ARGV[5],
  'want', ARGV[6], 'freed', ARGV[6], 'variant', ARGV[7] or '')
return 1
