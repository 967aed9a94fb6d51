--[[
  Admission (admit, admitAndDispatch): duplicate check, window limits (throttles only when
  overloaded and outside an open interaction), queue bounds; then window usage, the interaction,
  the owner's default lease, the counter lift and the enqueue. A rejection changes nothing but the
  throttle windows (onlyWhenOverloaded), which count every arrival, admitted or not (FairServe
  Algorithm 1 line 19: the counter is incremented on arrival, before the limits are checked).

  admitRequest(o) reads the admission arguments from ARGV[o + 2] on, in admit-4.lua's layout (o = 0
  there): ARGV[o + 2] id ... ARGV[o + 22] tenant, ARGV[o + 23] number of limits n, then 8 per limit,
  then the usage account and quotas (includes/usage.lua, e = o + 23 + 8n). admissionEnd(o) is the
  index of its last argument (nil if a count is not a number).

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
  return usageEnd(o + 23 + n * 8)
end

-- Counts a rejected arrival in the request's throttle windows (see the header).
local function countRejectedArrival(o, id, now, scope, nLimits)
  for i = 0, nLimits - 1 do
    local b = o + 24 + i * 8
    if ARGV[b + 4] == '1' then
      local wkey = (ARGV[b + 7] == '1' and lp('') or scope) .. ARGV[b]
      purgeWindow(wkey, now - num(ARGV[b + 3]))
      -- Its own entry: the same id may arrive again, and be admitted then.
      addToWindow(wkey, id .. '#' .. fmt(now), now, num(ARGV[b + 2]))
    end
  end
end

-- { 1, queued [, alerts] } admitted (queued = size of the (pool, band) queue; alerts as
-- reserveQuotas returns them, only if any), or { 0, code, retryAfterMs, key }.
local function admitRequest(o)
  local id, pool, band, flow = ARGV[o + 2], ARGV[o + 3], ARGV[o + 4], ARGV[o + 5]
  local owner = ARGV[o + 10]
  local now = num(ARGV[o + 13])
  local scope = lp(ARGV[o + 22])
  local ikey = ARGV[o + 16]
  if ikey ~= '' then ikey = scope .. ikey end
  local nLimits = num(ARGV[o + 23])
  local reqKey = key_req(id)

  if redis.call('EXISTS', reqKey) == 1 then return { 0, 'duplicate', '0', id } end

  local interactionOpen = false
  if ikey ~= '' then
    local untilMs = redis.call('ZSCORE', key_interactions(), ikey)
    interactionOpen = untilMs ~= false and now < num(untilMs)
  end
  local throttleApplies = ARGV[o + 15] == '1' and not interactionOpen
  -- A call made while its interaction is open continues it, whoever says so (FairServe).
  local cont = (ARGV[o + 12] == '1' or interactionOpen) and '1' or '0'

  for i = 0, nLimits - 1 do
    local b = o + 24 + i * 8
    local wkey = (ARGV[b + 7] == '1' and lp('') or scope) .. ARGV[b]
    local limit, amount, windowMs = num(ARGV[b + 1]), num(ARGV[b + 2]), num(ARGV[b + 3])
    if not (ARGV[b + 4] == '1' and not throttleApplies) then
      purgeWindow(wkey, now - windowMs)
      local retry = windowRetryAfter(wkey, amount, limit, windowMs, now)
      if retry ~= nil then
        countRejectedArrival(o, id, now, scope, nLimits)
        return { 0, ARGV[b + 5], fmt(retry), ARGV[b] }
      end
    end
  end
  local ue = o + 23 + nLimits * 8
  local overQuota = checkQuotas(ue, ARGV[o + 22], now)
  if overQuota ~= nil then
    countRejectedArrival(o, id, now, scope, nLimits)
    return overQuota
  end

  if ARGV[o + 18] ~= '' then
    local n = redis.call('ZCARD', key_fifo(pool, band, flow))
    if n >= num(ARGV[o + 18]) then
      countRejectedArrival(o, id, now, scope, nLimits)
      return { 0, 'queue_full', ARGV[o + 21], 'flow:' .. pool .. ':' .. band .. ':' .. flow }
    end
  end
  if ARGV[o + 19] ~= '' then
    if num(redis.call('GET', key_poolQueued(pool))) >= num(ARGV[o + 19]) then
      countRejectedArrival(o, id, now, scope, nLimits)
      return { 0, 'queue_full', ARGV[o + 21], 'pool:' .. pool }
    end
  end

  local record = {
    'rec', ARGV[o + 11], 'pool', pool, 'band', band, 'flow', flow, 'arrival', ARGV[o + 7],
    'reserve', ARGV[o + 8], 'cost', ARGV[o + 9], 'owner', owner, 'cont', cont, 'state', 'q',
    'replica', '', 'charged', '0', 'ikey', ikey, 'ittl', ARGV[o + 17], 'wn', nLimits,
  }
  for i = 0, nLimits - 1 do
    local b = o + 24 + i * 8
    local wkey = (ARGV[b + 7] == '1' and lp('') or scope) .. ARGV[b]
    addToWindow(wkey, id, now, num(ARGV[b + 2]))
    record[#record + 1] = 'wk' .. (i + 1)
    record[#record + 1] = wkey
    record[#record + 1] = 'wt' .. (i + 1)
    record[#record + 1] = ARGV[b + 6]
  end
  if ikey ~= '' then
    redis.call('ZREMRANGEBYSCORE', key_interactions(), '-inf', fmt(now))
    openInteraction(ikey, now, num(ARGV[o + 17]))
  end
  redis.call('ZADD', key_leases(), 'NX', now + num(ARGV[o + 20]), owner)
  redis.call('SADD', key_owner(owner), id)

  local seq = redis.call('INCR', key_seq())
  local fm = sortKey(num(ARGV[o + 7])) .. id
  record[#record + 1] = 'fm'
  record[#record + 1] = fm
  local alerts = reserveQuotas(ue, ARGV[o + 22], record)
  redis.call('HSET', reqKey, unpack(record))
  local size = enqueue(pool, band, flow, id, fm, seq, ARGV[o + 6], ARGV[o + 7], cont == '1', ARGV[o + 14])
  if #alerts > 0 then return { 1, size, alerts } end
  return { 1, size }
end
