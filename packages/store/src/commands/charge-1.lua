--[[
  Adds streamed-output costs to the counters of running requests' flows, many items in one round
  trip. Unknown and still-queued requests are ignored.

  Input:
    KEYS[1] admission sequence key_seq() (only routes the call to the store's slot)
    ARGV[1] key base  ARGV[2] number of items n, then per item: request id, amount, reservation
    growth in tokens (0: none)

  Output: number of items applied; -2 arguments not understood (client/library version skew)
]]
--- @include "includes/charge"

local n = tonumber(ARGV[2])
if n == nil or #ARGV ~= 2 + n * 3 then return -2 end
return chargeRequests(2, n)
