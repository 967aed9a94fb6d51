--[[
  Open interactions (FairServe OIT): ZSET key_interactions() of interaction key -> end of its open
  period. An interaction is open while now < end.
]]
--- @include "numbers"
local function openInteraction(ikey, now, ttl)
  local untilMs = now + ttl
  local cur = redisCall('ZSCORE', key_interactions(), ikey)
  if not cur or untilMs > num(cur) then
    redisCall('ZADD', key_interactions(), fmt(untilMs), ikey)
  end
end
