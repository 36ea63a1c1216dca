-- NODE_SNAPSHOTS (read only): nodes as a cycle's table reads them, atomically, in one call rather than three commands each.
-- KEYS: per node three keys in this order: its info, reservations and bound keys.
-- ARGV: the info fields to read (NodeRecord.HASH_FIELDS).
-- Reply: per node three arrays: the info fields (HMGET: all nil for no node), the reservations (HVALS), the bound uids (SMEMBERS).

local out = {}
for i = 1, #KEYS, 3 do
  out[i] = redis.call('HMGET', KEYS[i], unpack(ARGV))
  out[i + 1] = redis.call('HVALS', KEYS[i + 1])
  out[i + 2] = redis.call('SMEMBERS', KEYS[i + 2])
end
return out
