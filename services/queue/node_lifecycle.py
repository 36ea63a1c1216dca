"""The node lifecycle: nodes whose heartbeat stopped are marked lost (node.lost), and found
again when it comes back (node.updated), as kube's node lifecycle controller does."""

from __future__ import annotations

import time

from kubus.bus import (
    EventKind,
    announcements,
)
from kubus.queue._base import QueueBase


class NodeLifecycle(QueueBase):
    """Watches node heartbeats."""

    async def _check_nodes(self) -> None:
        """Mark nodes whose heartbeat is older than node_grace unreachable (node.lost); announce
        nodes that came back (node.updated). Nodes that never heartbeated are left alone.

        Reads only the silent nodes (the heartbeats index, by time) and the ones it marked lost;
        every node's heartbeat is read at the first check and every reconcile_interval after it,
        which also heals the index (a node missing there)."""
        state = self._cluster()
        now = time.time()
        full = self._lost_nodes is None or now >= self._next_node_scan
        if full:
            liveness = await state.node_liveness(await state.node_names())
            await state.index_heartbeats(
                {n: live.heartbeat for n, live in liveness.items() if live.heartbeat is not None}
            )
            self._next_node_scan = now + self.options.reconcile_interval
        else:
            silent = await state.silent_nodes(now - self.options.node_grace)
            names = set(silent) | (self._lost_nodes or set())
            liveness = await state.node_liveness(sorted(names)) if names else {}
            if gone := [n for n in silent if n not in liveness]:
                await state.forget_heartbeats(gone)  # deleted without delete_node
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
                await self._publish(
                    announcements.node_event(
                        EventKind.NODE_UPDATED, name, live.generation, at=time.time(), reason="NodeReachable"
                    )
                )
            if heartbeat is not None and now - heartbeat > self.options.node_grace:
                if await state.mark_unreachable(name):
                    self._lost_nodes.add(name)
                    unreachable_count += 1
                    self.log.warning("node lost", node=name, silent_for=round(now - heartbeat, 1))
                    await self._publish(
                        announcements.node_event(
                            EventKind.NODE_LOST,
                            name,
                            live.generation,
                            at=time.time(),
                            reason="NodeUnreachable",
                            message=f"no heartbeat for {now - heartbeat:.0f}s",
                        )
                    )
                continue
            ready += 1
        if full:
            self._lost_nodes &= set(liveness)
        else:  # every lost node was read: the ones not found are gone
            self._lost_nodes = {n for n in self._lost_nodes if n in liveness}
            ready = max(await state.node_count() - unreachable_count, 0)
        self.metrics.nodes.labels(state="ready").set(ready)
        self.metrics.nodes.labels(state="unreachable").set(unreachable_count)
