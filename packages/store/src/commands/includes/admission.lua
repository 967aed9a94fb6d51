--[[
  Admission (admit, admitAndDispatch): duplicate check, window limits (throttles only when
  overloaded and outside an open interaction), queue bounds; then window usage, the interaction,
  the owner's default lease, the counter lift and the enqueue. A rejection changes nothing but the
  throttle windows (onlyWhenOverloaded), which count every arrival, admitted or not (FairServe
  Algorithm 1 line 19: the counter is incremented on arrival, before the limits are checked).

  admitRequest(o) reads the admission arguments from ARGV[o + 2] on, in admit-4.lua's layout (o = 0
  there): ARGV[o + 2] id ... ARGV[o + 22] tenant, ARGV[o + 23] number of limits n, then 8 per limit,
  then the usage account and quotas (includes/usage.lua, e = o + 23 + 8n), then the request's
  affinity: replica id ('' none), tokenCapacity, seqCapacity (kept in the record as aff, afft,
  affs for the pick), then its prefix parts ('' none; kept as px, see includes/prefixes.lua).
  admissionEnd(o) is the index of its last argument (nil if a count is not a number).

  Windows and the interaction belong to the request's tenant: their keys are the caller's keys
  prefixed with lp(tenant) (as tenantScoped in keys.ts), so no key a request names reaches another
  tenant's window or interaction; a shared limit's window is scoped by lp('') (tenant ids are never
  empty), one for all tenants. Records keep the scoped keys; rejections report the caller's.
]]
--- @include "numbers"
--- @include "queue"
--- @include "windows"
--- @include "interactions"
--- @include "usage"

local function admissionEnd(o)
  local n = tonumber(ARGV[o + 23])
  if n == nil then return nil end
  local e = usageEnd(o + 23 + n * 8)
  if e == nil then return nil end
  return e + 4
end

-- Counts amount in limit i's window (b its first argument), with the window its check read if
-- any (`read`, by limit index from 0: what purgeWindow returned, false if empty).
local function countInWindow(wkey, b, now, read, i)
  local w = read[i]
  if w == nil then return addToWindow(wkey, now, num(ARGV[b + 3]), num(ARGV[b + 2]), now) end
  return addToWindow(wkey, now, num(ARGV[b + 3]), num(ARGV[b + 2]), now, true, w or nil)
end

-- Counts a rejected arrival in the request's throttle windows (see the header).
local function countRejectedArrival(o, now, scope, nLimits, read)
  for i = 0, nLimits - 1 do
    local b = o + 24 + i * 8
    if ARGV[b + 4] == '1' then
      local wkey = (ARGV[b + 7] == '1' and lp('') or scope) .. ARGV[b]
      countInWindow(wkey, b, now, read, i)
    end
  end
end

