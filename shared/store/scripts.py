"""The Lua scripts: every multi-step change of the shared state that must be atomic is one script.

The scripts live in `lua/*.lua`, next to this module, one file per script, each opening with its
contract (KEYS, ARGV, reply); `lua/_*.lua` are libraries of local functions, prepended to the
scripts that use them (the constants below say which). They are read once, at import.

Contracts every script keeps:
- Registered once per client (`Scripts`, via redis-py's `register_script`: EVALSHA, loading the
  source on NOSCRIPT). Keys come as KEYS, all in one hash slot (see `kubus.store.keys`); on a
  single Redis the pod and node scripts may also receive the index keys (one slot of their own)
  after the record's keys, and then keep the indexes in step atomically.
- The reply is an array whose first element is a return code (`StoreCode`), except the Permit,
  PodGroup and lease scripts (a number or a token) and ADMISSION_VIEW and POD_PLACEMENTS (reads).
- A refusal changes nothing. Numbers are Lua numbers (doubles), exact up to 2**53 (8 PiB of
  memory), formatted back with `%d`, never `tostring` (`1e+15`): HINCRBY always gets an integer.

How the services use them, step by step, is docs/services.md.
"""

from __future__ import annotations

from enum import StrEnum
from importlib.resources import files
from typing import Any

from kubus.store.keys import PHASES

_LUA_DIR = files("kubus.store") / "lua"


def _lua(name: str) -> str:
    """The text of `lua/<name>.lua`, read at import. Raises FileNotFoundError when there is none."""
    return (_LUA_DIR / f"{name}.lua").read_text(encoding="utf-8")


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
_LIB = _lua("_lib")

# Label selectors and pod affinity terms, for RESERVE's node-local anti-affinity check.
_AFFINITY_LIB = _lua("_affinity_lib")

_PHASES_LUA = "local PHASES = {" + ", ".join(f"'{p}'" for p in PHASES) + "}\n"
"""The pod phases in the order their index keys are passed (PHASES)."""

_POD_LIB = _PHASES_LUA + _lua("_pod_lib")

PUT_NODE = _LIB + _lua("put_node")

DELETE_NODE = _lua("delete_node")

HEARTBEAT = _LIB + _lua("heartbeat")

MARK_UNREACHABLE = _LIB + _lua("mark_unreachable")

# RESERVE's steps, shared by RESERVE and PREEMPT (which reserves once its victims' room counts
# as given back). Needs _LIB and _AFFINITY_LIB.
_RESERVE_LIB = _lua("_reserve_lib")

RESERVE = _LIB + _AFFINITY_LIB + _RESERVE_LIB + _lua("reserve")

RESERVE_PODS = _LIB + _AFFINITY_LIB + _RESERVE_LIB + _POD_LIB + _lua("reserve_pods")

PREEMPT = _LIB + _AFFINITY_LIB + _RESERVE_LIB + _PHASES_LUA + _lua("preempt")

UNRESERVE = _LIB + _lua("unreserve")

MARK_BOUND = _LIB + _lua("mark_bound")

RELEASE = _LIB + _lua("release")

OBSERVE_PLACED = _LIB + _AFFINITY_LIB + _RESERVE_LIB + _POD_LIB + _lua("observe_placed")

RESTORE_ROOM = _LIB + _AFFINITY_LIB + _RESERVE_LIB + _lua("restore_room")

PUT_POD = _POD_LIB + _lua("put_pod")

PUT_PODS = _POD_LIB + _lua("put_pods")

TRANSITION = _POD_LIB + _lua("transition")

GIVE_BACK = _LIB + _POD_LIB + _lua("give_back")

BIND_POD = _POD_LIB + _lua("bind_pod")

BIND_MANY = _LIB + _PHASES_LUA + _lua("bind_many")

START_POD = _LIB + _lua("start_pod")

ADMISSION_VIEW = _lua("admission_view")

POD_PLACEMENTS = _lua("pod_placements")

PUT_POD_GROUP = _lua("put_pod_group")

PERMIT_ALLOW = _lua("permit_allow")

PERMIT_REJECT = _lua("permit_reject")

ACQUIRE_LEASE = _LIB + _lua("acquire_lease")

RELEASE_LEASE = _lua("release_lease")


class Scripts:
    """The scripts registered on one client (redis.asyncio.Redis).

    Attributes are redis-py Script objects, awaited as `await scripts.reserve(keys=[...],
    args=[...])`. Registering sends nothing; the first call loads the script (SCRIPT LOAD on
    NOSCRIPT), so a server restart or SCRIPT FLUSH is survived.
    """

    # Any: a `redis.asyncio.Redis`. Typed so, redis-py checks every script call's args, and two
    # callers (PodStore.put_pods, AgentStore.start_pods) still build theirs as untyped lists.
    def __init__(self, redis: Any) -> None:
        self.put_node = redis.register_script(PUT_NODE)
        self.delete_node = redis.register_script(DELETE_NODE)
        self.heartbeat = redis.register_script(HEARTBEAT)
        self.mark_unreachable = redis.register_script(MARK_UNREACHABLE)
        self.reserve = redis.register_script(RESERVE)
        self.reserve_pods = redis.register_script(RESERVE_PODS)
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
        self.pod_placements = redis.register_script(POD_PLACEMENTS)
