--[[
  Puts a running request back at the head of its flow's FIFO (QLM eviction): releases its replica
  reservation (grown included), corrects its flow's counter so the request was charged exactly `servedCost`, keeps
  that as its charge and sets the cost its next dispatch adds. A flow that was not backlogged
  rejoins without a lift; a continuation also goes back to the head of its continuation FIFO. The
  request loses its affinity, unless it is moved: then the replica it moves to is its affinity. With `undispatch` the request's last dispatch is undone instead: the
  counter gives back what it charged (charged - cost) and the next dispatch charges `cost` again.

  Input:
    KEYS[1] request record key_req(id)
    ARGV[1] key base  ARGV[2] id  ARGV[3] nowMs  ARGV[4] servedCost  ARGV[5] dispatchCost
    ARGV[6] undispatch ('1' | '0')
    ARGV[7 .. 9] optional: the replica it moves to, its tokenCapacity and seqCapacity (as the
                 admission's affinity)

  Output: 1 re-queued, 0 the request was not running
]]
--- @include "includes/numbers"
--- @include "includes/request"
--- @include "includes/queue"

local id = ARGV[2]
local r = loadReq(id)
if r == nil or r.state ~= 'r' then return 0 end
local pool, band, flow = r.pool, r.band, r.flow
local served, nextCost = num(ARGV[4]), num(ARGV[5])
if ARGV[6] == '1' then
  nextCost = num(redisCall('HGET', KEYS[1], 'cost'))
  served = num(r.charged) - nextCost
end
addToCounter(pool, band, flow, served - num(r.charged))
release(r)

-- The head of a FIFO is its least score (admission sequence); go one below it.
local function frontScore(key)
  local first = redisCall('ZRANGE', key, '0', '0', 'WITHSCORES')
  if first[1] == nil then return 0 end
  return num(first[2]) - 1
end

local fk = key_flow(pool, band, flow)
local v = redisCall('HMGET', fk, 'n', 'b', 'c')
local c = fmt(num(v[1]))
local fields, gone = { 'n', c }, {}
local member = backlogMember(r.fm, flow)
local fifo = key_fifo(pool, band, flow)
redisCall('ZADD', fifo, fmt(frontScore(fifo)), r.fm)
rekey(key_backlog(pool, band), 'b', v[2], member, c, true, fields, gone)
if r.cont == '1' then
  local cf = key_contFifo(pool, band, flow)
  redisCall('ZADD', cf, fmt(frontScore(cf)), r.fm)
  rekey(key_contBacklog(pool, band), 'c', v[3], member, c, true, fields, gone)
end
applyFlowHash(fk, fields, gone)
local byScore = key_byScore(pool, band)
redisCall('ZADD', byScore, cjson.decode(redisCall('HGET', KEYS[1], 'rec')).score, id)
grow(byScore, redisCall('ZCARD', byScore))
redisCall('INCR', key_poolQueued(pool))
redisCall('HSET', KEYS[1], 'state', 'q', 'replica', '', 'charged', fmt(served), 'cost', fmt(nextCost))
-- The growth belonged to that run; the next dispatch reserves what the request was queued with.
if r.grown then redisCall('HDEL', KEYS[1], 'grown') end
if ARGV[7] ~= nil then
  redisCall('HSET', KEYS[1], 'aff', ARGV[7], 'afft', ARGV[8], 'affs', ARGV[9])
else
  redisCall('HDEL', KEYS[1], 'aff', 'afft', 'affs')
end
return 1
