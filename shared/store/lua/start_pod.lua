-- START_POD: an agent starts a pod it admitted: Bound here with a bound reservation -> Running.
-- KEYS: record, events, node reservations, node bound, Bound index, Running index.
-- ARGV: node, attempt ('' = any), now, event JSON ('' = none), events kept, ends_at (0 = never).
-- Reply: {OK|ALREADY|GONE, version, phase, profile} | {CONFLICT, version, phase, profile, reason} | {NOT_FOUND}.

local rec, events, resv, bound = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
if redis.call('EXISTS', rec) == 0 then return {'NOT_FOUND'} end
local cur = redis.call('HMGET', rec, 'phase', 'version', 'profile', 'uid', 'node')
local phase, version, profile, uid, node = cur[1], cur[2], cur[3] or '', cur[4], cur[5] or ''
if phase == 'Deleted' then return {'GONE', version, phase, profile} end
if node ~= ARGV[1] then return {'CONFLICT', version, phase, profile, 'the pod is on another node'} end
if phase == 'Running' then return {'ALREADY', version, phase, profile} end
if phase ~= 'Bound' then return {'CONFLICT', version, phase, profile, 'the pod is not bound'} end
local j = redis.call('HGET', resv, uid)
if not j then return {'CONFLICT', version, phase, profile, 'no reservation'} end
if redis.call('SISMEMBER', bound, uid) == 0 then
  return {'CONFLICT', version, phase, profile, 'its reservation is not bound'}
end
if ARGV[2] ~= '' and attempt_of(j) ~= ARGV[2] then
  return {'CONFLICT', version, phase, profile, 'the reservation is another attempt\'s'}
end
local v = int(num(version) + 1)
redis.call('HSET', rec, 'phase', 'Running', 'updated_at', ARGV[3], 'ends_at', ARGV[6], 'version', v)
redis.call('SREM', KEYS[5], uid)
redis.call('SADD', KEYS[6], uid)
append_event(events, ARGV[4], tonumber(ARGV[5]))
return {'OK', v, phase, profile}
