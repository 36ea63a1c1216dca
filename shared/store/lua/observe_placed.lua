-- OBSERVE_PLACED: a pod the apiserver has on a node, recorded Bound/Running there with its room held.
-- KEYS: the pod's 10 (as TRANSITION), then the node's 5. ARGV: uid, ns/name, now, reservation
-- JSON, phase wanted, '1' when the other node's room was given back, then the new record's fields.
-- Reply: {OK, old phase, phase, version} | {ALREADY, phase, version} | {MOVED, phase, node} | {GONE, phase} | {NODE_GONE}.

-- A pod the apiserver has on a node (cluster mode: bound by another scheduler, created with
-- spec.nodeName, or bound by kubus's binder whose store step was lost): the store made to say
-- so, as kube-scheduler's cache adds a bound pod it did not assume. The pod is recorded (a new
-- record when it has none) Bound, or Running when the apiserver says it runs (never backwards),
-- on that node, bound once, and its room held there, marked bound: the room kept when it holds
-- it (its own reservation), else taken whatever is left, as the kubelet, not kubus, admitted it.
-- A reservation JSON with "deleted_at" (the pod is terminating) stamps the room it holds with it
-- (appended to the stored JSON, its other keys and their order kept), once.
-- KEYS: the pod's 10 (record, keys index, 7 phase indexes, its profile's pending index), then
-- the node's 5 (node_keys). ARGV: uid, namespace/name, now, reservation JSON (node, devices),
-- phase wanted (Bound|Running), '1' when the caller gave back the room the record's other node
-- held (else ''), then the new record's fields as pairs (used only when there is none). Reply:
-- {'OK', old phase ('' new), new phase, version} | {'ALREADY', phase, version} nothing to change
-- | {'MOVED', phase, node} Reserved, Bound or Running on another node: the caller gives that
-- room back first, then asks again with '1' | {'GONE', phase} finished or deleted: left alone |
-- {'NODE_GONE'} no such node (yet).
local rec = KEYS[1]
local info, usage, resv, bound, fences = KEYS[11], KEYS[12], KEYS[13], KEYS[14], KEYS[15]
local uid, key, now, j, want = ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5]
local r = cjson.decode(j)
local cur = redis.call('HMGET', rec, 'phase', 'node', 'version', 'bindings')
local phase = cur[1]
if phase == 'Succeeded' or phase == 'Failed' or phase == 'Deleted' then return {'GONE', phase} end
local moved = (phase == 'Reserved' or phase == 'Bound' or phase == 'Running') and cur[2] ~= r.node
if moved and ARGV[6] ~= '1' then return {'MOVED', phase, cur[2]} end
if redis.call('EXISTS', info) == 0 then return {'NODE_GONE'} end
local wrote = false
if redis.call('HEXISTS', resv, uid) == 0 then
  reserve_write(info, usage, resv, fences, uid, j, r)
  wrote = true
elseif r.deleted_at then
  local held = redis.call('HGET', resv, uid)
  if cjson.decode(held).deleted_at == nil then
    redis.call('HSET', resv, uid,
               string.sub(held, 1, -2) .. ',"deleted_at":' .. string.format('%.17g', r.deleted_at) .. '}')
    wrote = true
  end
end
if redis.call('SADD', bound, uid) == 1 then wrote = true end
local new = want
if phase == 'Running' and not moved then new = 'Running' end
if phase == new and not moved then
  if wrote then return {'OK', phase, new, cur[3]} end
  return {'ALREADY', phase, cur[3]}
end
local old = phase or ''
if not phase then
  for i = 7, #ARGV, 2 do redis.call('HSET', rec, ARGV[i], ARGV[i + 1]) end
  redis.call('HSET', KEYS[2], key, uid)
end
local version = int(num(redis.call('HGET', rec, 'version')) + 1)
local devices = {}
for i, d in ipairs(r.gpu_devices) do devices[i] = int(d) end
redis.call('HSET', rec, 'phase', new, 'node', r.node, 'gpu_devices', table.concat(devices, ','),
           'updated_at', now, 'version', version)
if old == '' or old == 'Pending' or old == 'Reserved' then redis.call('HINCRBY', rec, 'bindings', 1) end
index_move(uid, old, new)
return {'OK', old, new, version}
