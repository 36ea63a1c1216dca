-- PERMIT_ALLOW: a Permit plugin lets the pod go.
-- KEYS: the pod's permit hash. ARGV: attempt, plugin.
-- Reply: 1 done (or not waited on by it) | 0 no such wait of that attempt.

if redis.call('HGET', KEYS[1], 'attempt') ~= ARGV[1] then return 0 end
redis.call('HDEL', KEYS[1], 'p:' .. ARGV[2])
return 1
