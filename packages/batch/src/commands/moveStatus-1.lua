--[[
  Moves a batch to a new status if it is in one of the given ones, stamping when.

  KEYS[1] the batch's hash
  ARGV[1] new status
  ARGV[2] field to stamp (e.g. in_progress_at), or '' for none
  ARGV[3] the stamp (Unix seconds)
  ARGV[4..] statuses it may move from

  Output: 1 if moved, 0 if its status was another (or it does not exist).
]]
local current = redis.call('HGET', KEYS[1], 'status')
if not current then
  return 0
end
for i = 4, #ARGV do
  if current == ARGV[i] then
    redis.call('HSET', KEYS[1], 'status', ARGV[1])
    if ARGV[2] ~= '' then
      redis.call('HSET', KEYS[1], ARGV[2], ARGV[3])
    end
    return 1
  end
end
return 0
