--[[
  Applies the dispatcher's coalesced charges, then picks the next request of a pool (bands in
  priority order; `fair`: continuations first, then the backlogged flow with the least counter,
  ties by head arrival then flow id; `score`: least (score, id)), reserves it on the first or
  best-fitting candidate replica and charges its dispatch cost to its flow's counter. If the pick
  fits no candidate nothing but the charges changes.

  Input:
    KEYS[1] the pool's queued count   key_poolQueued(pool)
    (queue, request and replica keys are built with the generated key_* functions)

    ARGV[1] key base  ARGV[2] pool  ARGV[3] ordering ('fair' | 'score')  ARGV[4] fit ('first' | 'best')
    ARGV[5] number of bands b, then b bands
    then number of replicas n, then per replica: id, tokenCapacity, seqCapacity
    then number of charges k, then per charge: request id, amount, reservation growth

  Output:
    { 'empty' }
    { 'blocked', id, reserveTokens }
    { 'dispatched', replica, request JSON }
    -1 (state corrupt: an indexed flow or request without its record)
    -2 (arguments not understood: client/script version skew)
]]
--- @include "includes/pick"

local d = dispatchArgs(0)
if d == nil then return -2 end
return dispatchNext(d)
