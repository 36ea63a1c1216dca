"""The Lua scripts: every multi-step change of the shared state that must be atomic is one script.

Each script is registered once per client (`Scripts`, via redis-py's `register_script`: EVALSHA,
loading the source on NOSCRIPT) and receives its keys as KEYS, all in one hash slot (see
`kubus.store.keys`). On a single Redis the pod and node scripts may also receive the index keys
(one slot of their own) after the record's keys, and then keep the indexes in step atomically.

Every script replies with an array whose first element is a return code (`StoreCode`); the rest is
documented per script below. Numbers are handled as Lua numbers (doubles), exact up to 2**53
(8 PiB of memory): plenty for quantities in base units. Lua formats them back with `%d`, never
`tostring` (which would print `1e+15`), so HINCRBY always receives an integer.

Node scripts (KEYS = info, usage, reservations, bound, fences [, nodes index, heartbeats index])
-------------------------------------------------------------------------------------------------
PUT_NODE     ARGV: name, record JSON, manifest ('' = none), shape JSON {alloc, gpus, unreachable}.
             Replaces the node's description atomically, keeps its heartbeat, and recomputes the
             per-GPU usage from the reservations (the devices may have changed, as NodeTable
             re-adds the pods of a changed node). -> OK generation | NOOP generation (nothing
             changed: generation not bumped).
DELETE_NODE  ARGV: name. Drops the node, its usage and its reservations (and its entry in the
             heartbeats index). -> OK json... (the reservations it dropped) | NOOP (no such node).
HEARTBEAT    Many nodes (an agent simulating thousands beats them all each interval): KEYS =
             the heartbeats index, then each node's info. ARGV: time, then each node's name. Per
             node: the time recorded, and its score in the heartbeats index; a node marked
             unreachable is reachable again (generation + 1). -> per node: OK 'recorded'
             generation | OK 'revived' generation | NOT_FOUND (a heartbeat never creates a node).
MARK_UNREACHABLE ARGV: '1' or '0'. -> OK generation | NOOP generation | NOT_FOUND.
RESERVE      ARGV: pod uid, reservation JSON (`Reservation.encode`). Checks, for a new
             reservation, against the node's allocatable and usage: one more pod fits
             ("Too many pods"); every requested resource with a positive amount, except
             `pods` and the reservation's `ignored` ones, fits allocatable - used
             ("Insufficient cpu"); every requested GPU device exists ("gpu 9 does not exist"),
             is healthy ("gpu 1 unhealthy") and is free: a shared slice needs free memory >=
             gpu_memory, a whole GPU needs no holder and total memory >= gpu_memory ("gpu 3
             busy", "gpu 3 too small"); no host port collides, as kube's NodePorts rules say
             ("host port TCP/80 in use"); no required pod anti-affinity on
             kubernetes.io/hostname is broken, the pod's own terms (`anti_host`) against the
             pods held here or theirs against the pod ("node(s) didn't match pod anti-affinity
             rules (pod ns/name)", "... didn't satisfy existing pods anti-affinity rules ...":
             two profiles racing for one node; the usage field `anti` counts the holders of
             such terms, so nodes without any skip the walk). Then adds the usage and records
             the reservation. A reservation with `gpu_pick` (GPUFit's mode) whose devices
             cannot take the pod (another profile took them) gets the ones GPUFit would
             pick against Redis's usage instead, if enough can: healthy, of an accepted model
             (`gpu_models`), big enough, free (shared: memory; whole: no holder); ordered
             by free memory (binpack ascending, spread descending), then index.
             -> OK 'reserved' ['devices' d...: the devices held, when picked again] |
             OK 'already reserved' 'devices' d... (the pod holds one here from the same
             attempt: an idempotent retry, nothing checked or changed) | CONFLICT reason...
             (nothing changed; 'pod already reserved here by another attempt' when the pod
             holds one here from a different `attempt`) | NODE_GONE 'node not found' / 'node
             unreachable' (a retry that already holds its reservation still gets OK) | FENCED
             reason (the reservation's token is older than one this profile already used on
             this node: a deposed leader).
RESERVE_POD  KEYS = the pod's 10 (as TRANSITION), then the node's 5. ARGV: profile, time, pod
             uid, reservation JSON with "attempt":"". A cycle's attempt in one step: for a
             Pending pod, RESERVE with the attempt the pod is about to get (its version + 1),
             and when the room is reserved, Pending -> Reserved as TRANSITION moves it (node,
             the devices held, attempts + 1, version + 1). -> NOT_FOUND | PROFILE profile |
             GONE / CONFLICT version phase profile (not Pending: nothing tried) | OK version
             'Pending' profile, then RESERVE's OK reply | NOOP version 'Pending' profile, then
             RESERVE's refusal (the pod unchanged; a reservation held here already is a stale
             one: CONFLICT).
UNRESERVE    ARGV: pod uid, attempt ('' = any). Gives a *reserved* reservation back.
             -> OK | NOOP (none: idempotent) | BOUND (the pod is being bound: use RELEASE) |
             CONFLICT (held by another attempt: not yours to give back).
MARK_BOUND   ARGV: pod uid, attempt ('' = any). reserved -> bound.
             -> OK | ALREADY | NOT_FOUND (no reservation) | CONFLICT (another attempt's).
RELEASE      ARGV: pod uid, attempt ('' = any). Gives the reservation back, bound or not:
             the pod finished or was deleted, or the binder backs out of its own attempt.
             -> OK | NOOP | CONFLICT (another attempt's, when `attempt` is given).

Pod scripts (KEYS = record [, pod-keys index, 7 phase indexes in PHASES order, pending index
of the pod's profile])
----------------------------------------------------------------------------------------------
PUT_POD      ARGV: uid, namespace/name, profile, field, value, ... Insert if absent (submissions
             are at-least-once). -> OK version phase profile | ALREADY version phase profile.
PUT_PODS     PUT_POD for many pods, single Redis only: KEYS = pod-keys index, 7 phase indexes,
             then per pod its record and its profile's pending index; ARGV per pod: uid,
             namespace/name, profile, JSON object of the fields but the manifest, the manifest.
             -> one PUT_POD reply per pod.
TRANSITION   ARGV: new phase, expected version ('' = any), expected phases (comma-separated,
             '' = any), profile, now, attempts increment, field, value, ...
             Compare-and-set of the phase. Allowed moves:
                 Pending  -> Pending, Reserved, Failed, Deleted
                 Reserved -> Pending, Reserved, Failed, Deleted
                 Bound    -> Running, Succeeded, Failed, Deleted   (bound is for life)
                 Running  -> Succeeded, Failed, Deleted
                 Succeeded, Failed -> Deleted
             Bound only through BIND_POD. -> OK version old-phase profile | ALREADY version
             phase profile (already in that Running/Succeeded/Failed/Deleted phase: an
             idempotent retry; nothing changed) | CONFLICT version phase profile (expected
             version/phases not met, or a move not allowed) | GONE version phase profile (the
             pod is Deleted) | NOT_FOUND | PROFILE profile (the index key given is not the
             pod's profile's; the caller retries with the right one).
GIVE_BACK    KEYS = the pod's (as TRANSITION), then its node's info, usage, reservations, bound.
             ARGV: uid, attempt, profile, node, now, then field, value, ... (reason, message).
             Reserved -> Pending for one attempt, with the attempt's room given back, as one
             step (Unreserve + back to the queue): the pod must be Reserved on `node` at version
             `attempt`; its reservation there, if it is that attempt's, is removed unless bound.
             -> OK version old-phase profile released ('OK' when room was given back, '' when
             there was none of that attempt) | BOUND version phase profile (the reservation is
             bound: a binder has the pod; nothing changed) | CONFLICT ... (not Reserved there at
             that attempt; nothing changed) | GONE ... | NOT_FOUND | PROFILE profile.
BIND_POD     ARGV: node, devices ("0,3"), profile, now, expected version ('' = any). Exactly
             once: Pending/Reserved (on that node or none) -> Bound, bindings + 1.
             -> OK version old-phase profile | ALREADY ... (bound, running or finished on
             that node) | CONFLICT ... (bound elsewhere, reserved elsewhere, failed unbound, or
             version mismatch) | GONE ... (deleted) | NOT_FOUND | PROFILE profile.

Binder script (it writes a node's keys and a pod's keys together)
-----------------------------------------------------------------
BIND_MANY    KEYS = the 7 phase indexes (PHASES order), then per pod: its node's info, usage,
             reservations, bound, the pod's record, events, the pending index of the profile.
             ARGV: now, event cap, then per pod: uid, attempt ('' = any), node, devices,
             profile, event JSON ('' = none). The binder's Bind step for many pods, each
             atomically: MARK_BOUND; then BIND_POD (expected version = attempt); bound now:
             the event appended; bind refused: RELEASE of the attempt's room. One reply per pod:
             -> NOT_FOUND|CONFLICT '' '' phase version (MARK_BOUND refused, nothing changed;
             the record's phase and version, '' without a record) | marked bind released
             phase version [created_at attempts] (marked: OK|ALREADY; bind: BIND_POD's code;
             released: 'OK' when the bind was refused and the room given back, else ''; phase
             and version as BIND_POD replies them; created_at and attempts of the record when
             bind is OK or ALREADY) | PROFILE profile (not the pod's profile: nothing changed).

START_POD    KEYS = the pod's record and events list, the node's reservations hash and bound
             set, the Bound and Running phase indexes (the only ones a Bound -> Running move
             touches; no profile needed). ARGV: node, attempt ('' = any), now, event JSON
             ('' = none), events kept, ends_at (when the agent will finish it; 0 = never, or it
             cannot tell: the record's ends_at). An agent starts a pod it admitted: Bound on that node,
             holding a bound reservation there of that attempt -> Running, with the event
             appended, atomically. -> OK version old-phase profile | ALREADY version phase
             profile (Running already: a redelivery; nothing changed) | CONFLICT version phase
             profile reason (not Bound, on another node, no reservation, not bound, another
             attempt's; nothing changed) | GONE ... (deleted) | NOT_FOUND.
ADMISSION_VIEW Read only. KEYS = the pod's record, the node's reservations
             hash and bound set. ARGV: pod uid. -> phase ('' = no such pod), node, profile,
             updated_at, reservation JSON ('' = none), 1 when bound else 0: what
             `ClusterState.admission_views` pipelines one command per pod for.

Preemption script (it writes a node's keys and its victims' pod keys together)
------------------------------------------------------------------------------
PREEMPT      KEYS = the node's info, usage, reservations, bound, fences; the 7 phase indexes
             (PHASES order); then per victim: its pod record, its events.
             ARGV: preemptor uid, its reservation JSON (as RESERVE), now, reason, message, event
             JSON ('' = none), events kept, then per victim: uid, attempt (its reservation's).
             DefaultPreemption's eviction and the preemptor's Reserve as one step, all checked
             before anything is written: RESERVE's gate (node found and reachable, fencing
             token; a preemptor already holding a reservation here answers as RESERVE does);
             every victim still holds a reservation on this node of that attempt and its pod is
             Reserved, Bound or Running here ("victim ns/name changed or gone since the cycle
             looked": the cycle's view was stale), of a priority lower than the reservation's
             `priority` ("victim ns/name has priority 5, not lower than 5"); then RESERVE's
             checks, with the victims' room counted as given back and their reservations left
             out of the anti-affinity walk. Then per victim: RELEASE of its room and its pod ->
             Deleted (reason, message, the event appended; phase indexes kept in step); then the
             preemptor's reservation is recorded as RESERVE records it.
             -> OK 'preempted' (uid, namespace/name, profile, old phase, new version)... per
             victim evicted (a victim listed twice is evicted once) | OK 'already reserved'
             (an idempotent retry: nothing checked or changed) | CONFLICT reason... (nothing
             changed) | NODE_GONE reason | FENCED reason, as RESERVE.

Permit scripts (KEYS = the pod's permit hash)
---------------------------------------------
PERMIT_ALLOW  ARGV: attempt, plugin. The plugin lets the pod go. -> 1 done (or not waited on
             by it), 0 no such wait of that attempt.
PERMIT_REJECT ARGV: attempt, plugin, message. The first rejection is kept. -> 1 | 0 as above.

PodGroup script (KEYS = the group's record hash, the groups index)
------------------------------------------------------------------
PUT_POD_GROUP ARGV: group key (namespace/name), record JSON, manifest. Insert or replace,
             listed in the index. -> 1 written now (new or changed), 0 stored as is already.

Lease scripts (KEYS = holder hash, fence counter)
-------------------------------------------------
ACQUIRE_LEASE ARGV: holder, ttl ms. -> the fencing token (a string) when `holder` holds the lease
             (renewed: same token) or takes it (free or expired: INCR of the fence counter, so
             tokens only grow), nil when another holder has it.
RELEASE_LEASE ARGV: holder. -> 1 released, 0 not the holder (nothing changed).
"""

