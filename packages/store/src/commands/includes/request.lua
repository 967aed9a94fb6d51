--[[
  Request records: HASH key_req(id) with fields
    pool, band, flow, score, arrival, reserve, cost, owner, payload,
    cont ('' absent, '0', '1'), state ('q' queued, 'r' running), replica, charged, seq,
    ikey, ittl (interaction, '' if none), wn (number of windows), wk<i>, wt<i> (window key, '1' if true-up).
]]
local function loadReq(id)
  local flat = redis.call('HGETALL', key_req(id))
  if #flat == 0 then return nil end
  local r = {}
  for i = 1, #flat, 2 do r[flat[i]] = flat[i + 1] end
  return r
end

-- Forgets a request: its record and its owner's claim on it.
local function forgetReq(id, r)
  redis.call('DEL', key_req(id))
  redis.call('SREM', key_owner(r.owner), id)
end

-- The fields a dispatcher needs to rebuild the QueuedRequest, in a fixed order.
local function reqReply(id, r)
  return { id, r.pool, r.band, r.flow, r.score, r.arrival, r.reserve, r.cost, r.owner, r.payload, r.cont }
end
