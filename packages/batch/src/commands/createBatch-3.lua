--[[
  Creates a batch of a tenant's unless it has as many open as it may: batches that ended (or are
  gone) leave the tenant's open set here, so the count needs no hook on every way a batch ends.

  KEYS[1] the batch's hash
  KEYS[2] the tenant's batches by creation (sorted set, ms)
  KEYS[3] the tenant's open batches (set)
  ARGV[1] batch key base
  ARGV[2] now, ms
  ARGV[3] most open batches (-1: no limit)
  ARGV[4] batch id
  ARGV[5..] the batch's fields, field value pairs

  Output: {code, open, limit}; code 0 created, -5 too many open.
]]
local TERMINAL = { completed = true, failed = true, expired = true, cancelled = true }
local base, maxOpen, id = ARGV[1], tonumber(ARGV[3]), ARGV[4]
for _, b in ipairs(redis.call('SMEMBERS', KEYS[3])) do
  local status = redis.call('HGET', base .. ':batch:' .. b, 'status')
  if not status or TERMINAL[status] then
    redis.call('SREM', KEYS[3], b)
  end
end
local open = redis.call('SCARD', KEYS[3])
if maxOpen >= 0 and open >= maxOpen then
  return { -5, open, maxOpen }
end
redis.call('HSET', KEYS[1], unpack(ARGV, 5))
redis.call('ZADD', KEYS[2], ARGV[2], id)
redis.call('SADD', KEYS[3], id)
return { 0, open + 1, maxOpen }
