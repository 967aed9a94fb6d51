--[[
  A tenant's files and the storage they hold. A file's keys are built from the batch base as
  batch-keys.ts builds them (every one in the slot of the base's hash tag). The tenant's storage
  hash holds `bytes` (the total) and one field per file (its bytes), so a file whose keys Redis
  already expired is still taken off the total when it is purged.
]]

-- Deletes file `id` with its content and takes its bytes off the tenant's total.
local function dropFile(base, expiryKey, createdKey, storageKey, id)
  local meta = base .. ':file:' .. id
  local bytes = tonumber(redis.call('HGET', storageKey, id) or '0')
  if bytes ~= 0 then
    redis.call('HINCRBY', storageKey, 'bytes', -bytes)
  end
  redis.call('HDEL', storageKey, id)
  redis.call('DEL', meta, meta .. ':chunks', meta .. ':content')
  redis.call('ZREM', expiryKey, id)
  redis.call('ZREM', createdKey, id)
end

-- Deletes every file whose expiry, or unfinished upload's deadline, is at or before nowMs.
local function purgeExpired(base, expiryKey, createdKey, storageKey, nowMs)
  local ids = redis.call('ZRANGEBYSCORE', expiryKey, '-inf', nowMs)
  for _, id in ipairs(ids) do
    dropFile(base, expiryKey, createdKey, storageKey, id)
  end
  return #ids
end

local function usedBytes(storageKey)
  return tonumber(redis.call('HGET', storageKey, 'bytes') or '0')
end