from __future__ import annotations

from enum import StrEnum
from typing import Any

from kubus.store.keys import PHASES


class StoreCode(StrEnum):
    """The first element of every script's reply."""

    OK = "OK"
    NOOP = "NOOP"
    """Nothing to do: the state already is what was asked (an idempotent retry)."""
    ALREADY = "ALREADY"
    """Done before, by this same request: an idempotent retry."""
    CONFLICT = "CONFLICT"
    """Refused: the state is not what the request expects; nothing changed."""
    NODE_GONE = "NODE_GONE"
    """The node is missing or marked unreachable."""
    NOT_FOUND = "NOT_FOUND"
    GONE = "GONE"
    """The pod is deleted."""
    BOUND = "BOUND"
    """UNRESERVE refused: the reservation is bound (RELEASE gives it back)."""
    FENCED = "FENCED"
    """RESERVE refused: the fencing token is older than one already seen on the node."""
    PROFILE = "PROFILE"
    """Internal: the pending index passed is not the pod's profile's; ClusterState retries."""


# Shared Lua helpers, prepended to every script that needs them.
_LIB = r"""
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
  local ngpus = num(redis.call('HGET', info, 'gpus'))
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
"""

# Label selectors and pod affinity terms, for RESERVE's node-local anti-affinity check.
_AFFINITY_LIB = r"""
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
"""

