--[[
  Settlement (settle, settleAndDispatch): ends a running request — corrects its flow's counter to
  the final cost, releases its replica reservation, trues up its TPM windows, records its output
  length (VTC(predict)), keeps its interaction open for another ttl, and records its usage
  (includes/usage.lua).

  settleRequest(o) reads its arguments from ARGV[o + 2] on, in settle-1.lua's layout (o = 0 there):
  id, nowMs, finalCost, actualTokens, outputTokens, history length; the last is ARGV[o + 7].
]]
--- @include "numbers"
--- @include "request"
--- @include "queue"
--- @include "windows"
--- @include "interactions"
--- @include "usage"

-- 1 settled, 0 the request was not running.
local function settleRequest(o)
  local id = ARGV[o + 2]
  local r = loadReq(id)
  if r == nil or r.state ~= 'r' then return 0 end
  addToCounter(r.pool, r.band, r.flow, num(ARGV[o + 4]) - num(r.charged))
  release(r)
  trueUpWindows(id, r, num(ARGV[o + 5]))
  recordUsage(id, r, num(ARGV[o + 5]), num(ARGV[o + 6]))
  local hist = key_history(r.flow)
  redis.call('RPUSH', hist, ARGV[o + 6])
  redis.call('LTRIM', hist, -num(ARGV[o + 7]), -1)
  if r.ikey ~= '' then openInteraction(r.ikey, num(ARGV[o + 3]), num(r.ittl)) end
  forgetReq(id, r)
  return 1
end
