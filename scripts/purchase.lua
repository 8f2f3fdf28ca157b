-- purchase.lua: wrk script sending POSTs, each with the next bearer token of
-- a file (one token a line), so that every request is another buyer.
-- Arguments (after --): the token file, the number of wrk threads, and
-- optionally a body every request carries ("" none; e.g. a variant).
-- Each thread keeps every n-th token and formats all its requests in init,
-- before the clock starts, so that request() only returns a prepared string
-- and wrk stays far from being the bottleneck. Tokens are reused from the
-- start when a thread runs out (the run then shows already_purchased answers).
wrk.method = "POST"

local counter = 0
function setup(thread)
  thread:set("id", counter)
  counter = counter + 1
end

local reqs, n, count = {}, 0, 0
function init(args)
  local nthreads = tonumber(args[2] or "1")
  local body = args[3]
  if body == "" then body = nil end
  local i = 0
  for line in io.lines(args[1]) do
    if i % nthreads == id then
      count = count + 1
      reqs[count] = wrk.format(nil, nil, { ["Authorization"] = "Bearer " .. line }, body)
    end
    i = i + 1
  end
  if count == 0 then
    error("purchase.lua: no tokens for thread " .. id .. " in " .. args[1])
  end
end

function request()
  n = n + 1
  if n > count then n = 1 end
  return reqs[n]
end
