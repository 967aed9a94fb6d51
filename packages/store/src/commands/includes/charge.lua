--[[
  Charging streamed output to a running request's flow (used by charge and by dispatch, which
  applies a dispatcher's coalesced charges in the same round trip).
]]
--- @include "numbers"
--- @include "queue"

-- Adds `amount` to a running request's charge and its flow's counter; returns 1 if applied.
local function chargeRequest(id, amount)
  local key = key_req(id)
  local r = redis.call('HMGET', key, 'state', 'pool', 'band', 'flow', 'charged')
  if r[1] ~= 'r' then return 0 end
  redis.call('HSET', key, 'charged', tonumber(r[5]) + amount)
  addToCounter(r[2], r[3], r[4], amount)
  return 1
end
