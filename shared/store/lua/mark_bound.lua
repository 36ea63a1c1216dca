-- MARK_BOUND: a reservation reserved -> bound.
-- KEYS: info, usage, reservations, bound. ARGV: pod uid, attempt ('' = any).
-- Reply: {OK} | {ALREADY} | {NOT_FOUND} (no reservation) | {CONFLICT} (another attempt's).

local j = redis.call('HGET', KEYS[3], ARGV[1])
if not j then return {'NOT_FOUND'} end
if ARGV[2] ~= '' and attempt_of(j) ~= ARGV[2] then return {'CONFLICT'} end
if redis.call('SADD', KEYS[4], ARGV[1]) == 0 then return {'ALREADY'} end
return {'OK'}
