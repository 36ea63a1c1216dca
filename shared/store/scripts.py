"""The Lua scripts: every multi-step change of the shared state that must be atomic is one script.

Each script is registered once per client (`Scripts`, via redis-py's `register_script`: EVALSHA,
loading the source on NOSCRIPT) and receives its keys as KEYS, all in one hash slot (see
`kubus.store.keys`). On a single Redis the pod and node scripts may also receive the index keys
(one slot of their own) after the record's keys, and then keep the indexes in step atomically.

Every script replies with an array whose first element is a return code (`StoreCode`); the rest is
documented per script below. Numbers are handled as Lua numbers (doubles), exact up to 2**53
(8 PiB of memory): plenty for quantities in base units. Lua formats them back with `%d`, never
`tostring` (which would print `1e+15`), so HINCRBY always receives an integer.

Node scripts (KEYS = info, usage, reservations, bound, fences [, nodes index])
-------------------------------------------------------------------------------
PUT_NODE     ARGV: name, record JSON, manifest ('' = none), shape JSON {alloc, gpus, unreachable}.
             Replaces the node's description atomically, keeps its heartbeat, and recomputes the
             per-GPU usage from the reservations (the devices may have changed, as NodeTable
             re-adds the pods of a changed node). -> OK generation | NOOP generation (nothing
             changed: generation not bumped).
DELETE_NODE  ARGV: name. Drops the node, its usage and its reservations.
             -> OK json... (the reservations it dropped) | NOOP (no such node).
HEARTBEAT    ARGV: time. A node marked unreachable is reachable again (generation + 1).
             -> OK 'recorded' generation | OK 'revived' generation | NOT_FOUND (a heartbeat
             never creates a node).
MARK_UNREACHABLE ARGV: '1' or '0'. -> OK generation | NOOP generation | NOT_FOUND.
RESERVE      ARGV: pod uid, reservation JSON (`Reservation.encode`). Checks, for a new
             reservation, against the node's allocatable and usage: one more pod fits
             ("Too many pods"); every requested resource with a positive amount, except
             `pods` and the reservation's `ignored` ones, fits allocatable - used
             ("Insufficient cpu"); every requested GPU device exists ("gpu 9 does not exist"),
             is healthy ("gpu 1 unhealthy") and is free: a shared slice needs free memory >=
             gpu_memory, a whole GPU needs no holder and total memory >= gpu_memory ("gpu 3
             busy", "gpu 3 too small"); no host port collides, as kube's NodePorts rules say
             ("host port TCP/80 in use"). Then adds the usage and records the reservation.
             -> OK 'reserved' | OK 'already reserved' (the pod holds one here from the same
             attempt: an idempotent retry, nothing checked or changed) | CONFLICT reason...
             (nothing changed; 'pod already reserved here by another attempt' when the pod
             holds one here from a different `attempt`) | NODE_GONE 'node not found' / 'node
             unreachable' (a retry that already holds its reservation still gets OK) | FENCED
             reason (the reservation's token is older than one this profile already used on
             this node: a deposed leader).
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
TRANSITION   ARGV: new phase, expected version ('' = any), expected phases (comma-separated,
             '' = any), profile ('' without indexes), now, attempts increment, field, value, ...
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
BIND_POD     ARGV: node, devices ("0,3"), profile, now, expected version ('' = any). Exactly
             once: Pending/Reserved (on that node or none) -> Bound, bindings + 1.
             -> OK version old-phase profile | ALREADY ... (bound, running or finished on
             that node) | CONFLICT ... (bound elsewhere, reserved elsewhere, failed unbound, or
             version mismatch) | GONE ... (deleted) | NOT_FOUND | PROFILE profile.

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
-- Add (sign 1) or take back (sign -1) a decoded reservation's usage.
local function account(info, usage, r, sign)
  for _, pair in ipairs(r.requests) do
    if pair[1] ~= 'pods' then incr(usage, 'r:' .. pair[1], sign * pair[2]) end
  end
  incr(usage, 'pods', sign)
  local ngpus = num(redis.call('HGET', info, 'gpus'))
  for _, d in ipairs(r.gpu_devices) do
    if d >= 0 and d < ngpus then
      local ds = int(d)
      local taken = r.gpu_memory
      if not r.gpu_shared then taken = num(redis.call('HGET', info, 'g:' .. ds .. ':mem')) end
      incr(usage, 'g:' .. ds .. ':used', sign * taken)
      incr(usage, 'g:' .. ds .. ':pods', sign)
    end
  end
  for _, p in ipairs(r.host_ports) do
    local port = p[2] .. ':' .. int(p[3])
    incr(usage, 'p:' .. port .. ':' .. p[1], sign)
    incr(usage, 'p:' .. port, sign)
  end
end
"""

