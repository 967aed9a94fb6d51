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
if not dispatchArgsValid(o) then return -2 end

local settled = settleRequest(0)
local dispatched = dispatchNext(o)
if dispatched == -1 then return -1 end
return {
  settled,
  dispatched,
  num(redis.call('GET', key_poolQueued(ARGV[o + 2]))),
  candidateReservations(o),
}
