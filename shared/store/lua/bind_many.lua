-- BIND_MANY: the binder's Bind for many pods, each atomically: MARK_BOUND, BIND_POD, event or RELEASE.
-- KEYS: 7 phase indexes, then per pod: node info, usage, reservations, bound, record, events, pending index.
-- ARGV: now, event cap, then per pod: uid, attempt, node, devices, profile, event JSON.
-- Reply per pod: {marked, bind, released, phase, version [, created_at, attempts]} | {PROFILE, profile}.

-- KEYS: the 7 phase indexes (PHASES order), then per pod: node info, usage, reservations,
-- bound, pod record, pod events, pending index of the pod's profile.
-- ARGV: now, event cap, then per pod: uid, attempt, node, devices, profile, event JSON.
local now, cap = ARGV[1], tonumber(ARGV[2])
local function bind_one(k, a)
  local info, usage, resv, bound, rec, events = KEYS[k + 1], KEYS[k + 2], KEYS[k + 3], KEYS[k + 4],
                                                KEYS[k + 5], KEYS[k + 6]
  local uid, attempt, node, devices, profile, event = ARGV[a + 1], ARGV[a + 2], ARGV[a + 3], ARGV[a + 4],
                                                     ARGV[a + 5], ARGV[a + 6]
  local cur = redis.call('HMGET', rec, 'phase', 'version', 'profile', 'node', 'bindings', 'created_at', 'attempts')
  local phase, version = cur[1], cur[2]
  if phase and cur[3] ~= profile then return {'PROFILE', cur[3]} end
  -- MARK_BOUND
  local j = redis.call('HGET', resv, uid)
  if not j then return {'NOT_FOUND', '', '', phase or '', version or ''} end
  if attempt ~= '' and attempt_of(j) ~= attempt then return {'CONFLICT', '', '', phase or '', version or ''} end
  local marked = 'OK'
  if redis.call('SADD', bound, uid) == 0 then marked = 'ALREADY' end
  -- BIND_POD
  local code
  local pnode = cur[4] or ''
  if not phase then code = 'NOT_FOUND'
  elseif phase == 'Deleted' then code = 'GONE'
  elseif phase == 'Bound' or phase == 'Running' or phase == 'Succeeded' or phase == 'Failed' then
    if pnode == node and (phase ~= 'Failed' or cur[5] ~= '0') then code = 'ALREADY' else code = 'CONFLICT' end
  elseif attempt ~= '' and attempt ~= version then code = 'CONFLICT'
  elseif phase == 'Reserved' and pnode ~= '' and pnode ~= node then code = 'CONFLICT'
  else
    local v = int(num(version) + 1)
    redis.call('HSET', rec, 'phase', 'Bound', 'node', node, 'gpu_devices', devices, 'updated_at', now,
               'bindings', int(num(cur[5]) + 1), 'version', v)
    for i, p in ipairs(PHASES) do
      if p == 'Bound' then redis.call('SADD', KEYS[i], uid)
      elseif p == phase then redis.call('SREM', KEYS[i], uid) end
    end
    if phase == 'Pending' then redis.call('SREM', KEYS[k + 7], uid) end
    append_event(events, event, cap)
    return {marked, 'OK', '', phase, v, cur[6] or '', cur[7] or ''}
  end
  if code == 'ALREADY' then return {marked, code, '', phase, version, cur[6] or '', cur[7] or ''} end
  -- Refused: RELEASE this attempt's room (the reservation is this attempt's: checked above).
  drop_reservation(info, usage, resv, bound, uid, cjson.decode(j))
  return {marked, code, 'OK', phase or '', version or ''}
end
local out = {}
for i = 0, (#ARGV - 2) / 6 - 1 do out[i + 1] = bind_one(7 + i * 7, 2 + i * 6) end
return out
