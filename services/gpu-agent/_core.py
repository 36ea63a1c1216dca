"""The core every part of the agent shares: its nodes, options and store, the pods it runs,
the events it publishes, and its plumbing (bounded gathers, sleeps that end on stop, logs)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import TypeVar

from kubus.api.objects import Node
from kubus.bus import EventKind, MessageFaults, Publication, announcements, publish_durable
from kubus.gpu_agent.inventory import NodeInventory
from kubus.gpu_agent.options import AgentOptions
from kubus.gpu_agent.running import RunningPod, RunningPods
from kubus.gpu_agent.simulation import pod_duration
from kubus.service import TRANSIENT_ERRORS, Service, StructuredLogger, Throttle
from kubus.settings import ConnectionSettings
from kubus.store import ClusterState, PodPhase

_T = TypeVar("_T")
_R = TypeVar("_R")


class AgentCore(Service):
    """What every part of `kubus.gpu_agent.AgentService` shares."""

    metrics_role = "gpu-agent"

    def __init__(
        self,
        settings: ConnectionSettings | None,
        nodes: Sequence[Node],
        options: AgentOptions | None = None,
        *,
        simulated: bool = False,
        inventory: NodeInventory | None = None,
        clock: Callable[[], float] = time.time,
        name: str = "gpu-agent",
    ) -> None:
        super().__init__(name, settings)
        if not nodes:
            raise ValueError("an agent needs at least one node")
        if not simulated and len(nodes) != 1:
            raise ValueError("an agent runs one real node; use simulated=True for more")
        self.nodes: dict[str, Node] = {n.name: n for n in nodes}
        if len(self.nodes) != len(nodes):
            raise ValueError("node names repeat")
        self.options = options or AgentOptions()
        self.simulated = simulated
        self.inventory = inventory
        self.clock = clock
        self.source = f"{name}/{socket.gethostname()}"
        """Who recorded the pod events this agent writes."""
        self.cluster: ClusterState | None = None
        opts = self.options
        self.running = RunningPods(
            self.nodes,
            lambda uid: pod_duration(uid, opts.pod_duration, opts.pod_duration_jitter),
            self.metrics.pods_running.set,
        )
        """The pods this agent runs, by uid."""
        self._names = list(self.nodes)
        self._loops: list[asyncio.Task[None]] = []
        """The root tasks that finish the work in hand when the agent stops."""
        self._faults = MessageFaults(self.options.max_failures)
        """Failed tries of each assignment that were its own fault (not an outage's)."""
        self._unbacked_deletions = Throttle()
        """The throttle of "pod.deleted event ignored" lines (a forged event in a loop)."""

    # -- events ----------------------------------------------------------------------------------

    async def _pod_event(
        self, kind: EventKind, pod: RunningPod, *, phase: PodPhase | None = None, reason: str = ""
    ) -> None:
        p = self._pod_publication(kind, pod, phase=phase, reason=reason)
        await publish_durable(self.jetstream(), p.subject, p.payload, p.msg_id)

    def _pod_publication(
        self, kind: EventKind, pod: RunningPod, *, phase: PodPhase | None = None, reason: str = ""
    ) -> Publication:
        # One per (kind, pod): a pod runs and finishes once, whichever attempt placed it.
        return announcements.pod_event(
            kind, pod.key, pod.uid, at=self.clock(), node=pod.node, phase=str(phase or ""), reason=reason
        )

    # -- plumbing --------------------------------------------------------------------------------

    async def _each(self, items: Sequence[_T], fn: Callable[[_T], Awaitable[_R]]) -> list[_R]:
        """``fn`` over ``items``, at most ``concurrency`` at once; results in order."""
        if not items:
            return []
        limit = asyncio.Semaphore(self.options.concurrency)

        async def one(item: _T) -> _R:
            async with limit:
                return await fn(item)

        return list(await asyncio.gather(*(one(item) for item in items)))

    async def _sleep(self, seconds: float) -> bool:
        """Wait ``seconds``; True (at once) when the service is stopping."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.stopping.wait(), seconds)
        return self.stopping.is_set()

    def _log_failure(
        self, event: str, exc: BaseException, *, log: StructuredLogger | None = None, **fields: object
    ) -> None:
        log = log or self.log
        if isinstance(exc, TRANSIENT_ERRORS):
            log.warning(event, error=repr(exc), **fields)
        else:
            log.log(logging.ERROR, event, exc_info=exc, error=repr(exc), **fields)

    def _store(self) -> ClusterState:
        if self.cluster is None:
            raise RuntimeError(f"{self.name}: not started")
        return self.cluster
