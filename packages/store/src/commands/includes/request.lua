--[[
  Request records: HASH key_req(id) with fields
    rec (the QueuedRequest as JSON, returned verbatim on dispatch),
    pool, band, flow, arrival, reserve, cost, owner, cont ('1' continuation, '0' not),
    fm (the request's member in its flow's FIFOs: sortKey(arrival) .. id),
    state ('q' queued, 'r' running), replica, charged,
    grown (tokens its reservation grew by while it runs, on top of reserve; absent if none),
    px (its prefix parts, includes/prefixes.lua; absent if none),
    ikey, ittl (interaction, '' if none), wn (number of windows), wk<i>, wt<i> (window key, '1' if true-up),
    we<i>, wa<i> (of a true-up window: the end of the bucket it counts in and the amount it counts,
    includes/windows.lua),
    ua, qn and the usage account's fields (includes/usage.lua; absent without one).
]]
-- The record's fields but `rec`, `arrival` and `cost` (each field in a reply costs the script);
-- `running` (a settlement): a running request is in no queue, so not `cont` and `fm` either, and
-- not `qn`, which only a usage account has (recordUsage reads it with the account's fields). With
-- wk<i>, wt<i>, we<i>, wa<i> of its windows; nil if there is no record. The table is built by one
-- constructor naming every field, sized once: filled field by field it was rehashed as it grew
-- (≈13,000 instructions for 14 fields).
local function loadReq(id, running)
  local key = key_req(id)
  local r
  if running then
    local v = redisCall('HMGET', key, 'state', 'pool', 'band', 'flow', 'charged', 'replica', 'reserve',
      'grown', 'owner', 'ikey', 'ittl', 'wn', 'ua', 'px')
    if not v[1] then return nil end
    r = {
      state = v[1], pool = v[2], band = v[3], flow = v[4], charged = v[5], replica = v[6], reserve = v[7],
      grown = v[8], owner = v[9], ikey = v[10], ittl = v[11], wn = v[12], ua = v[13], qn = false, px = v[14],
    }
  else
    local v = redisCall('HMGET', key, 'state', 'pool', 'band', 'flow', 'charged', 'replica', 'reserve',
      'grown', 'owner', 'ikey', 'ittl', 'wn', 'ua', 'qn', 'cont', 'fm', 'px')
    if not v[1] then return nil end
    r = {
      state = v[1], pool = v[2], band = v[3], flow = v[4], charged = v[5], replica = v[6], reserve = v[7],
      grown = v[8], owner = v[9], ikey = v[10], ittl = v[11], wn = v[12], ua = v[13], qn = v[14],
      cont = v[15], fm = v[16], px = v[17],
    }
  end
  local n = num(r.wn) or 0
  if n > 0 then
    local names = {}
    for i = 1, n do
      names[#names + 1] = 'wk' .. i
      names[#names + 1] = 'wt' .. i
      names[#names + 1] = 'we' .. i
      names[#names + 1] = 'wa' .. i
    end
    local w = redisCall('HMGET', key, unpack(names))
    for i = 1, #names do r[names[i]] = w[i] end
  end
  return r
end

-- Forgets a request: its record and its owner's claim on it.
local function forgetReq(id, r)
  redisCall('DEL', key_req(id))
  redisCall('SREM', key_owner(r.owner), id)
end
