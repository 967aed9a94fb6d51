--[[
  Adds streamed-output costs to the counters of running requests' flows, many items in one round
  trip. Unknown and still-queued requests are ignored.

  Input:
    KEYS[1] admission sequence key_seq() (only routes the call to the store's slot)
    ARGV[1] key base  ARGV[2] number of items n, then per item: request id, amount

  Output: number of items applied
]]
--- @include "includes/numbers"
--- @include "includes/queue"

local applied = 0
for i = 0, tonumber(ARGV[2]) - 1 do
  local id, amount = ARGV[3 + i * 2], tonumber(ARGV[4 + i * 2])
  local key = key_req(id)
  local r = redis.call('HMGET', key, 'state', 'pool', 'band', 'flow', 'charged')
  if r[1] == 'r' then
    redis.call('HSET', key, 'charged', fmt(tonumber(r[5]) + amount))
    addToCounter(r[2], r[3], r[4], amount)
    applied = applied + 1
  end
end
return applied
