-- GIVE_BACK: Reserved -> Pending for one attempt, its room on the node given back unless bound.
-- KEYS: the pod's (as TRANSITION), then the node's info, usage, reservations, bound.
-- ARGV: uid, attempt, profile, node, now, field, value, ...
-- Reply: {OK, version, old phase, profile, 'OK'|''} | {BOUND|CONFLICT|GONE, ...} | {NOT_FOUND} | {PROFILE, profile}.

local rec = KEYS[1]
local info, usage, resv, bound = KEYS[11], KEYS[12], KEYS[13], KEYS[14]
local uid, attempt = ARGV[1], ARGV[2]
if redis.call('EXISTS', rec) == 0 then return {'NOT_FOUND'} end
local cur = redis.call('HMGET', rec, 'phase', 'version', 'profile', 'node')
local phase, version, profile, node = cur[1], cur[2], cur[3], cur[4] or ''
if profile ~= ARGV[3] then return {'PROFILE', profile} end
if phase == 'Deleted' then return {'GONE', version, phase, profile} end
if phase ~= 'Reserved' or version ~= attempt or node ~= ARGV[4] then
  return {'CONFLICT', version, phase, profile}
end
local released = ''
local j = redis.call('HGET', resv, uid)
if j then
  local r = cjson.decode(j)
  if r.attempt == attempt then
    if redis.call('SISMEMBER', bound, uid) == 1 then return {'BOUND', version, phase, profile} end
    drop_reservation(info, usage, resv, bound, uid, r)
    released = 'OK'
  end
end
set_fields(rec, ARGV, 6)
redis.call('HSET', rec, 'phase', 'Pending', 'node', '', 'gpu_devices', '', 'updated_at', ARGV[5])
local v = redis.call('HINCRBY', rec, 'version', 1)
index_move(uid, 'Reserved', 'Pending')
return {'OK', tostring(v), phase, profile, released}
