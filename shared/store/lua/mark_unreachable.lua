-- MARK_UNREACHABLE: set a node's unreachable flag, generation + 1 when it changes.
-- KEYS: the node's info. ARGV: '1' or '0'.
-- Reply: {OK, generation} | {NOOP, generation} | {NOT_FOUND}.

if redis.call('EXISTS', KEYS[1]) == 0 then return {'NOT_FOUND'} end
local gen = num(redis.call('HGET', KEYS[1], 'generation'))
if (redis.call('HGET', KEYS[1], 'unreachable') or '0') == ARGV[1] then return {'NOOP', int(gen)} end
redis.call('HSET', KEYS[1], 'unreachable', ARGV[1], 'generation', int(gen + 1))
return {'OK', int(gen + 1)}
