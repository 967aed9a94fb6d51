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
local d = dispatchArgs(o)
if d == nil then return -2 end

-- With nothing queued in the pool, no charges to apply first and the request's band among the
-- dispatch's, the dispatch would pick this very request: it goes to a replica as it is admitted
-- (see admitRequest), or, if none has room, the dispatch is known to be blocked on it.
local tried, place = false, nil
if d.nCharges == 0 and d.pool == ARGV[3] and readQueued(d) == 0 then
  for bi = 1, d.nBands do
    if ARGV[o + 5 + bi] == ARGV[4] then
      place = function(reserve, aff, affTokens, affSeqs, px)
        tried = true
        return choose(d, reserve, aff, affTokens, affSeqs, px)
      end
      break
    end
  end
end

-- The pool's queued count, when the dispatch has read it, serves the admission's pool bound too.
local admitted, placed = admitRequest(0, place, d.pool == ARGV[3] and d.queued or nil)
local dispatched, queued = { 'none' }, nil
-- An admission that did not place the request queued it: the count read above is stale.
if admitted[1] == 1 and placed == nil then d.queued = nil end
if admitted[1] == 1 then
  if placed ~= nil then
    dispatched, queued = { 'dispatched', placed, ARGV[11] }, 0
  elseif tried then
    dispatched = { 'blocked', ARGV[2], ARGV[8] }
  else
    dispatched = dispatchNext(d)
    if dispatched == -1 then return -1 end
  end
end
return {
  admitted,
  dispatched,
  queued or readQueued(d),
  candidateReservations(d),
}