_PHASES_LUA = "local PHASES = {" + ", ".join(f"'{p}'" for p in PHASES) + "}\n"
"""The pod phases in the order their index keys are passed (PHASES)."""

_POD_LIB = (
    _PHASES_LUA
    + r"""
-- Move the uid between the phase and pending sets (KEYS[3..9] and KEYS[10]).
local function index_move(uid, old, new)
  for i, p in ipairs(PHASES) do
    if p == new then redis.call('SADD', KEYS[2 + i], uid)
    elseif p == old then redis.call('SREM', KEYS[2 + i], uid) end
  end
  if new == 'Pending' then redis.call('SADD', KEYS[10], uid)
  elseif old == 'Pending' then redis.call('SREM', KEYS[10], uid) end
end
local function set_fields(key, argv, first)
  for i = first, #argv, 2 do redis.call('HSET', key, argv[i], argv[i + 1]) end
end
"""
)

PUT_NODE = (
    _LIB
    + r"""
local info, usage, resv = KEYS[1], KEYS[2], KEYS[3]
local shape = cjson.decode(ARGV[4])
local unreachable = '0'
if shape.unreachable then unreachable = '1' end
local gen = num(redis.call('HGET', info, 'generation'))
if redis.call('EXISTS', info) == 1
   and redis.call('HGET', info, 'record') == ARGV[2]
   and (redis.call('HGET', info, 'manifest') or '') == ARGV[3]
   and redis.call('HGET', info, 'unreachable') == unreachable then
  redis.call('SADD', KEYS[6], ARGV[1])
  return {'NOOP', int(gen)}
end
local heartbeat = redis.call('HGET', info, 'heartbeat')
redis.call('DEL', info)
gen = gen + 1
redis.call('HSET', info, 'record', ARGV[2], 'generation', int(gen), 'gpus', int(#shape.gpus),
           'unreachable', unreachable)
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
"""
)

