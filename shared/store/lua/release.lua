-- RELEASE: give a reservation back, bound or not (the pod finished, was deleted, or backs out).
-- KEYS: info, usage, reservations, bound. ARGV: pod uid, attempt ('' = any).
-- Reply: {OK} | {NOOP} | {CONFLICT} (another attempt's, when `attempt` is given).

local j = redis.call('HGET', KEYS[3], ARGV[1])
if not j then
  redis.call('SREM', KEYS[4], ARGV[1])
  return {'NOOP'}
end
local r = cjson.decode(j)
if ARGV[2] ~= '' and r.attempt ~= ARGV[2] then return {'CONFLICT'} end
drop_reservation(KEYS[1], KEYS[2], KEYS[3], KEYS[4], ARGV[1], r)
return {'OK'}
