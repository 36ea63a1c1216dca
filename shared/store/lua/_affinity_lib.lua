-- Library (needs _lib): required pod anti-affinity on kubernetes.io/hostname, checked against
-- the reservations held on a node, both ways (the pod's terms against the holders', theirs
-- against the pod). Defines functions only; touches no key.

local function sel_match(sel, labels)
  if sel == nil or sel == cjson.null then return false end
  if type(sel.matchLabels) == 'table' then
    for k, v in pairs(sel.matchLabels) do if labels[k] ~= v then return false end end
  end
  if type(sel.matchExpressions) == 'table' then
    for _, e in ipairs(sel.matchExpressions) do
      local v, op, found = labels[e.key], e.operator, false
      if v ~= nil and type(e.values) == 'table' then
        for _, x in ipairs(e.values) do if x == v then found = true end end
      end
      if op == 'In' then if not found then return false end
      elseif op == 'NotIn' then if found then return false end
      elseif op == 'Exists' then if v == nil then return false end
      elseif op == 'DoesNotExist' then if v ~= nil then return false end
      else return false end
    end
  end
  return true
end
local function ns_labels(r, ns)
  local l = {}
  if type(r.nsl) == 'table' then for k, v in pairs(r.nsl) do l[k] = v end end
  l['kubernetes.io/metadata.name'] = ns
  return l
end
-- kube's AffinityTerm.Matches: the pod's namespace is the term's, or its namespace selector
-- selects the namespace's labels; then the label selector selects the pod.
local function term_match(t, ns, labels, nslabels)
  local in_ns = false
  if type(t.ns) == 'table' then for _, n in ipairs(t.ns) do if n == ns then in_ns = true end end end
  if not in_ns then in_ns = sel_match(t.nss, nslabels) end
  return in_ns and sel_match(t.sel, labels)
end
-- Required anti-affinity on kubernetes.io/hostname, both ways, against the pods held on the
-- node but those `leaving` (uid -> true): the placement two profiles could race on. `holders`:
-- how many of the pods staying have such terms (usage `anti`; none and no terms of its own:
-- no walk). Returns kube's reason, or nil.
local function anti_affinity_conflict(resv, uid, r, holders, leaving)
  local own = r.anti_host or {}
  if #own == 0 and holders == 0 then return nil end
  local pns = string.match(r.pod_key, '^([^/]*)/')
  local plabels = r.labels or {}
  local held = redis.call('HGETALL', resv)
  for i = 1, #held, 2 do
    if held[i] ~= uid and not leaving[held[i]] then
      local e = cjson.decode(held[i + 1])
      local ens = string.match(e.pod_key, '^([^/]*)/')
      for _, t in ipairs(own) do
        if term_match(t, ens, e.labels or {}, ns_labels(e, ens)) then
          return "node(s) didn't match pod anti-affinity rules (pod " .. e.pod_key .. ')'
        end
      end
      for _, t in ipairs(e.anti_host or {}) do
        if term_match(t, pns, plabels, ns_labels(r, pns)) then
          return "node(s) didn't satisfy existing pods anti-affinity rules (pod " .. e.pod_key .. ')'
        end
      end
    end
  end
  return nil
end
