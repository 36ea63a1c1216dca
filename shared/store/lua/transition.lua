-- TRANSITION: compare-and-set of a pod's phase along the allowed moves (Bound only via BIND_POD).
-- KEYS: record [, keys index, 7 phase indexes, pending index].
-- ARGV: new phase, expected version, expected phases (comma-separated), profile, now, attempts +, field, value, ...
-- Reply: {OK|ALREADY|CONFLICT|GONE, version, phase, profile} | {NOT_FOUND} | {PROFILE, profile}.

local ALLOWED = {
  Pending = {Pending = true, Reserved = true, Failed = true, Deleted = true},
  Reserved = {Pending = true, Reserved = true, Failed = true, Deleted = true},
  Bound = {Running = true, Succeeded = true, Failed = true, Deleted = true},
  Running = {Succeeded = true, Failed = true, Deleted = true},
  Succeeded = {Deleted = true},
  Failed = {Deleted = true},
  Deleted = {},
}
local SETTLED = {Running = true, Succeeded = true, Failed = true, Deleted = true}
local rec = KEYS[1]
if redis.call('EXISTS', rec) == 0 then return {'NOT_FOUND'} end
local cur = redis.call('HMGET', rec, 'phase', 'version', 'profile', 'uid')
local phase, version, profile, uid = cur[1], cur[2], cur[3], cur[4]
if profile ~= ARGV[4] then return {'PROFILE', profile} end
local new = ARGV[1]
if phase == new and SETTLED[new] then return {'ALREADY', version, phase, profile} end
if phase == 'Deleted' then return {'GONE', version, phase, profile} end
if ARGV[2] ~= '' and ARGV[2] ~= version then return {'CONFLICT', version, phase, profile} end
if ARGV[3] ~= '' and not string.find(',' .. ARGV[3] .. ',', ',' .. phase .. ',', 1, true) then
  return {'CONFLICT', version, phase, profile}
end
if not ALLOWED[phase] or not ALLOWED[phase][new] then return {'CONFLICT', version, phase, profile} end
set_fields(rec, ARGV, 7)
redis.call('HSET', rec, 'phase', new, 'updated_at', ARGV[5])
if ARGV[6] ~= '0' then redis.call('HINCRBY', rec, 'attempts', ARGV[6]) end
local v = redis.call('HINCRBY', rec, 'version', 1)
index_move(uid, phase, new)
return {'OK', tostring(v), phase, profile}
