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

-- Decimal strings of the whole numbers 0 .. 255, made once when the library loads. A number given
-- to redis.call is formatted with %.17g on every call (≈2,300 instructions); a string is not.
local DECIMAL = {}
for i = 0, 255 do DECIMAL[i] = i .. '' end

-- A count (a whole number ≥ 0, never -0) as redis.call takes it: its decimal string if small, else
-- itself (Redis writes it as %.17g would, the same digits).
local function count(x)
  return DECIMAL[x] or x
end

-- A number as a reply element: an integer (exact up to 2^53; the client reads it as a number)
-- unless it has a fraction, then as fmt writes it. Cheaper than fmt when it is whole.
local function wire(x)
  if x % 1 == 0 and x > -9007199254740992 and x < 9007199254740992 then return x end
  return fmt(x)
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
