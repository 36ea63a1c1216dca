-- PUT_NODE: replace a node's description, keep its heartbeat and its 'registered' time (set
-- to ARGV now by the first put that finds none, kept across re-registrations); GPU usage redone.
-- KEYS: info, usage, reservations, bound, fences [, nodes index, heartbeats index].
-- ARGV: name, record JSON, manifest ('' = none), shape JSON {alloc, gpus, unreachable}, now.
-- Reply: {OK, generation} | {NOOP, generation} (nothing changed, generation kept).

local info, usage, resv = KEYS[1], KEYS[2], KEYS[3]
local shape = cjson.decode(ARGV[4])
local unreachable = '0'
if shape.unreachable then unreachable = '1' end
-- One read of what is kept or compared (a node is there when its generation is), one write.
local cur = redis.call('HMGET', info, 'generation', 'registered', 'record', 'manifest', 'unreachable', 'heartbeat')
local gen, registered = num(cur[1]), cur[2]
if cur[1] and cur[3] == ARGV[2] and (cur[4] or '') == ARGV[3] and cur[5] == unreachable then
  if not registered then redis.call('HSET', info, 'registered', ARGV[5]) end
  redis.call('SADD', KEYS[6], ARGV[1])
  return {'NOOP', int(gen)}
end
redis.call('DEL', info)
gen = gen + 1
local fields = {'record', ARGV[2], 'generation', int(gen), 'gpus', int(#shape.gpus), 'unreachable', unreachable,
                'registered', registered or ARGV[5]}
local function put(field, value) fields[#fields + 1] = field; fields[#fields + 1] = value end
if ARGV[3] ~= '' then put('manifest', ARGV[3]) end
if cur[6] then put('heartbeat', cur[6]) end
for _, pair in ipairs(shape.alloc) do put('a:' .. pair[1], int(pair[2])) end
for i, g in ipairs(shape.gpus) do
  local ok = '0'
  if g[2] then ok = '1' end
  local d = 'g:' .. int(i - 1)
  put(d .. ':mem', int(g[1])); put(d .. ':ok', ok); put(d .. ':model', g[3] or '')
end
redis.call('HSET', info, unpack(fields))
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
