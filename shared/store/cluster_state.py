"""ClusterState: the shared state of kubus in Redis, behind one async API.

Nodes (allocatable, labels, taints, GPUs), pods and their phase, reservations, bindings, pod
events and leader leases. Every change that must be atomic is one Lua script
(`kubus.store.scripts`, which documents each return code); reads are plain commands, pipelined.

The protocol the services follow (docs/services.md has the whole contract), so that neither
invariant (`kubus.store.invariants`) breaks and every step can be retried. An attempt id is the
pod record's version right after its Pending -> Reserved transition; every later step names it.

- queue:  put_pod (insert if absent) -> Pending.
- cycle:  v = transition(uid, RESERVED, node=n, expected_phases={PENDING}, count_attempt=True)
          .version; then reserve(n, Reservation.of(..., attempt=str(v), token=lease token)).
          On CONFLICT/NODE_GONE/FENCED: transition(uid, PENDING, expected_version=v, reason=...).
- binder: mark_bound(n, uid, attempt) (NOT_FOUND: the attempt was abandoned, drop it), then
          bind_pod(uid, n, devices, expected_version=v) -> OK or ALREADY. Backing out after
          mark_bound takes release(n, uid, attempt): unreserve answers BOUND by then.
          A bound pod stays bound for life. bind_many does these steps for many pods at once.
- agent:  transition(RUNNING), then transition(SUCCEEDED | FAILED) and release(n, uid).
- delete: transition(DELETED) and release(n, uid).
- janitor: reconcile(grace_s, reserved_timeout_s) repairs what a crash between steps left.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from kubus import codec
from kubus.api.gpus import format_gpu_devices
from kubus.api.objects import Node
from kubus.framework.nodeinfo import NodeInfo
from kubus.store.keys import DEFAULT_PREFIX, PHASES, Keys
from kubus.store.records import (
    NodeRecord,
    PodEvent,
    PodPhase,
    PodRecord,
    Reservation,
    ReservationState,
    _text,
)
from kubus.store.scripts import Scripts, StoreCode

_MAX_LUA_INT = 2**53
"""Quantities the scripts compare are doubles in Lua: exact up to here (see scripts.py)."""

_BATCH = 500
"""Commands per pipeline round trip in bulk reads."""

_BIND_CHUNK = 128
"""Pods per BIND_MANY script call (bounds how long one call holds Redis)."""


@dataclass(frozen=True, slots=True)
class PutNodeResult:
    changed: bool
    """False when the node was stored exactly like this already (generation unchanged)."""
    generation: int


@dataclass(frozen=True, slots=True)
class HeartbeatResult:
    found: bool
    """False for an unknown node (nothing recorded)."""
    revived: bool = False
    """The node was marked unreachable and is not any more (its generation was bumped)."""
    generation: int = 0


@dataclass(frozen=True, slots=True)
class ReserveResult:
    code: StoreCode
    """OK, CONFLICT, NODE_GONE or FENCED."""
    reasons: tuple[str, ...] = ()
    """Why not (CONFLICT: every shortfall, "Insufficient cpu", "gpu 3 busy", ...)."""
    already: bool = False
    """OK because the pod already held a reservation on this node (an idempotent retry)."""

    @property
    def ok(self) -> bool:
        return self.code is StoreCode.OK

    @property
    def reason(self) -> str:
        return ", ".join(self.reasons)


@dataclass(frozen=True, slots=True)
class PodWrite:
    """What put_pod, transition and bind_pod did."""

    code: StoreCode
    version: int = 0
    """The new version (OK), else the current one (0 when NOT_FOUND)."""
    phase: PodPhase | None = None
    """The phase before the change (OK), else the current phase."""

    @property
    def ok(self) -> bool:
        return self.code is StoreCode.OK


@dataclass(frozen=True, slots=True)
class GPUUsage:
    index: int
    memory: int
    """Total device memory, bytes."""
    used: int
    """Memory held by reservations (a whole-GPU holder holds all of it)."""
    healthy: bool
    holders: tuple[str, ...]
    """Uids of the pods holding the device."""
    exclusive: bool
    """Held whole by one pod."""

    @property
    def free(self) -> int:
        return self.memory - self.used


@dataclass(frozen=True, slots=True)
class NodeUsage:
    """What the reservations on one node hold, as Redis accounts it."""

    node: str
    requested: dict[str, int]
    """Sum of the reservations' requests per resource (zero sums omitted)."""
    pods: int
    gpus: tuple[GPUUsage, ...]
    host_ports: dict[tuple[str, int, str], int]
    """(protocol, port, hostIP) -> reservations using it."""


@dataclass(frozen=True, slots=True)
class AdmissionView:
    """What a node agent reads to admit one assigned pod (`ClusterState.admission_views`)."""

    uid: str
    node: str
    """The node asked about (where the assignment says the pod runs)."""
    phase: PodPhase | None
    """None when there is no such pod."""
    pod_node: str
    """The node the pod record names ('' for none)."""
    profile: str
    updated_at: float
    """The record's last change, seconds since the epoch (a Running pod's start)."""
    reservation: Reservation | None
    """The pod's reservation on `node` (with its state), or None."""


@dataclass(frozen=True, slots=True)
class PodStart:
    """One pod an agent admitted, for `ClusterState.start_pods`."""

    uid: str
    node: str
    attempt: str = ""
    """The attempt the reservation must carry ('' = any)."""
    event: PodEvent | None = None
    """Appended to the pod's events when it starts now (not on ALREADY)."""


@dataclass(frozen=True, slots=True)
class PodStartResult:
    """What `ClusterState.start_pods` did with one pod."""

    code: StoreCode
    """OK (Running now), ALREADY (Running before), CONFLICT (not Bound on that node with a
    bound reservation of that attempt; nothing changed), GONE (deleted) or NOT_FOUND."""
    version: int = 0
    phase: PodPhase | None = None
    """The phase before (OK), else the current one."""
    reason: str = ""
    """Why CONFLICT."""

    @property
    def started(self) -> bool:
        """Running now or before: the agent runs it."""
        return self.code in (StoreCode.OK, StoreCode.ALREADY)


@dataclass(frozen=True, slots=True)
class Lease:
    name: str
    holder: str
    token: int
    ttl_ms: int
    """Milliseconds left before it lapses (as Redis reported it)."""


