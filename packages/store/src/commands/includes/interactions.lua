--[[
  Open interactions (FairServe OIT): ZSET key_interactions() of interaction key -> end of its open
  period. An interaction is open while now < end. HASH key_interactionCalls() counts the calls
  admitted in an interaction's open period: a call's stage is the number admitted before it.
]]
--- @include "numbers"
local function openInteraction(ikey, now, ttl)
  local untilMs = now + ttl
  local cur = redisCall('ZSCORE', key_interactions(), ikey)
  -- A period that ended (or never began) starts anew: no calls counted in it yet.
  if not cur or num(cur) <= now then redisCall('HDEL', key_interactionCalls(), ikey) end
  if not cur or untilMs > num(cur) then
    redisCall('ZADD', key_interactions(), fmt(untilMs), ikey)
  end
end

-- Counts a call admitted in interaction ikey, whose period openInteraction just opened or kept
-- open, and returns its stage: the calls admitted before it in the period.
local function countInteractionCall(ikey)
  return redisCall('HINCRBY', key_interactionCalls(), ikey, 1) - 1
end

-- Forgets up to 32 interactions whose open period ended (each admission that names an interaction
-- purges at least as many as it may add, so the set stays bounded by the open ones).
local function purgeInteractions(now)
  local ended = redisCall('ZRANGEBYSCORE', key_interactions(), '-inf', fmt(now), 'LIMIT', 0, 32)
  if #ended == 0 then return end
  redisCall('ZREM', key_interactions(), unpack(ended))
  redisCall('HDEL', key_interactionCalls(), unpack(ended))
end
