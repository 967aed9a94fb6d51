--[[
  Per-(pool, band) queues: FIFOs per flow, the backlogged set ordered by counter, the score index,
  counter lift and counter updates (VTC Algorithm 2). Mirrors memory-store.ts operation by operation.

  The backlog ZSETs are scored by counter and their members are sortKey(head arrival) .. flow, so
  Redis's own (score, member) order is exactly the fair order (counter, head arrival, flow) and a
  pick is one ZRANGE. key_members(pool, band) maps 'b' .. flow and 'c' .. flow to the flow's
  current member in the backlog and continuation backlog; a flow is backlogged iff it has one.
]]
--- @include "numbers"
--- @include "request"

-- Order-preserving fixed-width encoding of a double (16 hex digits).
local function sortKey(x)
  local b = { string.byte(struct.pack('>d', x + 0.0), 1, 8) }
  if b[1] >= 128 then
    for i = 1, 8 do b[i] = 255 - b[i] end
  else
    b[1] = b[1] + 128
  end
  return string.format('%02x%02x%02x%02x%02x%02x%02x%02x', unpack(b))
end

local function memberFlow(member)
  return string.sub(member, 17)
end

local function counterOf(pool, band, flow)
  return num(redis.call('HGET', key_counters(pool, band), flow))
end

-- Adds to a flow's counter and keeps the backlog indexes scored by it in step.
local function addToCounter(pool, band, flow, amount)
  local s = fmt(counterOf(pool, band, flow) + amount)
  redis.call('HSET', key_counters(pool, band), flow, s)
  local m = redis.call('HMGET', key_members(pool, band), 'b' .. flow, 'c' .. flow)
  if m[1] then redis.call('ZADD', key_backlog(pool, band), s, m[1]) end
  if m[2] then redis.call('ZADD', key_contBacklog(pool, band), s, m[2]) end
end

-- Least flow of a backlog index in fair order; returns flow, its head request id.
local function pickFlow(indexKey, pool, band, fifoKeyOf)
  local top = redis.call('ZRANGE', indexKey, 0, 0)[1]
  if top == nil then return nil, nil end
  local flow = memberFlow(top)
  return flow, redis.call('ZRANGE', fifoKeyOf(pool, band, flow), 0, 0)[1]
end

-- Re-keys a flow in a backlog index after its FIFO changed; drops it if the FIFO is empty.
-- Returns true if the flow is still in the index.
-- `old` is the flow's current member (nil: look it up); `counter` its counter string (nil: look up).
local function rekey(indexKey, pool, band, flow, tag, fifoKey, old, counter)
  local membersKey = key_members(pool, band)
  if old == nil then old = redis.call('HGET', membersKey, tag .. flow) end
  local head = redis.call('ZRANGE', fifoKey, 0, 0)[1]
  if head == nil then
    if old then redis.call('ZREM', indexKey, old) end
    redis.call('HDEL', membersKey, tag .. flow)
    return false
  end
  local m = sortKey(tonumber(redis.call('HGET', key_req(head), 'arrival'))) .. flow
  if m ~= old then
    if old then redis.call('ZREM', indexKey, old) end
    redis.call('ZADD', indexKey, counter or redis.call('HGET', key_counters(pool, band), flow), m)
    redis.call('HSET', membersKey, tag .. flow, m)
  elseif counter ~= nil then
    redis.call('ZADD', indexKey, counter, m)
  end
  return true
end

-- Appends a request to its flow's FIFO, lifting the counter if the flow was not backlogged.
-- Returns the queue's new size.
local function enqueue(pool, band, flow, id, seq, score, arrival, cont, lift)
  local membersKey = key_members(pool, band)
  local bl = key_backlog(pool, band)
  local c = nil
  if not redis.call('HGET', membersKey, 'b' .. flow) then
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
    local m = sortKey(tonumber(arrival)) .. flow
    redis.call('ZADD', bl, c, m)
    redis.call('HSET', membersKey, 'b' .. flow, m)
  end
  redis.call('ZADD', key_fifo(pool, band, flow), seq, id)
  if cont then
    if not redis.call('HGET', membersKey, 'c' .. flow) then
      c = c or redis.call('HGET', key_counters(pool, band), flow)
      local m = sortKey(tonumber(arrival)) .. flow
      redis.call('ZADD', key_contBacklog(pool, band), c, m)
      redis.call('HSET', membersKey, 'c' .. flow, m)
    end
    redis.call('ZADD', key_contFifo(pool, band, flow), seq, id)
  end
  local byScore = key_byScore(pool, band)
  redis.call('ZADD', byScore, score, id)
  redis.call('INCR', key_poolQueued(pool))
  return redis.call('ZCARD', byScore)
end

-- Takes a queued request out of its queue; the flow leaves the backlog if it was its last.
local function unqueue(id, r)
  local pool, band, flow = r.pool, r.band, r.flow
  local fifo = key_fifo(pool, band, flow)
  redis.call('ZREM', fifo, id)
  if r.cont == '1' then
    local cf = key_contFifo(pool, band, flow)
    redis.call('ZREM', cf, id)
    rekey(key_contBacklog(pool, band), pool, band, flow, 'c', cf)
  end
  redis.call('ZREM', key_byScore(pool, band), id)
  redis.call('DECR', key_poolQueued(pool))
  if not rekey(key_backlog(pool, band), pool, band, flow, 'b', fifo) then
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
