--[[
  Request records: HASH key_req(id) with fields
    rec (the QueuedRequest as JSON, returned verbatim on dispatch),
    pool, band, flow, arrival, reserve, cost, owner, cont ('1' continuation, '0' not),
    fm (the request's member in its flow's FIFOs: sortKey(arrival) .. id),
    state ('q' queued, 'r' running), replica, charged,
    grown (tokens its reservation grew by while it runs, on top of reserve; absent if none),
    ikey, ittl (interaction, '' if none), wn (number of windows), wk<i>, wt<i> (window key, '1' if true-up),
    ua, qn and the usage account's fields (includes/usage.lua; absent without one).
]]
local REQ_FIELDS = { 'state', 'pool', 'band', 'flow', 'charged', 'replica', 'reserve', 'grown', 'owner', 'cont', 'fm', 'ikey', 'ittl', 'wn', 'ua', 'qn' }

-- The record's fields but `rec`, `arrival` and `cost` (each field in a reply costs the script),
-- with wk<i>, wt<i> of its windows; nil if there is no record.
local function loadReq(id)
  local key = key_req(id)
  local v = redis.call('HMGET', key, unpack(REQ_FIELDS))
  if not v[1] then return nil end
  local r = {}
  for i = 1, #REQ_FIELDS do r[REQ_FIELDS[i]] = v[i] end
  local n = num(r.wn) or 0
  if n > 0 then
    local names = {}
    for i = 1, n do
      names[#names + 1] = 'wk' .. i
      names[#names + 1] = 'wt' .. i
    end
    local w = redis.call('HMGET', key, unpack(names))
    for i = 1, #names do r[names[i]] = w[i] end
  end
  return r
end

-- Forgets a request: its record and its owner's claim on it.
local function forgetReq(id, r)
  redis.call('DEL', key_req(id))
  redis.call('SREM', key_owner(r.owner), id)
end
