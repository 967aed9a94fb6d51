--[[
  Starts storing a file of a tenant's, after purging its expired files: checks the tenant's upload
  rate, file count and bytes (with the size the upload declares), then records the file as
  uploading, counted at once, until commitFile or its deadline (a dispatcher that died mid-upload
  leaves nothing counted past it). A file stored again under its id (a batch's output written
  anew) replaces the old one.

  KEYS[1] the tenant's files by expiry (sorted set, ms)
  KEYS[2] the tenant's files by creation (sorted set, ms)
  KEYS[3] the tenant's storage (hash: bytes, and each file's bytes)
  KEYS[4] the tenant's upload window (sorted set of upload ids by time, ms)
  ARGV[1] batch key base
  ARGV[2] now, ms
  ARGV[3] file id
  ARGV[4] upload deadline, ms
  ARGV[5] most files (-1: no limit)
  ARGV[6] most bytes (-1: no limit)
  ARGV[7] bytes the upload declares
  ARGV[8] uploads per window (-1: no limit)
  ARGV[9] window, ms
  ARGV[10..] the file's metadata, field value pairs

  Output: {code, used, limit, retryAfterMs}; code 0 started, -1 file count, -2 bytes, -3 rate.
]]
--- @include "includes/files"
local base, now, id = ARGV[1], tonumber(ARGV[2]), ARGV[3]
local maxFiles, maxBytes = tonumber(ARGV[5]), tonumber(ARGV[6])
local declared, rate, windowMs = tonumber(ARGV[7]), tonumber(ARGV[8]), tonumber(ARGV[9])
purgeExpired(base, KEYS[1], KEYS[2], KEYS[3], now)
if rate >= 0 then
  redis.call('ZREMRANGEBYSCORE', KEYS[4], '-inf', now - windowMs)
  local n = redis.call('ZCARD', KEYS[4])
  if n >= rate then
    local oldest = redis.call('ZRANGE', KEYS[4], 0, 0, 'WITHSCORES')[2]
    local retry = windowMs
    if oldest then
      retry = tonumber(oldest) + windowMs - now
    end
    return { -3, n, rate, retry }
  end
end
if redis.call('ZSCORE', KEYS[1], id) then
  dropFile(base, KEYS[1], KEYS[2], KEYS[3], id)
end
if maxFiles >= 0 then
  local n = redis.call('ZCARD', KEYS[1])
  if n >= maxFiles then
    return { -1, n, maxFiles, 0 }
  end
end
local used = usedBytes(KEYS[3])
if maxBytes >= 0 and used + declared > maxBytes then
  return { -2, used, maxBytes, 0 }
end
local meta = base .. ':file:' .. id
redis.call('DEL', meta, meta .. ':chunks')
redis.call('HSET', meta, unpack(ARGV, 10))
redis.call('HSET', meta, 'status', 'uploading', 'bytes', 0)
redis.call('PEXPIREAT', meta, ARGV[4])
redis.call('ZADD', KEYS[1], ARGV[4], id)
redis.call('ZADD', KEYS[2], now, id)
redis.call('HSET', KEYS[3], id, 0)
if rate >= 0 then
  redis.call('ZADD', KEYS[4], now, id)
  redis.call('PEXPIRE', KEYS[4], windowMs)
end
return { 0, used, maxBytes, 0 }
