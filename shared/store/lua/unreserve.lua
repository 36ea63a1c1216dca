-- UNRESERVE: give back a reserved (not bound) reservation.
-- KEYS: info, usage, reservations, bound. ARGV: pod uid, attempt ('' = any).
-- Reply: {OK} | {NOOP} (none: idempotent) | {BOUND} (use RELEASE) | {CONFLICT} (another attempt's).

local j = redis.call('HGET', KEYS[3], ARGV[1])
if not j then return {'NOOP'} end
local r = cjson.decode(j)
if ARGV[2] ~= '' and r.attempt ~= ARGV[2] then return {'CONFLICT'} end
if redis.call('SISMEMBER', KEYS[4], ARGV[1]) == 1 then return {'BOUND'} end
drop_reservation(KEYS[1], KEYS[2], KEYS[3], KEYS[4], ARGV[1], r)
return {'OK'}
