--[[
  Adds streamed-output costs to the counters of running requests' flows, many items in one round
  trip. Unknown and still-queued requests are ignored.

  Input:
    KEYS[1] admission sequence key_seq() (only routes the call to the store's slot)
    ARGV[1] key base  ARGV[2] number of items n, then per item: request id, amount

  Output: number of items applied
]]
--- @include "includes/charge"

local applied = 0
for i = 0, tonumber(ARGV[2]) - 1 do
  applied = applied + chargeRequest(ARGV[3 + i * 2], tonumber(ARGV[4 + i * 2]))
end
return applied
