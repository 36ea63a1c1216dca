-- PUT_PODS: PUT_POD for many pods (single Redis only).
-- KEYS: keys index, 7 phase indexes, then per pod: record, pending index of its profile.
-- ARGV per pod: uid, ns/name, profile, JSON of the fields but the manifest, manifest. Reply: one PUT_POD reply per pod.

-- The manifest, the bulk of a record, comes apart from the other fields: JSON would escape its
-- every quote, and decoding it again costs the most of the script.
local out = {}
for i = 1, #ARGV / 5 do
  local rec, pending = KEYS[7 + 2 * i], KEYS[8 + 2 * i]
  local uid, key, profile = ARGV[5 * i - 4], ARGV[5 * i - 3], ARGV[5 * i - 2]
  if redis.call('EXISTS', rec) == 1 then
    local cur = redis.call('HMGET', rec, 'version', 'phase', 'profile')
    out[i] = {'ALREADY', cur[1], cur[2], cur[3]}
  else
    local fields = cjson.decode(ARGV[5 * i - 1])
    local flat = {'manifest', ARGV[5 * i]}
    for f, v in pairs(fields) do
      flat[#flat + 1] = f
      flat[#flat + 1] = v
    end
    redis.call('HSET', rec, unpack(flat))
    local phase = fields.phase
    redis.call('HSET', KEYS[1], key, uid)
    for j, p in ipairs(PHASES) do
      if p == phase then redis.call('SADD', KEYS[1 + j], uid) end
    end
    if phase == 'Pending' then redis.call('SADD', pending, uid) end
    out[i] = {'OK', fields.version, phase, profile}
  end
end
return out
