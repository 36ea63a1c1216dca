-- PUT_POD_GROUP: insert or replace a PodGroup record, listed in the index.
-- KEYS: the group's record hash, the groups index. ARGV: ns/name, record JSON, manifest.
-- Reply: 1 written now (new or changed) | 0 stored as is already.

local record = redis.call('HGET', KEYS[1], 'record')
local manifest = redis.call('HGET', KEYS[1], 'manifest') or ''
redis.call('SADD', KEYS[2], ARGV[1])
if record == ARGV[2] and manifest == ARGV[3] then
  return 0
end
redis.call('HSET', KEYS[1], 'record', ARGV[2], 'manifest', ARGV[3])
return 1