DELETE_NODE = r"""
local removed = redis.call('HVALS', KEYS[3])
local existed = redis.call('EXISTS', KEYS[1])
redis.call('DEL', KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5])
redis.call('SREM', KEYS[6], ARGV[1])
redis.call('ZREM', KEYS[7], ARGV[1])
if existed == 0 and #removed == 0 then return {'NOOP'} end
local out = {'OK'}
for _, j in ipairs(removed) do out[#out + 1] = j end
return out
"""

HEARTBEAT = (
    _LIB
    + r"""
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
"""
)

MARK_UNREACHABLE = (
    _LIB
    + r"""
if redis.call('EXISTS', KEYS[1]) == 0 then return {'NOT_FOUND'} end
local gen = num(redis.call('HGET', KEYS[1], 'generation'))
if (redis.call('HGET', KEYS[1], 'unreachable') or '0') == ARGV[1] then return {'NOOP', int(gen)} end
redis.call('HSET', KEYS[1], 'unreachable', ARGV[1], 'generation', int(gen + 1))
return {'OK', int(gen + 1)}
"""
)

# RESERVE's steps, shared by RESERVE and PREEMPT (which reserves once its victims' room counts
# as given back). Needs _LIB and _AFFINITY_LIB.
_RESERVE_LIB = r"""
-- Whether pod `uid` may reserve with r (decoded) on the node at all: the reply that ends the
-- script (NODE_GONE, FENCED, OK 'already reserved' for an idempotent retry, CONFLICT when it
-- holds another attempt's reservation here), or nil to go on.
local function reserve_gate(info, resv, fences, uid, r)
  if redis.call('EXISTS', info) == 0 then return {'NODE_GONE', 'node not found'} end
  local held = redis.call('HGET', resv, uid)
  if held then
    if attempt_of(held) == r.attempt then return {'OK', 'already reserved'} end
    return {'CONFLICT', 'pod already reserved here by another attempt'}
  end
  if redis.call('HGET', info, 'unreachable') == '1' then return {'NODE_GONE', 'node unreachable'} end
  local token = tonumber(r.token) or 0
  if token > 0 then
    local seen = num(redis.call('HGET', fences, r.profile))
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
  local reasons = {}
  if used('pods') + 1 > num(redis.call('HGET', info, 'a:pods')) then
    reasons[#reasons + 1] = 'Too many pods'
  end
  local ignored = {}
  for _, name in ipairs(r.ignored) do ignored[name] = true end
  for _, pair in ipairs(r.requests) do
    local name, want = pair[1], pair[2]
    if want > 0 and name ~= 'pods' and not ignored[name] then
      local cap = num(redis.call('HGET', info, 'a:' .. name))
      if want > cap - used('r:' .. name) then reasons[#reasons + 1] = 'Insufficient ' .. name end
    end
  end
  local ngpus = num(redis.call('HGET', info, 'gpus'))
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
  local anti = anti_affinity_conflict(resv, uid, r, used('anti'), leaving)
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
  if token > 0 and token > num(redis.call('HGET', fences, r.profile)) then
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
"""

RESERVE = (
    _LIB
    + _AFFINITY_LIB
    + _RESERVE_LIB
    + r"""
local info, usage, resv, fences = KEYS[1], KEYS[2], KEYS[3], KEYS[5]
local uid, j = ARGV[1], ARGV[2]
local r = cjson.decode(j)
local refused = reserve_gate(info, resv, fences, uid, r)
if refused then
  if refused[2] == 'already reserved' then  -- a retry: the devices it holds, picked again or not
    refused[3] = 'devices'
    for _, d in ipairs(cjson.decode(redis.call('HGET', resv, uid)).gpu_devices) do refused[#refused + 1] = int(d) end
  end
  return refused
end
return reserve_step(info, usage, resv, fences, uid, j, r)
"""
)

