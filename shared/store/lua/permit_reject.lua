-- PERMIT_REJECT: a Permit plugin rejects the pod; the first rejection is kept.
-- KEYS: the pod's permit hash. ARGV: attempt, plugin, message.
-- Reply: 1 | 0 no such wait of that attempt.

if redis.call('HGET', KEYS[1], 'attempt') ~= ARGV[1] then return 0 end
redis.call('HSETNX', KEYS[1], 'rejected', ARGV[2] .. ': ' .. ARGV[3])
return 1
