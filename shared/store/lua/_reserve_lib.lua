-- Library (needs _lib and _affinity_lib): RESERVE's steps, shared by RESERVE, RESERVE_PODS,
-- PREEMPT, OBSERVE_PLACED and RESTORE_ROOM: reserve_gate (node found and reachable, fencing
-- token, an idempotent retry), fit_reasons, reserve_write, repick (GPUFit's pick against Redis's
-- usage) and reserve_step. Defines functions only; touches no key.

-- Whether pod `uid` may reserve with r (decoded) on the node at all: the reply that ends the
-- script (NODE_GONE, FENCED, OK 'already reserved' for an idempotent retry, CONFLICT when it
-- holds another attempt's reservation here), or nil to go on.
local function reserve_gate(info, resv, fences, uid, r)
  -- A node is there when its generation is (PUT_NODE writes it with the rest, as HEARTBEAT reads it).
  local node = redis.call('HMGET', info, 'generation', 'unreachable')
  if not node[1] then return {'NODE_GONE', 'node not found'} end
  local held = redis.call('HGET', resv, uid)
  if held then
    if attempt_of(held) == r.attempt then return {'OK', 'already reserved'} end
    return {'CONFLICT', 'pod already reserved here by another attempt'}
  end
  if node[2] == '1' then return {'NODE_GONE', 'node unreachable'} end
  local token = tonumber(r.token) or 0
  if token > 0 then
    local seen = num(redis.call('HGET', fences, r.profile))
    r.fence_seen = seen  -- reserve_write's comparison, not read again
    if token < seen then
      return {'FENCED', 'fencing token ' .. int(token) .. ' of profile ' .. r.profile ..
              ' is older than ' .. int(seen)}
    end
  end
  return nil
end
-- Why r does not fit the node: every shortfall, in kube's order ({} when it fits). `freed`
-- (usage field -> amount) is room counted as given back, and `leaving` (uid -> true) the pods
-- that give it: RESERVE passes {} and {}.
local function fit_reasons(info, usage, resv, uid, r, freed, leaving)
  local function used(field) return num(redis.call('HGET', usage, field)) - (freed[field] or 0) end
  -- The pod count and the requests' capacities and usage: one HMGET of each hash.
  local ignored = {}
  for _, name in ipairs(r.ignored) do ignored[name] = true end
  local wanted, caps, uses = {}, {'a:pods', 'gpus'}, {'pods', 'anti'}
  for _, pair in ipairs(r.requests) do
    local name = pair[1]
    if pair[2] > 0 and name ~= 'pods' and not ignored[name] then
      wanted[#wanted + 1] = pair
      caps[#caps + 1], uses[#uses + 1] = 'a:' .. name, 'r:' .. name
    end
  end
  local cap, use = redis.call('HMGET', info, unpack(caps)), redis.call('HMGET', usage, unpack(uses))
  local function used_at(i) return num(use[i]) - (freed[uses[i]] or 0) end
  local reasons = {}
  if used_at(1) + 1 > num(cap[1]) then
    reasons[#reasons + 1] = 'Too many pods'
  end
  for i, pair in ipairs(wanted) do
    if pair[2] > num(cap[i + 2]) - used_at(i + 2) then reasons[#reasons + 1] = 'Insufficient ' .. pair[1] end
  end
  local ngpus = num(cap[2])
  for _, d in ipairs(r.gpu_devices) do
    local ds = int(d)
    if d < 0 or d >= ngpus then
      reasons[#reasons + 1] = 'gpu ' .. ds .. ' does not exist'
    elseif redis.call('HGET', info, 'g:' .. ds .. ':ok') ~= '1' then
      reasons[#reasons + 1] = 'gpu ' .. ds .. ' unhealthy'
    else
      local total = num(redis.call('HGET', info, 'g:' .. ds .. ':mem'))
      local taken = used('g:' .. ds .. ':used')
      if r.gpu_shared then
        if total - taken < r.gpu_memory then
          reasons[#reasons + 1] = 'gpu ' .. ds .. ' busy (' .. int(total - taken) .. ' bytes free, ' ..
                                  int(r.gpu_memory) .. ' wanted)'
        end
      elseif used('g:' .. ds .. ':pods') > 0 then
        reasons[#reasons + 1] = 'gpu ' .. ds .. ' busy'
      elseif total < r.gpu_memory then
        reasons[#reasons + 1] = 'gpu ' .. ds .. ' too small'
      end
    end
  end
  for _, p in ipairs(r.host_ports) do
    local port = p[2] .. ':' .. int(p[3])
    local in_use
    if p[1] == '0.0.0.0' then
      in_use = used('p:' .. port) > 0
    else
      in_use = used('p:' .. port .. ':' .. p[1]) > 0 or used('p:' .. port .. ':0.0.0.0') > 0
    end
    if in_use then reasons[#reasons + 1] = 'host port ' .. p[2] .. '/' .. int(p[3]) .. ' in use' end
  end
  local anti = anti_affinity_conflict(resv, uid, r, used_at(2), leaving)
  if anti then reasons[#reasons + 1] = anti end
  return reasons
end
local function conflict(reasons)
  local out = {'CONFLICT'}
  for _, reason in ipairs(reasons) do out[#out + 1] = reason end
  return out
end
-- Record the reservation (JSON j, decoded r) and add its usage; remember its fencing token.
local function reserve_write(info, usage, resv, fences, uid, j, r)
  account(info, usage, r, 1)
  redis.call('HSET', resv, uid, j)
  local token = tonumber(r.token) or 0
  if token > 0 and token > (r.fence_seen or num(redis.call('HGET', fences, r.profile))) then
    redis.call('HSET', fences, r.profile, int(token))
  end
end
-- GPUFit's pick made again against what Redis holds, for a reservation that allows it
-- (r.gpu_pick): nil when its own devices can take the pod (or too few can); else the devices
-- that can, ordered by free memory (binpack: least first; spread: most first), then index.
local function repick(info, usage, r)
  if not r.gpu_pick or #r.gpu_devices == 0 then return nil end
  local models = {}
  for _, m in ipairs(r.gpu_models or {}) do models[m] = true end
  local any_model = not r.gpu_models or #r.gpu_models == 0
  local ngpus = num(redis.call('HGET', info, 'gpus'))
  -- The free memory of device d when it can take the pod, else nil.
  local function can(d)
    if d < 0 or d >= ngpus then return nil end
    local ds = int(d)
    local g = redis.call('HMGET', info, 'g:' .. ds .. ':ok', 'g:' .. ds .. ':mem', 'g:' .. ds .. ':model')
    local u = redis.call('HMGET', usage, 'g:' .. ds .. ':used', 'g:' .. ds .. ':pods')
    local total = num(g[2])
    local free = total - num(u[1])
    local fits
    if r.gpu_shared then fits = free >= r.gpu_memory else fits = num(u[2]) == 0 end
    if g[1] == '1' and total >= r.gpu_memory and fits and (any_model or models[g[3] or '']) then return free end
    return nil
  end
  local mine = true
  for _, d in ipairs(r.gpu_devices) do mine = mine and can(d) ~= nil end
  if mine then return nil end  -- the common case: only its own devices looked at
  local order = {}
  for d = 0, ngpus - 1 do
    local free = can(d)
    if free then
      if r.gpu_pick == 'spread' then order[#order + 1] = {-free, d} else order[#order + 1] = {free, d} end
    end
  end
  if #order < #r.gpu_devices then return nil end
  table.sort(order, function(a, b) if a[1] ~= b[1] then return a[1] < b[1] end return a[2] < b[2] end)
  local picked = {}
  for i = 1, #r.gpu_devices do picked[i] = order[i][2] end
  table.sort(picked)
  return picked
end
-- RESERVE's step, once reserve_gate let pod uid through, with reservation JSON j (decoded r):
-- GPUFit's pick made again when r allows it (r.gpu_devices then says which), the fit, then the
-- write. Returns the reply: {'OK', 'reserved' ['devices', d...]} or the refusal.
local function reserve_step(info, usage, resv, fences, uid, j, r)
  local picked = repick(info, usage, r)
  if picked then
    r.gpu_devices = picked
    local list = {}
    for i, d in ipairs(picked) do list[i] = int(d) end
    -- the first "gpu_devices":[...] of the JSON is the reservation's own (labels come after)
    j = string.gsub(j, '"gpu_devices":%[[%d,]*%]', '"gpu_devices":[' .. table.concat(list, ',') .. ']', 1)
  end
  local reasons = fit_reasons(info, usage, resv, uid, r, {}, {})
  if #reasons > 0 then return conflict(reasons) end
  reserve_write(info, usage, resv, fences, uid, j, r)
  local out = {'OK', 'reserved'}
  if picked then
    out[3] = 'devices'
    for _, d in ipairs(picked) do out[#out + 1] = int(d) end
  end
  return out
end