RESERVE_POD = (
    _LIB
    + _AFFINITY_LIB
    + _RESERVE_LIB
    + _POD_LIB
    + r"""
-- A cycle's attempt for a Pending pod, in one step: its room reserved on the node as RESERVE
-- does, and only then the pod Pending -> Reserved (TRANSITION's writes: node, devices, one
-- attempt more, version + 1). The attempt is the version the pod gets: the reservation's JSON
-- carries "attempt":"" and gets it here. A refused room leaves the pod as it was.
-- KEYS: the pod's 10 (record, keys index, 7 phase indexes, its profile's pending index), then
-- the node's 5 (node_keys). ARGV: profile, now, uid, reservation JSON.
-- Reply: {code, version, phase, profile} about the pod (NOT_FOUND alone; PROFILE and the
-- profile; GONE or CONFLICT when not Pending, nothing tried), then, when the room was tried,
-- RESERVE's reply: the pod's code is OK (now Reserved at `version`) or NOOP (refused).
local rec = KEYS[1]
local info, usage, resv, fences = KEYS[11], KEYS[12], KEYS[13], KEYS[15]
local profile, now, uid, j = ARGV[1], ARGV[2], ARGV[3], ARGV[4]
if redis.call('EXISTS', rec) == 0 then return {'NOT_FOUND'} end
local cur = redis.call('HMGET', rec, 'phase', 'version', 'profile', 'attempts')
local phase, version = cur[1], cur[2]
if cur[3] ~= profile then return {'PROFILE', cur[3]} end
if phase == 'Deleted' then return {'GONE', version, phase, profile} end
if phase ~= 'Pending' then return {'CONFLICT', version, phase, profile} end
local attempt = int(num(version) + 1)
local at = string.find(j, '"attempt":""', 1, true)  -- a plain find: a third of gsub's cost
if at then j = string.sub(j, 1, at + 10) .. attempt .. string.sub(j, at + 11) end
local r = cjson.decode(j)
if r.attempt ~= attempt then return {'CONFLICT', version, phase, profile} end  -- not a fresh attempt's JSON
local room = reserve_gate(info, resv, fences, uid, r)
if room and room[1] == 'OK' then  -- 'already reserved': a Pending pod's reservation is stale
  room = {'CONFLICT', 'pod already reserved here by another attempt'}
end
room = room or reserve_step(info, usage, resv, fences, uid, j, r)
local out = {'NOOP', version, phase, profile}
if room[1] == 'OK' then
  local devices = {}
  for i, d in ipairs(r.gpu_devices) do devices[i] = d end
  table.sort(devices)
  for i, d in ipairs(devices) do devices[i] = int(d) end
  redis.call('HSET', rec, 'node', r.node, 'gpu_devices', table.concat(devices, ','), 'phase', 'Reserved',
             'updated_at', now, 'attempts', int(num(cur[4]) + 1), 'version', attempt)
  out = {'OK', attempt, phase, profile}
  index_move(uid, phase, 'Reserved')
end
for _, x in ipairs(room) do out[#out + 1] = x end
return out
"""
)

PREEMPT = (
    _LIB
    + _AFFINITY_LIB
    + _RESERVE_LIB
    + _PHASES_LUA
    + r"""
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
"""
)

UNRESERVE = (
    _LIB
    + r"""
local j = redis.call('HGET', KEYS[3], ARGV[1])
if not j then return {'NOOP'} end
local r = cjson.decode(j)
if ARGV[2] ~= '' and r.attempt ~= ARGV[2] then return {'CONFLICT'} end
if redis.call('SISMEMBER', KEYS[4], ARGV[1]) == 1 then return {'BOUND'} end
drop_reservation(KEYS[1], KEYS[2], KEYS[3], KEYS[4], ARGV[1], r)
return {'OK'}
"""
)

MARK_BOUND = (
    _LIB
    + r"""
local j = redis.call('HGET', KEYS[3], ARGV[1])
if not j then return {'NOT_FOUND'} end
if ARGV[2] ~= '' and attempt_of(j) ~= ARGV[2] then return {'CONFLICT'} end
if redis.call('SADD', KEYS[4], ARGV[1]) == 0 then return {'ALREADY'} end
return {'OK'}
"""
)

RELEASE = (
    _LIB
    + r"""
local j = redis.call('HGET', KEYS[3], ARGV[1])
if not j then
  redis.call('SREM', KEYS[4], ARGV[1])
  return {'NOOP'}
end
local r = cjson.decode(j)
if ARGV[2] ~= '' and r.attempt ~= ARGV[2] then return {'CONFLICT'} end
drop_reservation(KEYS[1], KEYS[2], KEYS[3], KEYS[4], ARGV[1], r)
return {'OK'}
"""
)

