--[[
  Purges a tenant's expired files and reports what its files hold.

  KEYS[1] the tenant's files by expiry (sorted set, ms)
  KEYS[2] the tenant's files by creation (sorted set, ms)
  KEYS[3] the tenant's storage (hash: bytes, and each file's bytes)
  ARGV[1] batch key base
  ARGV[2] now, ms

  Output: {files purged, files held, bytes held}.
]]
--- @include "includes/files"
local purged = purgeExpired(ARGV[1], KEYS[1], KEYS[2], KEYS[3], tonumber(ARGV[2]))
return { purged, redis.call('ZCARD', KEYS[1]), usedBytes(KEYS[3]) }
