"""Registration and heartbeat (`Registration`): the agent's nodes in Redis, alive in the node
lifecycle's eyes, and a real node's inventory kept as NVML sees it."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable

from nats.js import JetStreamContext

from kubus.api.objects import Node
from kubus.bus import EventKind, announcements, publish_durable
from kubus.core.metrics import Metrics
from kubus.gpu_agent._plumbing import each
from kubus.gpu_agent.inventory import NodeInventory
from kubus.gpu_agent.options import AgentOptions
from kubus.runtime.service import StructuredLogger
from kubus.store import ClusterState

__all__ = ["Registration"]


class Registration:
    """Registers the agent's nodes, heartbeats them, and re-reads a real node's inventory."""

    def __init__(
        self,
        *,
        store: ClusterState,
        js: JetStreamContext,
        nodes: dict[str, Node],
        inventory: NodeInventory | None,
        simulated: bool,
        options: AgentOptions,
        clock: Callable[[], float],
        log: StructuredLogger,
        metrics: Metrics,
    ) -> None:
        """``nodes``: the agent's nodes, by name (a changed inventory replaces its node there);
        ``inventory``: a real node's (None: simulated nodes)."""
        self.store = store
        self.js = js
        self.nodes = nodes
        self.names = list(nodes)
        self.inventory = inventory
        self.simulated = simulated
        self.options = options
        self.clock = clock
        self.log = log
        self.metrics = metrics

    async def register(self, names: Iterable[str]) -> None:
        """put_node each node, and announce the ones that are new or changed."""

        async def one(name: str) -> None:
            result = await self.store.put_node(self.nodes[name])
            if result.changed:
                kind = EventKind.NODE_ADDED if result.generation == 1 else EventKind.NODE_UPDATED
                await self._node_event(kind, name, result.generation)

        await each(list(names), one, concurrency=self.options.concurrency)
        self.log.info("nodes registered", nodes=len(self.nodes), simulated=self.simulated)

    async def beat(self) -> None:
        """One heartbeat of every node (pipelined): revived nodes announced, missing ones registered again."""
        results = await self.store.heartbeat_many(self.names)
        missing = [name for name, r in zip(self.names, results, strict=True) if not r.found]
        revived = [(name, r.generation) for name, r in zip(self.names, results, strict=True) if r.revived]
        self.metrics.nodes.labels(state="ready").set(len(self.names) - len(missing))
        self.metrics.nodes.labels(state="missing").set(len(missing))
        for name, _ in revived:
            self.log.info("node reachable again", node=name)
        await each(
            revived,
            lambda item: self._node_event(EventKind.NODE_UPDATED, item[0], item[1]),
            concurrency=self.options.concurrency,
        )
        if missing:
            self.log.warning("nodes missing from Redis, registering them again", nodes=len(missing), first=missing[0])
            await self.register(missing)
            await self.store.heartbeat_many(missing)

    async def refresh_inventory(self) -> None:
        """A real node's inventory changed (a GPU failed): store and announce it."""
        if self.inventory is None or self.inventory.nvml is None:
            return
        node = self.inventory.node()
        if node == self.nodes[node.name]:
            return
        self.nodes[node.name] = node
        result = await self.store.put_node(node)
        if result.changed:
            self.log.warning("node inventory changed", node=node.name, gpus=len(node.gpus))
            await self._node_event(EventKind.NODE_UPDATED, node.name, result.generation)

    async def _node_event(self, kind: EventKind, name: str, generation: int) -> None:
        # A deleted node registered again starts over at generation 1: the nonce keeps it announced.
        p = announcements.node_event(kind, name, generation, at=self.clock(), nonce=uuid.uuid4().hex)
        await publish_durable(self.js, p.subject, p.payload, p.msg_id)
