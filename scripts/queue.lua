-- queue.lua: wrk script sending each request as the next entrant of a fair
-- queue: a file of "<token> <ticket>" lines (one entrant a line) gives each
-- request its bearer token and X-Queue-Ticket header.
-- Arguments (after --): the entrant file, the number of wrk threads, the
-- method (GET for the status poll, POST for a purchase).
-- Like purchase.lua, each thread keeps every n-th entrant and formats all
-- its requests in init, before the clock starts, so that request() only
-- returns a prepared string; a thread that runs out starts over.
local counter = 0
function setup(thread)
  thread:set("id", counter)
  counter = counter + 1
end

local reqs, n, count = {}, 0, 0
function init(args)
  local nthreads = tonumber(args[2] or "1")
  local method = args[3] or "GET"
  local i = 0
  for line in io.lines(args[1]) do
    if i % nthreads == id then
      local tok, ticket = line:match("^(%S+)%s+(%S+)$")
      if not tok then
        error("queue.lua: want \"<token> <ticket>\" on line " .. (i + 1) .. " of " .. args[1])
      end
      count = count + 1
      reqs[count] = wrk.format(method, nil, { ["Authorization"] = "Bearer " .. tok, ["X-Queue-Ticket"] = ticket }, nil)
    end
    i = i + 1
  end
  if count == 0 then
    error("queue.lua: no entrants for thread " .. id .. " in " .. args[1])
  end
end

function request()
  n = n + 1
  if n > count then n = 1 end
  return reqs[n]
end
