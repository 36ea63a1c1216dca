-- Library, prepended to the scripts that need it: int() (a Lua number as '%d', never 1e+15),
-- num(), incr() (HINCRBY that drops a field at 0), attempt_of() (a stored reservation's attempt
-- without decoding its JSON), holdings()/account() (a reservation's usage added or taken back),
-- drop_reservation() and append_event(). Defines functions only; touches no key.

local function int(x) return string.format('%d', x) end
local function num(v) return tonumber(v or '0') or 0 end
local function incr(key, field, by)
  if by == 0 then return end
  local v = redis.call('HINCRBY', key, field, int(by))
  if v == 0 then redis.call('HDEL', key, field) end
end
-- A stored reservation's attempt, read without decoding its JSON (a sixth of a reservation's
-- Redis time): the first "attempt" key is the reservation's own, as Reservation.to_json writes
-- it before the labels, the only object whose keys a pod chooses (inside a JSON string a quote
-- is escaped, so the key cannot be matched there). nil when there is none.
local function attempt_of(j)
  local _, last = string.find(j, '"attempt":"', 1, true)
  if not last then return nil end
  local value = string.sub(j, last + 1, string.find(j, '"', last + 1, true) - 1)
  if string.find(value, '\\', 1, true) then return cjson.decode(j).attempt end  -- escaped: as JSON reads it
  return value
end
-- What a decoded reservation holds of its node's usage: {field, amount} pairs, in the order
-- `account` writes them.
local function holdings(info, r)
  local out = {}
  for _, pair in ipairs(r.requests) do
    if pair[1] ~= 'pods' then out[#out + 1] = {'r:' .. pair[1], pair[2]} end
  end
  out[#out + 1] = {'pods', 1}
  local ngpus = #r.gpu_devices > 0 and num(redis.call('HGET', info, 'gpus')) or 0
  for _, d in ipairs(r.gpu_devices) do
    if d >= 0 and d < ngpus then
      local ds = int(d)
      local taken = r.gpu_memory
      if not r.gpu_shared then taken = num(redis.call('HGET', info, 'g:' .. ds .. ':mem')) end
      out[#out + 1] = {'g:' .. ds .. ':used', taken}
      out[#out + 1] = {'g:' .. ds .. ':pods', 1}
    end
  end
  for _, p in ipairs(r.host_ports) do
    local port = p[2] .. ':' .. int(p[3])
    out[#out + 1] = {'p:' .. port .. ':' .. p[1], 1}
    out[#out + 1] = {'p:' .. port, 1}
  end
  if r.anti_host and #r.anti_host > 0 then out[#out + 1] = {'anti', 1} end
  return out
end
-- Add (sign 1) or take back (sign -1) a decoded reservation's usage.
local function account(info, usage, r, sign)
  for _, h in ipairs(holdings(info, r)) do incr(usage, h[1], sign * h[2]) end
end
-- Give pod uid's reservation r (decoded) back: its usage, the reservation, its bound mark.
local function drop_reservation(info, usage, resv, bound, uid, r)
  redis.call('SREM', bound, uid)
  account(info, usage, r, -1)
  redis.call('HDEL', resv, uid)
end
-- Append a pod event (JSON; '' = none), keeping the newest `cap`.
local function append_event(events, event, cap)
  if event == '' then return end
  redis.call('RPUSH', events, event)
  redis.call('LTRIM', events, -cap, -1)
end
