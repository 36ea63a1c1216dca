-- POD_PLACEMENTS (read only): the phase and node of pods, in one call rather than one HMGET each.
-- KEYS: the pods' records. ARGV: none. Reply: phase, node for each key in order (nil, nil for no record).

local out = {}
for i, key in ipairs(KEYS) do
  local cur = redis.call('HMGET', key, 'phase', 'node')
  out[2 * i - 1], out[2 * i] = cur[1], cur[2]  -- false, not nil, where missing: the reply keeps its length
end
return out
