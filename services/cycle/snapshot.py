"""The cycle's node table kept equal to what Redis holds: nodes and the reservations on them.

`NodeSnapshot` owns a `NodeTable` and an index of where each pod is accounted. It is pure logic
(no I/O): the service reads Redis (`ClusterState.load_snapshot`) and hands the rows over here,
between two batches, never while the Scheduler runs. A row is made equal to Redis by a diff:
only the pods that appeared, left or changed devices are assumed or forgotten, so a refresh of
a node the cycle itself just reserved on changes nothing.

Unreachable nodes arrive with kube's ``node.kubernetes.io/unreachable`` taints already added
(`NodeRecord.to_node`), so no plugin sees them as schedulable.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from kubus.api.attempts import NO_ATTEMPT, Attempt
from kubus.api.objects import Node
from kubus.kernels import NUMPY, Backend, NodeTable
from kubus.kernels.nodeinfo import PodInfo
from kubus.store import UNREACHABLE_TAINT_KEY, Reservation, ReservationState

__all__ = ["NodeSnapshot", "PlacedPod", "SyncStats"]


@dataclass(frozen=True, slots=True)
class PlacedPod:
    """Where the table accounts a pod, and which incarnation of it (uid)."""

    node: str
    uid: str
    attempt: Attempt = field(default=NO_ATTEMPT, compare=False)
    """The attempt of its reservation in Redis, when the table has it from there (NO_ATTEMPT for
    the cycle's own placements until a sync): preemption evicts exactly that reservation."""
    bound: bool = field(default=False, compare=False)
    """Whether its reservation was bound when the table last read it (scheduler_cache_size's
    assumed_pods are the others)."""


@dataclass(slots=True)
class SyncStats:
    """What a sync changed; for logs."""

    nodes_added: int = 0
    nodes_updated: int = 0
    nodes_removed: int = 0
    pods_assumed: int = 0
    pods_forgotten: int = 0

    @property
    def changed(self) -> bool:
        return any((self.nodes_added, self.nodes_updated, self.nodes_removed, self.pods_assumed, self.pods_forgotten))


class NodeSnapshot:
    """A NodeTable mirroring Redis, plus ``placed``: pod key -> (node, uid) of every pod in it.

    Not thread-safe; one scheduling loop owns it, and nothing changes it while the Scheduler
    runs over `table`.
    """

    def __init__(self, backend: Backend = NUMPY, *, seed: int = 0) -> None:
        self.table = NodeTable(backend, seed=seed)
        self.placed: dict[str, PlacedPod] = {}
        """Pod key (namespace/name) -> where the table accounts it."""

    # ---- from Redis ----------------------------------------------------------------------------

    def load(self, entries: Iterable[tuple[Node, Sequence[Reservation]]]) -> SyncStats:
        """A full resync: make the table equal to ``entries`` (every node there is, with its
        reservations); nodes not among them are removed. Idempotent."""
        stats = SyncStats()
        seen: set[str] = set()
        for node, reservations in entries:
            seen.add(node.name)
            self._sync(node, reservations, stats)
        for name in [n for n in self.table.row_of if n not in seen]:
            self._remove(name, stats)
        return stats

    def sync_nodes(
        self,
        names: Iterable[str],
        entries: Iterable[tuple[Node, Sequence[Reservation]]],
        stats: SyncStats | None = None,
    ) -> SyncStats:
        """Make the rows of ``names`` equal to ``entries`` (what Redis has of those nodes); a
        name without an entry is a node Redis no longer has, and is removed. Idempotent. Counts
        into ``stats`` (a new one when None) and returns it."""
        stats = SyncStats() if stats is None else stats
        found: set[str] = set()
        for node, reservations in entries:
            found.add(node.name)
            self._sync(node, reservations, stats)
        for name in names:
            if name not in found and name in self.table:
                self._remove(name, stats)
        return stats

    def noticed(self, reservations: Iterable[Reservation], stats: SyncStats | None = None) -> set[str]:
        """Take in reservations another profile's cycle announced (`ReservedPods`), ahead of
        reading them from Redis: a pod the table lacks is assumed on its node. Returns the nodes
        to read again instead, where the table has the pod on another node or as another
        incarnation (Redis decides). A node the table lacks is left to its node event."""
        stats = SyncStats() if stats is None else stats
        reread: set[str] = set()
        table = self.table
        for r in reservations:
            if r.node not in table:
                continue
            placed = self.placed.get(r.pod_key)
            if placed is not None:
                if placed.node != r.node or placed.uid != r.pod_uid:
                    reread.update((placed.node, r.node))
                continue
            table.assume(r.pod_info(), r.node)
            self.placed[r.pod_key] = PlacedPod(r.node, r.pod_uid, r.attempt, _bound(r))
            stats.pods_assumed += 1
        return reread

    # ---- the cycle's own placements --------------------------------------------------------------

    def placed_by_scheduler(self, key: str, uid: str, node: str) -> None:
        """Record a placement the Scheduler assumed into the table itself."""
        self.placed[key] = PlacedPod(node, uid)

    def reserved(self, key: str, node: str, attempt: Attempt) -> None:
        """The store now holds the cycle's own placement under ``attempt`` (what a preemption
        that picks this pod as a victim must name)."""
        placed = self.placed.get(key)
        if placed is not None and placed.node == node:
            self.placed[key] = PlacedPod(node, placed.uid, attempt)

    def evicted(self, key: str, node: str) -> PlacedPod | None:
        """A pod the Scheduler's preemption already took off ``node`` in the table: forget where
        it was. Returns where it was (with the attempt the store must still hold)."""
        placed = self.placed.get(key)
        if placed is None or placed.node != node:
            return None
        del self.placed[key]
        return placed

    def forget(self, key: str, node: str) -> bool:
        """Undo a placement (a failed reservation). False when the pod is not on that node."""
        if node not in self.table or key not in self.table.node_info(node).pods:
            return False
        self.table.forget(key, node)
        if (p := self.placed.get(key)) is not None and p.node == node:
            del self.placed[key]
        return True

    # ---- queries -------------------------------------------------------------------------------

    def sizes(self) -> tuple[int, int, int]:
        """(nodes, pods, assumed pods: those whose reservation was not bound when last read)."""
        placed = self.placed
        return len(self.table), len(placed), sum(1 for p in placed.values() if not p.bound)

    def unreachable_nodes(self) -> int:
        """Nodes carrying kube's unreachable taint."""
        return sum(
            1 for info in self.table.node_infos() if any(t.key == UNREACHABLE_TAINT_KEY for t in info.node.spec.taints)
        )

    # ---- rows ----------------------------------------------------------------------------------

    def _sync(self, node: Node, reservations: Sequence[Reservation], stats: SyncStats) -> None:
        table, name = self.table, node.name
        if name not in table:
            table.set_node(node)
            stats.nodes_added += 1
        elif table.node_info(name).node != node:
            table.set_node(node)  # keeps the pods; the diff below fixes them
            stats.nodes_updated += 1
        info = table.node_info(name)
        wanted: dict[str, Reservation] = {}
        for r in reservations:
            wanted.setdefault(r.pod_key, r)  # one pod per key and node, as NodeInfo keys them
        for key, pod_info in list(info.pods.items()):
            held = wanted.get(key)
            if held is None or not _same(pod_info, held):
                table.forget(key, name)
                if (p := self.placed.get(key)) is not None and p.node == name:
                    del self.placed[key]
                stats.pods_forgotten += 1
        for key, r in wanted.items():
            if key in info.pods:
                if (p := self.placed.get(key)) is not None and p.node == name and p.bound != _bound(r):
                    self.placed[key] = PlacedPod(name, p.uid, p.attempt, _bound(r))
                continue
            moved = self.placed.get(key)
            if moved is not None and moved.node != name and moved.node in table:
                # Redis moved the pod (a stale row elsewhere): it is accounted once, here.
                self.forget(key, moved.node)
                stats.pods_forgotten += 1
            table.assume(r.pod_info(), name)
            self.placed[key] = PlacedPod(name, r.pod_uid, r.attempt, _bound(r))
            stats.pods_assumed += 1

    def _remove(self, name: str, stats: SyncStats) -> None:
        info = self.table.remove_node(name)
        for key in info.pods:
            if (p := self.placed.get(key)) is not None and p.node == name:
                del self.placed[key]
        stats.nodes_removed += 1


def _bound(r: Reservation) -> bool:
    return r.state is ReservationState.BOUND


def _same(pod_info: PodInfo, r: Reservation) -> bool:
    """Whether the table's pod is the reservation's (same incarnation, same devices, terminating
    or not: a pod whose deletion began is taken in again, for the plugins that skip it)."""
    return (
        pod_info.pod.metadata.uid == r.pod_uid
        and tuple(sorted(pod_info.gpu_devices)) == r.gpu_devices
        and pod_info.pod.metadata.deletion_timestamp == r.deletion_timestamp
    )
