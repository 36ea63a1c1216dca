-- RESTORE_ROOM: hold again the room of a Bound/Running pod that holds none on its node.
-- KEYS: the pod's record, then the node's 5. ARGV: uid, reservation JSON.
-- Reply: {OK} | {ALREADY} | {NOOP, phase, node} | {NODE_GONE, why} | {CONFLICT, reasons...}.

-- The room of a Bound or Running pod that holds none on its node (given back while the pod
-- stayed there: a release that should not have happened), held again and marked bound, if the
-- pod is still Bound or Running on that node and the node has room for it next to what is
-- reserved there now. KEYS: the pod's record, then the node's 5 (node_keys). ARGV: uid, the
-- reservation JSON (the pod's devices, its node). Reply: {'OK'} held again; {'ALREADY'} it holds
-- its room (marked bound now if it was not); {'NOOP', phase, node} the pod is not placed
-- there any more, nothing done; {'NODE_GONE', why}; or {'CONFLICT', reasons...}: no room.
local rec = KEYS[1]
local info, usage, resv, bound, fences = KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6]
local uid, j = ARGV[1], ARGV[2]
local r = cjson.decode(j)
local cur = redis.call('HMGET', rec, 'phase', 'node')
if (cur[1] ~= 'Bound' and cur[1] ~= 'Running') or cur[2] ~= r.node then
  return {'NOOP', cur[1] or '', cur[2] or ''}
end
if redis.call('HEXISTS', resv, uid) == 1 then
  redis.call('SADD', bound, uid)
  return {'ALREADY'}
end
if redis.call('EXISTS', info) == 0 then return {'NODE_GONE', 'node not found'} end
local reasons = fit_reasons(info, usage, resv, uid, r, {}, {})
if #reasons > 0 then return conflict(reasons) end
reserve_write(info, usage, resv, fences, uid, j, r)
redis.call('SADD', bound, uid)
return {'OK'}