OBSERVE_PLACED = (
    _LIB
    + _AFFINITY_LIB
    + _RESERVE_LIB
    + _POD_LIB
    + r"""
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
"""
)

RESTORE_ROOM = (
    _LIB
    + _AFFINITY_LIB
    + _RESERVE_LIB
    + r"""
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
"""
)

PUT_POD = (
    _POD_LIB
    + r"""
local rec = KEYS[1]
if redis.call('EXISTS', rec) == 1 then
  local cur = redis.call('HMGET', rec, 'version', 'phase', 'profile')
  return {'ALREADY', cur[1], cur[2], cur[3]}
end
set_fields(rec, ARGV, 4)
local phase = redis.call('HGET', rec, 'phase')
redis.call('HSET', KEYS[2], ARGV[2], ARGV[1])
index_move(ARGV[1], '', phase)
return {'OK', redis.call('HGET', rec, 'version'), phase, ARGV[3]}
"""
)

PUT_PODS = (
    _POD_LIB
    + r"""
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
"""
)

TRANSITION = (
    _POD_LIB
    + r"""
local ALLOWED = {
  Pending = {Pending = true, Reserved = true, Failed = true, Deleted = true},
  Reserved = {Pending = true, Reserved = true, Failed = true, Deleted = true},
  Bound = {Running = true, Succeeded = true, Failed = true, Deleted = true},
  Running = {Succeeded = true, Failed = true, Deleted = true},
  Succeeded = {Deleted = true},
  Failed = {Deleted = true},
  Deleted = {},
}
local SETTLED = {Running = true, Succeeded = true, Failed = true, Deleted = true}
local rec = KEYS[1]
if redis.call('EXISTS', rec) == 0 then return {'NOT_FOUND'} end
local cur = redis.call('HMGET', rec, 'phase', 'version', 'profile', 'uid')
local phase, version, profile, uid = cur[1], cur[2], cur[3], cur[4]
if profile ~= ARGV[4] then return {'PROFILE', profile} end
local new = ARGV[1]
if phase == new and SETTLED[new] then return {'ALREADY', version, phase, profile} end
if phase == 'Deleted' then return {'GONE', version, phase, profile} end
if ARGV[2] ~= '' and ARGV[2] ~= version then return {'CONFLICT', version, phase, profile} end
if ARGV[3] ~= '' and not string.find(',' .. ARGV[3] .. ',', ',' .. phase .. ',', 1, true) then
  return {'CONFLICT', version, phase, profile}
end
if not ALLOWED[phase] or not ALLOWED[phase][new] then return {'CONFLICT', version, phase, profile} end
set_fields(rec, ARGV, 7)
redis.call('HSET', rec, 'phase', new, 'updated_at', ARGV[5])
if ARGV[6] ~= '0' then redis.call('HINCRBY', rec, 'attempts', ARGV[6]) end
local v = redis.call('HINCRBY', rec, 'version', 1)
index_move(uid, phase, new)
return {'OK', tostring(v), phase, profile}
"""
)

GIVE_BACK = (
    _LIB
    + _POD_LIB
    + r"""
local rec = KEYS[1]
local info, usage, resv, bound = KEYS[11], KEYS[12], KEYS[13], KEYS[14]
local uid, attempt = ARGV[1], ARGV[2]
if redis.call('EXISTS', rec) == 0 then return {'NOT_FOUND'} end
local cur = redis.call('HMGET', rec, 'phase', 'version', 'profile', 'node')
local phase, version, profile, node = cur[1], cur[2], cur[3], cur[4] or ''
if profile ~= ARGV[3] then return {'PROFILE', profile} end
if phase == 'Deleted' then return {'GONE', version, phase, profile} end
if phase ~= 'Reserved' or version ~= attempt or node ~= ARGV[4] then
  return {'CONFLICT', version, phase, profile}
end
local released = ''
local j = redis.call('HGET', resv, uid)
if j then
  local r = cjson.decode(j)
  if r.attempt == attempt then
    if redis.call('SISMEMBER', bound, uid) == 1 then return {'BOUND', version, phase, profile} end
    drop_reservation(info, usage, resv, bound, uid, r)
    released = 'OK'
  end
end
set_fields(rec, ARGV, 6)
redis.call('HSET', rec, 'phase', 'Pending', 'node', '', 'gpu_devices', '', 'updated_at', ARGV[5])
local v = redis.call('HINCRBY', rec, 'version', 1)
index_move(uid, 'Reserved', 'Pending')
return {'OK', tostring(v), phase, profile, released}
"""
)

