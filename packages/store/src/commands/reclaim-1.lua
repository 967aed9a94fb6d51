--[[
  Reclaims everything held by owners whose lease ended (lease <= now), owners by (lease end,
  owner), each owner's requests by id: queued requests are dropped, running ones have their
  reservation released (their charges stay).

  Input:
    KEYS[1] owner leases key_leases()
    ARGV[1] key base  ARGV[2] nowMs

  Output: { dropped ids, released ids }
]]
--- @include "includes/drop"

local now = num(ARGV[2])
local dropped, released = {}, {}
local owners = redisCall('ZRANGEBYSCORE', KEYS[1], '-inf', fmt(now))
for _, owner in ipairs(owners) do
  local ids = redisCall('SMEMBERS', key_owner(owner))
  table.sort(ids, bless)
  for _, id in ipairs(ids) do
    local r = loadReq(id)
    if r ~= nil then
      if r.state == 'q' then
        dropQueued(id, r, now)
        dropped[#dropped + 1] = id
      else
        release(r)
        forgetReq(id, r)
        released[#released + 1] = id
      end
    end
  end
  redisCall('ZREM', KEYS[1], owner)
  redisCall('DEL', key_owner(owner))
end
return { dropped, released }
