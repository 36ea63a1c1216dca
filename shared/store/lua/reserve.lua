-- RESERVE: check a reservation against the node (gate, fit, GPUs, host ports, anti-affinity) and record it.
-- KEYS: info, usage, reservations, bound, fences. ARGV: pod uid, reservation JSON.
-- Reply: {OK, 'reserved' [, 'devices', d...]} | {OK, 'already reserved', 'devices', d...} (a retry)
-- | {CONFLICT, reason...} | {NODE_GONE, reason} | {FENCED, reason}; nothing changed unless OK.

local info, usage, resv, fences = KEYS[1], KEYS[2], KEYS[3], KEYS[5]
local uid, j = ARGV[1], ARGV[2]
local r = cjson.decode(j)
local refused = reserve_gate(info, resv, fences, uid, r)
if refused then
  if refused[2] == 'already reserved' then  -- a retry: the devices it holds, picked again or not
    refused[3] = 'devices'
    for _, d in ipairs(cjson.decode(redis.call('HGET', resv, uid)).gpu_devices) do refused[#refused + 1] = int(d) end
  end
  return refused
end
return reserve_step(info, usage, resv, fences, uid, j, r)
