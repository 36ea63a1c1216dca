-- BIND_POD: exactly once, Pending/Reserved (on that node or none) -> Bound, bindings + 1.
-- KEYS: record [, keys index, 7 phase indexes, pending index].
-- ARGV: node, devices ("0,3"), profile, now, expected version ('' = any).
-- Reply: {OK|ALREADY|CONFLICT|GONE, version, phase, profile} | {NOT_FOUND} | {PROFILE, profile}.

local rec = KEYS[1]
if redis.call('EXISTS', rec) == 0 then return {'NOT_FOUND'} end
local cur = redis.call('HMGET', rec, 'phase', 'version', 'profile', 'uid', 'node')
local phase, version, profile, uid, node = cur[1], cur[2], cur[3], cur[4], cur[5] or ''
if profile ~= ARGV[3] then return {'PROFILE', profile} end
if phase == 'Deleted' then return {'GONE', version, phase, profile} end
if phase == 'Bound' or phase == 'Running' or phase == 'Succeeded' or phase == 'Failed' then
  if node == ARGV[1] and (phase ~= 'Failed' or redis.call('HGET', rec, 'bindings') ~= '0') then
    return {'ALREADY', version, phase, profile}
  end
  return {'CONFLICT', version, phase, profile}
end
if ARGV[5] ~= '' and ARGV[5] ~= version then return {'CONFLICT', version, phase, profile} end
if phase == 'Reserved' and node ~= '' and node ~= ARGV[1] then return {'CONFLICT', version, phase, profile} end
redis.call('HSET', rec, 'phase', 'Bound', 'node', ARGV[1], 'gpu_devices', ARGV[2], 'updated_at', ARGV[4])
redis.call('HINCRBY', rec, 'bindings', 1)
local v = redis.call('HINCRBY', rec, 'version', 1)
index_move(uid, phase, 'Bound')
return {'OK', tostring(v), phase, profile}
