--[[
  Dropping a queued request for good (cancel, reclaim): nothing was served, so its true-up windows
  (TPM) get their amount back.
]]
--- @include "queue"
--- @include "windows"
--- @include "request"
local function dropQueued(id, r)
  unqueue(id, r)
  trueUpWindows(id, r, 0)
  forgetReq(id, r)
end
