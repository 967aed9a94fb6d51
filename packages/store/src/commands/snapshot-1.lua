--[[
  Reads one queue consistently: every counter, and each backlogged flow with its queue length and
  head arrival (the caller orders them by (counter, head arrival, flow)).

  Input:
    KEYS[1] the queue's counters key_counters(pool, band)
    ARGV[1] key base  ARGV[2] pool  ARGV[3] band

  Output: { { flow, counter, ... }, { flow, queued, headArrival, ... } }
]]
--- @include "includes/numbers"
--- @include "includes/queue"

local pool, band = ARGV[2], ARGV[3]
local backlogged = {}
for _, flow in ipairs(redis.call('ZRANGE', key_backlog(pool, band), 0, -1)) do
  local fifo = key_fifo(pool, band, flow)
  local _, arr = fifoHead(fifo)
  backlogged[#backlogged + 1] = flow
  backlogged[#backlogged + 1] = redis.call('ZCARD', fifo)
  backlogged[#backlogged + 1] = fmt(arr or 0)
end
return { redis.call('HGETALL', KEYS[1]), backlogged }
