"""Registration and heartbeat: the agent's nodes in Redis, alive in the node lifecycle's eyes,
and a real node's inventory kept as NVML sees it."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterable

from kubus.bus import EventKind, announcements, publish_durable
from kubus.gpu_agent._core import AgentCore


class Registration(AgentCore):
    """Registers the agent's nodes, heartbeats them, and re-reads a real node's inventory."""

    async def _register(self, names: Iterable[str]) -> None:
        """put_node each node, and announce the ones that are new or changed."""
        state = self._store()

        async def one(name: str) -> None:
            result = await state.put_node(self.nodes[name])
            if result.changed:
                kind = EventKind.NODE_ADDED if result.generation == 1 else EventKind.NODE_UPDATED
                await self._node_event(kind, name, result.generation)

        await self._each(list(names), one)
        self.log.info("nodes registered", nodes=len(self.nodes), simulated=self.simulated)

    async def _beat(self) -> None:
        """One heartbeat of every node (pipelined): revived nodes announced, missing ones registered again."""
        state = self._store()
        results = await state.heartbeat_many(self._names)
        missing = [name for name, r in zip(self._names, results, strict=True) if not r.found]
        revived = [(name, r.generation) for name, r in zip(self._names, results, strict=True) if r.revived]
        self.metrics.nodes.labels(state="ready").set(len(self._names) - len(missing))
        self.metrics.nodes.labels(state="missing").set(len(missing))
        for name, _ in revived:
            self.log.info("node reachable again", node=name)
        await self._each(revived, lambda item: self._node_event(EventKind.NODE_UPDATED, item[0], item[1]))
        if missing:
            self.log.warning("nodes missing from Redis, registering them again", nodes=len(missing), first=missing[0])
            await self._register(missing)
            await state.heartbeat_many(missing)

    async def _refresh_inventory(self) -> None:
        """A real node's inventory changed (a GPU failed): store and announce it."""
        if self.inventory is None or self.inventory.nvml is None:
            return
        node = self.inventory.node()
        if node == self.nodes[node.name]:
            return
        self.nodes[node.name] = node
        result = await self._store().put_node(node)
        if result.changed:
            self.log.warning("node inventory changed", node=node.name, gpus=len(node.gpus))
            await self._node_event(EventKind.NODE_UPDATED, node.name, result.generation)

    async def _heartbeat_loop(self) -> None:
        last_inventory = time.monotonic()
        while not await self._sleep(self.options.heartbeat_interval):
            try:
                await self._beat()
                if time.monotonic() - last_inventory >= self.options.inventory_interval:
                    last_inventory = time.monotonic()
                    await self._refresh_inventory()
            except Exception as exc:
                self._log_failure("heartbeat failed", exc)

    async def _node_event(self, kind: EventKind, name: str, generation: int) -> None:
        # A deleted node registered again starts over at generation 1: the nonce keeps it announced.
        p = announcements.node_event(kind, name, generation, at=self.clock(), nonce=uuid.uuid4().hex)
        await publish_durable(self.jetstream(), p.subject, p.payload, p.msg_id)
