--[[
  Dispatch (dispatch, admitAndDispatch): applies the dispatcher's coalesced charges, then picks the
  next request of a pool (bands in priority order; `fair`: continuations first, then the
  backlogged flow with the least counter, ties by head arrival then flow id; `score`: least
  (score, id)), reserves it on the first or best-fitting candidate replica and charges its dispatch
  cost to its flow's counter. If the pick fits no candidate nothing but the charges changes.

  The dispatch arguments are the last ones of the script, from ARGV[o + 2] on, in dispatch-1.lua's
  layout (o = 0 there): pool, ordering, fit, number of bands b and the bands, number of replicas n
  and per replica id, tokenCapacity, seqCapacity, number of charges k and per charge id, amount,
  reservation growth.
  dispatchArgsValid(o) checks that layout; dispatchReplicas(o) gives the index of the replica count.
]]
--- @include "numbers"
--- @include "queue"
--- @include "charge"

local function dispatchReplicas(o)
  local nBands = tonumber(ARGV[o + 5])
  if nBands == nil then return nil end
  return o + 6 + nBands
end

local function dispatchArgsValid(o)
  local rBase = dispatchReplicas(o)
  if rBase == nil then return false end
  local nReplicas = tonumber(ARGV[rBase])
  if nReplicas == nil then return false end
  local cBase = rBase + 1 + nReplicas * 3
  local nCharges = tonumber(ARGV[cBase])
  return nCharges ~= nil and #ARGV == cBase + nCharges * 3
end

-- Tokens and seqs reserved on every candidate replica, flattened, in candidate order.
local function candidateReservations(o)
  local rBase = dispatchReplicas(o)
  local out = {}
  for i = 0, num(ARGV[rBase]) - 1 do
    local rep = redis.call('HMGET', key_replica(ARGV[rBase + 1 + i * 3]), 'tokens', 'seqs')
    out[#out + 1] = fmt(num(rep[1]))
    out[#out + 1] = fmt(num(rep[2]))
  end
  return out
end

-- { 'empty' } | { 'blocked', id, reserveTokens } | { 'dispatched', replica, request JSON } | -1 (state corrupt).
local function dispatchNext(o)
  local pool, ordering, fit = ARGV[o + 2], ARGV[o + 3], ARGV[o + 4]
  local nBands = num(ARGV[o + 5])
  local rBase = o + 6 + nBands
  local nReplicas = num(ARGV[rBase])
  local cBase = rBase + 1 + nReplicas * 3
  local nCharges = num(ARGV[cBase])

  chargeRequests(cBase, nCharges)

  for bi = 1, nBands do
    local band = ARGV[o + 5 + bi]
    -- Under `fair` with no continuations queued in the band the pick already tells the flow, its
    -- backlog member and the request's FIFO member, and that the flow has no continuation member:
    -- the reads below then fetch only what is still unknown (each reply element costs the script).
    local id, flow, fm, pickedCont, nextHead, member = nil, nil, nil, false, nil, nil
    if ordering == 'score' then
      id = redis.call('ZRANGE', key_byScore(pool, band), '0', '0')[1]
    else
      -- The counter is read from the flow's hash below: a score in a reply costs a double to string
      -- and back.
      local top = redis.call('ZRANGE', key_contBacklog(pool, band), '0', '0')
      pickedCont = top[1] ~= nil
      if not pickedCont then
        top = redis.call('ZRANGE', key_backlog(pool, band), '0', '0')
        member = top[1]
      end
      if top[1] ~= nil then
        flow = memberFlow(top[1])
        local fifoOf = pickedCont and key_contFifo or key_fifo
        local heads = redis.call('ZRANGE', fifoOf(pool, band, flow), '0', '1')
        if heads[1] == nil then return -1 end
        fm, nextHead = heads[1], heads[2]
        id = memberId(fm)
      end
    end

    if id ~= nil then
      local reqKey = key_req(id)
      local f
      if fm == nil then
        f = redis.call('HMGET', reqKey, 'reserve', 'cost', 'cont', 'rec', 'charged', 'flow', 'fm')
        if not f[6] then return -1 end
        flow, fm = f[6], f[7]
      else
        f = redis.call('HMGET', reqKey, 'reserve', 'cost', 'cont', 'rec', 'charged')
        if not f[1] then return -1 end
      end
      local reserve = num(f[1])

      local chosen, bestLeft, chosenTokens, chosenSeqs = nil, 0, 0, 0
      for i = 0, nReplicas - 1 do
        local b = rBase + 1 + i * 3
        local rep = redis.call('HMGET', key_replica(ARGV[b]), 'tokens', 'seqs')
        local tokens, seqs, capacity = num(rep[1]), num(rep[2]), num(ARGV[b + 1])
        local after = tokens + reserve
        if after <= capacity and seqs + 1 <= num(ARGV[b + 2]) then
          local left = capacity - after
          if chosen == nil or left < bestLeft then
            chosen, bestLeft, chosenTokens, chosenSeqs = ARGV[b], left, after, seqs + 1
          end
          if fit == 'first' then break end
        end
      end
      if chosen == nil then return { 'blocked', id, f[1] } end

      -- Dequeue and charge in one pass: each backlog member of the flow is re-keyed once, with the
      -- new counter and the new head.
      local fk = key_flow(pool, band, flow)
      local v
      if member ~= nil then
        v = { redis.call('HGET', fk, 'n'), member, false }
      else
        v = redis.call('HMGET', fk, 'n', 'b', 'c')
      end
      local cost = num(f[2])
      -- Numbers go to redis.call as they are: Redis formats them with %.17g, as fmt does.
      local c = num(v[1]) + cost
      local fields, gone = { 'n', c }, {}
      local fifo = key_fifo(pool, band, flow)
      redis.call('ZREM', fifo, fm)
      redis.call('ZREM', key_byScore(pool, band), id)
      redis.call('DECR', key_poolQueued(pool))
      if f[3] == '1' then
        local cf = key_contFifo(pool, band, flow)
        redis.call('ZREM', cf, fm)
        local head = pickedCont and nextHead or redis.call('ZRANGE', cf, '0', '0')[1]
        rekey(key_contBacklog(pool, band), 'c', v[3], backlogMember(head, flow), c, true, fields, gone)
      elseif v[3] then
        redis.call('ZADD', key_contBacklog(pool, band), c, v[3])
      end
      local head
      if ordering == 'fair' and not pickedCont then
        head = nextHead
      else
        head = redis.call('ZRANGE', fifo, '0', '0')[1]
      end
      if not rekey(key_backlog(pool, band), 'b', v[2], backlogMember(head, flow), c, true, fields, gone) then
        redis.call('SET', key_lastFlow(pool, band), flow)
      end
      applyFlowHash(fk, fields, gone)

      redis.call('HSET', key_replica(chosen), 'tokens', chosenTokens, 'seqs', chosenSeqs)
      -- A re-queued request keeps what it was charged before (see requeue).
      redis.call('HSET', reqKey, 'state', 'r', 'replica', chosen, 'charged', num(f[5]) + cost)
      return { 'dispatched', chosen, f[4] }
    end
  end
  return { 'empty' }
end