@dataclass(frozen=True, slots=True)
class Move:
    """One pod for `ClusterState.transition_many`: the arguments of `ClusterState.transition`."""

    uid: str
    phase: PodPhase
    expected_version: int | None = None
    expected_phases: frozenset[PodPhase] | None = None
    node: str | None = None
    gpu_devices: tuple[int, ...] | None = None
    reason: str | None = None
    message: str | None = None
    count_attempt: bool = False
    manifest: bytes | None = None


@dataclass(frozen=True, slots=True)
class Binding:
    """One pod for `ClusterState.bind_many`: bind it to `node` on its reservation's `attempt`."""

    uid: str
    node: str
    attempt: int = 0
    """The attempt id (the record's version after its Pending -> Reserved); 0 = any."""
    devices: Sequence[int] = ()
    profile: str = ""
    """The pod's profile (schedulerName); a wrong one costs a retry, never a wrong write."""
    event: PodEvent | None = None
    """Appended to the pod's events when the pod is bound now (not on ALREADY)."""


@dataclass(frozen=True, slots=True)
class BindingResult:
    """What `ClusterState.bind_many` did for one pod: mark_bound, then bind_pod, then (a refused
    bind) release, exactly as the binder's steps one by one would have."""

    marked: StoreCode
    """mark_bound's code: OK, ALREADY, NOT_FOUND (no reservation: the attempt was abandoned) or
    CONFLICT (another attempt's). NOT_FOUND/CONFLICT: nothing else was done."""
    write: PodWrite | None = None
    """bind_pod's result (None when mark_bound refused)."""
    released: StoreCode | None = None
    """release's code when the bind was refused (GONE, CONFLICT, NOT_FOUND), else None."""
    phase: PodPhase | None = None
    """mark_bound refused: the pod's phase now (None without a record)."""
    version: int = 0
    """mark_bound refused: the pod's version now."""
    created_at: float = 0.0
    """Bound (OK or ALREADY): when the pod was accepted."""
    attempts: int = 0
    """Bound (OK or ALREADY): its scheduling attempts."""

    @property
    def bound(self) -> bool:
        """The pod is bound on this node (now, or before: a retry)."""
        return self.write is not None and self.write.code in (StoreCode.OK, StoreCode.ALREADY)


def _code(reply: Any) -> StoreCode:
    return StoreCode(_text(reply))


def _binding_result(reply: list[Any]) -> BindingResult:
    """One pod's reply of BIND_MANY (not PROFILE) as a BindingResult."""
    marked = _code(reply[0])
    phase_text, version = _text(reply[3]), int(_text(reply[4]) or 0)
    phase = PodPhase(phase_text) if phase_text else None
    if marked in (StoreCode.NOT_FOUND, StoreCode.CONFLICT):
        return BindingResult(marked, phase=phase, version=version)
    code = _code(reply[1])
    write = PodWrite(code) if code is StoreCode.NOT_FOUND else PodWrite(code, version, phase)
    released = _text(reply[2])
    if len(reply) > 5:
        return BindingResult(
            marked, write, created_at=float(_text(reply[5]) or 0.0), attempts=int(_text(reply[6]) or 0)
        )
    return BindingResult(marked, write, released=StoreCode(released) if released else None)


def _start_result(reply: list[Any]) -> PodStartResult:
    code = _code(reply[0])
    if code is StoreCode.NOT_FOUND:
        return PodStartResult(code)
    reason = _text(reply[4]) if len(reply) > 4 else ""
    return PodStartResult(code, int(_text(reply[1]) or 0), PodPhase(_text(reply[2])), reason)


def _heartbeat_result(reply: list[Any]) -> HeartbeatResult:
    if _code(reply[0]) is StoreCode.NOT_FOUND:
        return HeartbeatResult(found=False)
    return HeartbeatResult(found=True, revived=_text(reply[1]) == "revived", generation=int(_text(reply[2])))


