-- HEARTBEAT: record many nodes' heartbeats; an unreachable node is revived (generation + 1).
-- KEYS: heartbeats index, then each node's info. ARGV: time, then each node's name.
-- Reply per node: {OK, 'recorded'|'revived', generation} | {NOT_FOUND} (never creates a node).

local at, out, beats = ARGV[1], {}, {}
for i = 2, #KEYS do
  local info = KEYS[i]
  local cur = redis.call('HMGET', info, 'generation', 'unreachable')
  if not cur[1] then  -- no node: PUT_NODE writes a node's generation with the rest of it
    out[i - 1] = {'NOT_FOUND'}
  else
    local gen = num(cur[1])
    if cur[2] == '1' then
      gen = gen + 1
      redis.call('HSET', info, 'heartbeat', at, 'unreachable', '0', 'generation', int(gen))
      out[i - 1] = {'OK', 'revived', int(gen)}
    else
      redis.call('HSET', info, 'heartbeat', at)
      out[i - 1] = {'OK', 'recorded', int(gen)}
    end
    beats[#beats + 1] = at
    beats[#beats + 1] = ARGV[i]
  end
end
if #beats > 0 then redis.call('ZADD', KEYS[1], unpack(beats)) end
return out
