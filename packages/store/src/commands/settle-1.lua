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
--- @include "includes/numbers"
--- @include "includes/request"
--- @include "includes/queue"
--- @include "includes/windows"
--- @include "includes/interactions"

local id = ARGV[2]
local r = loadReq(id)
if r == nil or r.state ~= 'r' then return 0 end
addToCounter(r.pool, r.band, r.flow, tonumber(ARGV[4]) - tonumber(r.charged))
release(r)
trueUpWindows(id, r, tonumber(ARGV[5]))
local hist = key_history(r.flow)
redis.call('RPUSH', hist, ARGV[6])
redis.call('LTRIM', hist, -tonumber(ARGV[7]), -1)
if r.ikey ~= '' then openInteraction(r.ikey, tonumber(ARGV[3]), tonumber(r.ittl)) end
forgetReq(id, r)
return 1
