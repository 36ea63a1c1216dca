-- Library, after the `local PHASES = {...}` line scripts.py writes: index_move (the uid between
-- the phase indexes KEYS[3..9] and the pending index KEYS[10]) and set_fields. Defines functions
-- only; touches no key.

-- Move the uid between the phase and pending sets: KEYS[base + 1 .. base + 7] and
-- KEYS[base + 8], base 2 (after the pod's record and the keys index) unless given.
local function index_move(uid, old, new, base)
  base = base or 2
  for i, p in ipairs(PHASES) do
    if p == new then redis.call('SADD', KEYS[base + i], uid)
    elseif p == old then redis.call('SREM', KEYS[base + i], uid) end
  end
  if new == 'Pending' then redis.call('SADD', KEYS[base + 8], uid)
  elseif old == 'Pending' then redis.call('SREM', KEYS[base + 8], uid) end
end
local function set_fields(key, argv, first)
  for i = first, #argv, 2 do redis.call('HSET', key, argv[i], argv[i + 1]) end
end