-- { 1, queued, alerts, share, held, stage } admitted (queued = size of the (pool, band) queue;
-- alerts as reserveQuotas returns them, empty if none; share as checkQuotas returns it, '' if
-- none; held { total, oldest bucket end, ... } of every window after the admission, in limit
-- order; stage the calls admitted before it in its open interaction, '' without one), or
-- { 0, code, retryAfterMs, key [, total] } (total: what the refusing window holds, for a limit).
-- `place` (admitAndDispatch, when the request is the only one its dispatch can pick, see there)
-- is asked, once the request is admitted, for a replica with room: place(reserveTokens) returns
-- the replica's id, key, and tokens and seqs with the request on it, or nil. With one, the request
-- runs there at once — it is recorded running and `passThrough` leaves the flow as enqueue and the
-- dispatch would, without the queue writes that cancel out — and its id is the second result.
-- `poolQueued`, when the caller has read it in this call, is the size of the request's pool.
local function admitRequest(o, place, poolQueued)
  local id, pool, band, flow = ARGV[o + 2], ARGV[o + 3], ARGV[o + 4], ARGV[o + 5]
  local owner = ARGV[o + 10]
  local now = num(ARGV[o + 13])
  local scope = lp(ARGV[o + 22])
  local ikey = ARGV[o + 16]
  if ikey ~= '' then ikey = scope .. ikey end
  local nLimits = num(ARGV[o + 23])
  local reqKey = key_req(id)

  if redisCall('EXISTS', reqKey) == 1 then return { 0, 'duplicate', '0', id } end

  local interactionOpen = false
  if ikey ~= '' then
    local untilMs = redisCall('ZSCORE', key_interactions(), ikey)
    interactionOpen = untilMs ~= false and now < num(untilMs)
  end
  local throttleApplies = ARGV[o + 15] == '1' and not interactionOpen
  -- A call made while its interaction is open continues it, whoever says so (FairServe).
  local cont = (ARGV[o + 12] == '1' or interactionOpen) and '1' or '0'

  -- The windows the checks read, kept so that counting in them needs no second read (a request's
  -- limits name distinct windows, as admitInputSchema requires).
  local read = {}
  for i = 0, nLimits - 1 do
    local b = o + 24 + i * 8
    local wkey = (ARGV[b + 7] == '1' and lp('') or scope) .. ARGV[b]
    local limit, amount, windowMs = num(ARGV[b + 1]), num(ARGV[b + 2]), num(ARGV[b + 3])
    if not (ARGV[b + 4] == '1' and not throttleApplies) then
      local w = purgeWindow(wkey, now)
      read[i] = w or false
      local retry = windowRetryAfter(wkey, w, amount, limit, windowMs, now)
      if retry ~= nil then
        countRejectedArrival(o, now, scope, nLimits, read)
        return { 0, ARGV[b + 5], fmt(retry), ARGV[b], fmt(w and w[1] or 0) }
      end
    end
  end
  local ue = o + 23 + nLimits * 8
  local overQuota, share = checkQuotas(ue, ARGV[o + 22], now)
  if overQuota ~= nil then
    countRejectedArrival(o, now, scope, nLimits, read)
    return overQuota
  end

  if ARGV[o + 18] ~= '' then
    local n = redisCall('ZCARD', key_fifo(pool, band, flow))
    if n >= num(ARGV[o + 18]) then
      countRejectedArrival(o, now, scope, nLimits, read)
      return { 0, 'queue_full', ARGV[o + 21], 'flow:' .. pool .. ':' .. band .. ':' .. flow }
    end
  end
  if ARGV[o + 19] ~= '' then
    if (poolQueued or num(redisCall('GET', key_poolQueued(pool)))) >= num(ARGV[o + 19]) then
      countRejectedArrival(o, now, scope, nLimits, read)
      return { 0, 'queue_full', ARGV[o + 21], 'pool:' .. pool }
    end
  end

  local ae = admissionEnd(o)
  local aff = ARGV[ae - 3]
  if aff == '' then aff = nil end
  local px = ARGV[ae]
  if px == '' then px = false end
  local chosen, chosenKey, chosenTokens, chosenSeqs
  if place ~= nil then
    chosen, chosenKey, chosenTokens, chosenSeqs = place(num(ARGV[o + 8]), aff, ARGV[ae - 2], ARGV[ae - 1], px)
  end
  local cost = num(ARGV[o + 9])
  local record = {
    'rec', ARGV[o + 11], 'pool', pool, 'band', band, 'flow', flow, 'arrival', ARGV[o + 7],
    'reserve', ARGV[o + 8], 'cost', ARGV[o + 9], 'owner', owner, 'cont', cont, 'state', 'q',
    'replica', '', 'charged', '0', 'ikey', ikey, 'ittl', ARGV[o + 17], 'wn', count(nLimits),
  }
  if chosen ~= nil then
    -- As the dispatch writes them: charged what it was (0) plus the dispatch cost.
    record[20], record[22], record[24] = 'r', chosen, 0 + cost
  end
  -- What each window holds after this admission and when its oldest bucket ends (rate-limit headers).
  local held = {}
  for i = 0, nLimits - 1 do
    local b = o + 24 + i * 8
    local wkey = (ARGV[b + 7] == '1' and lp('') or scope) .. ARGV[b]
    local bucket, total, oldest = countInWindow(wkey, b, now, read, i)
    held[#held + 1] = total
    held[#held + 1] = oldest
    local n = i + 1
    record[#record + 1] = 'wk' .. n
    record[#record + 1] = wkey
    record[#record + 1] = 'wt' .. n
    record[#record + 1] = ARGV[b + 6]
    if ARGV[b + 6] == '1' then
      record[#record + 1] = 'we' .. n
      record[#record + 1] = bucket
      record[#record + 1] = 'wa' .. n
      record[#record + 1] = ARGV[b + 2]
    end
  end
  local stage = ''
  if ikey ~= '' then
    purgeInteractions(now)
    openInteraction(ikey, now, num(ARGV[o + 17]))
    stage = countInteractionCall(ikey)
  end
  redisCall('ZADD', key_leases(), 'NX', now + num(ARGV[o + 20]), owner)
  redisCall('SADD', key_owner(owner), id)

  local fm = sortKey(num(ARGV[o + 7])) .. id
  record[#record + 1] = 'fm'
  record[#record + 1] = fm
  -- A request placed as it is admitted never needs its affinity again.
  if aff ~= nil and chosen == nil then
    record[#record + 1] = 'aff'
    record[#record + 1] = aff
    record[#record + 1] = 'afft'
    record[#record + 1] = ARGV[ae - 2]
    record[#record + 1] = 'affs'
    record[#record + 1] = ARGV[ae - 1]
  end
  if px then
    record[#record + 1] = 'px'
    record[#record + 1] = px
  end
  local alerts = reserveQuotas(ue, ARGV[o + 22], record, share)
  redisCall('HSET', reqKey, unpack(record))
  local size = 1
  if chosen ~= nil then
    passThrough(pool, band, flow, cost, ARGV[o + 14])
    redisCall('HSET', chosenKey, 'tokens', chosenTokens, 'seqs', count(chosenSeqs))
  else
    local seq = redisCall('INCR', key_seq())
    size = enqueue(pool, band, flow, id, fm, seq, ARGV[o + 6], ARGV[o + 7], cont == '1', ARGV[o + 14])
  end
  return { 1, size, alerts, share == nil and '' or fmt(share), held, stage }, chosen
end
