--[[
  Runs k dispatches with the same arguments one after another, exactly as k dispatch-1.lua calls
  made in a row would: concurrent picks of one dispatcher from the same pool onto the same
  candidates, in one round trip (the call's fixed cost and its arguments paid once). A pick that
  finds nothing to dispatch or nothing that fits changes nothing, so the picks after it are told
  the same.

  Input:
    KEYS[1] the pool's queued count   key_poolQueued(pool)
    ARGV[1] key base  ARGV[2] k, the number of picks
    ARGV[3 ..] the dispatch, as ARGV[2 ..] of dispatch-1.lua, with no charges

  Output:
    { reply, ... } k replies, each as dispatch-1.lua's: { 'empty' }, { 'blocked', id,
    reserveTokens }, { 'dispatched', replica, request JSON } or -1 (state corrupt: nothing changed
    by it or after it)
    -2 (arguments not understood, or charges given: client/script version skew)
]]
--- @include "includes/pick"

local k = tonumber(ARGV[2])
local d = dispatchArgs(1)
if k == nil or d == nil or d.nCharges ~= 0 then return -2 end
-- The picks keep what they read and reserve on the replicas in hand, and write it once at the end.
d.known, d.write, d.noCont = {}, {}, {}
local out = {}
local last = nil
for i = 1, k do
  if last == nil or (last ~= -1 and last[1] == 'dispatched') then last = dispatchNext(d) end
  out[i] = last
end
finishPicks(d)
return out
