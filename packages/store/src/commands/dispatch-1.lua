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
    { 'dispatched', replica, request JSON }
    -1 (state corrupt: an indexed flow or request without its record)
    -2 (arguments not understood: client/script version skew)
]]
--- @include "includes/numbers"
--- @include "includes/queue"

local pool, ordering, fit = ARGV[2], ARGV[3], ARGV[4]
local nBands = tonumber(ARGV[5])
local rBase = 6 + nBands
local nReplicas = tonumber(ARGV[rBase])
if nReplicas == nil or #ARGV ~= rBase + nReplicas * 3 then return -2 end

for bi = 1, nBands do
  local band = ARGV[5 + bi]
  local id, counter = nil, nil
  if ordering == 'score' then
    id = redis.call('ZRANGE', key_byScore(pool, band), 0, 0)[1]
  else
    local top = redis.call('ZRANGE', key_contBacklog(pool, band), 0, 0, 'WITHSCORES')
    local fifoOf = key_contFifo
    if top[1] == nil then
      top = redis.call('ZRANGE', key_backlog(pool, band), 0, 0, 'WITHSCORES')
      fifoOf = key_fifo
    end
    if top[1] ~= nil then
      counter = tonumber(top[2])
      id = redis.call('ZRANGE', fifoOf(pool, band, memberFlow(top[1])), 0, 0)[1]
      if id == nil then return -1 end
    end
  end

  if id ~= nil then
    local f = redis.call('HMGET', key_req(id), 'flow', 'reserve', 'cost', 'cont', 'rec')
    if not f[1] then return -1 end
    local flow, reserve = f[1], tonumber(f[2])

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
    if chosen == nil then return { 'blocked', id, f[2] } end

    -- Dequeue and charge in one pass: the flow's backlog members are re-keyed once, with the new
    -- counter and the new head.
    local fifo = key_fifo(pool, band, flow)
    redis.call('ZREM', fifo, id)
    redis.call('ZREM', key_byScore(pool, band), id)
    redis.call('DECR', KEYS[1])
    if counter == nil then counter = counterOf(pool, band, flow) end
    local c = fmt(counter + tonumber(f[3]))
    redis.call('HSET', key_counters(pool, band), flow, c)
    local m = redis.call('HMGET', key_members(pool, band), 'b' .. flow, 'c' .. flow)
    if f[4] == '1' then
      local cf = key_contFifo(pool, band, flow)
      redis.call('ZREM', cf, id)
      rekey(key_contBacklog(pool, band), pool, band, flow, 'c', cf, m[2], c)
    elseif m[2] then
      redis.call('ZADD', key_contBacklog(pool, band), c, m[2])
    end
    if not rekey(key_backlog(pool, band), pool, band, flow, 'b', fifo, m[1], c) then
      redis.call('HSET', key_queueMeta(pool, band), 'lastLeft', flow)
    end

    redis.call('HSET', key_replica(chosen), 'tokens', fmt(chosenTokens), 'seqs', chosenSeqs)
    redis.call('HSET', key_req(id), 'state', 'r', 'replica', chosen, 'charged', f[3])
    return { 'dispatched', chosen, f[5] }
  end
end
return { 'empty' }
