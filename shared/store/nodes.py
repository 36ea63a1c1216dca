"""Nodes in Redis: their records, heartbeats and liveness, usage, and the snapshot a cycle
builds its node table from."""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace

from kubus.api.objects import Node
from kubus.core import codec
from kubus.core.codec import text
from kubus.kernels.nodeinfo import NodeInfo
from kubus.store._core import _BATCH, _MAX_LUA_INT, RedisHash, StoreCore, _code
from kubus.store.records import (
    NodeRecord,
    Reservation,
    ReservationState,
    hash_fields,
)
from kubus.store.scripts import StoreCode


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
class Liveness:
    """How a node last showed it is alive (`ClusterState.node_liveness`)."""

    heartbeat: float | None
    """Its last heartbeat, seconds since the epoch; None when it never heartbeated."""
    unreachable: bool
    """Marked lost by the node lifecycle."""
    generation: int
    """The node record's generation (node events carry it)."""


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


def _put_node_result(reply: Sequence[object]) -> PutNodeResult:
    return PutNodeResult(changed=_code(reply[0]) is StoreCode.OK, generation=int(text(reply[1])))


def _heartbeat_result(reply: Sequence[object]) -> HeartbeatResult:
    if _code(reply[0]) is StoreCode.NOT_FOUND:
        return HeartbeatResult(found=False)
    return HeartbeatResult(found=True, revived=text(reply[1]) == "revived", generation=int(text(reply[2])))


