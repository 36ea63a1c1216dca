-- DELETE_NODE: drop a node, its usage and its reservations (and its index entries).
-- KEYS: info, usage, reservations, bound, fences, nodes index, heartbeats index. ARGV: name.
-- Reply: {OK, reservation JSON...} (the reservations dropped) | {NOOP} (no such node).

local removed = redis.call('HVALS', KEYS[3])
local existed = redis.call('EXISTS', KEYS[1])
redis.call('DEL', KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5])
redis.call('SREM', KEYS[6], ARGV[1])
redis.call('ZREM', KEYS[7], ARGV[1])
if existed == 0 and #removed == 0 then return {'NOOP'} end
local out = {'OK'}
for _, j in ipairs(removed) do out[#out + 1] = j end
return out
