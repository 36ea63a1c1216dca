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

One module per part: `registration` (registration, heartbeat, inventory), `assignments`
(taking assignments), `finishing` (the timer, deletion), `resync` (rescan, resync, orphans),
over `running` (the table of pods this agent runs) and `_core` (what the parts share).
"""

from __future__ import annotations

import asyncio
import contextlib

from kubus.api.objects import Node
from kubus.bus import (
    NODE_PODS_ALL,
    NODES_STREAM,
    EventKind,
    agent_consumer,
    ensure_pull_consumer,
    event_filter,
    node_pods,
)
from kubus.gpu_agent.finishing import Finishing
from kubus.gpu_agent.inventory import NodeInventory
from kubus.gpu_agent.options import AgentOptions
from kubus.gpu_agent.registration import Registration
from kubus.gpu_agent.resync import Resync
from kubus.gpu_agent.simulation import simulated_nodes
from kubus.settings import ConnectionSettings
from kubus.store import ClusterState

__all__ = ["AgentService"]


class AgentService(Registration, Resync, Finishing):
    """The node agent; see the module docstring. Build it with `for_node` or `simulating`,
    or directly from the nodes it runs (``simulated`` picks the one-consumer-for-all mode)."""

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

    async def on_start(self) -> None:
        assert self.redis is not None and self.nc is not None and self.js is not None
        self.cluster = ClusterState(self.redis, clock=self.clock)
        # The consumer first: a simulation next to per-node agents fails here, before touching Redis.
        if self.simulated:
            durable, subject = agent_consumer(None), NODE_PODS_ALL
        else:
            (node,) = self._names
            durable, subject = agent_consumer(node), node_pods(node)
        subscription = self.intake(
            await ensure_pull_consumer(
                self.nc,
                self.js,
                NODES_STREAM.name,
                durable,
                subject,
                ack_wait=self.options.ack_wait,
                description="gpu-agent: the pods bound to its node(s).",
            )
        )
        await self._register(self._names)
        await self._beat()
        await self._rescan()
        # Deleted pods stop at once (the periodic resync catches events missed while away).
        self.intake(await self.nc.subscribe(event_filter(EventKind.POD_DELETED), cb=self._on_deleted))
        # Keeps the nodes alive in the node lifecycle's eyes (and re-registers lost ones).
        self.spawn("heartbeat", self._heartbeat_loop)
        # Admits and starts the pods bound to this agent's nodes.
        self._loops.append(self.spawn("assignments", self._assignment_loop, subscription))
        # Finishes pods whose run time is up (one timer for every pod).
        self._loops.append(self.spawn("finish pods", self._finish_loop))
        # Forgets pods that stopped being Running behind our back (missed deletions), adopts orphans.
        self.spawn("resync", self._resync_loop)

    async def on_stop(self) -> None:
        # The assignment loop finishes the batch in hand, the finisher the finishes under way.
        self.running.wake.set()
        for loop in self._loops:
            if not loop.done():
                with contextlib.suppress(BaseException):
                    await asyncio.shield(loop)
        if self.inventory is not None:
            self.inventory.close()
