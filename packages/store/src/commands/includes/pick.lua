--[[
  Dispatch (dispatch, admitAndDispatch): applies the dispatcher's coalesced charges, then picks the
  next request of a pool (bands in priority order; `fair`: continuations first, then the
  backlogged flow with the least counter, ties by head arrival then flow id; `score`: least
  (score, id)), reserves it on the first or best-fitting candidate replica and charges its dispatch
  cost to its flow's counter. If the pick fits no candidate nothing but the charges changes.

  The dispatch arguments are the last ones of the script, from ARGV[o + 2] on, in dispatch-1.lua's
  layout (o = 0 there): pool, ordering, fit, number of bands b and the bands, number of replicas n
  and per replica id, tokenCapacity, seqCapacity, number of charges k and per charge id, amount,
  reservation growth, then the affinity bound ('' none: affinity is ignored).
  dispatchArgs(o) reads that layout once and returns the dispatch `d` that dispatchNext and
  candidateReservations take (nil if the arguments are not understood).
]]
--- @include "numbers"
--- @include "queue"
--- @include "charge"
--- @include "prefixes"

-- The dispatch of the running call (see dispatchArgs). One table, refilled by every call: a new
-- one with these fields costs ≈5,000 instructions, more than reading the arguments twice.
local DISPATCH = { seen = {} }
local EMPTY = {}

