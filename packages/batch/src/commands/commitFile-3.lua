--[[
  Ends an upload: the file becomes readable and lives until its expiry, when Redis drops its keys
  and the tenant's next purge takes its bytes off the total.

  KEYS[1] the file's metadata (hash)
  KEYS[2] the file's content (list of pieces)
  KEYS[3] the tenant's files by expiry (sorted set, ms)
  ARGV[1] file id
  ARGV[2] expiry, ms
  ARGV[3] expiry, Unix seconds (the File object's expires_at)
  ARGV[4..] metadata learnt during the upload (filename, purpose), field value pairs

  Output: 0 committed, -4 the upload is gone (purged, deleted).
]]
if redis.call('HGET', KEYS[1], 'status') ~= 'uploading' then
  return -4
end
redis.call('HSET', KEYS[1], 'status', 'processed', 'expires_at', ARGV[3], unpack(ARGV, 4))
redis.call('PEXPIREAT', KEYS[1], ARGV[2])
redis.call('PEXPIREAT', KEYS[2], ARGV[2])
redis.call('ZADD', KEYS[3], 'XX', ARGV[2], ARGV[1])
return 0
