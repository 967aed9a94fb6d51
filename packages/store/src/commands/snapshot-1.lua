--[[
  Reads one queue consistently: every counter, and each backlogged flow in fair order (counter,
  head arrival, flow) with its queue length.

  Input:
    KEYS[1] the queue's flows key_flows(pool, band)
    ARGV[1] key base  ARGV[2] pool  ARGV[3] band

  Output: { { flow, counter, ... }, { flow, queued, ... } }
]]
--- @include "includes/numbers"
--- @include "includes/queue"

local pool, band = ARGV[2], ARGV[3]
local backlogged = {}
for _, member in ipairs(redisCall('ZRANGE', key_backlog(pool, band), '0', '-1')) do
  local flow = memberFlow(member)
  backlogged[#backlogged + 1] = flow
  backlogged[#backlogged + 1] = redisCall('ZCARD', key_fifo(pool, band, flow))
end
local counters = {}
for _, flow in ipairs(redisCall('SMEMBERS', KEYS[1])) do
  counters[#counters + 1] = flow
  counters[#counters + 1] = redisCall('HGET', key_flow(pool, band, flow), 'n') or '0'
end
return { counters, backlogged }
