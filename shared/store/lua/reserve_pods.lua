-- RESERVE_PODS: a cycle's attempts for Pending pods of one profile, each atomically: RESERVE, then Pending -> Reserved.
-- KEYS: the 7 phase indexes, the profile's pending index, then per pod: its record, its node's
-- 5 (node_keys).
-- ARGV: profile, now, then per pod: uid, reservation JSON with "attempt":"".
-- Reply per pod: {code, version, phase, profile} about the pod, then RESERVE's reply when tried.

-- A cycle's attempt for a Pending pod, in one step: its room reserved on the node as RESERVE
-- does, and only then the pod Pending -> Reserved (TRANSITION's writes: node, devices, one
-- attempt more, version + 1). The attempt is the version the pod gets: the reservation's JSON
-- carries "attempt":"" and gets it here. A refused room leaves the pod as it was.
-- Reply: {code, version, phase, profile} about the pod (NOT_FOUND alone; PROFILE and the
-- profile; GONE or CONFLICT when not Pending, nothing tried), then, when the room was tried,
-- RESERVE's reply: the pod's code is OK (now Reserved at `version`) or NOOP (refused).
local profile, now = ARGV[1], ARGV[2]
local function reserve_one(rec, info, usage, resv, fences, uid, j)
  if redis.call('EXISTS', rec) == 0 then return {'NOT_FOUND'} end
  local cur = redis.call('HMGET', rec, 'phase', 'version', 'profile', 'attempts')
  local phase, version = cur[1], cur[2]
  if cur[3] ~= profile then return {'PROFILE', cur[3]} end
  if phase == 'Deleted' then return {'GONE', version, phase, profile} end
  if phase ~= 'Pending' then return {'CONFLICT', version, phase, profile} end
  local attempt = int(num(version) + 1)
  local at = string.find(j, '"attempt":""', 1, true)  -- a plain find: a third of gsub's cost
  if at then j = string.sub(j, 1, at + 10) .. attempt .. string.sub(j, at + 11) end
  local r = cjson.decode(j)
  if r.attempt ~= attempt then return {'CONFLICT', version, phase, profile} end  -- not a fresh attempt's JSON
  local room = reserve_gate(info, resv, fences, uid, r)
  if room and room[1] == 'OK' then  -- 'already reserved': a Pending pod's reservation is stale
    room = {'CONFLICT', 'pod already reserved here by another attempt'}
  end
  room = room or reserve_step(info, usage, resv, fences, uid, j, r)
  local out = {'NOOP', version, phase, profile}
  if room[1] == 'OK' then
    local devices = {}
    for i, d in ipairs(r.gpu_devices) do devices[i] = d end
    table.sort(devices)
    for i, d in ipairs(devices) do devices[i] = int(d) end
    redis.call('HSET', rec, 'node', r.node, 'gpu_devices', table.concat(devices, ','), 'phase', 'Reserved',
               'updated_at', now, 'attempts', int(num(cur[4]) + 1), 'version', attempt)
    out = {'OK', attempt, phase, profile}
    index_move(uid, phase, 'Reserved', 0)  -- the indexes are KEYS[1..8] here
  end
  for _, x in ipairs(room) do out[#out + 1] = x end
  return out
end
local replies = {}
local n = (#ARGV - 2) / 2
for p = 0, n - 1 do
  local k, a = 8 + 6 * p, 2 + 2 * p
  -- the node's 5: info, usage, reservations, bound (unused here), fences
  replies[p + 1] = reserve_one(KEYS[k + 1], KEYS[k + 2], KEYS[k + 3], KEYS[k + 4], KEYS[k + 6],
                               ARGV[a + 1], ARGV[a + 2])
end
return replies
