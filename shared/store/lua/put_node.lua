-- PUT_NODE: replace a node's description, keep its heartbeat and its 'registered' time (set
-- to ARGV now by the first put that finds none, kept across re-registrations); GPU usage redone.
-- KEYS: info, usage, reservations, bound, fences [, nodes index, heartbeats index].
-- ARGV: name, record JSON, manifest ('' = none), shape JSON {alloc, gpus, unreachable}, now.
-- Reply: {OK, generation} | {NOOP, generation} (nothing changed, generation kept).

local info, usage, resv = KEYS[1], KEYS[2], KEYS[3]
local shape = cjson.decode(ARGV[4])
local unreachable = '0'
if shape.unreachable then unreachable = '1' end
local gen = num(redis.call('HGET', info, 'generation'))
local registered = redis.call('HGET', info, 'registered')
if redis.call('EXISTS', info) == 1
   and redis.call('HGET', info, 'record') == ARGV[2]
   and (redis.call('HGET', info, 'manifest') or '') == ARGV[3]
   and redis.call('HGET', info, 'unreachable') == unreachable then
  if not registered then redis.call('HSET', info, 'registered', ARGV[5]) end
  redis.call('SADD', KEYS[6], ARGV[1])
  return {'NOOP', int(gen)}
end
local heartbeat = redis.call('HGET', info, 'heartbeat')
redis.call('DEL', info)
gen = gen + 1
redis.call('HSET', info, 'record', ARGV[2], 'generation', int(gen), 'gpus', int(#shape.gpus),
           'unreachable', unreachable, 'registered', registered or ARGV[5])
if ARGV[3] ~= '' then redis.call('HSET', info, 'manifest', ARGV[3]) end
if heartbeat then redis.call('HSET', info, 'heartbeat', heartbeat) end
for _, pair in ipairs(shape.alloc) do redis.call('HSET', info, 'a:' .. pair[1], int(pair[2])) end
for i, g in ipairs(shape.gpus) do
  local ok = '0'
  if g[2] then ok = '1' end
  redis.call('HSET', info, 'g:' .. int(i - 1) .. ':mem', int(g[1]), 'g:' .. int(i - 1) .. ':ok', ok,
             'g:' .. int(i - 1) .. ':model', g[3] or '')
end
-- The devices may have changed: recompute GPU usage from the reservations.
for _, field in ipairs(redis.call('HKEYS', usage)) do
  if string.sub(field, 1, 2) == 'g:' then redis.call('HDEL', usage, field) end
end
local ngpus = #shape.gpus
for _, j in ipairs(redis.call('HVALS', resv)) do
  local r = cjson.decode(j)
  for _, d in ipairs(r.gpu_devices) do
    if d >= 0 and d < ngpus then
      local taken = r.gpu_memory
      if not r.gpu_shared then taken = shape.gpus[d + 1][1] end
      incr(usage, 'g:' .. int(d) .. ':used', taken)
      incr(usage, 'g:' .. int(d) .. ':pods', 1)
    end
  end
end
redis.call('SADD', KEYS[6], ARGV[1])
return {'OK', int(gen)}
