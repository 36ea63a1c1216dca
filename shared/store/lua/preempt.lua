-- PREEMPT: evict the victims and reserve for the preemptor, all checked before any write.
-- KEYS: the node's 5, the 7 phase indexes, then per victim: record, events.
-- ARGV: preemptor uid, reservation JSON, now, reason, message, event JSON, events kept, then per victim: uid, attempt.
-- Reply: {OK, 'preempted', (uid, ns/name, profile, old phase, version)...} | {OK, 'already reserved'} | RESERVE's refusals.

-- KEYS: the node's info, usage, reservations, bound, fences; the 7 phase indexes (PHASES order);
-- then per victim: its pod record, its events.
-- ARGV: preemptor uid, its reservation JSON, now, reason, message, event JSON ('' = none),
-- events kept, then per victim: uid, attempt.
local info, usage, resv, bound, fences = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local uid, r = ARGV[1], cjson.decode(ARGV[2])
local now, reason, message, event, cap = ARGV[3], ARGV[4], ARGV[5], ARGV[6], tonumber(ARGV[7])
local refused = reserve_gate(info, resv, fences, uid, r)
if refused then return refused end
local ON_NODE = {Reserved = true, Bound = true, Running = true}
local priority = tonumber(r.priority) or 0
local victims, stale, freed, leaving = {}, {}, {}, {}
for i = 1, (#ARGV - 7) / 2 do
  local vuid, attempt, rec = ARGV[6 + 2 * i], ARGV[7 + 2 * i], KEYS[11 + 2 * i]
  local j = redis.call('HGET', resv, vuid)
  local v = j and cjson.decode(j)
  local cur = redis.call('HMGET', rec, 'phase', 'node', 'profile', 'namespace', 'name')
  local name = vuid
  if v then name = v.pod_key elseif cur[4] then name = cur[4] .. '/' .. cur[5] end
  if not v or v.attempt ~= attempt or not ON_NODE[cur[1]] or cur[2] ~= r.node then
    stale[#stale + 1] = 'victim ' .. name .. ' changed or gone since the cycle looked'
  elseif (tonumber(v.priority) or 0) >= priority then
    stale[#stale + 1] = 'victim ' .. name .. ' has priority ' .. int(tonumber(v.priority) or 0) ..
                        ', not lower than ' .. int(priority)
  elseif not leaving[vuid] then
    leaving[vuid] = true
    victims[#victims + 1] = {vuid, rec, KEYS[12 + 2 * i], v, cur[1], cur[3] or ''}
    for _, h in ipairs(holdings(info, v)) do freed[h[1]] = (freed[h[1]] or 0) + h[2] end
  end
end
if #stale > 0 then return conflict(stale) end
local reasons = fit_reasons(info, usage, resv, uid, r, freed, leaving)
if #reasons > 0 then return conflict(reasons) end
local out = {'OK', 'preempted'}
for _, e in ipairs(victims) do
  local vuid, rec, events, v, phase = e[1], e[2], e[3], e[4], e[5]
  drop_reservation(info, usage, resv, bound, vuid, v)  -- RELEASE
  -- TRANSITION to Deleted (from Reserved, Bound or Running: no pending index to touch)
  redis.call('HSET', rec, 'phase', 'Deleted', 'reason', reason, 'message', message, 'updated_at', now)
  local version = redis.call('HINCRBY', rec, 'version', 1)
  for k, p in ipairs(PHASES) do
    if p == 'Deleted' then redis.call('SADD', KEYS[5 + k], vuid)
    elseif p == phase then redis.call('SREM', KEYS[5 + k], vuid) end
  end
  append_event(events, event, cap)
  for _, x in ipairs({vuid, v.pod_key, e[6], phase, tostring(version)}) do out[#out + 1] = x end
end
reserve_write(info, usage, resv, fences, uid, ARGV[2], r)
return out
