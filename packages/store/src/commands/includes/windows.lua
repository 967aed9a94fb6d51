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
      was created, 'r' '1' while key_windowRestored exists, 'q' the last refusal's answer among
      the older buckets, '<below>:<end>:<upTo>' (see windowRetryAfter; '' or absent when none);
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

-- Reads a window: { tot, newest end, newest sum, oldest end, 'q' } once the buckets that ended at
-- or before now are dropped; nil if no bucket is left (the window is then deleted).
local function purgeWindow(wkey, now)
  local sums = key_windowSums(wkey)
  local v = redisCall('HMGET', sums, 't', 'h', 'l', 'n', 'r', 'q')
  if not v[1] then return nil end
  local w = { num(v[1]), v[3], num(v[4]), v[2], v[6] }
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
  local left = w[1] - tot
  w[1] = tot
  redisCall('ZREMRANGEBYSCORE', buckets, '-inf', now)
  local first = redisCall('ZRANGE', buckets, '0', '0')
  local head = v[3]
  if #first > 0 then head = bucketName(first[1]) end
  w[4] = head
  -- A refusal's answer (see windowRetryAfter) still ahead counts from the new oldest bucket.
  local q = v[6]
  local a = ''
  if q and q ~= '' then
    local i = string.find(q, ':', 1, true)
    local j = string.find(q, ':', i + 1, true)
    local e = string.sub(q, i + 1, j - 1)
    if num(e) > now then
      a = fmt(string.sub(q, 1, i - 1) - left) .. ':' .. e .. ':' .. fmt(string.sub(q, j + 1) - left)
    end
  end
  w[5] = a
  redisCall('HSET', sums, 't', fmt(tot), 'h', head, 'q', a)
  if v[5] then
    local restored = key_windowRestored(wkey)
    redisCall('ZREMRANGEBYSCORE', restored, '-inf', now)
    if redisCall('ZCARD', restored) == 0 then redisCall('HDEL', sums, 'r') end
  end
  return w
end

-- nil if amount fits under limit beside the window w (purgeWindow's); otherwise ms until enough
-- buckets leave (windowMs if never). With `need` = tot + amount - limit, the answer is the first
-- bucket, oldest first, whose sum with every older one (its prefix sum) reaches need: the newest
-- when the older ones together fall short (the newest alone keeps the window full). The last
-- answer among the older buckets is kept in 'q' with the prefix sums just below it and up to it,
-- so a flood whose refusals ask again finds it without a read (need between the two), or walks on
-- from it (need grown: counted refusals fill the newest bucket, which is after it); the older
-- buckets change only out of order (an admission dated before the newest bucket, a true-up), which
-- drops or corrects 'q', and by purges, which move both sums down alike. Otherwise the walk starts
-- at the end nearer the answer: the oldest when less must leave than may stay, else the newest;
-- the older buckets in rounds of 1, 4, 16 and 64, each one read with its sum.
local function windowRetryAfter(wkey, w, amount, limit, windowMs, now)
  local tot = w and w[1] or 0
  if tot + amount <= limit then return nil end
  if amount > limit then return windowMs end
  if w[3] + amount > limit then return num(w[2]) - now end
  local need = tot + amount - limit
  local buckets = key_windowBuckets(wkey)
  local below, from, n = 0, 0, 1
  local after = nil
  local q = w[5]
  local i = q and q ~= '' and string.find(q, ':', 1, true)
  local j = i and string.find(q, ':', i + 1, true)
  -- (An answer whose bucket has ended is not used: a build that keeps no answers may have purged it.)
  if j and string.sub(q, i + 1, j - 1) + 0 > now then
    local upTo = string.sub(q, j + 1) + 0
    if need <= upTo then
      if string.sub(q, 1, i - 1) + 0 < need then return string.sub(q, i + 1, j - 1) - now end
    else
      below, after = upTo, string.sub(q, i + 1, j - 1)
    end
  end
  if after == nil and need > limit - amount then
    local kept = w[3]
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
  local sum = below
  while true do
    local older
    if after == nil then
      older = redisCall('ZRANGE', buckets, count(from), count(from + n - 1))
    else
      older = redisCall('ZRANGEBYSCORE', buckets, '(' .. after, '+inf', 'LIMIT', count(from), count(n))
    end
    for i = 1, #older do
      local m = older[i]
      local upTo = sum + bucketSum(m)
      if upTo >= need then
        local e = bucketName(m)
        redisCall('HSET', key_windowSums(wkey), 'q', fmt(sum) .. ':' .. e .. ':' .. fmt(upTo))
        return num(e) - now
      end
      sum = upTo
    end
    if #older < n then
      if tot - sum - w[3] + amount <= limit then return num(w[2]) - now end
      return windowMs
    end
    from, n = from + n, n * 4
  end
end

-- Counts amount, admitted at `at`, in its bucket (dropping the buckets that ended by now first,
-- unless `purged`: then w is what purgeWindow returned for this now, nil if the window was empty;
-- a window created here is born at now). Returns the bucket's end as fmt writes it, the window's
-- total after it and its oldest bucket's end.
local function addToWindow(wkey, at, windowMs, amount, now, purged, w)
  local e = bucketEnd(at, windowMs)
  local sums = key_windowSums(wkey)
  if not purged then w = purgeWindow(wkey, now) end
  if w == nil then
    local name, t = fmt(e), fmt(0 + amount)
    redisCall('HSET', sums, 't', t, 'h', name, 'l', name, 'n', t, 'b', fmt(now))
    return name, t, name
  end
  local last = num(w[2])
  local t = fmt(w[1] + amount)
  -- The newest bucket's name is fmt of its end already.
  if e == last then
    redisCall('HSET', sums, 'n', fmt(w[3] + amount), 't', t)
    return w[2], t, w[4]
  end
  local name = fmt(e)
  if e > last then
    -- The newest bucket becomes an older one.
    redisCall('ZADD', key_windowBuckets(wkey), last, w[2] .. ':' .. fmt(w[3]))
    redisCall('HSET', sums, 'l', name, 'n', fmt(0 + amount), 't', t)
  else
    -- Admitted out of order (another dispatcher's clock, a restore): into its own older bucket,
    -- which may be one a refusal's answer ('q') counted.
    local buckets = key_windowBuckets(wkey)
    local m = redisCall('ZRANGEBYSCORE', buckets, e, e)
    local sum = 0
    if #m > 0 then
      sum = bucketSum(m[1])
      redisCall('ZREM', buckets, m[1])
    end
    redisCall('ZADD', buckets, e, name .. ':' .. fmt(sum + amount))
    if e < num(w[4]) then
      redisCall('HSET', sums, 't', t, 'h', name, 'q', '')
      return name, t, name
    end
    redisCall('HSET', sums, 't', t, 'q', '')
  end
  return name, t, w[4]
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
          -- An older bucket changed: a refusal's answer kept in 'q' may count it.
          redisCall('HSET', sums, 't', fmt(num(v[1]) + (next - sum)), 'q', '')
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
