-- ACQUIRE_LEASE: hold (renew) or take a lease; tokens only grow (INCR of the fence counter).
-- KEYS: holder hash, fence counter. ARGV: holder, ttl ms.
-- Reply: the fencing token (string) when `holder` holds it now | nil when another holder has it.

local holder = redis.call('HGET', KEYS[1], 'holder')
if holder == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return redis.call('HGET', KEYS[1], 'token')
end
if holder then return false end
local token = redis.call('INCR', KEYS[2])
redis.call('HSET', KEYS[1], 'holder', ARGV[1], 'token', int(token))
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return int(token)
