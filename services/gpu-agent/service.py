"""The node agent: registers its node(s), heartbeats, admits and runs the pods bound to them.

One agent runs one real node (``--node``), or simulates many (``--simulate N``) in one process:
5,000 simulated nodes cost one consumer, one heartbeat pipeline every interval and one timer.

- **Registration.** ``put_node`` for every node, then a ``node.added`` event (``node.updated``
  when a node of that name existed and changed); unchanged nodes publish nothing. A node that
  disappears from Redis (an operator deleted it) is registered again on the next heartbeat.
- **Heartbeat** every ``heartbeat_interval`` (10 s, as kubelet renews its node lease; the node
  lifecycle's grace is 40 s), pipelined for all nodes; a node the lifecycle had marked
  unreachable is revived (``node.updated``). A real node's inventory (NVML's GPUs) is
  re-read every ``inventory_interval`` and stored again when it changed.
- **Assignments.** A durable pull consumer on KUBUS_NODES: ``kubus.node.<node>.pods`` for a
  real node, ``kubus.node.*.pods`` for a simulation (all its nodes through one consumer).
  KUBUS_NODES is a work-queue stream, where consumers' filters must not overlap: a simulating
  agent therefore owns the whole stream, and cannot share a NATS with per-node agents (or a
  second simulation); starting one next to the other fails with ConsumerConflictError.
- **Admission** (`kubus.gpu_agent.assignments`): the pod's reservation on this node must
  exist, be bound and be the assignment's attempt (`kubus.store.AdmissionView.refusal`, the
  checks START_POD makes atomically), else the assignment is dropped (acked, logged). Then the
  pod must fit the node's real allocatable next to the pods running there, with its GPU
  devices present, healthy (NVML, for a real node with GPUs) and free
  (`kubus.gpu_agent.admission`). A pod that does not fit fails as kubelet would fail it
  (``Failed``, reason ``OutOfcpu``...; room released, ``pod.finished``). Admitted: Bound →
  Running, a "Started" pod event, ``pod.running``. Assignments are admitted in batches (all
  that one fetch brings, up to ``batch``): one pipelined read of the pods and their
  reservations, every decision at once, one pipelined START_POD script per admitted pod (Bound
  → Running and its event, atomically, checking the reservation again), the ``pod.running``
  events published together, then the acks. If that fails, each assignment is admitted again
  alone, the same way. Under light load the agent lets a batch gather for up to ``batch_wait``
  (50 ms).
- **Finishing.** A pod runs ``pod_duration`` seconds (stretched by ``pod_duration_jitter``;
  0 = until deleted), then Running → Succeeded, ``release``, ``pod.finished``. One timer (a
  heap) serves every pod. On restart the agent rescans Redis for the Running pods on its
  nodes and finishes them on time (their start is the record's last update).
- **Deletion.** A ``pod.deleted`` event (its ``data.uid``, else the pod key) stops a pod this
  agent runs once Redis agrees it does not run there any more (an event is a claim: a forged or
  stale one stops nothing); the queue released its room already, the agent releases again
  (idempotent).
- **Resync** every ``resync_interval`` (30 s): pods no longer Running in Redis are forgotten
  (a deletion event missed), pods Running on these nodes with their room held that the agent
  does not run are taken over, and pods Bound to these nodes for longer than that without an
  assignment (a binder that bound but could not publish) are admitted as if assigned. Both
  read the phase indexes (one query per 5,000 running pods, one for the Bound pods), not
  every pod or node. A pod that runs until deleted costs nothing periodic beyond that.

It is composed of parts, one module each, each given what it needs and built once the
connections exist (`AgentParts`): `registration` (registration, heartbeat, inventory),
`assignments` (admitting assignments), `finishing` (the timer, deletion), `resync` (rescan,
resync, orphans); they share `running` (the table of pods this agent runs, `RunningPods`) and
the service runs their loops.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from nats.aio.client import Client as NATS
from nats.aio.msg import Msg
from nats.js import JetStreamContext

from kubus.api.objects import Node
from kubus.bus import (
    NODE_PODS_ALL,
    NODES_STREAM,
    EventKind,
    PullConsumer,
    agent_consumer,
    ensure_pull_consumer,
    event_filter,
    in_progress_while,
    node_pods,
)
from kubus.core.settings import ConnectionSettings
from kubus.gpu_agent._plumbing import log_failure
from kubus.gpu_agent.assignments import AdmissionResult, Assignments
from kubus.gpu_agent.finishing import Finishing
from kubus.gpu_agent.inventory import NodeInventory
from kubus.gpu_agent.options import AgentOptions
from kubus.gpu_agent.registration import Registration
from kubus.gpu_agent.resync import Resync
from kubus.gpu_agent.running import RunningPods
from kubus.gpu_agent.simulation import pod_duration, simulated_nodes
from kubus.runtime.service import Service
from kubus.store import ClusterState

__all__ = ["AgentParts", "AgentService"]


@dataclass(frozen=True, slots=True)
class AgentParts:
    """The parts of a started agent, each holding what it needs."""

    store: ClusterState
    registration: Registration
    assignments: Assignments
    finishing: Finishing
    resync: Resync


class AgentService(Service):
    """The node agent; see the module docstring. Build it with `for_node` or `simulating`,
    or directly from the nodes it runs (``simulated`` picks the one-consumer-for-all mode)."""

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
        opts = self.options
        self.running = RunningPods(
            self.nodes,
            lambda uid: pod_duration(uid, opts.pod_duration, opts.pod_duration_jitter),
            self.metrics.pods_running.set,
        )
        """The pods this agent runs, by uid."""
        self.parts: AgentParts | None = None
        """The parts, built by start() once the connections are open (None before)."""
        self._loops: list[asyncio.Task[None]] = []
        """The root tasks that finish the work in hand when the agent stops."""

    @classmethod
    def for_node(
        cls, settings: ConnectionSettings | None, inventory: NodeInventory, options: AgentOptions | None = None
    ) -> AgentService:
        """The agent of one real node, described by ``inventory``."""
        return cls(settings, [inventory.node()], options, inventory=inventory)

    @classmethod
    def simulating(
        cls,
        settings: ConnectionSettings | None,
        template: Node,
        count: int,
        options: AgentOptions | None = None,
        *,
        prefix: str = "sim-",
    ) -> AgentService:
        """An agent simulating ``count`` nodes cloned from ``template`` (see kubus.gpu_agent.simulation)."""
        return cls(settings, simulated_nodes(template, count, prefix), options, simulated=True)

    def _assemble(self, store: ClusterState, js: JetStreamContext) -> AgentParts:
        o, log, metrics = self.options, self.log, self.metrics
        registration = Registration(
            store=store, js=js, nodes=self.nodes, inventory=self.inventory, simulated=self.simulated, options=o,
            clock=self.clock, log=log, metrics=metrics,
        )  # fmt: skip
        assignments = Assignments(
            store=store, js=js, nodes=self.nodes, running=self.running, inventory=self.inventory, options=o,
            outage=self.outage, clock=self.clock, source=self.source, log=log, metrics=metrics,
        )  # fmt: skip
        finishing = Finishing(
            store=store, js=js, running=self.running, concurrency=o.concurrency, clock=self.clock,
            source=self.source, log=log, metrics=metrics,
        )  # fmt: skip
        resync = Resync(
            store=store, nodes=self.nodes, running=self.running, admit=assignments.admit_many, options=o,
            clock=self.clock, log=log, metrics=metrics,
        )  # fmt: skip
        return AgentParts(store, registration, assignments, finishing, resync)

    async def on_start(self) -> None:
        if self.nc is None or self.js is None or self.redis is None:
            raise RuntimeError(f"{self.name}: needs NATS and Redis (settings)")
        self.parts = parts = self._assemble(ClusterState(self.redis, clock=self.clock), self.js)
        # The consumer first: a simulation next to per-node agents fails here, before touching Redis.
        subscription = self.intake(await self._consumer(self.nc, self.js))
        await parts.registration.register(list(self.nodes))
        await parts.registration.beat()
        await parts.resync.rescan()
        # Deleted pods stop at once (the periodic resync catches events missed while away).
        self.intake(await self.nc.subscribe(event_filter(EventKind.POD_DELETED), cb=parts.finishing.on_deleted))
        # Keeps the nodes alive in the node lifecycle's eyes (and re-registers lost ones).
        self.spawn("heartbeat", self._heartbeat_loop, parts.registration)
        # Admits and starts the pods bound to this agent's nodes.
        self._loops.append(self.spawn("assignments", self._assignment_loop, subscription))
        # Finishes pods whose run time is up (one timer for every pod).
        self._loops.append(self.spawn("finish pods", parts.finishing.finish_due, self.stopping))
        # Forgets pods that stopped being Running behind our back (missed deletions), adopts orphans.
        self.spawn("resync", self._resync_loop, parts.resync)

    async def _consumer(self, nc: NATS, js: JetStreamContext) -> PullConsumer:
        """The durable consumer of this agent's assignments (see the module docstring)."""
        if self.simulated:
            durable, subject = agent_consumer(None), NODE_PODS_ALL
        else:
            (node,) = self.nodes
            durable, subject = agent_consumer(node), node_pods(node)
        return await ensure_pull_consumer(
            nc,
            js,
            NODES_STREAM.name,
            durable,
            subject,
            ack_wait=self.options.ack_wait,
            description="gpu-agent: the pods bound to its node(s).",
        )

    async def on_stop(self) -> None:
        # The assignment loop finishes the batch in hand, the finisher the finishes under way.
        self.running.wake.set()
        for loop in self._loops:
            if not loop.done():
                with contextlib.suppress(BaseException):
                    await asyncio.shield(loop)
        if self.inventory is not None:
            self.inventory.close()

    # -- assignments -----------------------------------------------------------------------------

    async def handle(self, msg: Msg) -> AdmissionResult | None:
        """Handle one delivered NodeAssignment to the end: `handle_batch` of one."""
        return (await self.handle_batch([msg]))[0]

    async def handle_batch(self, messages: Sequence[Msg]) -> list[AdmissionResult | None]:
        """Handle delivered NodeAssignments to the end (`Assignments.handle_batch`). Raises
        RuntimeError before start()."""
        if self.parts is None:
            raise RuntimeError(f"{self.name}: not started")
        return await self.parts.assignments.handle_batch(messages)

    # -- the parts' loops ------------------------------------------------------------------------

    async def _assignment_loop(self, subscription: PullConsumer) -> None:
        while not self.stopping.is_set():
            began = time.monotonic()
            messages = await self.fetch(subscription, self.options.batch, self.options.fetch_timeout)
            if not messages:
                continue
            async with in_progress_while(messages, self.options.ack_wait / 3):
                await self.handle_batch(messages)
            if len(messages) < self.options.batch:  # light load: let the next batch gather
                left = self.options.batch_wait - (time.monotonic() - began)
                if left > 0:
                    await self._sleep(left)

    async def _heartbeat_loop(self, registration: Registration) -> None:
        last_inventory = time.monotonic()
        while not await self._sleep(self.options.heartbeat_interval):
            try:
                await registration.beat()
                if time.monotonic() - last_inventory >= self.options.inventory_interval:
                    last_inventory = time.monotonic()
                    await registration.refresh_inventory()
            except Exception as exc:
                log_failure(self.log, "heartbeat failed", exc)

    async def _resync_loop(self, resync: Resync) -> None:
        while not await self._sleep(self.options.resync_interval):
            try:
                await resync.resync()
                await resync.adopt_untracked()
                await resync.adopt_orphans()
            except Exception as exc:
                log_failure(self.log, "resync failed", exc)

    async def _sleep(self, seconds: float) -> bool:
        """Wait ``seconds``; True (at once) when the service is stopping."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.stopping.wait(), seconds)
        return self.stopping.is_set()
