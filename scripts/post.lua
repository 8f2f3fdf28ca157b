-- post.lua: wrk script turning wrk's one prepared request into a POST (its
-- headers come from -H), so that wrk sends one static request.
-- Its one optional argument is a body every request carries ("" none).
wrk.method = "POST"

function init(args)
  if args[1] and args[1] ~= "" then
    wrk.body = args[1]
  end
end
