--[[
  Sliding windows (RPM, TPM, OIT throttles) in time buckets, as sliding-window.ts keeps them, with
  the same float operations in the same order.

  An amount admitted at t counts until bucketEnd(t, windowMs): t + windowMs rounded up to a
  multiple of ceil(windowMs / WINDOW_BUCKETS) ms, never earlier, so a limit is never exceeded and a
  window holds at most WINDOW_BUCKETS + 1 buckets (for one windowMs). Nothing is kept per request:
  a request's record holds its bucket and amount (we<i>, wa<i>) for true-up.

  Keys per window (wkey, tenant-scoped):
    key_windowSums HASH: 't' total, 'h' end of the oldest bucket, 'l' end of the newest bucket and
      'n' its sum (admissions land there: no other bucket is read or written), 'b' when the window
      was created, 'r' '1' while key_windowRestored exists;
    key_windowBuckets ZSET of the older buckets, scored by end, member '<end>:<sum>' (a refusal
      reads them in order, sums included, without a lookup per bucket);
    key_windowRestored ZSET request id -> bucket end of the entries restore put back.
  A window whose buckets all ended is deleted; the next amount creates it afresh. Bucket ends are
  written with fmt, sums with fmt.
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

-- An older bucket's sum and end, from its member.
local function bucketSum(m)
  return string.sub(m, string.find(m, ':', 1, true) + 1) + 0
end

local function bucketName(m)
  return string.sub(m, 1, string.find(m, ':', 1, true) - 1)
end

-- Reads a window: { tot, newest end, newest sum } once the buckets that ended at or before now are
-- dropped; nil if no bucket is left (the window is then deleted).
local function purgeWindow(wkey, now)
  local sums = key_windowSums(wkey)
  local v = redisCall('HMGET', sums, 't', 'h', 'l', 'n', 'r')
  if not v[1] then return nil end
  local w = { num(v[1]), v[3], num(v[4]) }
  if num(v[2]) > now then return w end
  local buckets = key_windowBuckets(wkey)
  if num(v[3]) <= now then
    redisCall('DEL', sums, buckets, key_windowRestored(wkey))
    return nil
  end
  local old = redisCall('ZRANGEBYSCORE', buckets, '-inf', now)
  local tot = w[1]
  for i = 1, #old do
    tot = tot - bucketSum(old[i])
  end
  w[1] = tot
  redisCall('ZREMRANGEBYSCORE', buckets, '-inf', now)
  local first = redisCall('ZRANGE', buckets, '0', '0')
  local head = v[3]
  if #first > 0 then head = bucketName(first[1]) end
  redisCall('HSET', sums, 't', fmt(tot), 'h', head)
  if v[5] then
    local restored = key_windowRestored(wkey)
    redisCall('ZREMRANGEBYSCORE', restored, '-inf', now)
    if redisCall('ZCARD', restored) == 0 then redisCall('HDEL', sums, 'r') end
  end
  return w
end

-- nil if amount fits under limit beside the window w (purgeWindow's); otherwise ms until enough
-- buckets leave (windowMs if never). Walks from the end nearer the answer: from the oldest bucket
-- when less must leave than may stay (a flood at its limit: the oldest answers), else from the
-- newest (a throttled flood, whose refused arrivals fill the newest buckets); the older buckets in
-- rounds of 1, 4, 16 and 64, each one read with its sum.
local function windowRetryAfter(wkey, w, amount, limit, windowMs, now)
  local tot = w and w[1] or 0
  if tot + amount <= limit then return nil end
  if amount > limit then return windowMs end
  local buckets = key_windowBuckets(wkey)
  local from, n = 0, 1
  if tot + amount - limit <= limit - amount then
    local rem = tot
    while true do
      local older = redisCall('ZRANGE', buckets, count(from), count(from + n - 1))
      for i = 1, #older do
        rem = rem - bucketSum(older[i])
        if rem + amount <= limit then return num(bucketName(older[i])) - now end
      end
      if #older < n then break end
      from, n = from + n, n * 4
    end
    rem = rem - w[3]
    if rem + amount <= limit then return num(w[2]) - now end
    return windowMs
  end
  local kept = w[3]
  if kept + amount > limit then return num(w[2]) - now end
  while true do
    local older = redisCall('ZRANGE', buckets, count(from), count(from + n - 1), 'REV')
    for i = 1, #older do
      kept = kept + bucketSum(older[i])
      if kept + amount > limit then return num(bucketName(older[i])) - now end
    end
    if #older < n then return windowMs end
    from, n = from + n, n * 4
  end
end

-- Counts amount, admitted at `at`, in its bucket (dropping the buckets that ended by now first;
-- a window created here is born at now). Returns the bucket's end as fmt writes it.
local function addToWindow(wkey, at, windowMs, amount, now)
  local e = bucketEnd(at, windowMs)
  local name = fmt(e)
  local sums = key_windowSums(wkey)
  local w = purgeWindow(wkey, now)
  if w == nil then
    redisCall('HSET', sums, 't', fmt(0 + amount), 'h', name, 'l', name, 'n', fmt(0 + amount), 'b', fmt(now))
    return name
  end
  local last = num(w[2])
  if e == last then
    redisCall('HSET', sums, 'n', fmt(w[3] + amount), 't', fmt(w[1] + amount))
  elseif e > last then
    -- The newest bucket becomes an older one.
    redisCall('ZADD', key_windowBuckets(wkey), last, w[2] .. ':' .. fmt(w[3]))
    redisCall('HSET', sums, 'l', name, 'n', fmt(0 + amount), 't', fmt(w[1] + amount))
  else
    -- Admitted out of order (another dispatcher's clock, a restore): into its own older bucket.
    local buckets = key_windowBuckets(wkey)
    local m = redisCall('ZRANGEBYSCORE', buckets, e, e)
    local sum = 0
    if #m > 0 then
      sum = bucketSum(m[1])
      redisCall('ZREM', buckets, m[1])
    end
    redisCall('ZADD', buckets, e, name .. ':' .. fmt(sum + amount))
    if e < num(redisCall('HGET', sums, 'h')) then
      redisCall('HSET', sums, 't', fmt(w[1] + amount), 'h', name)
    else
      redisCall('HSET', sums, 't', fmt(w[1] + amount))
    end
  end
  return name
end

-- Replaces a request's amounts in its true-up windows (settle: true tokens; cancel: 0): in each,
-- the amount it counted (wa<i>) in its bucket (we<i>), if that bucket has not ended by now. A
-- bucket never goes below empty.
local function trueUpWindows(r, amount, now)
  for i = 1, num(r.wn) do
    local name = r['we' .. i]
    if r['wt' .. i] == '1' and name and num(name) > now then
      local wkey = r['wk' .. i]
      local sums = key_windowSums(wkey)
      local v = redisCall('HMGET', sums, 't', 'l', 'n')
      if v[2] == name then
        local sum = num(v[3])
        local next = sum - num(r['wa' .. i]) + amount
        if next < 0 then next = 0 end
        redisCall('HSET', sums, 'n', fmt(next), 't', fmt(num(v[1]) + (next - sum)))
      elseif v[1] then
        local buckets = key_windowBuckets(wkey)
        local m = redisCall('ZRANGEBYSCORE', buckets, name, name)
        if #m > 0 then
          local sum = bucketSum(m[1])
          local next = sum - num(r['wa' .. i]) + amount
          if next < 0 then next = 0 end
          redisCall('ZREM', buckets, m[1])
          redisCall('ZADD', buckets, name, name .. ':' .. fmt(next))
          redisCall('HSET', sums, 't', fmt(num(v[1]) + (next - sum)))
        end
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
