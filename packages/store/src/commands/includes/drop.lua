--[[
  Dropping a queued request for good (cancel, reclaim): nothing was served, so its true-up windows
  (TPM) and its quotas get their amount back.
]]
--- @include "queue"
--- @include "windows"
--- @include "request"
--- @include "usage"
local function dropQueued(id, r)
  unqueue(id, r)
  trueUpWindows(id, r, 0)
  releaseQuotas(id, r)
  forgetReq(id, r)
end