-- The dispatch arguments from ARGV[o + 2] on, read once: counts and where each list starts; nil
-- if a count is not a number or the argument count does not match them. `seen` collects the
-- replica reads of the pick (see candidateReservations), `known` what the caller knows of some.
-- With `write` set (a table: replica id -> key), picks in a row keep the replicas they read and
-- reserve in `known` and leave their writes, and the queued count's decrements (`dequeued`), to
-- finishPicks: nothing else in the script reads them in between; and a band found without
-- continuations stays so (`noCont`: picks only take them away). `queued`, once the caller has read
-- the pool's queued count, is kept up to date by the pick (nil: not read). `unwritten`, a replica
-- id whose holdings in `known` the caller has yet to write: a pick that reserves on it writes them
-- (with its reservation) and clears it.
local function dispatchArgs(o)
  local nBands = tonumber(ARGV[o + 5])
  if nBands == nil then return nil end
  local rBase = o + 6 + nBands
  local nReplicas = tonumber(ARGV[rBase])
  if nReplicas == nil then return nil end
  local cBase = rBase + 1 + nReplicas * 3
  local nCharges = tonumber(ARGV[cBase])
  if nCharges == nil or #ARGV ~= cBase + nCharges * 3 + 1 then return nil end
  local d = DISPATCH
  d.affTokens = tonumber(ARGV[#ARGV])
  d.o, d.pool, d.nBands, d.rBase, d.nReplicas = o, ARGV[o + 2], nBands, rBase, nReplicas
  d.cBase, d.nCharges, d.known, d.write, d.dequeued, d.noCont = cBase, nCharges, nil, nil, 0, nil
  d.queued, d.unwritten = nil, nil
  local seen = d.seen
  for i = 0, nReplicas - 1 do seen[i] = nil end
  return d
end

-- The pool's queued count, read once per call (the fused calls report it, and a pool with nothing
-- queued needs no pick).
local function readQueued(d)
  if d.queued == nil then d.queued = num(redisCall('GET', key_poolQueued(d.pool))) end
  return d.queued
end

-- Tokens and seqs reserved on every candidate replica, flattened, in candidate order. A replica
-- the pick read, or whose holdings the caller knows (d.known), is not read again: its values are
-- what the pick saw or wrote. Values go back as Redis holds them (numbers that scripts stored,
-- which the client parses), '0' when absent.
local function candidateReservations(d)
  local out = {}
  local known = d.known
  for i = 0, d.nReplicas - 1 do
    local rep = d.seen[i]
    if rep == nil then
      local id = ARGV[d.rBase + 1 + i * 3]
      rep = known and known[id] or redisCall('HMGET', key_replica(id), 'tokens', 'seqs')
    end
    out[#out + 1] = rep[1] or '0'
    out[#out + 1] = rep[2] or '0'
  end
  return out
end

-- The affinity replica `aff` of a request reserving `reserve` tokens (affTokens, affSeqs: the room
-- it was admitted with; px: its prefix parts, false if none, which it reserves there only where no
-- running request holds them), as choose returns it, if its reservation is at most d.affTokens
-- and it has room: the candidate's room when it is offered, else the admitted one; then also the
-- prefix keys and holder counts read. One replica read (none if d.known holds it), one more with
-- parts.
local function affine(d, reserve, aff, affTokens, affSeqs, px)
  local capTokens, capSeqs, at = num(affTokens), num(affSeqs), nil
  for i = 0, d.nReplicas - 1 do
    local b = d.rBase + 1 + i * 3
    if ARGV[b] == aff then
      capTokens, capSeqs, at = num(ARGV[b + 1]), num(ARGV[b + 2]), i
      break
    end
  end
  local rk = key_replica(aff)
  local rep = d.known and d.known[aff]
  if not rep then
    rep = redisCall('HMGET', rk, 'tokens', 'seqs')
    if d.write then d.known[aff] = rep end
  end
  local tokens, seqs = num(rep[1]), num(rep[2])
  local keys, counts
  if px then
    local held
    held, keys, counts = heldPrefixTokens(aff, px)
    reserve = reserve - held
  end
  if tokens > d.affTokens or tokens + reserve > capTokens or seqs + 1 > capSeqs then
    if at ~= nil then d.seen[at] = rep end
    return nil
  end
  if at ~= nil then d.seen[at] = { wire(tokens + reserve), seqs + 1 } end
  return aff, rk, tokens + reserve, seqs + 1, keys, counts
end

-- The candidate replica a request reserving `reserve` tokens goes to (the first with room, or
-- under `best` the one left with the least room): its id, its key, and its tokens and seqs once
-- the request is on it (the caller writes them); nil if none has room. Records what it read in
-- d.seen, and what the caller will write for the chosen one. Replicas in d.known (id -> holdings
-- as HMGET tokens seqs reads them: a settlement just wrote them) are not read again. A request
-- with prefix parts (px, false if none) is judged at `reserve` on the candidates (at most what it
-- reserves on any) and reserved on the chosen one less the parts held there, which it now holds
-- too (see includes/prefixes.lua).
local function choose(d, reserve, aff, affTokens, affSeqs, px)
  local rBase, first = d.rBase, ARGV[d.o + 4] == 'first'
  if aff and d.affTokens then
    local chosen, chosenKey, tokens, seqs, keys, counts = affine(d, reserve, aff, affTokens, affSeqs, px)
    if chosen ~= nil then
      if px then holdPrefixParts(keys, counts) end
      return chosen, chosenKey, tokens, seqs
    end
  end
  local chosen, chosenKey, chosenAt, bestLeft, chosenTokens, chosenSeqs = nil, nil, nil, 0, 0, 0
  for i = 0, d.nReplicas - 1 do
    local b = rBase + 1 + i * 3
    local rk = key_replica(ARGV[b])
    local rep = d.known and d.known[ARGV[b]]
    if not rep then
      rep = redisCall('HMGET', rk, 'tokens', 'seqs')
      if d.write then d.known[ARGV[b]] = rep end
    end
    d.seen[i] = rep
    local tokens, seqs, capacity = num(rep[1]), num(rep[2]), num(ARGV[b + 1])
    local after = tokens + reserve
    if after <= capacity and seqs + 1 <= num(ARGV[b + 2]) then
      local left = capacity - after
      if chosen == nil or left < bestLeft then
        chosen, chosenKey, chosenAt, bestLeft, chosenTokens, chosenSeqs = ARGV[b], rk, i, left, after, seqs + 1
      end
      if first then break end
    end
  end
  if chosen ~= nil then
    if px then
      local held, keys, counts = heldPrefixTokens(chosen, px)
      chosenTokens = chosenTokens - held
      holdPrefixParts(keys, counts)
    end
    d.seen[chosenAt] = { wire(chosenTokens), chosenSeqs }
  end
  return chosen, chosenKey, chosenTokens, chosenSeqs
end

-- Writes what picks in a row left to the end (see dispatchArgs): each reserved replica's holdings
-- once, and the pool's queued count.
local function finishPicks(d)
  for id, key in pairs(d.write) do
    local held = d.known[id]
    redisCall('HSET', key, 'tokens', held[1], 'seqs', count(held[2]))
  end
  if d.dequeued > 0 then redisCall('DECRBY', key_poolQueued(d.pool), d.dequeued) end
end

-- { 'empty' } | { 'blocked', id, reserveTokens } | { 'dispatched', replica, request JSON } | -1 (state corrupt).
local function dispatchNext(d)
  local o, pool = d.o, d.pool
  local ordering = ARGV[o + 3]

  chargeRequests(d.cBase, d.nCharges)
  -- Nothing queued in the pool: no band has anything to pick.
  if d.queued == 0 then return { 'empty' } end

  for bi = 1, d.nBands do
    local band = ARGV[o + 5 + bi]
    local bl, cbl = key_backlog(pool, band), key_contBacklog(pool, band)
    -- Under `fair` the pick tells the flow, its backlog member and the request's FIFO member,
    -- and whether the request is a continuation: with none queued in the band (the common case)
    -- it is not, and the flow has no continuation member. The reads below then fetch only what
    -- is still unknown (each reply element costs the script).
    local id, flow, fm, pickedCont, nextHead, member, fifo = nil, nil, nil, false, nil, nil, nil
    if ordering == 'score' then
      id = redisCall('ZRANGE', key_byScore(pool, band), '0', '0')[1]
    else
      -- The counter is read from the flow's hash below: a score in a reply costs a double to string
      -- and back.
      local top = EMPTY
      if not (d.noCont and d.noCont[band]) then top = redisCall('ZRANGE', cbl, '0', '0') end
      pickedCont = top[1] ~= nil
      if d.noCont and not pickedCont then d.noCont[band] = true end
      if not pickedCont then
        top = redisCall('ZRANGE', bl, '0', '0')
        member = top[1]
      end
      if top[1] ~= nil then
        flow = memberFlow(top[1])
        fifo = key_fifo(pool, band, flow)
        local heads = redisCall('ZRANGE', pickedCont and key_contFifo(pool, band, flow) or fifo, '0', '1')
        if heads[1] == nil then return -1 end
        fm, nextHead = heads[1], heads[2]
        id = memberId(fm)
      end
    end

    if id ~= nil then
      local reqKey = key_req(id)
      -- f: reserve, cost, rec, charged, then under `score` cont, flow, fm.
      local f, cont
      -- aff: the affinity fields' index in f (read only when the dispatch honours affinity); px:
      -- the prefix parts' (the field after them).
      local aff, px
      if fm == nil then
        if d.affTokens then
          f = redisCall('HMGET', reqKey, 'reserve', 'cost', 'rec', 'charged', 'cont', 'flow', 'fm', 'px', 'aff', 'afft', 'affs')
          aff = 9
        else
          f = redisCall('HMGET', reqKey, 'reserve', 'cost', 'rec', 'charged', 'cont', 'flow', 'fm', 'px')
        end
        if not f[6] then return -1 end
        cont, flow, fm, px = f[5], f[6], f[7], f[8]
        fifo = key_fifo(pool, band, flow)
      else
        if d.affTokens then
          f = redisCall('HMGET', reqKey, 'reserve', 'cost', 'rec', 'charged', 'px', 'aff', 'afft', 'affs')
          aff = 6
        else
          f = redisCall('HMGET', reqKey, 'reserve', 'cost', 'rec', 'charged', 'px')
        end
        if not f[1] then return -1 end
        cont, px = pickedCont and '1' or '0', f[5]
      end
      local reserve = num(f[1])

      local chosen, chosenKey, chosenTokens, chosenSeqs
      if aff then
        chosen, chosenKey, chosenTokens, chosenSeqs = choose(d, reserve, f[aff] or nil, f[aff + 1], f[aff + 2], px)
      else
        chosen, chosenKey, chosenTokens, chosenSeqs = choose(d, reserve, nil, nil, nil, px)
      end
      if chosen == nil then return { 'blocked', id, f[1] } end

      -- Dequeue and charge in one pass: each backlog member of the flow is re-keyed once, with the
      -- new counter and the new head.
      local fk = key_flow(pool, band, flow)
      -- The flow's counter and backlog members (under `fair` without continuations the pick
      -- told both members).
      local n, bm, cm
      if member ~= nil then
        n, bm, cm = redisCall('HGET', fk, 'n'), member, false
      else
        local v = redisCall('HMGET', fk, 'n', 'b', 'c')
        n, bm, cm = v[1], v[2], v[3]
      end
      local cost = num(f[2])
      -- Numbers go to redis.call as they are: Redis formats them with %.17g, as fmt does.
      local c = num(n) + cost
      local fields, gone = { 'n', c }, {}
      redisCall('ZREM', fifo, fm)
      redisCall('ZREM', key_byScore(pool, band), id)
      if d.write then
        d.dequeued = d.dequeued + 1
      else
        d.queued = redisCall('DECR', key_poolQueued(pool))
      end
      if cont == '1' then
        local cf = key_contFifo(pool, band, flow)
        redisCall('ZREM', cf, fm)
        local head = pickedCont and nextHead or redisCall('ZRANGE', cf, '0', '0')[1]
        rekey(cbl, 'c', cm, backlogMember(head, flow), c, true, fields, gone)
      elseif cm then
        redisCall('ZADD', cbl, c, cm)
      end
      local head
      if ordering == 'fair' and not pickedCont then
        head = nextHead
      else
        head = redisCall('ZRANGE', fifo, '0', '0')[1]
      end
      if not rekey(bl, 'b', bm, backlogMember(head, flow), c, true, fields, gone) then
        redisCall('SET', key_lastFlow(pool, band), flow)
      end
      applyFlowHash(fk, fields, gone)

      if d.write then
        d.known[chosen] = { wire(chosenTokens), chosenSeqs }
        d.write[chosen] = chosenKey
      else
        redisCall('HSET', chosenKey, 'tokens', chosenTokens, 'seqs', count(chosenSeqs))
        if d.unwritten == chosen then d.unwritten = nil end
      end
      -- A re-queued request keeps what it was charged before (see requeue).
      redisCall('HSET', reqKey, 'state', 'r', 'replica', chosen, 'charged', num(f[4]) + cost)
      return { 'dispatched', chosen, f[3] }
    end
  end
  return { 'empty' }
end
