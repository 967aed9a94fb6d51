--[[
  Prefix parts (QueuedRequest.prefixParts): the parts of a prompt's start that the requests running
  on one replica hold once, because its prefix cache shares their KV blocks. A request's record
  keeps them as `px`, 'key tokens key tokens …' (absent: none). key_replicaPrefix(replica, part)
  counts the running requests on the replica that hold the part; the replica's reservation
  counts each held part's tokens once: a request reserves `reserve` less the tokens of its parts
  another running request there holds, and its release frees a part's tokens only with the last
  holder.
]]
--- @include "numbers"

-- The keys and tokens of a `px` string, in two arrays.
local function prefixParts(px)
  local keys, tokens = {}, {}
  for k, t in string.gmatch(px, '(%S+) (%S+)') do
    keys[#keys + 1] = k
    tokens[#tokens + 1] = t + 0
  end
  return keys, tokens
end

-- The keys counting the holders of each part on `replica` (key_replicaPrefix).
local function prefixKeys(replica, keys)
  local out = {}
  for i = 1, #keys do out[i] = key_replicaPrefix(replica, keys[i]) end
  return out
end

-- The tokens of the parts of `px` that a running request on `replica` holds already (what a request
-- with these parts does not reserve again there), with the counting keys and counts read (for
-- holdPrefixParts). One read.
local function heldPrefixTokens(replica, px)
  local keys, tokens = prefixParts(px)
  local counted = prefixKeys(replica, keys)
  local counts = redisCall('MGET', unpack(counted))
  local held = 0
  for i = 1, #keys do
    if counts[i] then held = held + tokens[i] end
  end
  return held, counted, counts
end

-- Counts one more running request on its replica holding the parts (counting keys and counts as
-- heldPrefixTokens read them). One write.
local function holdPrefixParts(counted, counts)
  local kv = {}
  for i = 1, #counted do
    kv[#kv + 1] = counted[i]
    kv[#kv + 1] = count(num(counts[i]) + 1)
  end
  redisCall('MSET', unpack(kv))
end

-- A running request on `replica` lets go of the parts of `px`: returns the tokens of those another
-- running request there still holds (they stay reserved on the replica).
local function releasePrefixParts(replica, px)
  local keys, tokens = prefixParts(px)
  local counted = prefixKeys(replica, keys)
  local counts = redisCall('MGET', unpack(counted))
  local kept, keep, gone = 0, {}, {}
  for i = 1, #keys do
    local n = num(counts[i]) - 1
    if n > 0 then
      kept = kept + tokens[i]
      keep[#keep + 1] = counted[i]
      keep[#keep + 1] = count(n)
    else
      gone[#gone + 1] = counted[i]
    end
  end
  if #keep > 0 then redisCall('MSET', unpack(keep)) end
  if #gone > 0 then redisCall('DEL', unpack(gone)) end
  return kept
end
