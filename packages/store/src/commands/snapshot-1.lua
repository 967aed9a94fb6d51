--[[
  Reads one queue consistently: every counter, and each backlogged flow in fair order (counter,
  head arrival, flow) with its queue length.

  Input:
    KEYS[1] the queue's counters key_counters(pool, band)
    ARGV[1] key base  ARGV[2] pool  ARGV[3] band

  Output: { { flow, counter, ... }, { flow, queued, ... } }
]]
--- @include "includes/numbers"
--- @include "includes/queue"

local pool, band = ARGV[2], ARGV[3]
local backlogged = {}
for _, member in ipairs(redis.call('ZRANGE', key_backlog(pool, band), 0, -1)) do
  local flow = memberFlow(member)
  backlogged[#backlogged + 1] = flow
  backlogged[#backlogged + 1] = redis.call('ZCARD', key_fifo(pool, band, flow))
end
return { redis.call('HGETALL', KEYS[1]), backlogged }
