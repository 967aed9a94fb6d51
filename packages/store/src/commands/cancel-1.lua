--[[
  Removes a queued request (client gone, queue timeout); its TPM windows get their amount back.

  Input:
    KEYS[1] request record key_req(id)
    ARGV[1] key base  ARGV[2] id  ARGV[3] nowMs

  Output: 1 cancelled, 0 the request was not queued
]]
--- @include "includes/drop"

local id = ARGV[2]
local r = loadReq(id)
if r == nil or r.state ~= 'q' then return 0 end
dropQueued(id, r, num(ARGV[3]))
return 1
