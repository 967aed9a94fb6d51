--[[
  Picks the next request of a pool (bands in priority order; `fair`: continuations first, then the
  backlogged flow with the least counter, ties by head arrival then flow id; `score`: least
  (score, id)), reserves it on the first or best-fitting candidate replica and charges its
  dispatch cost to its flow's counter. If the pick fits no candidate nothing changes.

  Input:
    KEYS[1] the pool's queued count   key_poolQueued(pool)
    (queue, request and replica keys are built with the generated key_* functions)

    ARGV[1] key base  ARGV[2] pool  ARGV[3] ordering ('fair' | 'score')  ARGV[4] fit ('first' | 'best')
    ARGV[5] number of bands b, then b bands
    then number of replicas n, then per replica: id, tokenCapacity, seqCapacity

  Output:
    { 'empty' }
    { 'blocked', id, reserveTokens }
    { 'dispatched', replica, id, pool, band, flow, score, arrivalMs, reserveTokens, dispatchCost,
      owner, payload, continuation }
    -1 (state corrupt: a backlogged flow without queued requests)
]]
--- @include "includes/numbers"
--- @include "includes/request"
--- @include "includes/queue"

local pool, ordering, fit = ARGV[2], ARGV[3], ARGV[4]
local nBands = tonumber(ARGV[5])
local rBase = 6 + nBands
local nReplicas = tonumber(ARGV[rBase])

for bi = 1, nBands do
  local band = ARGV[5 + bi]
  if num(redis.call('HGET', key_queueMeta(pool, band), 'size')) > 0 then
    local id
    if ordering == 'score' then
      id = redis.call('ZRANGE', key_byScore(pool, band), 0, 0)[1]
    else
      local flow
      flow, id = pickFlow(key_contBacklog(pool, band), pool, band, key_contFifo)
      if flow == nil then flow, id = pickFlow(key_backlog(pool, band), pool, band, key_fifo) end
    end
    if id == nil then return -1 end
    local r = loadReq(id)
    if r == nil then return -1 end
    local reserve = tonumber(r.reserve)

    local chosen, bestLeft, chosenTokens, chosenSeqs = nil, 0, 0, 0
    for i = 0, nReplicas - 1 do
      local b = rBase + 1 + i * 3
      local rep = redis.call('HMGET', key_replica(ARGV[b]), 'tokens', 'seqs')
      local tokens, seqs = num(rep[1]), num(rep[2])
      local after = tokens + reserve
      if after <= tonumber(ARGV[b + 1]) and seqs + 1 <= tonumber(ARGV[b + 2]) then
        local left = tonumber(ARGV[b + 1]) - after
        if chosen == nil or left < bestLeft then
          chosen, bestLeft, chosenTokens, chosenSeqs = ARGV[b], left, after, seqs + 1
        end
        if fit == 'first' then break end
      end
    end
    if chosen == nil then return { 'blocked', id, r.reserve } end

    unqueue(id, r)
    redis.call('HSET', key_replica(chosen), 'tokens', fmt(chosenTokens), 'seqs', chosenSeqs)
    redis.call('HSET', key_req(id), 'state', 'r', 'replica', chosen, 'charged', r.cost)
    addToCounter(pool, band, r.flow, tonumber(r.cost))
    local reply = reqReply(id, r)
    table.insert(reply, 1, chosen)
    table.insert(reply, 1, 'dispatched')
    return reply
  end
end
return { 'empty' }
