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

-- 1 settled, 0 the request was not running; when settled, also the replica it ran on, what that
-- replica holds now, its key and whether that is still to be written (as release returns them;
-- `deferRelease` is release's `defer`).
local function settleRequest(o, deferRelease)
  local id = ARGV[o + 2]
  local r = loadReq(id, true)
  if r == nil or r.state ~= 'r' then return 0 end
  addToCounter(r.pool, r.band, r.flow, num(ARGV[o + 4]) - num(r.charged))
  local held, heldKey, unwritten = release(r, deferRelease)
  trueUpWindows(r, num(ARGV[o + 5]), num(ARGV[o + 3]))
  recordUsage(id, r, num(ARGV[o + 5]), num(ARGV[o + 6]))
  local hist = key_history(r.flow)
  local keep = num(ARGV[o + 7])
  local len = redisCall('RPUSH', hist, ARGV[o + 6])
  -- Keeps the last `keep` (a list at its length drops its oldest: LPOP takes no number to format,
  -- and its reply is a string, not a status table). keep < 1 trims as the client asked.
  if keep < 1 then
    redisCall('LTRIM', hist, -keep, -1)
  elseif len == keep + 1 then
    redisCall('LPOP', hist)
  elseif len > keep then
    redisCall('LTRIM', hist, -keep, -1)
  end
  if r.ikey ~= '' then openInteraction(r.ikey, num(ARGV[o + 3]), num(r.ittl)) end
  forgetReq(id, r)
  return 1, r.replica, held, heldKey, unwritten
end