class ClusterState:
    """The shared state of the cluster in one Redis (a `redis.asyncio.Redis`; for high
    availability, Redis with replicas behind Sentinel or a managed failover endpoint). Safe to
    share between tasks; processes each build their own. The indexes change in the same script
    as the records. The client may or may not decode responses.
    """

    def __init__(
        self,
        redis: Any,
        *,
        prefix: str = DEFAULT_PREFIX,
        event_cap: int = 100,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.redis = redis
        self.keys = Keys(prefix)
        self.event_cap = event_cap
        """Events kept per pod; older ones are dropped."""
        self.clock = clock
        self.scripts = Scripts(redis)
        self._profiles: OrderedDict[str, str] = OrderedDict()

    # ---- helpers -------------------------------------------------------------------------------

    async def _run(self, script: Any, keys: Sequence[str], args: Sequence[Any]) -> list[Any]:
        reply = await script(keys=list(keys), args=list(args))
        return list(reply) if isinstance(reply, list | tuple) else [reply]

    def _node_keys(self, node: str) -> list[str]:
        return [*self.keys.node_keys(node), self.keys.nodes_index(), self.keys.heartbeats_index()]

    def _pod_keys(self, uid: str, profile: str) -> list[str]:
        return [
            self.keys.pod_record(uid),
            self.keys.pod_keys_index(),
            *self.keys.phase_indexes(),
            self.keys.pending_index(profile),
        ]

    def know_profile(self, uid: str, profile: str) -> None:
        """Tell the store the profile of a pod it is about to write (a caller that knows it,
        like a cycle holding the pod it popped): saves reading it first. A wrong profile costs
        a retry, never a wrong write (the scripts check it)."""
        self._remember_profile(uid, profile)

    def _remember_profile(self, uid: str, profile: str) -> None:
        self._profiles[uid] = profile
        self._profiles.move_to_end(uid)
        if len(self._profiles) > 65536:
            self._profiles.popitem(last=False)

    async def _profile_of(self, uid: str) -> str:
        profile = self._profiles.get(uid)
        if profile is None:
            profile = _text(await self.redis.hget(self.keys.pod_record(uid), "profile"))
            if profile:
                self._remember_profile(uid, profile)
        return profile

    def _pipeline(self) -> Any:
        """A pipeline for bulk reads: MULTI/EXEC, so a consistent snapshot."""
        return self.redis.pipeline(transaction=True)

    # ---- nodes ---------------------------------------------------------------------------------

    async def put_node(self, node: Node, manifest: bytes | None = None) -> PutNodeResult:
        """Add or replace a node (its reservations and heartbeat stay). Atomic; idempotent: a
        node stored exactly like this already is left alone (changed=False)."""
        record = NodeRecord.of(node, manifest)
        shape = {
            "alloc": [[r, min(q, _MAX_LUA_INT)] for r, q in sorted(record.allocatable.items())],
            "gpus": [[min(g.memory, _MAX_LUA_INT), g.healthy] for g in record.gpus],
            "unreachable": record.unreachable,
        }
        reply = await self._run(
            self.scripts.put_node,
            self._node_keys(record.name),
            [record.name, record.encode_static(), manifest or b"", codec.dumps(shape)],
        )
        return PutNodeResult(changed=_code(reply[0]) is StoreCode.OK, generation=int(_text(reply[1])))

    async def get_node(self, name: str) -> NodeRecord | None:
        raw = await self.redis.hgetall(self.keys.node_info(name))
        return NodeRecord.from_hash(raw) if raw else None

    async def node_names(self) -> list[str]:
        """Names of all nodes (from the index), sorted."""
        return sorted(_text(n) for n in await self.redis.smembers(self.keys.nodes_index()))

    async def list_nodes(self) -> list[NodeRecord]:
        """Every node, sorted by name."""
        names = await self.node_names()
        out: list[NodeRecord] = []
        for start in range(0, len(names), _BATCH):
            pipe = self._pipeline()
            for name in names[start : start + _BATCH]:
                pipe.hgetall(self.keys.node_info(name))
            out += [NodeRecord.from_hash(raw) for raw in await pipe.execute() if raw]
        return out

    async def delete_node(self, name: str) -> list[Reservation]:
        """Remove a node with its usage and reservations, atomically. Idempotent.

        Returns the reservations it dropped: their pods lost their node, and the caller moves
        them on (a reserved pod back to Pending, a bound one to Failed).
        """
        reply = await self._run(self.scripts.delete_node, self._node_keys(name), [name])
        return [Reservation.decode(j) for j in reply[1:]]

    async def heartbeat(self, name: str, at: float | None = None) -> HeartbeatResult:
        """Record the node's heartbeat time (seconds since the epoch; default now); a node
        marked unreachable becomes reachable again (`revived`: publish node.updated). A
        heartbeat never creates a node (`found` False). The time is also the node's score in
        the heartbeats index (`silent_nodes`)."""
        at = self.clock() if at is None else at
        reply = await self._run(self.scripts.heartbeat, self._node_keys(name), [repr(float(at)), name])
        return _heartbeat_result(reply)

    async def heartbeat_many(self, names: Sequence[str], at: float | None = None) -> list[HeartbeatResult]:
        """`heartbeat` for many nodes (an agent simulating thousands), pipelined: one round trip
        per 500 nodes. Results in the order of `names`; each node's heartbeat
        is atomic, the batch is not."""
        at = self.clock() if at is None else at
        arg = repr(float(at))
        out: list[HeartbeatResult] = []
        for start in range(0, len(names), _BATCH):
            chunk = names[start : start + _BATCH]
            pipe = self.redis.pipeline(transaction=False)
            for name in chunk:
                await self.scripts.heartbeat(keys=self._node_keys(name), args=[arg, name], client=pipe)
            out += [_heartbeat_result(list(reply)) for reply in await pipe.execute()]
        return out

    async def mark_unreachable(self, name: str, unreachable: bool = True) -> bool:
        """Mark the node lost (reserve answers NODE_GONE; `to_node` adds the unreachable
        taints) or back. False when the node is unknown. Idempotent."""
        reply = await self._run(self.scripts.mark_unreachable, self.keys.node_keys(name), ["1" if unreachable else "0"])
        return _code(reply[0]) is not StoreCode.NOT_FOUND

    async def silent_nodes(self, before: float) -> list[str]:
        """Names of the nodes whose last heartbeat (per the heartbeats index) is at or before
        ``before``, oldest first. Nodes that never heartbeated are not in the index."""
        return [_text(n) for n in await self.redis.zrangebyscore(self.keys.heartbeats_index(), "-inf", before)]

    async def node_count(self) -> int:
        """How many nodes there are (from the index)."""
        return int(await self.redis.scard(self.keys.nodes_index()))

    async def index_heartbeats(self, beats: Mapping[str, float]) -> int:
        """Add nodes missing from the heartbeats index with these times (a node's heartbeat
        field, read by whoever heals the index); entries there already are left alone (a
        heartbeat since is newer). Returns how many were added."""
        if not beats:
            return 0
        return int(await self.redis.zadd(self.keys.heartbeats_index(), dict(beats), nx=True))

    async def forget_heartbeats(self, names: Iterable[str]) -> None:
        """Drop index entries of nodes that no longer exist (deleted behind the store's back)."""
        names = list(names)
        if names:
            await self.redis.zrem(self.keys.heartbeats_index(), *names)

    async def reservations(self, name: str) -> list[Reservation]:
        """The reservations on a node (with their state), sorted by pod key."""
        pipe = self._pipeline()
        pipe.hvals(self.keys.node_reservations(name))
        pipe.smembers(self.keys.node_bound(name))
        values, bound = await pipe.execute()
        return _reservations(values, bound)

    async def node_usage(self, name: str) -> NodeUsage | None:
        """What the node's reservations hold, per resource, GPU and host port; None for an
        unknown node."""
        pipe = self._pipeline()
        pipe.hgetall(self.keys.node_info(name))
        pipe.hgetall(self.keys.node_usage(name))
        pipe.hvals(self.keys.node_reservations(name))
        pipe.smembers(self.keys.node_bound(name))
        info, usage, values, bound = await pipe.execute()
        if not info:
            return None
        record = NodeRecord.from_hash(info)
        return _node_usage(record, {_text(k): int(_text(v)) for k, v in usage.items()}, _reservations(values, bound))

    # ---- reservations --------------------------------------------------------------------------

    async def reserve(self, node: str, reservation: Reservation) -> ReserveResult:
        """Reserve room for a pod on a node, atomically, or say why not (see RESERVE in
        kubus.store.scripts). Idempotent: a pod that holds a reservation here gets OK again.
        Raises ValueError when `reservation.node` names another node."""
        if reservation.node != node:
            if reservation.node:
                raise ValueError(f"reservation of {reservation.pod_key} is for node {reservation.node!r}, not {node!r}")
            reservation = replace(reservation, node=node)
        reply = await self._run(
            self.scripts.reserve, self.keys.node_keys(node), [reservation.pod_uid, reservation.encode()]
        )
        code = _code(reply[0])
        details = tuple(_text(r) for r in reply[1:])
        if code is StoreCode.OK:
            return ReserveResult(code, already=details == ("already reserved",))
        return ReserveResult(code, details)

    async def reserve_many(self, reservations: Sequence[Reservation]) -> list[ReserveResult]:
        """`reserve` for many pods, each on its `Reservation.node`, in one pipelined round trip
       ; results in order. Each reservation is atomic on its own and sees
        the ones before it in the batch. Raises ValueError for a reservation without a node."""
        for r in reservations:
            if not r.node:
                raise ValueError(f"reservation of {r.pod_key} names no node")
        if not reservations:
            return []
        pipe = self.redis.pipeline(transaction=False)
        for r in reservations:
            await self.scripts.reserve(keys=self.keys.node_keys(r.node), args=[r.pod_uid, r.encode()], client=pipe)
        out = []
        for reply in await pipe.execute():
            reply = list(reply) if isinstance(reply, list | tuple) else [reply]
            code, details = _code(reply[0]), tuple(_text(r) for r in reply[1:])
            ok = code is StoreCode.OK
            out.append(
                ReserveResult(code, already=details == ("already reserved",)) if ok else ReserveResult(code, details)
            )
        return out

    async def unreserve(self, node: str, uid: str, attempt: str | None = None) -> StoreCode:
        """Give back a reserved (not bound) reservation, only if `attempt` made it (when given).
        OK, NOOP (none), BOUND (refused: bound) or CONFLICT (refused: another attempt's)."""
        reply = await self._run(self.scripts.unreserve, self.keys.node_keys(node), [uid, attempt or ""])
        return _code(reply[0])

    async def mark_bound(self, node: str, uid: str, attempt: str | None = None) -> StoreCode:
        """Mark the reservation bound: OK, ALREADY, NOT_FOUND (the reservation is gone) or
        CONFLICT (it is another attempt's, when `attempt` is given)."""
        reply = await self._run(self.scripts.mark_bound, self.keys.node_keys(node), [uid, attempt or ""])
        return _code(reply[0])

    async def release(self, node: str, uid: str, attempt: str | None = None) -> StoreCode:
        """Give back the pod's reservation, bound or not: the pod finished or was deleted, or
        (with its `attempt`) a binder backs out after mark_bound. OK, NOOP or CONFLICT (the
        reservation is another attempt's)."""
        reply = await self._run(self.scripts.release, self.keys.node_keys(node), [uid, attempt or ""])
        return _code(reply[0])

    # ---- pods ----------------------------------------------------------------------------------

    async def put_pod(self, record: PodRecord) -> bool:
        """Store a newly accepted pod unless one with its uid exists (submissions arrive at least
        once). True when stored now. The record is stored with version 1."""
        record = replace(record, version=1)
        fields = record.to_fields()
        args: list[Any] = [record.uid, record.key, record.profile]
        for name, value in fields.items():
            args += [name, value]
        reply = await self._run(self.scripts.put_pod, self._pod_keys(record.uid, record.profile), args)
        code = _code(reply[0])
        profile = _text(reply[3])
        self._remember_profile(record.uid, profile)
        return code is StoreCode.OK

    async def put_pods(self, records: Sequence[PodRecord]) -> list[bool]:
        """`put_pod` for many pods at the cost of about one round trip (PUT_PODS: one script
        call per 500 pods). Results in the order of ``records``. A uid given
        twice is stored once: the first wins, the second answers False."""
        out: list[bool] = []
        head = [self.keys.pod_keys_index(), *self.keys.phase_indexes()]
        for start in range(0, len(records), _BATCH):
            chunk = [replace(r, version=1) for r in records[start : start + _BATCH]]
            keys, args = list(head), []
            try:
                for record in chunk:
                    keys += [self.keys.pod_record(record.uid), self.keys.pending_index(record.profile)]
                    fields = {k: v.decode() if isinstance(v, bytes) else v for k, v in record.to_fields().items()}
                    args += [record.uid, record.key, record.profile, codec.dumps(fields)]
            except UnicodeDecodeError:  # a manifest that is not UTF-8 text: one call per pod
                out += [await self.put_pod(record) for record in chunk]
                continue
            for record, reply in zip(chunk, await self.scripts.put_pods(keys=keys, args=args), strict=True):
                reply = list(reply)
                self._remember_profile(record.uid, _text(reply[3]))
                out.append(_code(reply[0]) is StoreCode.OK)
        return out

    async def get_pod(self, uid: str) -> PodRecord | None:
        raw = await self.redis.hgetall(self.keys.pod_record(uid))
        return PodRecord.from_hash(raw) if raw else None

    async def get_pods(self, uids: Iterable[str]) -> list[PodRecord | None]:
        """The records of these uids, in order (None where there is none)."""
        uids = list(uids)
        out: list[PodRecord | None] = []
        for start in range(0, len(uids), _BATCH):
            pipe = self.redis.pipeline(transaction=False)
            for uid in uids[start : start + _BATCH]:
                pipe.hgetall(self.keys.pod_record(uid))
            out += [PodRecord.from_hash(raw) if raw else None for raw in await pipe.execute()]
        return out

    async def find_pod(self, namespace: str, name: str) -> PodRecord | None:
        """The newest pod stored under namespace/name, or None."""
        uid = await self.redis.hget(self.keys.pod_keys_index(), f"{namespace}/{name}")
        return None if uid is None else await self.get_pod(_text(uid))

    async def pod_uids_in_phase(self, phase: PodPhase, *, profile: str | None = None) -> set[str]:
        """Uids in a phase, from the index (Pending by profile when given)."""
        if phase is PodPhase.PENDING and profile is not None:
            key = self.keys.pending_index(profile)
        else:
            key = self.keys.phase_index(str(phase))
        return {_text(u) for u in await self.redis.smembers(key)}

    async def pods_in_phase(self, phase: PodPhase, *, profile: str | None = None) -> list[PodRecord]:
        """The pods in a phase (of one profile when given), sorted by creation then key. Read
        from the index and checked against the records, so a stale index entry is skipped."""
        uids = sorted(await self.pod_uids_in_phase(phase, profile=profile))
        pods = [
            p
            for p in await self.get_pods(uids)
            if p is not None and p.phase is phase and (profile is None or p.profile == profile)
        ]
        pods.sort(key=lambda p: (p.created_at, p.key, p.uid))
        return pods

    async def _pod_script(self, script: Any, uid: str, args: Callable[[str], list[Any]]) -> PodWrite:
        profile = await self._profile_of(uid)
        reply = await self._run(script, self._pod_keys(uid, profile), args(profile))
        code = _code(reply[0])
        if code is StoreCode.PROFILE:  # our cached profile was wrong (cannot be, but be safe)
            profile = _text(reply[1])
            self._remember_profile(uid, profile)
            reply = await self._run(script, self._pod_keys(uid, profile), args(profile))
            code = _code(reply[0])
        if code is StoreCode.NOT_FOUND:
            self._profiles.pop(uid, None)
            return PodWrite(code)
        if code is StoreCode.PROFILE:
            raise RuntimeError(f"pod {uid}: profile changed under us ({_text(reply[1])!r})")
        return PodWrite(code, int(_text(reply[1]) or 0), PodPhase(_text(reply[2])))

    async def transition(
        self,
        uid: str,
        phase: PodPhase,
        *,
        expected_version: int | None = None,
        expected_phases: Iterable[PodPhase] | None = None,
        node: str | None = None,
        gpu_devices: Sequence[int] | None = None,
        reason: str | None = None,
        message: str | None = None,
        count_attempt: bool = False,
        manifest: bytes | None = None,
    ) -> PodWrite:
        """Move a pod to `phase`, atomically, if it is at `expected_version` and in one of
        `expected_phases` (either may be None: any), and the move is allowed (see TRANSITION
        in kubus.store.scripts). Returns OK, ALREADY, CONFLICT, GONE or NOT_FOUND.

        PENDING clears node and devices; RESERVED needs `node`. `reason`/`message` record the
        last failure (kept when None). `count_attempt` adds one to `attempts`. `manifest`
        replaces the stored manifest (a pending pod resubmitted with changes). Raises
        ValueError for BOUND (use bind_pod) or RESERVED without a node.
        """
        move = Move(
            uid,
            PodPhase(phase),
            expected_version=expected_version,
            expected_phases=None if expected_phases is None else frozenset(PodPhase(p) for p in expected_phases),
            node=node,
            gpu_devices=None if gpu_devices is None else tuple(gpu_devices),
            reason=reason,
            message=message,
            count_attempt=count_attempt,
            manifest=manifest,
        )
        return await self.transition_move(move)

    async def transition_many(self, moves: Sequence[Move]) -> list[PodWrite]:
        """`transition` for many pods in one pipelined round trip, results
        in the order of ``moves``. Each move is atomic on its own, the batch is not."""
        plans = [self._transition_args(m) for m in moves]
        unknown = [m.uid for m, p in zip(moves, plans, strict=True) if not isinstance(p, PodWrite)]
        await self._learn_profiles(unknown)
        pipe = self.redis.pipeline(transaction=False)
        sent = []
        for move, plan in zip(moves, plans, strict=True):
            if isinstance(plan, PodWrite):
                continue
            profile = self._profiles.get(move.uid, "")
            await self.scripts.transition(keys=self._pod_keys(move.uid, profile), args=plan(profile), client=pipe)
            sent.append(move)
        replies = iter(await pipe.execute() if sent else [])
        out: list[PodWrite] = []
        for move, plan in zip(moves, plans, strict=True):
            if isinstance(plan, PodWrite):
                out.append(plan)
                continue
            reply = list(next(replies))
            code = _code(reply[0])
            if code is StoreCode.PROFILE:  # our profile guess was wrong: that one again, alone
                out.append(await self.transition_move(move))
            elif code is StoreCode.NOT_FOUND:
                self._profiles.pop(move.uid, None)
                out.append(PodWrite(code))
            else:
                out.append(PodWrite(code, int(_text(reply[1]) or 0), PodPhase(_text(reply[2]))))
        return out

    async def transition_move(self, move: Move) -> PodWrite:
        """`transition` with its arguments as a `Move`."""
        args = self._transition_args(move)
        if isinstance(args, PodWrite):
            return args
        return await self._pod_script(self.scripts.transition, move.uid, args)

    async def _learn_profiles(self, uids: Iterable[str]) -> None:
        """Read, in one round trip, the profiles of the pods whose profile is not cached."""
        missing = [uid for uid in dict.fromkeys(uids) if uid not in self._profiles]
        if not missing:
            return
        pipe = self.redis.pipeline(transaction=False)
        for uid in missing:
            pipe.hget(self.keys.pod_record(uid), "profile")
        for uid, profile in zip(missing, await pipe.execute(), strict=True):
            if profile:
                self._remember_profile(uid, _text(profile))

    def _transition_args(self, move: Move) -> Callable[[str], list[Any]] | PodWrite:
        """The TRANSITION script's arguments for ``move`` (given the pod's profile), or the
        answer when no script needs to run. Raises ValueError like `transition`."""
        phase = move.phase
        if phase is PodPhase.BOUND:
            raise ValueError("a pod is bound with bind_pod, not transition")
        if phase is PodPhase.RESERVED and not move.node:
            raise ValueError(f"pod {move.uid}: Reserved needs the node")
        fields: dict[str, Any] = {}
        if phase is PodPhase.PENDING:
            fields["node"] = ""
            fields["gpu_devices"] = ""
        else:
            if move.node is not None:
                fields["node"] = move.node
            if move.gpu_devices is not None:
                fields["gpu_devices"] = format_gpu_devices(list(move.gpu_devices))
        if move.reason is not None:
            fields["reason"] = move.reason
        if move.message is not None:
            fields["message"] = move.message
        if move.manifest is not None:
            fields["manifest"] = move.manifest
        phases = move.expected_phases
        expected = ",".join(sorted(str(p) for p in phases)) if phases is not None else ""
        if phases is not None and not expected:
            return PodWrite(StoreCode.CONFLICT)  # no phase is acceptable
        now = repr(float(self.clock()))
        version = "" if move.expected_version is None else str(move.expected_version)
        count = "1" if move.count_attempt else "0"

        def args(profile: str) -> list[Any]:
            out: list[Any] = [str(phase), version, expected, profile, now, count]
            for name, value in fields.items():
                out += [name, value]
            return out

        return args

    async def bind_pod(
        self, uid: str, node: str, devices: Sequence[int] = (), *, expected_version: int | None = None
    ) -> PodWrite:
        """Bind the pod to the node, exactly once (see BIND_POD in kubus.store.scripts): OK,
        ALREADY (bound to this node before: an idempotent retry), CONFLICT (bound or reserved
        elsewhere, or not at `expected_version`), GONE (deleted) or NOT_FOUND."""
        now = repr(float(self.clock()))
        devices_text = format_gpu_devices(list(devices))
        expected = "" if expected_version is None else str(expected_version)
        return await self._pod_script(
            self.scripts.bind_pod, uid, lambda profile: [node, devices_text, profile, now, expected]
        )

    async def bind_many(self, bindings: Sequence[Binding]) -> list[BindingResult]:
        """The binder's Bind step for many pods at the cost of about one round trip: per pod,
        ``mark_bound(node, uid, attempt)``; unless refused, ``bind_pod(uid, node, devices,
        expected_version=attempt)``; bound now: `Binding.event` appended; bind refused (GONE,
        CONFLICT, NOT_FOUND): ``release(node, uid, attempt)``. On a single Redis each pod's
        steps are one atomic script (BIND_MANY in kubus.store.scripts), so a crash leaves a pod
        either untouched or done; the batch as a whole is not atomic. Idempotent like the
        steps. Results in the order of `bindings`."""
        out: list[BindingResult | None] = [None] * len(bindings)
        todo = [(i, b, b.profile) for i, b in enumerate(bindings)]
        for _ in range(2):  # a second round for pods whose profile was not the one given
            retry: list[tuple[int, Binding, str]] = []
            for start in range(0, len(todo), _BIND_CHUNK):
                chunk = todo[start : start + _BIND_CHUNK]
                keys: list[str] = self.keys.phase_indexes()
                args: list[Any] = [repr(float(self.clock())), self.event_cap]
                for _i, b, profile in chunk:
                    keys += self.keys.node_keys(b.node)[:4]
                    keys += [self.keys.pod_record(b.uid), self.keys.pod_events(b.uid), self.keys.pending_index(profile)]
                    args += [
                        b.uid,
                        str(b.attempt) if b.attempt else "",
                        b.node,
                        format_gpu_devices(list(b.devices)),
                        profile,
                        b.event.encode() if b.event is not None else b"",
                    ]
                replies = await self.scripts.bind_many(keys=keys, args=args)
                for (i, b, _profile), reply in zip(chunk, replies, strict=True):
                    reply = list(reply)
                    if _code(reply[0]) is StoreCode.PROFILE:
                        retry.append((i, b, _text(reply[1])))
                    else:
                        out[i] = _binding_result(reply)
            if not retry:
                break
            todo = retry
        else:
            raise RuntimeError(f"pod {todo[0][1].uid}: profile changed under us")
        return [r for r in out if r is not None]

    async def append_event(self, uid: str, event: PodEvent) -> None:
        """Add an event to the pod's history, keeping the newest `event_cap`."""
        key = self.keys.pod_events(uid)
        pipe = self.redis.pipeline(transaction=True)
        pipe.rpush(key, event.encode())
        pipe.ltrim(key, -self.event_cap, -1)
        await pipe.execute()

    async def events(self, uid: str) -> list[PodEvent]:
        """The pod's events, oldest first."""
        return [PodEvent.decode(e) for e in await self.redis.lrange(self.keys.pod_events(uid), 0, -1)]

    # ---- node agents: admission in batches -----------------------------------------------------

    async def admission_views(self, pods: Sequence[tuple[str, str]]) -> list[AdmissionView]:
        """For each (node, uid): the pod's phase, node, profile and last update, and its
        reservation on that node, pipelined (one round trip per 500 pods).
        Each pod's fields are read together, not atomically with its reservation: the agent
        decides on them and `start_pods` checks again atomically. Remembers the profiles, so a
        later `transition` of these pods reads nothing first."""
        out: list[AdmissionView] = []
        pods = list(pods)
        for start in range(0, len(pods), _BATCH):
            chunk = pods[start : start + _BATCH]
            pipe = self.redis.pipeline(transaction=False)
            rows: list[Any] = []
            for node, uid in chunk:  # one read-only script per pod (a third of the commands)
                keys = [self.keys.pod_record(uid), self.keys.node_reservations(node), self.keys.node_bound(node)]
                await self.scripts.admission_view(keys=keys, args=[uid], client=pipe)
            for phase, pod_node, profile, updated_at, value, bound in await pipe.execute():
                rows.append((phase or None, pod_node, profile, updated_at, value or None, int(bound)))
            for (node, uid), (phase, pod_node, profile, updated_at, value, bound) in zip(chunk, rows, strict=True):
                reservation = None if value is None else Reservation.decode(value, bound=bool(bound))
                if phase is None:
                    out.append(AdmissionView(uid, node, None, "", "", 0.0, reservation))
                    continue
                profile_text = _text(profile)
                if profile_text:
                    self._remember_profile(uid, profile_text)
                out.append(
                    AdmissionView(
                        uid,
                        node,
                        PodPhase(_text(phase)),
                        _text(pod_node),
                        profile_text,
                        float(_text(updated_at) or 0.0),
                        reservation,
                    )
                )
        return out

    async def start_pods(self, starts: Sequence[PodStart]) -> list[PodStartResult]:
        """Bound -> Running for pods an agent admitted, each atomically with its checks (Bound
        on its node, holding a bound reservation there of its attempt) and its event (see
        START_POD in kubus.store.scripts); pipelined, one round trip per 500 pods on a single
        Redis. Results in the order of `starts`; each pod's start is atomic, the batch is not.
        Idempotent: a pod Running already answers ALREADY and gets no second event."""
        out: list[PodStartResult] = []
        now = repr(float(self.clock()))
        cap = str(self.event_cap)
        moved = [self.keys.phase_index(str(PodPhase.BOUND)), self.keys.phase_index(str(PodPhase.RUNNING))]
        for begin in range(0, len(starts), _BATCH):
            chunk = starts[begin : begin + _BATCH]
            pipe = self.redis.pipeline(transaction=False)
            for s in chunk:
                keys = [
                    self.keys.pod_record(s.uid),
                    self.keys.pod_events(s.uid),
                    self.keys.node_reservations(s.node),
                    self.keys.node_bound(s.node),
                    *moved,
                ]
                event = s.event.encode() if s.event is not None else b""
                await self.scripts.start_pod(keys=keys, args=[s.node, s.attempt, now, event, cap], client=pipe)
            for reply in await pipe.execute():
                out.append(_start_result(list(reply)))
        return out

    # ---- leases --------------------------------------------------------------------------------

    async def acquire_lease(self, name: str, holder: str, ttl_ms: int) -> int | None:
        """Take or renew the lease for `ttl_ms` milliseconds. Returns the fencing token while
        `holder` holds it (the same token on renewal, a larger one on every new acquisition),
        None when someone else does. Raises ValueError for ttl_ms < 1 or an empty holder."""
        if ttl_ms < 1:
            raise ValueError(f"lease ttl must be at least 1 ms, got {ttl_ms}")
        if not holder:
            raise ValueError("lease holder must be non-empty")
        reply = await self.scripts.acquire_lease(
            keys=[self.keys.lease_holder(name), self.keys.lease_fence(name)], args=[holder, int(ttl_ms)]
        )
        return None if reply is None else int(_text(reply))

    async def release_lease(self, name: str, holder: str) -> bool:
        """Give the lease up, if `holder` holds it. True when released."""
        reply = await self.scripts.release_lease(
            keys=[self.keys.lease_holder(name), self.keys.lease_fence(name)], args=[holder]
        )
        return int(reply) == 1

    async def get_lease(self, name: str) -> Lease | None:
        """Who holds the lease now, or None."""
        key = self.keys.lease_holder(name)
        pipe = self.redis.pipeline(transaction=True)
        pipe.hmget(key, "holder", "token")
        pipe.pttl(key)
        (holder, token), ttl = await pipe.execute()
        if holder is None:
            return None
        return Lease(name, _text(holder), int(_text(token)), int(ttl))

    # ---- recovery ------------------------------------------------------------------------------

    async def reconcile(self, *, grace_s: float = 30.0, reserved_timeout_s: float | None = None) -> list[str]:
        """Repair what a crash between two steps of the protocol leaves behind; one line per fix.

        - A reservation whose pod is missing, not on a node, or on another node gives its room
          back: at once when the pod finished or was deleted, after `grace_s` seconds otherwise
          (the attempt may still be between two steps). A reserved one goes by
          compare-and-delete on its attempt, so a newer reservation is never touched.
        - A pod Reserved on a node where it holds no reservation, untouched for `grace_s`,
          goes back to Pending (compare-and-set on its version), reason ReservationLost.
        - With `reserved_timeout_s`: a pod Reserved that long whose reservation no binder has
          marked bound (its BindRequest was never sent) gives the room back (on its attempt)
          and goes back to Pending, reason ReservationTimeout.
        Bound or running pods without a reservation are reported by check_invariants, not
        changed here: their room cannot be reclaimed safely.
        """
        now = self.clock()
        fixes: list[str] = []
        held: set[tuple[str, str]] = set()
        for name in await self.node_names():
            reservations = await self.reservations(name)
            pods = await self.get_pods(r.pod_uid for r in reservations)
            for r, pod in zip(reservations, pods, strict=True):
                held.add((name, r.pod_uid))
                if pod is not None and pod.phase.on_node and pod.node == name:
                    continue
                finished = pod is not None and pod.phase.terminal
                if not finished and now - r.reserved_at < grace_s:
                    continue
                why = "no pod" if pod is None else f"pod {pod.phase} on {pod.node or 'no node'}"
                if r.state is ReservationState.BOUND or finished:
                    code = await self.release(name, r.pod_uid)
                else:
                    code = await self.unreserve(name, r.pod_uid, r.attempt)
                if code is StoreCode.OK:
                    held.discard((name, r.pod_uid))
                    fixes.append(f"node {name}: gave back the reservation of {r.pod_key} ({r.pod_uid}): {why}")
        for pod in await self.pods_in_phase(PodPhase.RESERVED):
            age = now - pod.updated_at
            if (pod.node, pod.uid) in held:
                if reserved_timeout_s is None or age < reserved_timeout_s:
                    continue
                r = await self.reservation(pod.node, pod.uid)
                if r is not None:
                    if r.state is ReservationState.BOUND or await self.unreserve(pod.node, pod.uid, r.attempt) not in (
                        StoreCode.OK,
                        StoreCode.NOOP,
                    ):
                        continue  # a binder has it now
                    fixes.append(f"node {pod.node}: gave back the reservation of {pod.key} ({pod.uid}): never bound")
                reason, message = "ReservationTimeout", f"not bound on node {pod.node} within {reserved_timeout_s}s"
            else:
                if age < grace_s or await self.reservation(pod.node, pod.uid) is not None:
                    continue  # too young, or reserved since we listed the node
                reason, message = "ReservationLost", f"its reservation on node {pod.node} is gone"
            w = await self.transition(
                pod.uid, PodPhase.PENDING, expected_version=pod.version, reason=reason, message=message
            )
            if w.ok:
                fixes.append(f"pod {pod.key} ({pod.uid}): Reserved on {pod.node}, {reason}, back to Pending")
        return fixes

    async def reservation(self, node: str, uid: str) -> Reservation | None:
        """The pod's reservation on the node, or None."""
        pipe = self._pipeline()
        pipe.hget(self.keys.node_reservations(node), uid)
        pipe.sismember(self.keys.node_bound(node), uid)
        value, bound = await pipe.execute()
        return None if value is None else Reservation.decode(value, bound=bool(bound))

    # ---- snapshots -----------------------------------------------------------------------------

    async def load_snapshot(self, names: Iterable[str] | None = None) -> list[tuple[Node, list[Reservation]]]:
        """Every node with the reservations on it, sorted by node name: what a scheduling cycle
        rebuilds its node table from after a restart (see `node_info_of`). Each node is read
        consistently with its reservations. With `names`, only those nodes (in that order; an
        unknown one is left out): how a cycle refreshes the rows events told it about."""
        names = await self.node_names() if names is None else list(names)
        out: list[tuple[Node, list[Reservation]]] = []
        for start in range(0, len(names), _BATCH):
            pipe = self._pipeline()
            for name in names[start : start + _BATCH]:
                pipe.hgetall(self.keys.node_info(name))
                pipe.hvals(self.keys.node_reservations(name))
                pipe.smembers(self.keys.node_bound(name))
            replies = await pipe.execute()
            for i in range(0, len(replies), 3):
                info, values, bound = replies[i : i + 3]
                if info:
                    out.append((NodeRecord.from_hash(info).to_node(), _reservations(values, bound)))
        return out

    async def repair_indexes(self) -> list[str]:
        """Rebuild the indexes from the records (after drift, e.g. keys edited by hand).
        Returns what it fixed, one line each; empty when the indexes were right."""
        k = self.keys
        fixes: list[str] = []
        node_names = {k.node_of_info_key(_text(key)) async for key in self.redis.scan_iter(match=k.node_info_pattern())}
        indexed = {_text(n) for n in await self.redis.smembers(k.nodes_index())}
        for name in sorted(node_names - indexed):
            await self.redis.sadd(k.nodes_index(), name)
            fixes.append(f"nodes index: added {name}")
        for name in sorted(indexed - node_names):
            await self.redis.srem(k.nodes_index(), name)
            fixes.append(f"nodes index: removed {name}")

        pods = await _all_pods(self)
        want_phase: dict[str, set[str]] = {p: set() for p in PHASES}
        want_pending: dict[str, set[str]] = {}
        for pod in pods:
            want_phase[str(pod.phase)].add(pod.uid)
            if pod.phase is PodPhase.PENDING:
                want_pending.setdefault(pod.profile, set()).add(pod.uid)
        for phase in PHASES:
            fixes += await _sync_set(self, k.phase_index(phase), want_phase[phase], f"phase index {phase}")
        pending_keys = {_text(key) async for key in self.redis.scan_iter(match=k.pending_index_pattern())}
        for profile in want_pending:
            pending_keys.add(k.pending_index(profile))
        for key in sorted(pending_keys):
            profile = k.profile_of_pending_index(key)
            fixes += await _sync_set(self, key, want_pending.get(profile, set()), f"pending index {profile}")

        by_key: dict[str, PodRecord] = {}
        for pod in pods:
            best = by_key.get(pod.key)
            if best is None or (pod.created_at, pod.uid) > (best.created_at, best.uid):
                by_key[pod.key] = pod
        current = {_text(a): _text(b) for a, b in (await self.redis.hgetall(k.pod_keys_index())).items()}
        uids = {p.uid: p for p in pods}
        for key, pod in sorted(by_key.items()):
            have = uids.get(current.get(key, ""))
            if have is None or have.key != key:
                await self.redis.hset(k.pod_keys_index(), key, pod.uid)
                fixes.append(f"pod-keys index: {key} -> {pod.uid}")
        for key in sorted(set(current) - set(by_key)):
            await self.redis.hdel(k.pod_keys_index(), key)
            fixes.append(f"pod-keys index: removed {key}")
        return fixes


async def _sync_set(state: ClusterState, key: str, want: set[str], label: str) -> list[str]:
    have = {_text(u) for u in await state.redis.smembers(key)}
    fixes = []
    if want - have:
        await state.redis.sadd(key, *sorted(want - have))
        fixes += [f"{label}: added {u}" for u in sorted(want - have)]
    if have - want:
        await state.redis.srem(key, *sorted(have - want))
        fixes += [f"{label}: removed {u}" for u in sorted(have - want)]
    return fixes


async def _all_pods(state: ClusterState) -> list[PodRecord]:
    """Every pod record, found by SCAN (not by the indexes)."""
    pattern = state.keys.pod_record_pattern()
    uids = [state.keys.pod_of_record_key(_text(k)) async for k in state.redis.scan_iter(match=pattern, count=1000)]
    return [p for p in await state.get_pods(sorted(uids)) if p is not None]


def _reservations(values: Iterable[Any], bound: Iterable[Any]) -> list[Reservation]:
    bound_uids = {_text(u) for u in bound}
    out = []
    for j in values:
        r = Reservation.decode(j)
        out.append(replace(r, state=ReservationState.BOUND) if r.pod_uid in bound_uids else r)
    out.sort(key=lambda r: (r.pod_key, r.pod_uid))
    return out


def _node_usage(record: NodeRecord, usage: dict[str, int], reservations: list[Reservation]) -> NodeUsage:
    requested = {f[2:]: v for f, v in usage.items() if f.startswith("r:")}
    ports: dict[tuple[str, int, str], int] = {}
    for f, v in usage.items():
        parts = f.split(":", 3)
        if parts[0] == "p" and len(parts) == 4:
            ports[(parts[1], int(parts[2]), parts[3])] = v
    holders: dict[int, list[str]] = {}
    exclusive: dict[int, bool] = {}
    for r in reservations:
        for d in r.gpu_devices:
            holders.setdefault(d, []).append(r.pod_uid)
            exclusive[d] = exclusive.get(d, False) or not r.gpu_shared
    gpus = tuple(
        GPUUsage(
            index=g.index,
            memory=g.memory,
            used=usage.get(f"g:{g.index}:used", 0),
            healthy=g.healthy,
            holders=tuple(sorted(holders.get(g.index, []))),
            exclusive=exclusive.get(g.index, False),
        )
        for g in record.gpus
    )
    return NodeUsage(record.name, requested, usage.get("pods", 0), gpus, ports)


def node_info_of(node: Node, reservations: Iterable[Reservation]) -> NodeInfo:
    """A NodeInfo with the node's reservations accounted, exactly as Redis accounts them."""
    info = NodeInfo(node)
    for r in reservations:
        info.add_pod(r.pod_info())
    return info
