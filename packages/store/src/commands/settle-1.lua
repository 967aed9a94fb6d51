--[[
  Ends a running request: corrects its flow's counter to the final cost, releases its replica
  reservation, trues up its TPM windows, records its output length (VTC(predict)) and keeps its
  interaction open for another ttl.

  Input:
    KEYS[1] request record key_req(id)
    ARGV[1] key base  ARGV[2] id  ARGV[3] nowMs  ARGV[4] finalCost  ARGV[5] actualTokens
    ARGV[6] outputTokens  ARGV[7] history length to keep

  Output: 1 settled, 0 the request was not running
]]
--- @include "includes/settlement"

if #ARGV ~= 7 then return -2 end
local settled = settleRequest(0)
return settled
