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
    ARGV[20] default lease ms  ARGV[21] queue-full retry ms  ARGV[22] number of limits n
    then per limit: key, limit, amount, windowMs, onlyWhenOverloaded ('0'|'1'), code, trueUp ('0'|'1')

  Output:
    { 1, queued }                          admitted; queued = size of the (pool, band) queue
    { 0, code, retryAfterMs, key }         rejected
    -2                                     arguments not understood (client/script version skew)
]]
--- @include "includes/numbers"
--- @include "includes/queue"
--- @include "includes/windows"
--- @include "includes/interactions"

local id, pool, band, flow = ARGV[2], ARGV[3], ARGV[4], ARGV[5]
local owner = ARGV[10]
local now = tonumber(ARGV[13])
local ikey = ARGV[16]
local nLimits = tonumber(ARGV[22])
if nLimits == nil or #ARGV ~= 22 + nLimits * 7 then return -2 end

if redis.call('EXISTS', KEYS[1]) == 1 then return { 0, 'duplicate', '0', id } end

local interactionOpen = false
if ikey ~= '' then
  local untilMs = redis.call('ZSCORE', KEYS[4], ikey)
  interactionOpen = untilMs ~= false and now < tonumber(untilMs)
end
local throttleApplies = ARGV[15] == '1' and not interactionOpen

for i = 0, nLimits - 1 do
  local b = 23 + i * 7
  local wkey, limit, amount, windowMs = ARGV[b], tonumber(ARGV[b + 1]), tonumber(ARGV[b + 2]), tonumber(ARGV[b + 3])
  if not (ARGV[b + 4] == '1' and not throttleApplies) then
    purgeWindow(wkey, now - windowMs)
    local retry = windowRetryAfter(wkey, amount, limit, windowMs, now)
    if retry ~= nil then return { 0, ARGV[b + 5], fmt(retry), wkey } end
  end
end

if ARGV[18] ~= '' then
  local n = redis.call('ZCARD', key_fifo(pool, band, flow))
  if n >= tonumber(ARGV[18]) then
    return { 0, 'queue_full', ARGV[21], 'flow:' .. pool .. ':' .. band .. ':' .. flow }
  end
end
if ARGV[19] ~= '' then
  if num(redis.call('GET', key_poolQueued(pool))) >= tonumber(ARGV[19]) then
    return { 0, 'queue_full', ARGV[21], 'pool:' .. pool }
  end
end

local record = {
  'rec', ARGV[11], 'pool', pool, 'band', band, 'flow', flow, 'arrival', ARGV[7], 'reserve', ARGV[8],
  'cost', ARGV[9], 'owner', owner, 'cont', ARGV[12], 'state', 'q', 'replica', '',
  'charged', '0', 'ikey', ikey, 'ittl', ARGV[17], 'wn', nLimits,
}
for i = 0, nLimits - 1 do
  local b = 23 + i * 7
  addToWindow(ARGV[b], id, now, tonumber(ARGV[b + 2]))
  record[#record + 1] = 'wk' .. (i + 1)
  record[#record + 1] = ARGV[b]
  record[#record + 1] = 'wt' .. (i + 1)
  record[#record + 1] = ARGV[b + 6]
end
if ikey ~= '' then
  redis.call('ZREMRANGEBYSCORE', KEYS[4], '-inf', fmt(now))
  openInteraction(ikey, now, tonumber(ARGV[17]))
end
if not redis.call('ZSCORE', KEYS[2], owner) then
  redis.call('ZADD', KEYS[2], fmt(now + tonumber(ARGV[20])), owner)
end
redis.call('SADD', key_owner(owner), id)

local seq = redis.call('INCR', KEYS[3])
local fm = sortKey(tonumber(ARGV[7])) .. id
record[#record + 1] = 'fm'
record[#record + 1] = fm
redis.call('HSET', KEYS[1], unpack(record))
local size = enqueue(pool, band, flow, id, fm, seq, ARGV[6], ARGV[7], ARGV[12] == '1', ARGV[14])
return { 1, size }
