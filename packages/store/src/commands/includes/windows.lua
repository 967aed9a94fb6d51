--[[
  Sliding windows (RPM, TPM, OIT throttles): a ZSET of request ids by admission time, their amounts
  and a running total, updated with the same float operations in the same order as window-log.ts.
]]
--- @include "numbers"

-- Drops entries admitted at or before cutoff; deletes the window when it becomes empty.
local function purgeWindow(wkey, cutoff)
  local log = key_windowLog(wkey)
  local old = redisCall('ZRANGEBYSCORE', log, '-inf', fmt(cutoff))
  if #old == 0 then return end
  local amounts = key_windowAmounts(wkey)
  local tot = num(redisCall('GET', key_windowTotal(wkey)))
  for _, id in ipairs(old) do
    tot = tot - num(redisCall('HGET', amounts, id))
    redisCall('HDEL', amounts, id)
  end
  redisCall('ZREMRANGEBYSCORE', log, '-inf', fmt(cutoff))
  if redisCall('ZCARD', log) == 0 then
    redisCall('DEL', log, amounts, key_windowTotal(wkey))
  else
    redisCall('SET', key_windowTotal(wkey), fmt(tot))
  end
end

-- nil if amount fits under limit; otherwise ms until enough entries leave (windowMs if never).
local function windowRetryAfter(wkey, amount, limit, windowMs, now)
  local tot = num(redisCall('GET', key_windowTotal(wkey)))
  if tot + amount <= limit then return nil end
  if amount > limit then return windowMs end
  local entries = redisCall('ZRANGE', key_windowLog(wkey), '0', '-1', 'WITHSCORES')
  local amounts = key_windowAmounts(wkey)
  local rem = tot
  for i = 1, #entries, 2 do
    rem = rem - num(redisCall('HGET', amounts, entries[i]))
    if rem + amount <= limit then return num(entries[i + 1]) + windowMs - now end
  end
  return windowMs
end

local function addToWindow(wkey, id, now, amount)
  redisCall('ZADD', key_windowLog(wkey), fmt(now), id)
  redisCall('HSET', key_windowAmounts(wkey), id, fmt(amount))
  local tk = key_windowTotal(wkey)
  redisCall('SET', tk, fmt(num(redisCall('GET', tk)) + amount))
end

-- Replaces the amounts of a request's true-up windows (settle: true tokens; cancel: 0).
local function trueUpWindows(id, r, amount)
  for i = 1, num(r.wn) do
    if r['wt' .. i] == '1' then
      local wkey = r['wk' .. i]
      local old = redisCall('HGET', key_windowAmounts(wkey), id)
      if old then
        local tk = key_windowTotal(wkey)
        redisCall('SET', tk, fmt(num(redisCall('GET', tk)) - num(old) + amount))
        redisCall('HSET', key_windowAmounts(wkey), id, fmt(amount))
      end
    end
  end
end