BIND_POD = (
    _POD_LIB
    + r"""
local rec = KEYS[1]
if redis.call('EXISTS', rec) == 0 then return {'NOT_FOUND'} end
local cur = redis.call('HMGET', rec, 'phase', 'version', 'profile', 'uid', 'node')
local phase, version, profile, uid, node = cur[1], cur[2], cur[3], cur[4], cur[5] or ''
if profile ~= ARGV[3] then return {'PROFILE', profile} end
if phase == 'Deleted' then return {'GONE', version, phase, profile} end
if phase == 'Bound' or phase == 'Running' or phase == 'Succeeded' or phase == 'Failed' then
  if node == ARGV[1] and (phase ~= 'Failed' or redis.call('HGET', rec, 'bindings') ~= '0') then
    return {'ALREADY', version, phase, profile}
  end
  return {'CONFLICT', version, phase, profile}
end
if ARGV[5] ~= '' and ARGV[5] ~= version then return {'CONFLICT', version, phase, profile} end
if phase == 'Reserved' and node ~= '' and node ~= ARGV[1] then return {'CONFLICT', version, phase, profile} end
redis.call('HSET', rec, 'phase', 'Bound', 'node', ARGV[1], 'gpu_devices', ARGV[2], 'updated_at', ARGV[4])
redis.call('HINCRBY', rec, 'bindings', 1)
local v = redis.call('HINCRBY', rec, 'version', 1)
index_move(uid, phase, 'Bound')
return {'OK', tostring(v), phase, profile}
"""
)

BIND_MANY = (
    _LIB
    + _PHASES_LUA
    + r"""
-- KEYS: the 7 phase indexes (PHASES order), then per pod: node info, usage, reservations,
-- bound, pod record, pod events, pending index of the pod's profile.
-- ARGV: now, event cap, then per pod: uid, attempt, node, devices, profile, event JSON.
local now, cap = ARGV[1], tonumber(ARGV[2])
local function bind_one(k, a)
  local info, usage, resv, bound, rec, events = KEYS[k + 1], KEYS[k + 2], KEYS[k + 3], KEYS[k + 4],
                                                KEYS[k + 5], KEYS[k + 6]
  local uid, attempt, node, devices, profile, event = ARGV[a + 1], ARGV[a + 2], ARGV[a + 3], ARGV[a + 4],
                                                     ARGV[a + 5], ARGV[a + 6]
  local cur = redis.call('HMGET', rec, 'phase', 'version', 'profile', 'node', 'bindings', 'created_at', 'attempts')
  local phase, version = cur[1], cur[2]
  if phase and cur[3] ~= profile then return {'PROFILE', cur[3]} end
  -- MARK_BOUND
  local j = redis.call('HGET', resv, uid)
  if not j then return {'NOT_FOUND', '', '', phase or '', version or ''} end
  if attempt ~= '' and attempt_of(j) ~= attempt then return {'CONFLICT', '', '', phase or '', version or ''} end
  local marked = 'OK'
  if redis.call('SADD', bound, uid) == 0 then marked = 'ALREADY' end
  -- BIND_POD
  local code
  local pnode = cur[4] or ''
  if not phase then code = 'NOT_FOUND'
  elseif phase == 'Deleted' then code = 'GONE'
  elseif phase == 'Bound' or phase == 'Running' or phase == 'Succeeded' or phase == 'Failed' then
    if pnode == node and (phase ~= 'Failed' or cur[5] ~= '0') then code = 'ALREADY' else code = 'CONFLICT' end
  elseif attempt ~= '' and attempt ~= version then code = 'CONFLICT'
  elseif phase == 'Reserved' and pnode ~= '' and pnode ~= node then code = 'CONFLICT'
  else
    local v = int(num(version) + 1)
    redis.call('HSET', rec, 'phase', 'Bound', 'node', node, 'gpu_devices', devices, 'updated_at', now,
               'bindings', int(num(cur[5]) + 1), 'version', v)
    for i, p in ipairs(PHASES) do
      if p == 'Bound' then redis.call('SADD', KEYS[i], uid)
      elseif p == phase then redis.call('SREM', KEYS[i], uid) end
    end
    if phase == 'Pending' then redis.call('SREM', KEYS[k + 7], uid) end
    append_event(events, event, cap)
    return {marked, 'OK', '', phase, v, cur[6] or '', cur[7] or ''}
  end
  if code == 'ALREADY' then return {marked, code, '', phase, version, cur[6] or '', cur[7] or ''} end
  -- Refused: RELEASE this attempt's room (the reservation is this attempt's: checked above).
  drop_reservation(info, usage, resv, bound, uid, cjson.decode(j))
  return {marked, code, 'OK', phase or '', version or ''}
end
local out = {}
for i = 0, (#ARGV - 2) / 6 - 1 do out[i + 1] = bind_one(7 + i * 7, 2 + i * 6) end
return out
"""
)

