--[[
  Reads one queue consistently: every counter, and each backlogged flow in fair order (counter,
  head arrival, flow) with its queue length.

  Input:
    KEYS[1] the queue's hash key_queue(pool, band)
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
local counters = {}
local flat = redis.call('HGETALL', KEYS[1])
for i = 1, #flat, 2 do
  if string.sub(flat[i], 1, 2) == 'n:' then
    counters[#counters + 1] = string.sub(flat[i], 3)
    counters[#counters + 1] = flat[i + 1]
  end
end
return { counters, backlogged }
