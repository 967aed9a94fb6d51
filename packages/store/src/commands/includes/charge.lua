--[[
  Charging streamed output to a running request's flow (used by charge and by dispatch, which
  applies a dispatcher's coalesced charges in the same round trip).
]]
--- @include "numbers"
--- @include "queue"

-- Adds `amount` to a running request's charge and its flow's counter, and grows its reservation
-- on its replica by `grow` tokens (an output that outran its prediction); returns 1 if applied.
-- (Caching requests and flows of a batch in Lua tables was tried: the tables cost more than the
-- reads they save, ≈9,000 instructions per item more, unless many items share a flow.)
local function chargeRequest(id, amount, grow)
  local key = key_req(id)
  local r = redisCall('HMGET', key, 'state', 'pool', 'band', 'flow', 'charged')
  if r[1] ~= 'r' then return 0 end
  if amount ~= 0 then
    redisCall('HSET', key, 'charged', num(r[5]) + amount)
    addToCounter(r[2], r[3], r[4], amount)
  end
  if grow > 0 then
    local g = redisCall('HMGET', key, 'replica', 'grown')
    redisCall('HSET', key, 'grown', num(g[2]) + grow)
    local rk = key_replica(g[1])
    local t = redisCall('HGET', rk, 'tokens')
    if t then redisCall('HSET', rk, 'tokens', num(t) + grow) end
  end
  return 1
end

-- Applies the n charges (request id, amount, reservation growth) in ARGV[base + 1 ..] in order;
-- returns how many applied.
local function chargeRequests(base, n)
  local applied = 0
  for i = 0, n - 1 do
    local b = base + 1 + i * 3
    applied = applied + chargeRequest(ARGV[b], num(ARGV[b + 1]), num(ARGV[b + 2]))
  end
  return applied
end