START_POD = (
    _LIB
    + r"""
local rec, events, resv, bound = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
if redis.call('EXISTS', rec) == 0 then return {'NOT_FOUND'} end
local cur = redis.call('HMGET', rec, 'phase', 'version', 'profile', 'uid', 'node')
local phase, version, profile, uid, node = cur[1], cur[2], cur[3] or '', cur[4], cur[5] or ''
if phase == 'Deleted' then return {'GONE', version, phase, profile} end
if node ~= ARGV[1] then return {'CONFLICT', version, phase, profile, 'the pod is on another node'} end
if phase == 'Running' then return {'ALREADY', version, phase, profile} end
if phase ~= 'Bound' then return {'CONFLICT', version, phase, profile, 'the pod is not bound'} end
local j = redis.call('HGET', resv, uid)
if not j then return {'CONFLICT', version, phase, profile, 'no reservation'} end
if redis.call('SISMEMBER', bound, uid) == 0 then
  return {'CONFLICT', version, phase, profile, 'its reservation is not bound'}
end
if ARGV[2] ~= '' and attempt_of(j) ~= ARGV[2] then
  return {'CONFLICT', version, phase, profile, 'the reservation is another attempt\'s'}
end
local v = int(num(version) + 1)
redis.call('HSET', rec, 'phase', 'Running', 'updated_at', ARGV[3], 'ends_at', ARGV[6], 'version', v)
redis.call('SREM', KEYS[5], uid)
redis.call('SADD', KEYS[6], uid)
append_event(events, ARGV[4], tonumber(ARGV[5]))
return {'OK', v, phase, profile}
"""
)

ADMISSION_VIEW = r"""
local cur = redis.call('HMGET', KEYS[1], 'phase', 'node', 'profile', 'updated_at')
return {cur[1] or '', cur[2] or '', cur[3] or '', cur[4] or '', redis.call('HGET', KEYS[2], ARGV[1]) or '',
        redis.call('SISMEMBER', KEYS[3], ARGV[1])}
"""

PUT_POD_GROUP = r"""
local record = redis.call('HGET', KEYS[1], 'record')
local manifest = redis.call('HGET', KEYS[1], 'manifest') or ''
redis.call('SADD', KEYS[2], ARGV[1])
if record == ARGV[2] and manifest == ARGV[3] then
  return 0
end
redis.call('HSET', KEYS[1], 'record', ARGV[2], 'manifest', ARGV[3])
return 1
"""

PERMIT_ALLOW = r"""
if redis.call('HGET', KEYS[1], 'attempt') ~= ARGV[1] then return 0 end
redis.call('HDEL', KEYS[1], 'p:' .. ARGV[2])
return 1
"""

PERMIT_REJECT = r"""
if redis.call('HGET', KEYS[1], 'attempt') ~= ARGV[1] then return 0 end
redis.call('HSETNX', KEYS[1], 'rejected', ARGV[2] .. ': ' .. ARGV[3])
return 1
"""

ACQUIRE_LEASE = (
    _LIB
    + r"""
local holder = redis.call('HGET', KEYS[1], 'holder')
if holder == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return redis.call('HGET', KEYS[1], 'token')
end
if holder then return false end
local token = redis.call('INCR', KEYS[2])
redis.call('HSET', KEYS[1], 'holder', ARGV[1], 'token', int(token))
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return int(token)
"""
)

RELEASE_LEASE = r"""
if redis.call('HGET', KEYS[1], 'holder') == ARGV[1] then
  redis.call('DEL', KEYS[1])
  return 1
end
return 0
"""


class Scripts:
    """The scripts registered on one client (redis.asyncio.Redis).

    Attributes are redis-py Script objects, awaited as `await scripts.reserve(keys=[...],
    args=[...])`. Registering sends nothing; the first call loads the script (SCRIPT LOAD on
    NOSCRIPT), so a server restart or SCRIPT FLUSH is survived.
    """

    def __init__(self, redis: Any) -> None:
        self.put_node = redis.register_script(PUT_NODE)
        self.delete_node = redis.register_script(DELETE_NODE)
        self.heartbeat = redis.register_script(HEARTBEAT)
        self.mark_unreachable = redis.register_script(MARK_UNREACHABLE)
        self.reserve = redis.register_script(RESERVE)
        self.reserve_pod = redis.register_script(RESERVE_POD)
        self.preempt = redis.register_script(PREEMPT)
        self.unreserve = redis.register_script(UNRESERVE)
        self.mark_bound = redis.register_script(MARK_BOUND)
        self.release = redis.register_script(RELEASE)
        self.restore_room = redis.register_script(RESTORE_ROOM)
        self.observe_placed = redis.register_script(OBSERVE_PLACED)
        self.put_pod = redis.register_script(PUT_POD)
        self.put_pods = redis.register_script(PUT_PODS)
        self.transition = redis.register_script(TRANSITION)
        self.bind_pod = redis.register_script(BIND_POD)
        self.give_back = redis.register_script(GIVE_BACK)
        self.bind_many = redis.register_script(BIND_MANY)
        self.acquire_lease = redis.register_script(ACQUIRE_LEASE)
        self.release_lease = redis.register_script(RELEASE_LEASE)
        self.start_pod = redis.register_script(START_POD)
        self.put_pod_group = redis.register_script(PUT_POD_GROUP)
        self.permit_allow = redis.register_script(PERMIT_ALLOW)
        self.permit_reject = redis.register_script(PERMIT_REJECT)
        self.admission_view = redis.register_script(ADMISSION_VIEW)
