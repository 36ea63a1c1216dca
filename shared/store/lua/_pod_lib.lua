-- Library, after the `local PHASES = {...}` line scripts.py writes: index_move (the uid between
-- the phase indexes KEYS[3..9] and the pending index KEYS[10]) and set_fields. Defines functions
-- only; touches no key.

-- Move the uid between the phase and pending sets (KEYS[3..9] and KEYS[10]).
local function index_move(uid, old, new)
  for i, p in ipairs(PHASES) do
    if p == new then redis.call('SADD', KEYS[2 + i], uid)
    elseif p == old then redis.call('SREM', KEYS[2 + i], uid) end
  end
  if new == 'Pending' then redis.call('SADD', KEYS[10], uid)
  elseif old == 'Pending' then redis.call('SREM', KEYS[10], uid) end
end
local function set_fields(key, argv, first)
  for i = first, #argv, 2 do redis.call('HSET', key, argv[i], argv[i + 1]) end
end
