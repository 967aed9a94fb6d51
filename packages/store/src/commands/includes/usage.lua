--[[
  Usage accounting and quotas (admit, admitAndDispatch, settle, settleAndDispatch, cancel, reclaim).

  A request admitted with a usage account records, when it settles, its requests / input / output
  tokens / cost in its admission day's row (key_usageDay(day), fields <metric> .. lp(tenant) ..
  lp(key) .. model, metric r, i, o or c) and its tokens and cost in the totals of its tenant and
  its key for that day and month (key_usageTotal('tenant:' .. id | 'key:' .. id, day | month),
  fields t tokens, c cost, rt / rc reserved by running requests, at / ac alert sent). Quotas read
  these totals: settled usage plus reservations plus the request's amount must fit the budget.
  Floats are added in Lua and stored with %.17g (as numbers given to Redis, which writes them so),
  in the same order as memory-store.ts.

  Admission arguments after the window limits (e = admission's last limit argument):
    ARGV[e + 1] '1' with a usage account, '' without (the rest is then '' and 0 quotas)
    ARGV[e + 2] key id ('' none)  ARGV[e + 3] model  ARGV[e + 4] day  ARGV[e + 5] month
    ARGV[e + 6] price in per 1M tokens ('' none)  ARGV[e + 7] price out ('' none)
    ARGV[e + 8] number of quotas m, then 8 per quota: scope ('tenant' | 'key'), window ('day' |
    'month'), kind ('tokens' | 'spend'), budget, amount, alertAt ('' none), resetAtMs, minAmount
    ('' none: the whole amount)

  A quota with a minAmount reserves as much of its amount as its budget holds, down to minAmount:
  the share s = min over those quotas of (room - minAmount) / (amount - minAmount), capped at 1,
  is reserved of each (minAmount + s * (amount - minAmount)) and returned to the caller.

  Record fields: ua ('1'), ut tenant, uk, um, ud, umo, upi, upo, qn, and per quota qk<i> (totals
  key), qf<i> (rt | rc), qr<i> (amount reserved).
]]
--- @include "numbers"

