-- post.lua: wrk script turning wrk's one prepared request into a POST (its
-- headers come from -H), so that wrk sends one static request.
wrk.method = "POST"