class NodeStore(StoreCore):
    """Nodes: `ClusterState` is one."""

    async def put_node(self, node: Node, manifest: bytes | None = None) -> PutNodeResult:
        """Add or replace a node (its reservations, heartbeat and registered time stay: the
        first put of a node records now as when it was registered, what `get nodes` shows as
        its age when it has no creationTimestamp of its own). Atomic; idempotent: a node
        stored exactly like this already is left alone (changed=False)."""
        name, args = self._put_node_args(node, manifest)
        return _put_node_result(await self._run(self.scripts.put_node, self._node_keys(name), args))

    async def put_nodes(self, nodes: Sequence[Node]) -> list[PutNodeResult]:
        """`put_node` for many nodes, pipelined (a watcher's first list of thousands): each put
        atomic, the batch not. Results in the order of ``nodes``."""
        out: list[PutNodeResult] = []
        for start in range(0, len(nodes), _BATCH):
            pipe = self.redis.pipeline(transaction=False)
            for node in nodes[start : start + _BATCH]:
                name, args = self._put_node_args(node, None)
                await self.scripts.put_node(keys=self._node_keys(name), args=args, client=pipe)
            out += [_put_node_result(list(reply)) for reply in await pipe.execute()]
        return out

    def _put_node_args(self, node: Node, manifest: bytes | None) -> tuple[str, list[str | bytes]]:
        record = NodeRecord.of(node, manifest)
        shape = {
            "alloc": [[r, min(q, _MAX_LUA_INT)] for r, q in sorted(record.allocatable.items())],
            "gpus": [[min(g.memory, _MAX_LUA_INT), g.healthy, g.model] for g in record.gpus],
            "unreachable": record.unreachable,
        }
        now = repr(float(self.clock()))
        return record.name, [record.name, record.encode_static(), manifest or b"", codec.dumps(shape), now]

    async def get_node(self, name: str) -> NodeRecord | None:
        raw = hash_fields(await self.redis.hmget(self.keys.node_info(name), NodeRecord.HASH_FIELDS))
        return NodeRecord.from_hash(raw) if raw else None

    async def node_names(self) -> list[str]:
        """Names of all nodes (from the index), sorted."""
        return sorted(text(n) for n in await self.redis.smembers(self.keys.nodes_index()))

    async def list_nodes(self) -> list[NodeRecord]:
        """Every node, sorted by name."""
        names = await self.node_names()
        out: list[NodeRecord] = []
        for start in range(0, len(names), _BATCH):
            pipe = self._pipeline()
            for name in names[start : start + _BATCH]:
                pipe.hmget(self.keys.node_info(name), NodeRecord.HASH_FIELDS)
            out += [NodeRecord.from_hash(raw) for raw in map(hash_fields, await pipe.execute()) if raw]
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
        return (await self.heartbeat_many([name], at))[0]

    async def heartbeat_many(self, names: Sequence[str], at: float | None = None) -> list[HeartbeatResult]:
        """`heartbeat` for many nodes (an agent simulating thousands): one script call per 500
        nodes, each call atomic. Results in the order of `names`."""
        at = self.clock() if at is None else at
        arg = repr(float(at))
        index = self.keys.heartbeats_index()
        out: list[HeartbeatResult] = []
        for start in range(0, len(names), _BATCH):
            chunk = names[start : start + _BATCH]
            keys = [index, *map(self.keys.node_info, chunk)]
            out += [
                _heartbeat_result(list(reply)) for reply in await self.scripts.heartbeat(keys=keys, args=[arg, *chunk])
            ]
        return out

    async def mark_unreachable(self, name: str, unreachable: bool = True) -> bool:
        """Mark the node lost (reserve answers NODE_GONE; `to_node` adds the unreachable
        taints) or back. False when the node is unknown. Idempotent."""
        reply = await self._run(self.scripts.mark_unreachable, self.keys.node_keys(name), ["1" if unreachable else "0"])
        return _code(reply[0]) is not StoreCode.NOT_FOUND

    async def silent_nodes(self, before: float) -> list[str]:
        """Names of the nodes whose last heartbeat (per the heartbeats index) is at or before
        ``before``, oldest first. Nodes that never heartbeated are not in the index."""
        return [text(n) for n in await self.redis.zrangebyscore(self.keys.heartbeats_index(), "-inf", before)]

    async def node_count(self) -> int:
        """How many nodes there are (from the index)."""
        return int(await self.redis.scard(self.keys.nodes_index()))

    async def index_heartbeats(self, beats: Mapping[str, float]) -> int:
        """Add nodes missing from the heartbeats index with these times (a node's heartbeat
        field, read by whoever heals the index); entries there already are left alone (a
        heartbeat since is newer). Returns how many were added."""
        if not beats:
            return 0
        added = await self.redis.zadd(self.keys.heartbeats_index(), dict(beats), nx=True)
        assert added is not None  # ZADD without INCR answers the count added
        return int(added)

    async def forget_heartbeats(self, names: Iterable[str]) -> None:
        """Drop index entries of nodes that no longer exist (deleted behind the store's back)."""
        names = list(names)
        if names:
            await self.redis.zrem(self.keys.heartbeats_index(), *names)

    async def node_liveness(self, names: Sequence[str]) -> dict[str, Liveness]:
        """The liveness of these nodes (those that exist), read without decoding whole nodes:
        one pipelined round trip per 500 nodes. A node deleted meanwhile is left out."""
        out: dict[str, Liveness] = {}
        for start in range(0, len(names), _BATCH):
            chunk = names[start : start + _BATCH]
            pipe = self.redis.pipeline(transaction=False)
            for name in chunk:
                pipe.hmget(self.keys.node_info(name), "heartbeat", "unreachable", "generation")
            for name, (heartbeat, unreachable, generation) in zip(chunk, await pipe.execute(), strict=True):
                if generation is None:
                    continue
                out[name] = Liveness(
                    float(heartbeat) if heartbeat else None, text(unreachable) == "1", int(text(generation))
                )
        return out

    async def node_info(self, name: str) -> NodeInfo | None:
        """The node with its reservations accounted (`node_info_of`), or None when unknown."""
        snapshot = await self.load_snapshot([name])
        return node_info_of(*snapshot[0]) if snapshot else None

    async def node_usage(self, name: str) -> NodeUsage | None:
        """What the node's reservations hold, per resource, GPU and host port; None for an
        unknown node."""
        pipe = self._pipeline()
        pipe.hmget(self.keys.node_info(name), NodeRecord.HASH_FIELDS)
        pipe.hgetall(self.keys.node_usage(name))
        pipe.hvals(self.keys.node_reservations(name))
        pipe.smembers(self.keys.node_bound(name))
        fields, usage, values, bound = await pipe.execute()
        info = hash_fields(fields)
        if not info:
            return None
        record = NodeRecord.from_hash(info)
        return _node_usage(record, {text(k): int(text(v)) for k, v in usage.items()}, _reservations(values, bound))

    async def load_snapshot(
        self, names: Iterable[str] | None = None, *, decoded: DecodedRecords | None = None
    ) -> list[tuple[Node, list[Reservation]]]:
        """Every node with the reservations on it, sorted by node name: what a scheduling cycle
        rebuilds its node table from after a restart (see `node_info_of`). Each node is read
        consistently with its reservations. With `names`, only those nodes (in that order; an
        unknown one is left out): how a cycle refreshes the rows events told it about. With
        ``decoded``, what was decoded before from the same bytes is reused, not parsed again."""
        names = await self.node_names() if names is None else list(names)
        decoded = DecodedRecords() if decoded is None else decoded
        out: list[tuple[Node, list[Reservation]]] = []
        for start in range(0, len(names), _BATCH):
            chunk = names[start : start + _BATCH]
            pipe = self._pipeline()
            for name in chunk:
                pipe.hmget(self.keys.node_info(name), NodeRecord.HASH_FIELDS)
                pipe.hvals(self.keys.node_reservations(name))
                pipe.smembers(self.keys.node_bound(name))
            replies = await pipe.execute()
            for i, name in enumerate(chunk):
                fields, values, bound = replies[3 * i : 3 * i + 3]
                info = hash_fields(fields)
                if info:
                    out.append(decoded.node(name, info, values, bound))
                else:
                    decoded.forget(name)
        return out


