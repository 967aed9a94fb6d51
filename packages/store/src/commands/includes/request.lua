--[[
  Request records: HASH key_req(id) with fields
    rec (the QueuedRequest as JSON, returned verbatim on dispatch),
    pool, band, flow, arrival, reserve, cost, owner, cont ('1' continuation, '0' not),
    fm (the request's member in its flow's FIFOs: sortKey(arrival) .. id),
    state ('q' queued, 'r' running), replica, charged,
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
