--[[
  Per-(pool, band) queues: FIFOs per flow, the backlogged set ordered by counter, the score index,
  counter lift and counter updates (VTC Algorithm 2). Mirrors memory-store.ts operation by operation.
]]
--- @include "numbers"
--- @include "request"

local function counterOf(pool, band, flow)
  return num(redis.call('HGET', key_counters(pool, band), flow))
end

-- Adds to a flow's counter and keeps the backlog indexes keyed by it in step.
local function addToCounter(pool, band, flow, amount)
  local s = fmt(counterOf(pool, band, flow) + amount)
  redis.call('HSET', key_counters(pool, band), flow, s)
  redis.call('ZADD', key_backlog(pool, band), 'XX', s, flow)
  redis.call('ZADD', key_contBacklog(pool, band), 'XX', s, flow)
end

-- Oldest request id of a FIFO and its arrival time, or nil.
local function fifoHead(fifoKey)
  local h = redis.call('ZRANGE', fifoKey, 0, 0)
  if h[1] == nil then return nil, nil end
  return h[1], tonumber(redis.call('HGET', key_req(h[1]), 'arrival'))
end

-- Least flow of a backlog index by (counter, head arrival, flow); returns flow, head id.
local function pickFlow(indexKey, pool, band, fifoKeyOf)
  local top = redis.call('ZRANGE', indexKey, 0, 0, 'WITHSCORES')
  if top[1] == nil then return nil, nil end
  local ties = redis.call('ZRANGEBYSCORE', indexKey, top[2], top[2])
  local bestFlow, bestId, bestArr = nil, nil, nil
  for _, f in ipairs(ties) do
    local id, arr = fifoHead(fifoKeyOf(pool, band, f))
    if id == nil then return nil, nil end
    if bestFlow == nil or arr < bestArr or (arr == bestArr and bless(f, bestFlow)) then
      bestFlow, bestId, bestArr = f, id, arr
    end
  end
  return bestFlow, bestId
end

-- Appends a request to its flow's FIFO, lifting the counter if the flow was not backlogged.
-- Returns the queue's new size.
local function enqueue(pool, band, flow, id, seq, score, cont, lift)
  local bl = key_backlog(pool, band)
  local c = redis.call('ZSCORE', bl, flow)
  if not c then
    c = counterOf(pool, band, flow)
    if lift == 'vtc' then
      local floor = nil
      local top = redis.call('ZRANGE', bl, 0, 0, 'WITHSCORES')
      if top[1] ~= nil then
        floor = tonumber(top[2])
      else
        local last = redis.call('HGET', key_queueMeta(pool, band), 'lastLeft')
        if last then floor = counterOf(pool, band, last) end
      end
      if floor ~= nil and floor > c then c = floor end
    end
    c = fmt(c)
    redis.call('HSET', key_counters(pool, band), flow, c)
    redis.call('ZADD', bl, c, flow)
  end
  redis.call('ZADD', key_fifo(pool, band, flow), seq, id)
  if cont then
    local cf = key_contFifo(pool, band, flow)
    if redis.call('ZCARD', cf) == 0 then redis.call('ZADD', key_contBacklog(pool, band), c, flow) end
    redis.call('ZADD', cf, seq, id)
  end
  redis.call('ZADD', key_byScore(pool, band), score, id)
  redis.call('INCR', key_poolQueued(pool))
  return redis.call('HINCRBY', key_queueMeta(pool, band), 'size', 1)
end

-- Takes a queued request out of its queue; the flow leaves the backlog if it was its last.
local function unqueue(id, r)
  local pool, band, flow = r.pool, r.band, r.flow
  local fifo = key_fifo(pool, band, flow)
  redis.call('ZREM', fifo, id)
  if r.cont == '1' then
    local cf = key_contFifo(pool, band, flow)
    redis.call('ZREM', cf, id)
    if redis.call('ZCARD', cf) == 0 then redis.call('ZREM', key_contBacklog(pool, band), flow) end
  end
  redis.call('ZREM', key_byScore(pool, band), id)
  redis.call('HINCRBY', key_queueMeta(pool, band), 'size', -1)
  redis.call('DECR', key_poolQueued(pool))
  if redis.call('ZCARD', fifo) == 0 then
    redis.call('ZREM', key_backlog(pool, band), flow)
    redis.call('HSET', key_queueMeta(pool, band), 'lastLeft', flow)
  end
end

-- Frees a running request's reservation on its replica.
local function release(r)
  local key = key_replica(r.replica)
  local rep = redis.call('HMGET', key, 'tokens', 'seqs')
  if not rep[2] then return end
  local seqs = num(rep[2]) - 1
  if seqs <= 0 then
    redis.call('DEL', key)
  else
    redis.call('HSET', key, 'tokens', fmt(num(rep[1]) - tonumber(r.reserve)), 'seqs', seqs)
  end
end
