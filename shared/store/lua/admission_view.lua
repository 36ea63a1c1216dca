-- ADMISSION_VIEW (read only): what an agent needs to admit a pod.
-- KEYS: the pod's record, the node's reservations, the node's bound set. ARGV: pod uid.
-- Reply: {phase ('' = no pod), node, profile, updated_at, reservation JSON ('' = none), 1|0 bound}.

local cur = redis.call('HMGET', KEYS[1], 'phase', 'node', 'profile', 'updated_at')
return {cur[1] or '', cur[2] or '', cur[3] or '', cur[4] or '', redis.call('HGET', KEYS[2], ARGV[1]) or '',
        redis.call('SISMEMBER', KEYS[3], ARGV[1])}