class DecodedRecords:
    """The nodes and reservations `NodeStore.load_snapshot` decoded, each under a digest of the
    bytes it came from, so that reading an unchanged node again costs a hash and a lookup, not
    a parse: a cycle reads every node again at each resync (5,000 nodes and their pods took a
    second and a half of parsing). Holds one entry per node and per reservation last read; a
    node's entries are replaced at each read of it. The Nodes handed out are shared between
    reads: nobody changes them."""

    __slots__ = ("_nodes", "_reservations")

    def __init__(self) -> None:
        self._nodes: dict[str, tuple[bytes, Node]] = {}
        self._reservations: dict[str, dict[bytes, Reservation]] = {}
        """Node -> digest -> the reservation decoded from those bytes."""

    def node(
        self, name: str, info: RedisHash, values: Iterable[bytes | str], bound: Iterable[bytes | str]
    ) -> tuple[Node, list[Reservation]]:
        """The node and its reservations (as `load_snapshot` returns them) from its raw replies."""
        key = _digest(info.get(b"record") or info.get("record"), info.get(b"unreachable") or info.get("unreachable"))
        seen = self._nodes.get(name)
        if seen is not None and seen[0] == key:
            node = seen[1]
        else:
            node = NodeRecord.from_hash(info).to_node()
            self._nodes[name] = (key, node)
        before = self._reservations.get(name, {})
        now: dict[bytes, Reservation] = {}

        def decode(value: bytes | str) -> Reservation:
            digest = _digest(value)
            r = now[digest] = before.get(digest) or Reservation.decode(value)
            return r

        reservations = _reservations(values, bound, decode)
        self._reservations[name] = now
        return node, reservations

    def forget(self, name: str) -> None:
        """A node Redis no longer has."""
        self._nodes.pop(name, None)
        self._reservations.pop(name, None)


def _digest(*parts: object) -> bytes:
    h = hashlib.blake2b(digest_size=16)
    for part in parts:
        b = b"" if part is None else part if isinstance(part, bytes) else str(part).encode()
        h.update(len(b).to_bytes(8, "little"))
        h.update(b)
    return h.digest()


def _reservations(
    values: Iterable[bytes | str],
    bound: Iterable[bytes | str],
    decode: Callable[[bytes | str], Reservation] = Reservation.decode,
) -> list[Reservation]:
    """A node's reservations from HVALS, those in its bound set (SMEMBERS) in state BOUND,
    sorted by pod key and uid."""
    bound_uids = {text(u) for u in bound}
    out = []
    for j in values:
        r = decode(j)
        out.append(replace(r, state=ReservationState.BOUND) if r.pod_uid in bound_uids else r)
    out.sort(key=_by_pod)
    return out


def _by_pod(r: Reservation) -> tuple[str, str]:
    return r.pod_key, r.pod_uid


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
