-- ReserveMany is Reserve for many orders of one sale (or one bucket) in one
-- call: it answers each order exactly as Reserve called once per order, in
-- argument order, would, and leaves the same state behind. It reads the sale
-- hash and the buyers it names once and writes its counters and the buyers
-- hash once, so a crowd's
-- reserves cost one script call per batch instead of one per buyer.
--
-- KEYS[1] sale hash     fg:{<sale>}:sale
-- KEYS[2] buyers hash   fg:{<sale>}:buyers
-- KEYS[3] orders stream fg:{<sale>}:orders
-- KEYS[4] primary mark  fg:{<sale>}:primary
--         (lua.PrimaryKey): the failover fence, checked as Reserve
--         checks it (see reserve.lua), once per call and only when an
--         order would take units; fenced, the sale is paused as Reserve
--         pauses it, each such order is answered {7, ""} and nothing is
--         taken
-- KEYS[5] released set  (not read: lua.ReserveKeys) fg:{<sale>}:released
-- KEYS[6] queue hash    (read in a fair queue only) fg:{<sale>}:queue
-- ARGV[1] now, unix milliseconds (every entry's ts)
-- ARGV[2] sale id
-- ARGV[3] the bucket index when KEYS are a bucket's of a bucketed sale (each
--         entry then carries it, and each sold-out answer counts one want,
--         and one of its variant's, variant:<id>:want);
--         "" otherwise
-- ARGV[4+4i], ARGV[5+4i], ARGV[6+4i], ARGV[7+4i] for i = 0..n-1: order
--         id, user id, quantity and variant id ("" none: Reserve's ARGV[8])
--         of the i-th order
-- ARGV[4+4n] optional (one more than the orders' 4n): "draw" when the
--         draw's own close path reserves winners' orders (Reserve's
--         ARGV[9]): a draw sale answers every order of any other call {2, ""};
--         with it a closed draw sale still takes the winners' orders
--
-- Returns {code_1, order_1, ..., code_n, order_n}, each pair Reserve's
-- answer {code, order id} for that order (see reserve.lua); an order
-- reserved earlier in the same call counts as the user's live order for the
-- orders after it, and the units it took from its variant are gone for them.
-- On a sale sold in variants the figures of every variant the orders name
-- are read in one HMGET, and those of the variants that sold written in one
-- HSET at the end, so that a batch naming many variants costs two calls
-- more than one of a single stock, not three per variant.
local n = math.floor((#ARGV - 3) / 4)
local flag = ''
if #ARGV > 3 + 4 * n then
  flag = ARGV[#ARGV]
end
local out = {}
local f = redis.call('HMGET', KEYS[1], 'total', 'booked', 'start', 'closed', 'per_user', 'price', 'resume', 'queue', 'queue_prequeued', 'queue_admitted', 'queue_expired', 'variants')
-- A draw sale (f[8]) sells only through its draw's close path, which needs
-- no start flag (reserve.lua's ARGV[9]).
local drawing = f[8] == 'draw'
-- A draw is paused only by a resume of 1 or more (lua.PauseOf): the
-- rebuild of a draw not started leaves resume = 0, and such a draw, never
-- started, must still reserve its winners.
local paused = f[7] and (not drawing or (tonumber(f[7]) or 0) >= 1)
if not f[1] or (drawing and flag ~= 'draw') or (f[3] ~= '1' and (not drawing or paused)) then
  local code = 1
  if f[1] then
    if drawing and flag ~= 'draw' then
      code = 2
    elseif f[4] == '1' and not drawing then
      code = 3
    elseif paused then
      code = 7
    else
      code = 2
    end
  end
  for i = 1, n do
    out[2 * i - 1] = code
    out[2 * i] = ''
  end
  return out
end
local total = tonumber(f[1])
local booked = tonumber(f[2] or '0')
local perUser = tonumber(f[5] or '1') or 1
local price = f[6] or '0'
local bucket = ARGV[3]
local taken, want = 0, 0
local vwant, vworder = {}, {} -- variant → buyers a bucket turned away sold out, in first order
local fenced = nil -- the failover fence, looked at when first needed
-- A sale sold in variants (f[12]): the total, booked and reserved of each
-- variant the orders name, all read in one HMGET (vtotal[v] false: no such
-- variant; vfield[v] the index of its total's name in fields), and the
-- variants this call took units from (vsold), in the order first taken.
local sold = f[12] and true or false
local vtotal, vbooked, vreserved, vfield, vsold, vorder = {}, {}, {}, {}, {}, {}
local fields = {}
if sold then
  for i = 1, n do
    local v = ARGV[4 * i + 3] or ''
    if v ~= '' and not vfield[v] then
      local k = #fields
      vfield[v] = k + 1
      fields[k + 1] = 'variant:' .. v .. ':total'
      fields[k + 2] = 'variant:' .. v .. ':booked'
      fields[k + 3] = 'variant:' .. v .. ':reserved'
    end
  end
  if #fields > 0 then
    local vf = redis.call('HMGET', KEYS[1], unpack(fields))
    for v, k in pairs(vfield) do
      vtotal[v] = tonumber(vf[k] or '') or false
      vbooked[v] = tonumber(vf[k + 1] or '0') or 0
      vreserved[v] = tonumber(vf[k + 2] or '0') or 0
    end
  end
end
local mine = {} -- user → order reserved by this call
local buyers = {} -- user, order, ... for one HSET
local users = {}
for i = 1, n do
  users[i] = ARGV[4 * i + 1]
end
local held = redis.call('HMGET', KEYS[2], unpack(users))
-- A fair queue (lua/queueenter.lua): only a buyer whose position is
-- admitted and whose window has not ended buys (code 9 otherwise).
local admitted = nil
local fq = {f[8], f[9], f[10], f[11]} -- read with the sale's other fields
if fq[1] == 'fair' then
  admitted = {}
  local pre, k, e = tonumber(fq[2] or '0') or 0, tonumber(fq[3] or '0') or 0, tonumber(fq[4] or '0') or 0
  local entries = redis.call('HMGET', KEYS[6], unpack(users))
  for i = 1, n do
    local v = entries[i] or ''
    local kind, pos = string.sub(v, 1, 1), tonumber(string.sub(v, 2))
    if pos and kind == 'l' then
      pos = pos + pre
    elseif kind ~= 'r' then
      pos = nil
    end
    admitted[i] = pos ~= nil and pos <= k and pos > e
  end
end
for i = 1, n do
  local order, user, qty, v = ARGV[4 * i], ARGV[4 * i + 1], ARGV[4 * i + 2], ARGV[4 * i + 3] or ''
  local existing = mine[user] or held[i]
  local code = 0
  if existing then
    code = 5
  elseif admitted and not admitted[i] then
    code = 9
  else
    local q = tonumber(qty)
    if not q or q < 1 or q > perUser or q ~= math.floor(q) then
      code = 6
    elseif (sold and (v == '' or not vtotal[v])) or (not sold and v ~= '') then
      code = 10
    elseif booked + q > total or (sold and vbooked[v] + q > vtotal[v]) then
      code = 4
      if bucket ~= '' then
        -- A bucket turning a buyer away tells the leader's rebalancing
        -- that it has buyers while it is empty (of this variant, on a
        -- variant sale).
        want = want + 1
        if sold then
          if not vwant[v] then
            vwant[v] = 0
            vworder[#vworder + 1] = v
          end
          vwant[v] = vwant[v] + 1
        end
      end
    else
      if fenced == nil then
        fenced = false
        local marker = redis.call('GET', KEYS[4])
        if marker then
          local info = redis.pcall('INFO', 'replication')
          fenced = type(info) == 'string' and string.find(info, 'master_replid:', 1, true) ~= nil
            and not string.find(info, 'master_replid:' .. marker .. '\r', 1, true)
        end
        if fenced then
          redis.call('HSET', KEYS[1], 'start', 0, 'resume', 2)
        end
      end
      if fenced then
        code = 7
      else
        booked = booked + q
        taken = taken + q
        mine[user] = order
        buyers[#buyers + 1] = user
        buyers[#buyers + 1] = order
        local e = order .. ' ' .. string.format('%d', q) .. ' ' .. price .. ' ' .. ARGV[1] .. ' ' .. bucket .. ' ' .. user
        if sold then
          if not vsold[v] then
            vsold[v] = true
            vorder[#vorder + 1] = v
          end
          vbooked[v] = vbooked[v] + q
          vreserved[v] = vreserved[v] + q
          redis.call('XADD', KEYS[3], '*', 'e', e, 'variant', v)
        else
          redis.call('XADD', KEYS[3], '*', 'e', e)
        end
        existing = order
      end
    end
  end
  out[2 * i - 1] = code
  out[2 * i] = existing or ''
end
if taken > 0 then
  redis.call('HINCRBY', KEYS[1], 'booked', taken)
  redis.call('HINCRBY', KEYS[1], 'reserved', taken)
  redis.call('HSET', KEYS[2], unpack(buyers))
  if #vorder > 0 then
    -- The figures are whole numbers far below 2^53 (a sale's total is at
    -- most a million): Redis writes them as integers, as HINCRBY would.
    local set = {}
    for j, v in ipairs(vorder) do
      local k = vfield[v]
      set[4 * j - 3] = fields[k + 1]
      set[4 * j - 2] = vbooked[v]
      set[4 * j - 1] = fields[k + 2]
      set[4 * j] = vreserved[v]
    end
    redis.call('HSET', KEYS[1], unpack(set))
  end
end
if want > 0 then
  redis.call('HINCRBY', KEYS[1], 'want', want)
  for _, v in ipairs(vworder) do
    redis.call('HINCRBY', KEYS[1], 'variant:' .. v .. ':want', vwant[v])
  end
end
return out
