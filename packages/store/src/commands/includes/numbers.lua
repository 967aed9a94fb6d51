--[[
  Number and string helpers shared by every script.
  Lua's tostring and `..` write numbers with 14 significant digits; fmt keeps all 17 so a double
  survives exactly and the Redis backend matches the memory backend bit for bit. Use it for numbers
  a script returns or builds into strings. A number passed to redis.call needs none: Redis itself
  formats it with %.17g (checked on 7.0), cheaper than a Lua string.format.
]]
local function fmt(x)
  return string.format('%.17g', x)
end

-- A number from a string that holds one (an argument the client wrote, a value a script stored),
-- 0 if absent. `s + 0` parses once; tonumber() parses twice (lua_isnumber, then lua_tonumber),
-- ≈2 strtod per call. Use tonumber only to check untrusted input.
local function num(s)
  if s == false or s == nil or s == '' then return 0 end
  return s + 0
end

-- Byte-wise string order (Lua's < uses strcoll, which follows the server's locale).
local function bless(a, b)
  local n = math.min(#a, #b)
  for i = 1, n do
    local x, y = string.byte(a, i), string.byte(b, i)
    if x ~= y then return x < y end
  end
  return #a < #b
end
