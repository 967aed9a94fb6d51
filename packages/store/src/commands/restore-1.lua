--[[
  Puts back what a dispatcher holds after the store's state was lost (see SchedulingStore.restore):
  the window entries it admitted (skipped where the window counts them already, see
  restoreToWindow in includes/windows.lua), then its
  requests in order: a queued one joins the end of its flow's FIFO (lifted as admission lifts); a
  running one is reserved on its replica again whatever the replica's capacity (it holds the KV
  cache already) and charged its dispatch cost. A request with a record is skipped. Owners get a
  default lease if they have none.

  Input:
    KEYS[1] admission sequence key_seq()

    ARGV[1] key base  ARGV[2] nowMs  ARGV[3] lift ('vtc' | 'none')  ARGV[4] default lease ms
    ARGV[5] owner ('' if none)  ARGV[6] number of ids it holds h, then h ids
    then number of window entries w, then per entry: window key, request id, atMs, windowMs, amount
    then number of requests n, then per request: id, pool, band, flow, score, arrivalMs,
    reserveTokens, dispatchCost, owner, continuation ('0' | '1'), the QueuedRequest as JSON,
    replica ('' if queued), grown, prefix parts ('' none; includes/prefixes.lua), number of windows
    k, then per window: key, trueUp ('0' | '1'), atMs, windowMs, amount (where the request counts
    in it)

  Output: { restored, skipped, forgotten }; -2 arguments not understood (client/library version skew)
]]
--- @include "includes/drop"

-- The arguments are checked before anything is written, so a version skew changes nothing.
local h = tonumber(ARGV[6])
if h == nil then return -2 end
local wAt = 7 + h
local w = tonumber(ARGV[wAt])
if w == nil then return -2 end
local i = wAt + 1 + 5 * w
local n = tonumber(ARGV[i])
if n == nil then return -2 end
i = i + 1
for _ = 1, n do
  local k = tonumber(ARGV[i + 14])
  if k == nil then return -2 end
  i = i + 15 + 5 * k
end
if i ~= #ARGV + 1 then return -2 end

local now = num(ARGV[2])
local lift = ARGV[3]
local lease = num(ARGV[4])
local forgotten = 0
if ARGV[5] ~= '' then
  local holds = {}
  for j = 7, 6 + h do holds[ARGV[j]] = true end
  local ownerKey = key_owner(ARGV[5])
  local ids = redisCall('SMEMBERS', ownerKey)
  table.sort(ids, bless)
  for _, id in ipairs(ids) do
    if not holds[id] then
      local r = loadReq(id)
      if r == nil then
        redisCall('SREM', ownerKey, id)
      else
        if r.state == 'q' then
          dropQueued(id, r, now)
        else
          release(r)
          forgetReq(id, r)
        end
        forgotten = forgotten + 1
      end
    end
  end
end
i = wAt + 1
for _ = 1, w do
  restoreToWindow(ARGV[i], ARGV[i + 1], num(ARGV[i + 2]), num(ARGV[i + 3]), num(ARGV[i + 4]), now)
  i = i + 5
end
i = i + 1
local restored, skipped = 0, 0
for _ = 1, n do
  local id, pool, band, flow = ARGV[i], ARGV[i + 1], ARGV[i + 2], ARGV[i + 3]
  local score, arrival, reserve, cost = ARGV[i + 4], ARGV[i + 5], ARGV[i + 6], ARGV[i + 7]
  local owner, cont, rec, replica, grown = ARGV[i + 8], ARGV[i + 9], ARGV[i + 10], ARGV[i + 11], ARGV[i + 12]
  local px = ARGV[i + 13]
  local k = num(ARGV[i + 14])
  local reqKey = key_req(id)
  if redisCall('EXISTS', reqKey) == 1 then
    skipped = skipped + 1
  else
    local fm = sortKey(num(arrival)) .. id
    local record = {
      'rec', rec, 'pool', pool, 'band', band, 'flow', flow, 'arrival', arrival, 'reserve', reserve,
      'cost', cost, 'owner', owner, 'cont', cont, 'state', 'q', 'replica', '', 'charged', '0',
      'ikey', '', 'ittl', '0', 'wn', k, 'fm', fm,
    }
    for j = 1, k do
      local b = i + 10 + 5 * j
      record[#record + 1] = 'wk' .. j
      record[#record + 1] = ARGV[b]
      record[#record + 1] = 'wt' .. j
      record[#record + 1] = ARGV[b + 1]
      if ARGV[b + 1] == '1' then
        record[#record + 1] = 'we' .. j
        record[#record + 1] = fmt(bucketEnd(num(ARGV[b + 2]), num(ARGV[b + 3])))
        record[#record + 1] = 'wa' .. j
        record[#record + 1] = ARGV[b + 4]
      end
    end
    if px ~= '' then
      record[#record + 1] = 'px'
      record[#record + 1] = px
    end
    redisCall('ZADD', key_leases(), 'NX', now + lease, owner)
    redisCall('SADD', key_owner(owner), id)
    if replica == '' then
      redisCall('HSET', reqKey, unpack(record))
      enqueue(pool, band, flow, id, fm, redisCall('INCR', key_seq()), score, arrival, cont == '1', lift)
    else
      local g = num(grown)
      if px ~= '' then
        local held, keys, counts = heldPrefixTokens(replica, px)
        g = g - held
        holdPrefixParts(keys, counts)
      end
      local rk = key_replica(replica)
      local rep = redisCall('HMGET', rk, 'tokens', 'seqs')
      redisCall('HSET', rk, 'tokens', num(rep[1]) + num(reserve) + g, 'seqs', num(rep[2]) + 1)
      record[20] = 'r'
      record[22] = replica
      record[24] = cost
      if g > 0 then
        record[#record + 1] = 'grown'
        record[#record + 1] = grown
      end
      redisCall('HSET', reqKey, unpack(record))
      if not redisCall('HGET', key_flow(pool, band, flow), 'n') then
        redisCall('SADD', key_flows(pool, band), flow)
      end
      addToCounter(pool, band, flow, num(cost))
    end
    restored = restored + 1
  end
  i = i + 15 + 5 * k
end
return { restored, skipped, forgotten }
