--[[
  Per-(pool, band) queues: FIFOs per flow, the backlogged set ordered by counter, the score index,
  counter lift and counter updates (VTC Algorithm 2). Mirrors memory-store.ts operation by operation.

  Layout (see keys.ts): key_flow(pool, band, flow) is a small HASH per flow with `n` its counter,
  `b` and `c` its backlog members; key_flows(pool, band) the SET of flows with a counter;
  key_lastFlow(pool, band) the last flow to leave. FIFO members are sortKey(arrival) .. id
  (scored by admission sequence), backlog members sortKey(head arrival) .. flow (scored by
  counter), so Redis's own (score, member) order is the fair order (counter, head arrival, flow):
  a pick is one ZRANGE and a new head's backlog member needs no lookup.

  Redis keeps a sorted set of up to 128 short members as a listpack, which ZADD scans (parsing
  every score that is not an integer): ≈14 µs per ZADD at 100 members, against ≈1.7 µs as a
  skiplist (Redis 7.0, measured). grow() turns the backlogs and the score index into skiplists
  once they reach ZSET_SMALL members; a set stays a skiplist until it is emptied (deleted).
]]
--- @include "numbers"
--- @include "request"
--- @include "prefixes"

-- Order-preserving fixed-width encoding of a double (16 hex digits): the IEEE bits, negatives
-- inverted, positives with the sign bit set; in two 32-bit halves (Lua numbers hold them exactly).
local function sortKey(x)
  local hi, lo = struct.unpack('>I4I4', struct.pack('>d', x + 0.0))
  if hi >= 2147483648 then
    hi, lo = 4294967295 - hi, 4294967295 - lo
  else
    hi = hi + 2147483648
  end
  return string.format('%08x%08x', hi, lo)
end

local function memberFlow(member)
  return string.sub(member, 17)
end

local function memberId(member)
  return string.sub(member, 17)
end

-- The backlog member of a flow whose FIFO head has FIFO member `head` (nil if none).
local function backlogMember(head, flow)
  if head == nil then return nil end
  return string.sub(head, 1, 16) .. flow
end

local ZSET_SMALL = 16

-- Call after a new member made a sorted set `size` long: at ZSET_SMALL members it becomes a
-- skiplist (adding a member longer than zset-max-listpack-value converts it; removing it again
-- does not convert back). NX: a real member equal to the marker would already be a skiplist.
local function grow(key, size)
  if size ~= ZSET_SMALL then return end
  local marker = string.rep('~', 1025)
  if redisCall('ZADD', key, 'NX', 0, marker) == 1 then redisCall('ZREM', key, marker) end
end

-- Adds a flow that is not in a backlog index to it.
local function join(indexKey, counter, member)
  redisCall('ZADD', indexKey, counter, member)
  grow(indexKey, redisCall('ZCARD', indexKey))
end

local function counterOf(pool, band, flow)
  return num(redisCall('HGET', key_flow(pool, band, flow), 'n'))
end

-- Adds to a flow's counter and keeps the backlog indexes scored by it in step.
local function addToCounter(pool, band, flow, amount)
  local fk = key_flow(pool, band, flow)
  local v = redisCall('HMGET', fk, 'n', 'b', 'c')
  local s = num(v[1]) + amount
  redisCall('HSET', fk, 'n', s)
  if v[2] then redisCall('ZADD', key_backlog(pool, band), s, v[2]) end
  if v[3] then redisCall('ZADD', key_contBacklog(pool, band), s, v[3]) end
end

