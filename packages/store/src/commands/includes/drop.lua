--[[
  Dropping a queued request for good (cancel, reclaim): nothing was served, so its true-up windows
  (TPM) and its quotas get their amount back.
]]
--- @include "queue"
--- @include "windows"
--- @include "request"
--- @include "usage"
local function dropQueued(id, r, now)
  unqueue(id, r)
  trueUpWindows(r, 0, now)
  releaseQuotas(id, r)
  forgetReq(id, r)
end
