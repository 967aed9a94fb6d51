--[[
  Records the outcome of one batch line, once: the first outcome recorded for a line stays, a
  later one (a line run again after its dispatcher died) is dropped, so the output holds each
  custom_id exactly once and the counts count it once.

  KEYS[1] the batch's results hash (line index -> outcome)
  KEYS[2] the batch's hash (counters, total)
  ARGV[1] line index
  ARGV[2] outcome (JSON text)
  ARGV[3] counter to increment: completed, failed, expired or skipped

  Output: lines left to settle (>= 0), -1 when the line was already recorded, -2 when the batch
  is past taking outcomes (finalizing or finished).
]]
local status = redis.call('HGET', KEYS[2], 'status')
if status ~= 'in_progress' and status ~= 'cancelling' then
  return -2
end
if redis.call('HSETNX', KEYS[1], ARGV[1], ARGV[2]) == 0 then
  return -1
end
redis.call('HINCRBY', KEYS[2], ARGV[3], 1)
local settled = redis.call('HINCRBY', KEYS[2], 'settled', 1)
return tonumber(redis.call('HGET', KEYS[2], 'total')) - settled