-- Moves a flow in a backlog index to `new` (nil: out of the index). `old` is its current member
-- (false if absent), `field` its field in the flow's hash ('b' or 'c'); `counter` its counter
-- string, `changed` whether the counter just changed. Adds hash updates to `fields`, deletions to
-- `gone`. Returns true if still in the index.
local function rekey(indexKey, field, old, new, counter, changed, fields, gone)
  if new == nil then
    if old then
      redisCall('ZREM', indexKey, old)
      gone[#gone + 1] = field
    end
    return false
  end
  if new ~= old then
    if old then
      redisCall('ZREM', indexKey, old)
      redisCall('ZADD', indexKey, counter, new)
    else
      join(indexKey, counter, new)
    end
    fields[#fields + 1] = field
    fields[#fields + 1] = new
  elseif changed then
    redisCall('ZADD', indexKey, counter, new)
  end
  return true
end

local function applyFlowHash(fk, fields, gone)
  if #fields > 0 then redisCall('HSET', fk, unpack(fields)) end
  if #gone > 0 then redisCall('HDEL', fk, unpack(gone)) end
end

-- Appends a request to its flow's FIFO, lifting the counter if the flow was not backlogged.
-- `fm` is the request's FIFO member. Returns the queue's new size.
local function enqueue(pool, band, flow, id, fm, seq, score, arrival, cont, lift)
  local fk = key_flow(pool, band, flow)
  local bl = key_backlog(pool, band)
  local v = redisCall('HMGET', fk, 'n', 'b', 'c')
  local fields = {}
  local c = v[1]
  if not v[1] then redisCall('SADD', key_flows(pool, band), flow) end
  if not v[2] then
    local n = num(v[1])
    if lift == 'vtc' then
      local floor = nil
      local top = redisCall('ZRANGE', bl, '0', '0', 'WITHSCORES')
      if top[1] ~= nil then
        floor = num(top[2])
      else
        local last = redisCall('GET', key_lastFlow(pool, band))
        if last then floor = counterOf(pool, band, last) end
      end
      if floor ~= nil and floor > n then n = floor end
    end
    c = n
    local m = backlogMember(fm, flow)
    join(bl, c, m)
    fields[#fields + 1] = 'n'
    fields[#fields + 1] = c
    fields[#fields + 1] = 'b'
    fields[#fields + 1] = m
  end
  redisCall('ZADD', key_fifo(pool, band, flow), seq, fm)
  if cont then
    if not v[3] then
      local m = backlogMember(fm, flow)
      join(key_contBacklog(pool, band), c, m)
      fields[#fields + 1] = 'c'
      fields[#fields + 1] = m
    end
    redisCall('ZADD', key_contFifo(pool, band, flow), seq, fm)
  end
  if #fields > 0 then redisCall('HSET', fk, unpack(fields)) end
  local byScore = key_byScore(pool, band)
  redisCall('ZADD', byScore, score, id)
  redisCall('INCR', key_poolQueued(pool))
  local size = redisCall('ZCARD', byScore)
  grow(byScore, size)
  return size
end

-- What enqueue and then a dispatch of the same request leave when the pool had nothing queued
-- (admitAndDispatch, see admitRequest): the flow's counter lifted as enqueue lifts it (the band's
-- backlog is empty, so to the last flow's counter) plus the dispatch cost, and the flow recorded
-- as the last to leave the backlog. The FIFO, backlog, score index and queued count it would join
-- and leave are left alone, and no admission sequence number is drawn (only queued requests
-- need one). A flow that was the last to leave already (one busy flow) is its own floor and stays
-- the last: neither is read or written again.
local function passThrough(pool, band, flow, cost, lift)
  local fk = key_flow(pool, band, flow)
  local lk = key_lastFlow(pool, band)
  local v = redisCall('HGET', fk, 'n')
  if not v then redisCall('SADD', key_flows(pool, band), flow) end
  local n = num(v)
  local last = nil
  if lift == 'vtc' then
    last = redisCall('GET', lk)
    if last and last ~= flow then
      local floor = counterOf(pool, band, last)
      if floor > n then n = floor end
    end
  end
  redisCall('HSET', fk, 'n', n + cost)
  if last ~= flow then redisCall('SET', lk, flow) end
end

-- Takes a queued request out of its queue (cancel, reclaim); the flow leaves the backlog if it
-- was its last request.
local function unqueue(id, r)
  local pool, band, flow = r.pool, r.band, r.flow
  local fk = key_flow(pool, band, flow)
  local v = redisCall('HMGET', fk, 'n', 'b', 'c')
  local fields, gone = {}, {}
  local fifo = key_fifo(pool, band, flow)
  redisCall('ZREM', fifo, r.fm)
  if r.cont == '1' then
    local cf = key_contFifo(pool, band, flow)
    redisCall('ZREM', cf, r.fm)
    local head = redisCall('ZRANGE', cf, '0', '0')[1]
    rekey(key_contBacklog(pool, band), 'c', v[3], backlogMember(head, flow), v[1], false, fields, gone)
  end
  redisCall('ZREM', key_byScore(pool, band), id)
  redisCall('DECR', key_poolQueued(pool))
  local head = redisCall('ZRANGE', fifo, '0', '0')[1]
  if not rekey(key_backlog(pool, band), 'b', v[2], backlogMember(head, flow), v[1], false, fields, gone) then
    redisCall('SET', key_lastFlow(pool, band), flow)
  end
  applyFlowHash(fk, fields, gone)
end

-- Writes a replica's holdings as release computed them: the hash, or its deletion once it holds
-- nothing (a replica hash has no other fields, so a later HSET of both replaces either).
local function writeHeld(key, held)
  if held[2] then
    redisCall('HSET', key, 'tokens', held[1], 'seqs', count(held[2]))
  else
    redisCall('DEL', key)
  end
end

-- Frees a running request's reservation on its replica: what it reserved at dispatch and what
-- its reservation grew by since (charge), so nothing is left behind. Returns what the replica
-- then holds, as HMGET replica tokens seqs would read it (numbers, or false when absent), and its
-- key. With `defer` it writes nothing, and says whether the caller must writeHeld (settleAndDispatch:
-- a pick onto the same replica writes it once).
local function release(r, defer)
  -- Its prefix parts another running request there holds stay reserved.
  local kept = 0
  if r.px then kept = releasePrefixParts(r.replica, r.px) end
  local key = key_replica(r.replica)
  local rep = redisCall('HMGET', key, 'tokens', 'seqs')
  if not rep[2] then return rep, key, false end
  local seqs = num(rep[2]) - 1
  local held
  if seqs <= 0 then
    held = { false, false }
  else
    held = { wire(num(rep[1]) - num(r.reserve) - num(r.grown) + kept), seqs }
  end
  if defer then return held, key, true end
  writeHeld(key, held)
  return held, key, false
end
