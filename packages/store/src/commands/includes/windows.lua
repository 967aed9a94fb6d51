--[[
  Sliding windows (RPM, TPM, OIT throttles) in time buckets, as sliding-window.ts keeps them, with
  the same float operations in the same order.

  An amount admitted at t counts until bucketEnd(t, windowMs): t + windowMs rounded up to a
  multiple of ceil(windowMs / WINDOW_BUCKETS) ms, never earlier, so a limit is never exceeded and a
  window holds at most WINDOW_BUCKETS + 1 buckets. Nothing is kept per request: a request's record
  holds its bucket and amount (we<i>, wa<i>) for true-up.

  Keys per window (wkey, tenant-scoped): key_windowBuckets ZSET bucket end -> end (order);
  key_windowSums HASH bucket end -> sum, 't' total, 'h' first bucket end, 'b' creation time,
  'r' '1' while key_windowRestored (ZSET request id -> bucket end of entries restore put back)
  exists. A window whose buckets all ended is deleted; the next amount creates it afresh.
]]
--- @include "numbers"

-- sliding-window.ts's WINDOW_BUCKETS.
local WINDOW_BUCKETS = 60

local function bucketEnd(at, windowMs)
  local g = math.ceil(windowMs / WINDOW_BUCKETS)
  local x = at + windowMs
  local e = math.ceil(x / g) * g
  -- The quotient may round down to an integer below the true one: never leave early.
  if e < x then e = e + g end
  return e
end

-- The window's total once the buckets that ended at or before now are dropped (0 if none is left:
-- the window is deleted), and whether the window exists.
local function purgeWindow(wkey, now)
  local sums = key_windowSums(wkey)
  local v = redisCall('HMGET', sums, 't', 'h')
  if not v[1] then return 0, false end
  local tot = num(v[1])
  if num(v[2]) > now then return tot, true end
  local buckets = key_windowBuckets(wkey)
  local old = redisCall('ZRANGEBYSCORE', buckets, '-inf', now)
  local left = redisCall('ZRANGE', buckets, #old, #old)
  if #old == 0 then
    -- (Not reached: 'h' is the first bucket's end.)
    if #left > 0 then redisCall('HSET', sums, 'h', left[1]) end
    return tot, true
  end
  if #left == 0 then
    redisCall('DEL', buckets, sums, key_windowRestored(wkey))
    return 0, false
  end
  local s = redisCall('HMGET', sums, 'r', unpack(old))
  for i = 2, #s do tot = tot - num(s[i]) end
  redisCall('ZREMRANGEBYRANK', buckets, 0, #old - 1)
  redisCall('HDEL', sums, unpack(old))
  if s[1] then
    local restored = key_windowRestored(wkey)
    redisCall('ZREMRANGEBYSCORE', restored, '-inf', now)
    if redisCall('ZCARD', restored) == 0 then redisCall('HDEL', sums, 'r') end
  end
  redisCall('HSET', sums, 't', fmt(tot), 'h', left[1])
  return tot, true
end

-- nil if amount fits under limit beside the window's total tot (as purgeWindow returned it);
-- otherwise ms until enough buckets leave (windowMs if never). Reads at most every bucket.
local function windowRetryAfter(wkey, tot, amount, limit, windowMs, now)
  if tot + amount <= limit then return nil end
  if amount > limit then return windowMs end
  local ends = redisCall('ZRANGE', key_windowBuckets(wkey), 0, -1)
  local s = redisCall('HMGET', key_windowSums(wkey), unpack(ends))
  local rem = tot
  for i = 1, #ends do
    rem = rem - num(s[i])
    if rem + amount <= limit then return num(ends[i]) - now end
  end
  return windowMs
end

-- Counts amount, admitted at `at`, in its bucket (dropping the buckets that ended by now first;
-- a window created here is born at now). Returns the bucket's end as the window's hash names it.
local function addToWindow(wkey, at, windowMs, amount, now)
  local tot, exists = purgeWindow(wkey, now)
  local e = bucketEnd(at, windowMs)
  local name = fmt(e)
  local sums = key_windowSums(wkey)
  if not exists then
    redisCall('HSET', sums, name, fmt(0 + amount), 't', fmt(tot + amount), 'h', name, 'b', fmt(now))
    redisCall('ZADD', key_windowBuckets(wkey), e, name)
    return name
  end
  local v = redisCall('HMGET', sums, name, 'h')
  if v[1] then
    redisCall('HSET', sums, name, fmt(num(v[1]) + amount), 't', fmt(tot + amount))
    return name
  end
  if e < num(v[2]) then
    redisCall('HSET', sums, name, fmt(0 + amount), 't', fmt(tot + amount), 'h', name)
  else
    redisCall('HSET', sums, name, fmt(0 + amount), 't', fmt(tot + amount))
  end
  redisCall('ZADD', key_windowBuckets(wkey), e, name)
  return name
end

-- Replaces a request's amounts in its true-up windows (settle: true tokens; cancel: 0): in each,
-- the amount it counted (wa<i>) in its bucket (we<i>), if that bucket has not ended by now. A
-- bucket never goes below empty.
local function trueUpWindows(r, amount, now)
  for i = 1, num(r.wn) do
    local name = r['we' .. i]
    if r['wt' .. i] == '1' and name and num(name) > now then
      local sums = key_windowSums(r['wk' .. i])
      local v = redisCall('HMGET', sums, name, 't')
      if v[1] then
        local sum = num(v[1])
        local next = sum - num(r['wa' .. i]) + amount
        if next < 0 then next = 0 end
        redisCall('HSET', sums, name, fmt(next), 't', fmt(num(v[2]) + (next - sum)))
      end
    end
  end
end

-- Puts back an entry a dispatcher admitted before the state was lost (restore), unless it has
-- ended by now or the window counts it already: the window was created at or before its
-- admission (it has counted every admission since), or it was put back before.
local function restoreToWindow(wkey, id, at, windowMs, amount, now)
  local e = bucketEnd(at, windowMs)
  if e <= now then return end
  local sums = key_windowSums(wkey)
  local restored = key_windowRestored(wkey)
  local born = redisCall('HGET', sums, 'b')
  if born and (num(born) <= at or redisCall('ZSCORE', restored, id)) then return end
  addToWindow(wkey, at, windowMs, amount, now)
  redisCall('ZADD', restored, e, id)
  redisCall('HSET', sums, 'r', '1')
end
