"""The node lifecycle (`NodeLifecycle`): nodes whose heartbeat stopped are marked lost (node.lost),
and found again when it comes back (node.updated), as kube's node lifecycle controller does."""

from __future__ import annotations

import time

from nats.js import JetStreamContext

from kubus.bus import (
    EventKind,
    announcements,
)
from kubus.core.metrics import Metrics
from kubus.queue._pods import publish
from kubus.queue.options import QueueOptions
from kubus.runtime.service import StructuredLogger
from kubus.store import ClusterState

__all__ = ["NodeLifecycle"]


class NodeLifecycle:
    """Watches node heartbeats."""

    def __init__(
        self, *, store: ClusterState, js: JetStreamContext, options: QueueOptions, log: StructuredLogger,
        metrics: Metrics,
    ) -> None:  # fmt: skip
        self.store = store
        self.js = js
        self.options = options
        self.log = log
        self.metrics = metrics
        self._lost_nodes: set[str] | None = None
        """The nodes marked lost, as last read (None: not read yet, the next check reads them all)."""
        self._next_node_scan = 0.0
        """When `check_nodes` next reads every node's heartbeat (not only the silent ones)."""

    def forget(self) -> None:
        """Forget what was read of the nodes: the next check reads every node's heartbeat."""
        self._lost_nodes = None
        self._next_node_scan = 0.0

    async def check_nodes(self) -> None:
        """Mark nodes whose heartbeat is older than node_grace unreachable (node.lost); announce
        nodes that came back (node.updated). Nodes that never heartbeated are left alone.

        Reads only the silent nodes (the heartbeats index, by time) and the ones it marked lost;
        every node's heartbeat is read at the first check and every reconcile_interval after it,
        which also heals the index (a node missing there)."""
        now = time.time()
        full = self._lost_nodes is None or now >= self._next_node_scan
        if full:
            liveness = await self.store.node_liveness(await self.store.node_names())
            await self.store.index_heartbeats(
                {n: live.heartbeat for n, live in liveness.items() if live.heartbeat is not None}
            )
            self._next_node_scan = now + self.options.reconcile_interval
        else:
            silent = await self.store.silent_nodes(now - self.options.node_grace)
            names = set(silent) | (self._lost_nodes or set())
            liveness = await self.store.node_liveness(sorted(names)) if names else {}
            if gone := [n for n in silent if n not in liveness]:
                await self.store.forget_heartbeats(gone)  # deleted without delete_node
        if self._lost_nodes is None:
            self._lost_nodes = {name for name, live in liveness.items() if live.unreachable}
        ready = unreachable_count = 0
        for name, live in liveness.items():
            heartbeat = live.heartbeat
            if live.unreachable:
                unreachable_count += 1
                continue
            if name in self._lost_nodes:
                self._lost_nodes.discard(name)
                self.log.info("node back", node=name)
                await publish(
                    self.js,
                    announcements.node_event(
                        EventKind.NODE_UPDATED, name, live.generation, at=time.time(), reason="NodeReachable"
                    ),
                )
            if heartbeat is not None and now - heartbeat > self.options.node_grace:
                if await self.store.mark_unreachable(name):
                    self._lost_nodes.add(name)
                    unreachable_count += 1
                    self.log.warning("node lost", node=name, silent_for=round(now - heartbeat, 1))
                    await publish(
                        self.js,
                        announcements.node_event(
                            EventKind.NODE_LOST,
                            name,
                            live.generation,
                            at=time.time(),
                            reason="NodeUnreachable",
                            message=f"no heartbeat for {now - heartbeat:.0f}s",
                        ),
                    )
                continue
            ready += 1
        if full:
            self._lost_nodes &= set(liveness)
        else:  # every lost node was read: the ones not found are gone
            self._lost_nodes = {n for n in self._lost_nodes if n in liveness}
            ready = max(await self.store.node_count() - unreachable_count, 0)
        self.metrics.nodes.labels(state="ready").set(ready)
        self.metrics.nodes.labels(state="unreachable").set(unreachable_count)
