-- wrk script for the purchase path: each request buys as another user, with
-- tokens read from the file named by the first script argument; the second
-- is the number of wrk threads, the third the index of the first token.
local counter = 0
function setup(thread)
  thread:set("id", counter)
  counter = counter + 1
end

local tokens, n, nthreads, offset = {}, 0, 2, 0
function init(args)
  for line in io.lines(args[1]) do
    tokens[#tokens + 1] = line
  end
  nthreads = tonumber(args[2] or "2")
  offset = tonumber(args[3] or "0")
end

function request()
  local t = tokens[(offset + n * nthreads + id) % #tokens + 1]
  n = n + 1
  return wrk.format("POST", wrk.path, {["Authorization"] = "Bearer " .. t}, nil)
end
