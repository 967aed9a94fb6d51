--[[
  Charging streamed output to a running request's flow (used by charge and by dispatch, which
  applies a dispatcher's coalesced charges in the same round trip).
]]
--- @include "numbers"
--- @include "queue"

-- Adds `amount` to a running request's charge and its flow's counter; returns 1 if applied.
-- (Caching requests and flows of a batch in Lua tables was tried: the tables cost more than the
-- reads they save, ≈9,000 instructions per item more, unless many items share a flow.)
local function chargeRequest(id, amount)
  local key = key_req(id)
  local r = redis.call('HMGET', key, 'state', 'pool', 'band', 'flow', 'charged')
  if r[1] ~= 'r' then return 0 end
  redis.call('HSET', key, 'charged', num(r[5]) + amount)
  addToCounter(r[2], r[3], r[4], amount)
  return 1
end

-- Applies the n charges (request id, amount) in ARGV[base + 1 ..] in order; returns how many applied.
local function chargeRequests(base, n)
  local applied = 0
  for i = 0, n - 1 do
    applied = applied + chargeRequest(ARGV[base + 1 + i * 2], num(ARGV[base + 2 + i * 2]))
  end
  return applied
end
