--[[
  Appends a piece of an uploading file, counting its bytes to the tenant at once, and moves the
  upload's deadline on: data still arriving keeps an upload alive.

  KEYS[1] the file's metadata (hash)
  KEYS[2] the file's content (list of pieces)
  KEYS[3] the tenant's storage (hash: bytes, and each file's bytes)
  KEYS[4] the tenant's files by expiry (sorted set, ms)
  ARGV[1] file id
  ARGV[2] the piece
  ARGV[3] most bytes the tenant may hold (-1: no limit)
  ARGV[4] new upload deadline, ms

  Output: {code, used, limit}; code 0 appended (used: the tenant's bytes with it), -2 it would
  pass the limit (used: the tenant's bytes without it), -4 the upload is gone (purged, deleted).
]]
--- @include "includes/files"
if redis.call('HGET', KEYS[1], 'status') ~= 'uploading' then
  return { -4, 0, 0 }
end
local len = string.len(ARGV[2])
local maxBytes = tonumber(ARGV[3])
local used = usedBytes(KEYS[3])
if maxBytes >= 0 and used + len > maxBytes then
  return { -2, used, maxBytes }
end
redis.call('RPUSH', KEYS[2], ARGV[2])
redis.call('HINCRBY', KEYS[1], 'bytes', len)
redis.call('HINCRBY', KEYS[3], ARGV[1], len)
redis.call('HINCRBY', KEYS[3], 'bytes', len)
redis.call('PEXPIREAT', KEYS[1], ARGV[4])
redis.call('PEXPIREAT', KEYS[2], ARGV[4])
redis.call('ZADD', KEYS[4], 'XX', ARGV[4], ARGV[1])
return { 0, used + len, maxBytes }