_POD_LIB = (
    "local PHASES = {"
    + ", ".join(f"'{p}'" for p in PHASES)
    + "}\n"
    + r"""
-- With index keys (single Redis): move the uid between the phase and pending sets.
local function index_move(uid, old, new)
  if #KEYS < 10 then return end
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
  if #KEYS > 5 then redis.call('SADD', KEYS[6], ARGV[1]) end
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
  redis.call('HSET', info, 'g:' .. int(i - 1) .. ':mem', int(g[1]), 'g:' .. int(i - 1) .. ':ok', ok)
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
if #KEYS > 5 then redis.call('SADD', KEYS[6], ARGV[1]) end
return {'OK', int(gen)}
"""
)

DELETE_NODE = r"""
local removed = redis.call('HVALS', KEYS[3])
local existed = redis.call('EXISTS', KEYS[1])
redis.call('DEL', KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5])
if #KEYS > 5 then redis.call('SREM', KEYS[6], ARGV[1]) end
if existed == 0 and #removed == 0 then return {'NOOP'} end
local out = {'OK'}
for _, j in ipairs(removed) do out[#out + 1] = j end
return out
"""

HEARTBEAT = (
    _LIB
    + r"""
if redis.call('EXISTS', KEYS[1]) == 0 then return {'NOT_FOUND'} end
redis.call('HSET', KEYS[1], 'heartbeat', ARGV[1])
local gen = num(redis.call('HGET', KEYS[1], 'generation'))
if redis.call('HGET', KEYS[1], 'unreachable') == '1' then
  redis.call('HSET', KEYS[1], 'unreachable', '0', 'generation', int(gen + 1))
  return {'OK', 'revived', int(gen + 1)}
end
return {'OK', 'recorded', int(gen)}
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

RESERVE = (
    _LIB
    + r"""
local info, usage, resv, fences = KEYS[1], KEYS[2], KEYS[3], KEYS[5]
local uid = ARGV[1]
if redis.call('EXISTS', info) == 0 then return {'NODE_GONE', 'node not found'} end
local r = cjson.decode(ARGV[2])
local held = redis.call('HGET', resv, uid)
if held then
  if cjson.decode(held).attempt == r.attempt then return {'OK', 'already reserved'} end
  return {'CONFLICT', 'pod already reserved here by another attempt'}
end
if redis.call('HGET', info, 'unreachable') == '1' then return {'NODE_GONE', 'node unreachable'} end
local token = tonumber(r.token) or 0
local seen = 0
if token > 0 then
  seen = num(redis.call('HGET', fences, r.profile))
  if token < seen then
    return {'FENCED', 'fencing token ' .. int(token) .. ' of profile ' .. r.profile ..
            ' is older than ' .. int(seen)}
  end
end
local reasons = {}
if num(redis.call('HGET', usage, 'pods')) + 1 > num(redis.call('HGET', info, 'a:pods')) then
  reasons[#reasons + 1] = 'Too many pods'
end
local ignored = {}
for _, name in ipairs(r.ignored) do ignored[name] = true end
for _, pair in ipairs(r.requests) do
  local name, want = pair[1], pair[2]
  if want > 0 and name ~= 'pods' and not ignored[name] then
    local cap = num(redis.call('HGET', info, 'a:' .. name))
    local used = num(redis.call('HGET', usage, 'r:' .. name))
    if want > cap - used then reasons[#reasons + 1] = 'Insufficient ' .. name end
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
    local used = num(redis.call('HGET', usage, 'g:' .. ds .. ':used'))
    if r.gpu_shared then
      if total - used < r.gpu_memory then
        reasons[#reasons + 1] = 'gpu ' .. ds .. ' busy (' .. int(total - used) .. ' bytes free, ' ..
                                int(r.gpu_memory) .. ' wanted)'
      end
    elseif num(redis.call('HGET', usage, 'g:' .. ds .. ':pods')) > 0 then
      reasons[#reasons + 1] = 'gpu ' .. ds .. ' busy'
    elseif total < r.gpu_memory then
      reasons[#reasons + 1] = 'gpu ' .. ds .. ' too small'
    end
  end
end
for _, p in ipairs(r.host_ports) do
  local port = p[2] .. ':' .. int(p[3])
  local taken
  if p[1] == '0.0.0.0' then
    taken = num(redis.call('HGET', usage, 'p:' .. port)) > 0
  else
    taken = num(redis.call('HGET', usage, 'p:' .. port .. ':' .. p[1])) > 0
            or num(redis.call('HGET', usage, 'p:' .. port .. ':0.0.0.0')) > 0
  end
  if taken then reasons[#reasons + 1] = 'host port ' .. p[2] .. '/' .. int(p[3]) .. ' in use' end
end
if #reasons > 0 then
  local out = {'CONFLICT'}
  for _, reason in ipairs(reasons) do out[#out + 1] = reason end
  return out
end
account(info, usage, r, 1)
redis.call('HSET', resv, uid, ARGV[2])
if token > seen then redis.call('HSET', fences, r.profile, int(token)) end
return {'OK', 'reserved'}
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
account(KEYS[1], KEYS[2], r, -1)
redis.call('HDEL', KEYS[3], ARGV[1])
return {'OK'}
"""
)

MARK_BOUND = r"""
local j = redis.call('HGET', KEYS[3], ARGV[1])
if not j then return {'NOT_FOUND'} end
if ARGV[2] ~= '' and cjson.decode(j).attempt ~= ARGV[2] then return {'CONFLICT'} end
if redis.call('SADD', KEYS[4], ARGV[1]) == 0 then return {'ALREADY'} end
return {'OK'}
"""

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
redis.call('SREM', KEYS[4], ARGV[1])
account(KEYS[1], KEYS[2], r, -1)
redis.call('HDEL', KEYS[3], ARGV[1])
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
if #KEYS >= 10 then
  redis.call('HSET', KEYS[2], ARGV[2], ARGV[1])
  index_move(ARGV[1], '', phase)
end
return {'OK', redis.call('HGET', rec, 'version'), phase, ARGV[3]}
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
if #KEYS >= 10 and profile ~= ARGV[4] then return {'PROFILE', profile} end
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

BIND_POD = (
    _POD_LIB
    + r"""
local rec = KEYS[1]
if redis.call('EXISTS', rec) == 0 then return {'NOT_FOUND'} end
local cur = redis.call('HMGET', rec, 'phase', 'version', 'profile', 'uid', 'node')
local phase, version, profile, uid, node = cur[1], cur[2], cur[3], cur[4], cur[5] or ''
if #KEYS >= 10 and profile ~= ARGV[3] then return {'PROFILE', profile} end
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

SOURCES: dict[str, str] = {
    "put_node": PUT_NODE,
    "delete_node": DELETE_NODE,
    "heartbeat": HEARTBEAT,
    "mark_unreachable": MARK_UNREACHABLE,
    "reserve": RESERVE,
    "unreserve": UNRESERVE,
    "mark_bound": MARK_BOUND,
    "release": RELEASE,
    "put_pod": PUT_POD,
    "transition": TRANSITION,
    "bind_pod": BIND_POD,
    "acquire_lease": ACQUIRE_LEASE,
    "release_lease": RELEASE_LEASE,
}
"""Script name -> Lua source."""


class Scripts:
    """The scripts registered on one client (redis.asyncio.Redis or RedisCluster).

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
        self.unreserve = redis.register_script(UNRESERVE)
        self.mark_bound = redis.register_script(MARK_BOUND)
        self.release = redis.register_script(RELEASE)
        self.put_pod = redis.register_script(PUT_POD)
        self.transition = redis.register_script(TRANSITION)
        self.bind_pod = redis.register_script(BIND_POD)
        self.acquire_lease = redis.register_script(ACQUIRE_LEASE)
        self.release_lease = redis.register_script(RELEASE_LEASE)
