--[[
  Admits a request and, if it is admitted, dispatches the next request of a pool, atomically: the
  request path's common case (a request arrives and a replica has room) in one round trip. Reports
  what is left queued in the pool and what is reserved on every candidate replica, so the caller's
  view of the fleet stays fresh without reading it on the request path.

  Input:
    KEYS[1] request record       key_req(id)
    KEYS[2] owner leases         key_leases()
    KEYS[3] admission sequence   key_seq()
    KEYS[4] open interactions    key_interactions()
    (the other keys are built from ARGV with the generated key_* functions)

    ARGV[1] key base
    ARGV[2 .. a] the admission, as ARGV[2 ..] of admit-4.lua (a = 23 + 8 * number of limits)
    ARGV[a + 1 ..] the dispatch, as ARGV[2 ..] of dispatch-1.lua

  Output:
    { admitReply, dispatchReply, poolQueued, reservations }
      admitReply     as admit-4.lua's
      dispatchReply  as dispatch-1.lua's; { 'none' } when the admission was rejected
      poolQueued     requests queued in the dispatch's pool after the call
      reservations   { tokens, seqs, ... } of every candidate replica after the call, in order
    -1 (state corrupt: an indexed flow or request without its record)
    -2 (arguments not understood: client/script version skew)
]]
--- @include "includes/admission"
--- @include "includes/pick"

local a = admissionEnd(0)
if a == nil or #ARGV <= a then return -2 end
local o = a - 1
if not dispatchArgsValid(o) then return -2 end

local admitted = admitRequest(0)
local dispatched = { 'none' }
if admitted[1] == 1 then
  dispatched = dispatchNext(o)
  if dispatched == -1 then return -1 end
end
return {
  admitted,
  dispatched,
  num(redis.call('GET', key_poolQueued(ARGV[o + 2]))),
  candidateReservations(o),
}
