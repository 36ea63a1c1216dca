-- PUT_POD: insert a pod record if absent (submissions are at-least-once).
-- KEYS: record [, keys index, 7 phase indexes, pending index]. ARGV: uid, ns/name, profile, field, value, ...
-- Reply: {OK, version, phase, profile} | {ALREADY, version, phase, profile}.

local rec = KEYS[1]
if redis.call('EXISTS', rec) == 1 then
  local cur = redis.call('HMGET', rec, 'version', 'phase', 'profile')
  return {'ALREADY', cur[1], cur[2], cur[3]}
end
set_fields(rec, ARGV, 4)
local phase = redis.call('HGET', rec, 'phase')
redis.call('HSET', KEYS[2], ARGV[2], ARGV[1])
index_move(ARGV[1], '', phase)
return {'OK', redis.call('HGET', rec, 'version'), phase, ARGV[3]}