-- How long usage keys live after their first write, seconds: USAGE_RETENTION_DAYS of
-- store-options.ts (400 days: a year of daily rows plus a month's slack). Each day row and each
-- tenant's or key's total gets it when its first usage (or quota reservation) is written, so
-- nothing a tenant ever used stays in Redis for good.
local USAGE_RETENTION_S = 400 * 86400

-- Index of the last usage argument after e, nil if the count is not a number.
local function usageEnd(e)
  local m = tonumber(ARGV[e + 8])
  if m == nil then return nil end
  return e + 8 + m * 8
end

-- Sums go to HSET as numbers: Redis writes them with %.17g, the digits fmt would write, for less.
local function addFloat(key, field, amount)
  redisCall('HSET', key, field, num(redisCall('HGET', key, field)) + amount)
end

local function totalKey(scope, tenant, keyId, bucket)
  if scope == 'key' then return key_usageTotal('key:' .. keyId, bucket) end
  return key_usageTotal('tenant:' .. tenant, bucket)
end

-- nil and the share of the quotas with a minAmount (nil if none) if every quota fits; else the
-- refusal { 0, 'quota_exceeded', retryAfterMs, key }.
local function checkQuotas(e, tenant, now)
  if ARGV[e + 1] ~= '1' then return nil, nil end
  local share = nil
  for i = 0, num(ARGV[e + 8]) - 1 do
    local b = e + 9 + i * 8
    local bucket = ARGV[b + 1] == 'month' and ARGV[e + 5] or ARGV[e + 4]
    local tk = totalKey(ARGV[b], tenant, ARGV[e + 2], bucket)
    local used = ARGV[b + 2] == 'spend' and { 'c', 'rc' } or { 't', 'rt' }
    local v = redisCall('HMGET', tk, used[1], used[2])
    local amount, budget = num(ARGV[b + 4]), num(ARGV[b + 3])
    local least = amount
    if ARGV[b + 7] ~= '' then least = num(ARGV[b + 7]) end
    local held = num(v[1]) + num(v[2])
    if held + least > budget then
      return { 0, 'quota_exceeded', fmt(math.max(0, num(ARGV[b + 6]) - now)),
        'quota:' .. ARGV[b] .. ':' .. ARGV[b + 1] .. ':' .. ARGV[b + 2] }
    end
    if least < amount then
      local s = (budget - held - least) / (amount - least)
      if s > 1 then s = 1 end
      if share == nil or s < share then share = s end
    end
  end
  return nil, share
end

-- Appends the usage fields to an admitted request's record, reserves its quotas (those with a
-- minAmount by `share`, as checkQuotas returned it) and returns the alerts this admission set
-- off: { quota, bucket, budget, used, ... } (flat).
local function reserveQuotas(e, tenant, record, share)
  local alerts = {}
  if ARGV[e + 1] ~= '1' then return alerts end
  local m = num(ARGV[e + 8])
  local at = #record
  record[at + 1], record[at + 2], record[at + 3], record[at + 4] = 'ua', '1', 'ut', tenant
  record[at + 5], record[at + 6], record[at + 7], record[at + 8] = 'uk', ARGV[e + 2], 'um', ARGV[e + 3]
  record[at + 9], record[at + 10], record[at + 11], record[at + 12] = 'ud', ARGV[e + 4], 'umo', ARGV[e + 5]
  record[at + 13], record[at + 14], record[at + 15], record[at + 16] = 'upi', ARGV[e + 6], 'upo', ARGV[e + 7]
  record[at + 17], record[at + 18] = 'qn', count(m)
  for i = 0, m - 1 do
    local b = e + 9 + i * 8
    local bucket = ARGV[b + 1] == 'month' and ARGV[e + 5] or ARGV[e + 4]
    local tk = totalKey(ARGV[b], tenant, ARGV[e + 2], bucket)
    local spend = ARGV[b + 2] == 'spend'
    local uf, rf, af = 't', 'rt', 'at'
    if spend then uf, rf, af = 'c', 'rc', 'ac' end
    local amount = num(ARGV[b + 4])
    local reservedText = ARGV[b + 4]
    if share ~= nil and ARGV[b + 7] ~= '' and num(ARGV[b + 7]) < amount then
      local least = num(ARGV[b + 7])
      amount = least + share * (amount - least)
      reservedText = fmt(amount)
    end
    local v = redisCall('HMGET', tk, uf, rf)
    redisCall('HSET', tk, rf, fmt(num(v[2]) + amount))
    if not v[1] and not v[2] then redisCall('EXPIRE', tk, USAGE_RETENTION_S) end
    local n = i + 1
    record[#record + 1] = 'qk' .. n
    record[#record + 1] = tk
    record[#record + 1] = 'qf' .. n
    record[#record + 1] = rf
    record[#record + 1] = 'qr' .. n
    record[#record + 1] = reservedText
    local used = num(v[1]) + num(v[2]) + amount
    if ARGV[b + 5] ~= '' and used >= num(ARGV[b + 5]) and redisCall('HSETNX', tk, af, '1') == 1 then
      alerts[#alerts + 1] = ARGV[b] .. ':' .. ARGV[b + 1] .. ':' .. ARGV[b + 2]
      alerts[#alerts + 1] = bucket
      alerts[#alerts + 1] = ARGV[b + 3]
      alerts[#alerts + 1] = fmt(used)
    end
  end
  return alerts
end

-- Gives back a request's quota reservations (settle, or a queued request dropped).
local function releaseQuotas(id, r)
  local n = num(r.qn)
  if n == 0 then return end
  local names = {}
  for i = 1, n do
    names[#names + 1] = 'qk' .. i
    names[#names + 1] = 'qf' .. i
    names[#names + 1] = 'qr' .. i
  end
  local q = redisCall('HMGET', key_req(id), unpack(names))
  for i = 1, #q, 3 do addFloat(q[i], q[i + 1], -num(q[i + 2])) end
end

-- Adds a settlement's usage to its row of a day's hash (requests, input, output, and cost if
-- priced), one read and one write (sums as addFloat writes them). The row's first write sets the
-- key's expiry.
local function addToDayRow(key, row, inp, out, cost, priced)
  local rr, ri, ro = 'r' .. row, 'i' .. row, 'o' .. row
  if priced then
    local rc = 'c' .. row
    local v = redisCall('HMGET', key, rr, ri, ro, rc)
    redisCall('HSET', key, rr, num(v[1]) + 1, ri, num(v[2]) + inp, ro, num(v[3]) + out, rc, num(v[4]) + cost)
    if not v[1] then redisCall('EXPIRE', key, USAGE_RETENTION_S) end
  else
    local v = redisCall('HMGET', key, rr, ri, ro)
    redisCall('HSET', key, rr, num(v[1]) + 1, ri, num(v[2]) + inp, ro, num(v[3]) + out)
    if not v[1] then redisCall('EXPIRE', key, USAGE_RETENTION_S) end
  end
end

-- Adds a settlement's tokens, and cost if priced, to a total; its first settled usage sets the
-- key's expiry (and a settlement that finds it at 0 sets it again). A settlement with an API key
-- adds to four totals.
local function addToTotal(key, tokens, cost, priced)
  if priced then
    local v = redisCall('HMGET', key, 't', 'c')
    redisCall('HSET', key, 't', num(v[1]) + tokens, 'c', num(v[2]) + cost)
    if not v[1] then redisCall('EXPIRE', key, USAGE_RETENTION_S) end
  else
    -- Tokens are whole, so Redis adds them exactly, in one command; a total that was absent now
    -- holds just these tokens.
    if redisCall('HINCRBY', key, 't', tokens) == tokens then redisCall('EXPIRE', key, USAGE_RETENTION_S) end
  end
end

-- Records a settled request's usage (whole tokens) and replaces its reservations by it.
local function recordUsage(id, r, actualTokens, outputTokens)
  if r.ua ~= '1' then return end
  local out = math.floor(outputTokens)
  local inp = math.floor(actualTokens) - out
  if inp < 0 then inp = 0 end
  local u = redisCall('HMGET', key_req(id), 'ut', 'uk', 'um', 'ud', 'umo', 'upi', 'upo', 'qn')
  local tenant, keyId, day, month = u[1], u[2], u[4], u[5]
  r.qn = u[8]
  local priced = u[6] ~= '' or u[7] ~= ''
  local cost = (inp * num(u[6]) + out * num(u[7])) / 1000000
  local row = lp(tenant) .. lp(keyId) .. u[3]
  addToDayRow(key_usageDay(day), row, inp, out, cost, priced)
  local tokens = inp + out
  addToTotal(totalKey('tenant', tenant, keyId, day), tokens, cost, priced)
  addToTotal(totalKey('tenant', tenant, keyId, month), tokens, cost, priced)
  if keyId ~= '' then
    addToTotal(totalKey('key', tenant, keyId, day), tokens, cost, priced)
    addToTotal(totalKey('key', tenant, keyId, month), tokens, cost, priced)
  end
  releaseQuotas(id, r)
end
