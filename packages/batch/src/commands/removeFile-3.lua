--[[
  Deletes a tenant's file (uploaded, or an upload given up), taking its bytes off the tenant's total.

  KEYS[1] the tenant's files by expiry (sorted set, ms)
  KEYS[2] the tenant's files by creation (sorted set, ms)
  KEYS[3] the tenant's storage (hash: bytes, and each file's bytes)
  ARGV[1] batch key base
  ARGV[2] file id
  ARGV[3] the tenant

  Output: 1 deleted, 0 the tenant has no such file.
]]
--- @include "includes/files"
local base, id = ARGV[1], ARGV[2]
local owner = redis.call('HGET', base .. ':file:' .. id, 'tenant')
if owner ~= ARGV[3] then
  return 0
end
dropFile(base, KEYS[1], KEYS[2], KEYS[3], id)
return 1
