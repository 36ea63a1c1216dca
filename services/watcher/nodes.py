"""The apiserver's Nodes in the store, as a gpu-agent registers its own: room from
status.allocatable, labels, taints, spec.unschedulable, GPUs from the device plugin's resource
and GPU feature discovery's labels (`kubus.api.gpus.gfd_gpus`); the changes announced together
(``nodes.changed``: a list of thousands in a few messages), every node heartbeaten so the queue's
node lifecycle keeps it."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

from nats.js import JetStreamContext

from kubus.api.errors import ManifestError
from kubus.api.manifests import parse_node
from kubus.api.objects import Node
from kubus.bus import EventKind, announcements, publish_durable_many
from kubus.core.codec import JSONMapping
from kubus.runtime.service import StructuredLogger, Throttle
from kubus.store import ClusterState, PutNodeResult

__all__ = ["NodeMirror"]

_Change = tuple[EventKind, str, int]
"""A node's change as `announcements.node_changes` takes it: (kind, name, generation)."""

APISERVER = "apiserver"
"""How errors name where an object came from."""


class NodeMirror:
    """Keeps the store's nodes those of the apiserver. Not thread-safe; one reflector feeds it."""

    def __init__(
        self,
        *,
        store: ClusterState,
        js: JetStreamContext,
        log: StructuredLogger,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.store = store
        self.js = js
        self.log = log.bind(part="nodes")
        self.clock = clock
        self.names: set[str] = set()
        """The nodes the apiserver has (as last seen): the ones heartbeaten."""
        self._unreadable = Throttle(60.0)

    async def replace(self, objects: Sequence[JSONMapping]) -> None:
        """Every node the apiserver has now: each put; the store's other nodes deleted (gone
        while nobody watched). Idempotent."""
        announce: list[_Change] = []
        nodes = [node for node in map(self._read, objects) if node is not None]
        for node, result in zip(nodes, await self.store.put_nodes(nodes), strict=True):
            self._changed(node.name, result, announce)
        seen = {node.name for node in nodes}
        for name in sorted(set(await self.store.node_names()) - seen):
            await self._delete(name, announce)
        self.names = seen
        await self.heartbeat()
        await self._announce(announce)
        self.log.info("nodes listed", nodes=len(seen))

    async def changed(self, obj: JSONMapping) -> None:
        """A node added or changed."""
        announce: list[_Change] = []
        name = await self._put(obj, announce)
        if name and name not in self.names:
            self.names.add(name)
            await self.store.heartbeat(name)
        await self._announce(announce)

    async def deleted(self, obj: JSONMapping) -> None:
        """A node deleted: its reservations given back (the pods on it are deleted by kube's
        pod garbage collector, and their deletions reach kubus as any)."""
        name = str((obj.get("metadata") or {}).get("name") or "")
        if not name:
            return
        announce: list[_Change] = []
        self.names.discard(name)
        await self._delete(name, announce)
        await self._announce(announce)

    async def heartbeat(self) -> None:
        """One heartbeat of every node (pipelined); a node missing from the store is put again
        at its next change or relist."""
        names = sorted(self.names)
        if names:
            await self.store.heartbeat_many(names)

    async def _put(self, obj: JSONMapping, announce: list[_Change]) -> str:
        node = self._read(obj)
        if node is None:
            return ""
        self._changed(node.name, await self.store.put_node(node), announce)
        return node.name

    def _read(self, obj: JSONMapping) -> Node | None:
        try:
            return parse_node(obj, source=APISERVER)
        except ManifestError as exc:
            # Never silent, never a stopped watch: the node is left out (its pods still count
            # on it once it reads), and said at most once a minute.
            if (dropped := self._unreadable.allow()) is not None:
                self.log.warning("node unreadable, left out", error=str(exc), unlogged_before=dropped)
            return None

    def _changed(self, name: str, result: PutNodeResult, announce: list[_Change]) -> None:
        if result.changed:
            kind = EventKind.NODE_ADDED if result.generation == 1 else EventKind.NODE_UPDATED
            announce.append((kind, name, result.generation))

    async def _delete(self, name: str, announce: list[_Change]) -> None:
        held = await self.store.delete_node(name)
        announce.append((EventKind.NODE_DELETED, name, 0))
        self.log.info("node deleted", node=name, reservations=len(held))

    async def _announce(self, changes: list[_Change]) -> None:
        if changes:
            await publish_durable_many(self.js, announcements.node_changes(changes, at=self.clock()))
