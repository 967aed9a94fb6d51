--[[
  Admits a request: duplicate check, window limits (throttles only when overloaded and outside an
  open interaction), queue bounds; then records window usage, opens the interaction, grants the
  owner a default lease, lifts the flow's counter and enqueues. A rejection changes nothing.

  Input:
    KEYS[1] request record       key_req(id)
    KEYS[2] owner leases         key_leases()
    KEYS[3] admission sequence   key_seq()
    KEYS[4] open interactions    key_interactions()
    (window, queue and owner keys are built from ARGV with the generated key_* functions)

    ARGV[1] key base  ARGV[2] id  ARGV[3] pool  ARGV[4] band  ARGV[5] flow  ARGV[6] score
    ARGV[7] arrivalMs  ARGV[8] reserveTokens  ARGV[9] dispatchCost  ARGV[10] owner
    ARGV[11] the QueuedRequest as JSON  ARGV[12] continuation ('0' | '1')  ARGV[13] nowMs  ARGV[14] lift ('vtc' | 'none')
    ARGV[15] overloaded ('0' | '1')  ARGV[16] interaction key ('' if none)  ARGV[17] interaction ttl
    ARGV[18] maxQueuedFlow ('' if none)  ARGV[19] maxQueuedPool ('' if none)
    ARGV[20] default lease ms  ARGV[21] queue-full retry ms  ARGV[22] tenant (scopes windows and
    the interaction)  ARGV[23] number of limits n
    then per limit: key, limit, amount, windowMs, onlyWhenOverloaded ('0'|'1'), code, trueUp ('0'|'1'),
    shared ('0'|'1': one window for all tenants)
    then the usage account and quotas (includes/usage.lua)
    then the affinity: replica id ('' none), tokenCapacity, seqCapacity

  Output:
    { 1, queued, alerts, share, held }     admitted; queued = size of the (pool, band) queue,
                                           alerts { quota, bucket, budget, used, ... } (may be
                                           empty), share of the quotas with a minAmount ('' none),
                                           held { total, oldest bucket end, ... } per limit
    { 0, code, retryAfterMs, key [, total] }  rejected (total: what the refusing window holds)
    -2                                     arguments not understood (client/script version skew)
]]
--- @include "includes/admission"

if admissionEnd(0) ~= #ARGV then return -2 end
local reply = admitRequest(0)
return reply
