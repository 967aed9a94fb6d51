--[[
  Prefix parts (QueuedRequest.prefixParts): the parts of a prompt's start that the requests running
  on one replica hold once, because its prefix cache shares their KV blocks. A request's record
  keeps them as `px`, 'key tokens key tokens …' (absent: none). key_replicaPrefixes(replica) counts,
  per part key, the running requests on the replica that hold the part; the replica's reservation
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

-- The tokens of the parts of `px` that a running request on `replica` holds already (what a request
-- with these parts does not reserve again there), with the keys and holder counts read (for
-- holdPrefixParts). One read.
local function heldPrefixTokens(replica, px)
  local keys, tokens = prefixParts(px)
  local counts = redisCall('HMGET', key_replicaPrefixes(replica), unpack(keys))
  local held = 0
  for i = 1, #keys do
    if counts[i] then held = held + tokens[i] end
  end
  return held, keys, counts
end

-- Counts one more running request on `replica` holding the parts (keys and counts as
-- heldPrefixTokens read them). One write.
local function holdPrefixParts(replica, keys, counts)
  local fields = {}
  for i = 1, #keys do
    fields[#fields + 1] = keys[i]
    fields[#fields + 1] = count(num(counts[i]) + 1)
  end
  redisCall('HSET', key_replicaPrefixes(replica), unpack(fields))
end

-- A running request on `replica` lets go of the parts of `px`: returns the tokens of those another
-- running request there still holds (they stay reserved on the replica).
local function releasePrefixParts(replica, px)
  local keys, tokens = prefixParts(px)
  local pk = key_replicaPrefixes(replica)
  local counts = redisCall('HMGET', pk, unpack(keys))
  local kept, keep, gone = 0, {}, {}
  for i = 1, #keys do
    local n = num(counts[i]) - 1
    if n > 0 then
      kept = kept + tokens[i]
      keep[#keep + 1] = keys[i]
      keep[#keep + 1] = count(n)
    else
      gone[#gone + 1] = keys[i]
    end
  end
  if #keep > 0 then redisCall('HSET', pk, unpack(keep)) end
  if #gone > 0 then redisCall('HDEL', pk, unpack(gone)) end
  return kept
end
