--[[
  Settles a running request and dispatches the next request of a pool into the room it freed, in
  one round trip: the completion path's common case. Reports what is left queued in the pool and
  what is reserved on every candidate replica, like admitAndDispatch.

  Input:
    KEYS[1] request record key_req(id)
    ARGV[1] key base
    ARGV[2 .. 7] the settlement, as ARGV[2 ..] of settle-1.lua
    ARGV[8 ..] the dispatch, as ARGV[2 ..] of dispatch-1.lua

  Output:
    { settled, dispatchReply, poolQueued, reservations }
      settled        1 settled, 0 the request was not running (the dispatch happens either way)
      dispatchReply  as dispatch-1.lua's
      poolQueued     requests queued in the dispatch's pool after the call
      reservations   { tokens, seqs, ... } of every candidate replica after the call, in order
    -1 (state corrupt: an indexed flow or request without its record)
    -2 (arguments not understood: client/script version skew)
]]
--- @include "includes/settlement"
--- @include "includes/pick"

local o = 6
local d = dispatchArgs(o)
if d == nil then return -2 end

-- The pick need not read the replica the settlement released (unless charges change it first),
-- and if it reserves on it, writes it once for both.
local noCharges = d.nCharges == 0
local settled, replica, held, heldKey, unwritten = settleRequest(0, noCharges)
if settled == 1 and noCharges then
  d.known = { [replica] = held }
  if unwritten then d.unwritten = replica end
end
readQueued(d)
local dispatched = dispatchNext(d)
if d.unwritten ~= nil then writeHeld(heldKey, held) end
if dispatched == -1 then return -1 end
return { settled, dispatched, d.queued, candidateReservations(d) }
