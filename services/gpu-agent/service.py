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
- **Admission** (`kubus.gpu_agent.admission`): the pod's reservation on this node must exist,
  be bound and be the assignment's attempt, else the assignment is dropped (acked, logged).
  Then the pod must fit the node's real allocatable next to the pods running there, with its
  GPU devices present, healthy (NVML, for a real node with GPUs) and free. A pod that does
  not fit fails as kubelet would fail it (``Failed``, reason ``OutOfcpu``...; room released,
  ``pod.finished``). Admitted: Bound → Running, a "Started" pod event, ``pod.running``.
  Assignments are admitted in batches (all that one fetch brings, up to ``batch``): one
  pipelined read of the pods and their reservations, every decision at once, one pipelined
  START_POD script per admitted pod (Bound → Running and its event, atomically, checking the
  reservation again), the ``pod.running`` events published together, then the acks. Under
  light load the agent lets a batch gather for up to ``batch_wait`` (50 ms).
- **Finishing.** A pod runs ``pod_duration`` seconds (stretched by ``pod_duration_jitter``;
  0 = until deleted), then Running → Succeeded, ``release``, ``pod.finished``. One timer (a
  heap) serves every pod. On restart the agent rescans Redis for the Running pods on its
  nodes and finishes them on time (their start is the record's last update).
- **Deletion.** A ``pod.deleted`` event (its ``data.uid``, else the pod key) stops a pod this
  agent runs; the queue released its room already, the agent releases again (idempotent).
- **Resync** every ``resync_interval`` (30 s): pods no longer Running in Redis are forgotten
  (a deletion event missed), and pods Bound to these nodes for longer than that without an
  assignment (a binder that bound but could not publish) are admitted as if assigned. Both
  read the phase indexes (one query per 5,000 running pods, one for the Bound pods), not
  every pod or node. A pod that runs until deleted costs nothing periodic beyond that.
"""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import logging
import socket
import time
import uuid
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, TypeVar

from nats.aio.msg import Msg
from nats.js import JetStreamContext

from kubus.api.objects import Node
from kubus.bus import (
    NODE_PODS_ALL,
    NODES_STREAM,
    EventKind,
    Publication,
    consumer_name,
    deliveries,
    ensure_pull_consumer,
    event_filter,
    event_subject,
    node_pods,
    publish_durable,
    publish_durable_many,
    redelivery_delay,
)
from kubus.bus.messages import ClusterEvent, MessageError, NodeAssignment, decode, encode
from kubus.gpu_agent.admission import Verdict, admit
from kubus.gpu_agent.inventory import NodeInventory
from kubus.gpu_agent.simulation import pod_duration, simulated_nodes
from kubus.service import TRANSIENT_ERRORS, Service, StructuredLogger
from kubus.settings import ConnectionSettings
from kubus.store import (
    AdmissionView,
    ClusterState,
    EventType,
    PodEvent,
    PodPhase,
    PodStart,
    Reservation,
    ReservationState,
    StoreCode,
)

__all__ = ["AdmissionResult", "AgentOptions", "AgentService", "RunningPod"]

_T = TypeVar("_T")
_R = TypeVar("_R")


class AdmissionResult(StrEnum):
    """What became of one NodeAssignment: the ``result`` label of kubus_pod_admissions_total."""

    ADMITTED = "admitted"
    """Running now (or already: a redelivery)."""
    REJECTED = "rejected"
    """Did not fit the node as it is: Failed, room released."""
    DROPPED = "dropped"
    """Not this agent's to run (no bound reservation of this attempt, deleted, finished)."""
    RETRY = "retry"
    """A transient error: nak'ed, to be delivered again."""


@dataclass(frozen=True, slots=True)
class AgentOptions:
    """How an agent works; the defaults are a real node's."""

    heartbeat_interval: float = 10.0
    """Seconds between heartbeats. Kubelet renews its node lease every 10 s (a quarter of the
    40 s lease) and the node lifecycle marks a node unreachable after ``node_grace`` (40 s)
    without one: four beats per grace, as kube. Simulated nodes cost a Lua call each per beat."""
    pod_duration: float = 0.0
    """Seconds a pod runs before it succeeds; 0 = until it is deleted."""
    pod_duration_jitter: float = 0.0
    """Each pod runs pod_duration × a factor in [1 - jitter, 1 + jitter], drawn from its uid."""
    batch: int = 256
    """Assignments fetched and admitted together at most (a few pipelined round trips per batch)."""
    batch_wait: float = 0.05
    """After a batch smaller than ``batch``, seconds (from the start of its fetch) to let more
    assignments gather before the next fetch: fewer, larger batches under light load, at the
    cost of at most this much added start latency. 0 = fetch again at once."""
    ack_wait: float = 30.0
    """Seconds JetStream waits for an ack before delivering an assignment again."""
    max_deliver: int = 5
    """Deliveries of one assignment at most (transient errors are retried until then)."""
    fetch_timeout: float = 1.0
    """Seconds one fetch waits for assignments (how quickly an idle agent notices stop)."""
    resync_interval: float = 30.0
    """Seconds between checks that the pods this agent runs are still Running in Redis."""
    inventory_interval: float = 30.0
    """Seconds between re-reads of a real node's inventory (NVML); simulations never change."""
    concurrency: int = 64
    """Redis/NATS calls in flight at once when registering or finishing many pods."""

    def __post_init__(self) -> None:
        for name in ("heartbeat_interval", "ack_wait", "fetch_timeout", "resync_interval", "inventory_interval"):
            if not getattr(self, name) > 0:
                raise ValueError(f"{name}: must be a positive number of seconds, got {getattr(self, name)!r}")
        if self.batch_wait < 0:
            raise ValueError(f"batch_wait: must be 0 or more seconds, got {self.batch_wait}")
        if self.pod_duration < 0:
            raise ValueError(f"pod_duration: must be 0 (forever) or more seconds, got {self.pod_duration}")
        if not 0.0 <= self.pod_duration_jitter <= 1.0:
            raise ValueError(f"pod_duration_jitter: must be a fraction in [0, 1], got {self.pod_duration_jitter}")
        for name in ("batch", "max_deliver", "concurrency"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name}: must be at least 1, got {getattr(self, name)}")


@dataclass(slots=True)
class RunningPod:
    """A pod this agent runs."""

    uid: str
    key: str
    node: str
    reservation: Reservation | None
    """What it holds on the node (None if Redis had no reservation for a rescanned pod)."""
    started_at: float
    """Seconds since the epoch."""
    deadline: float
    """When it succeeds, seconds since the epoch; 0 = never."""
    confirmed: bool = True
    """Redis has it Running. False while its Bound → Running transition is under way: it holds
    its room in admission already, but neither the timer nor the resync may touch it yet."""


class AgentService(Service):
    """The node agent; see the module docstring. Build it with `for_node` or `simulating`,
    or directly from the nodes it runs (``simulated`` picks the one-consumer-for-all mode)."""

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
        self.running: dict[str, RunningPod] = {}
        """The pods this agent runs, by uid."""
        self._on_node: dict[str, dict[str, RunningPod]] = {n: {} for n in self.nodes}
        self._by_key: dict[str, str] = {}
        self._timers: list[tuple[float, str]] = []
        self._wake = asyncio.Event()
        self._loops: list[asyncio.Task[None]] = []
        self._names = list(self.nodes)

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

    # -- lifecycle -------------------------------------------------------------------------------

    async def on_start(self) -> None:
        assert self.redis is not None and self.nc is not None and self.js is not None
        self.cluster = ClusterState(self.redis, clock=self.clock)
        # The consumer first: a simulation next to per-node agents fails here, before touching Redis.
        if self.simulated:
            durable, subject = "kubus-agent-simulated", NODE_PODS_ALL
        else:
            (node,) = self._names
            durable, subject = consumer_name("kubus-agent", node), node_pods(node)
        subscription = self.intake(
            await ensure_pull_consumer(
                self.js,
                NODES_STREAM.name,
                durable,
                subject,
                ack_wait=self.options.ack_wait,
                max_deliver=self.options.max_deliver,
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
        # Forgets pods that stopped being Running behind our back (missed deletions).
        self.spawn("resync", self._resync_loop)

    async def on_stop(self) -> None:
        # The assignment loop finishes the batch in hand, the finisher the finishes under way.
        self._wake.set()
        for loop in self._loops:
            if not loop.done():
                with contextlib.suppress(BaseException):
                    await asyncio.shield(loop)
        if self.inventory is not None:
            self.inventory.close()

    # -- registration and heartbeat --------------------------------------------------------------

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

    # -- assignments -----------------------------------------------------------------------------

    async def _assignment_loop(self, subscription: JetStreamContext.PullSubscription) -> None:
        while not self.stopping.is_set():
            began = time.monotonic()
            messages = await self.fetch(subscription, self.options.batch, self.options.fetch_timeout)
            if not messages:
                continue
            await self.handle_batch(messages)
            if len(messages) < self.options.batch:  # light load: let the next batch gather
                left = self.options.batch_wait - (time.monotonic() - began)
                if left > 0:
                    await self._sleep(left)

    async def handle_batch(self, messages: Sequence[Msg]) -> list[AdmissionResult | None]:
        """Handle delivered NodeAssignments to the end (each acked, nak'ed or terminated), in
        order; never raises (but for cancellation). None for garbage or another agent's node.

        The batch is admitted together (`_admit_many`: a few pipelined round trips to Redis and
        one to JetStream, whatever its size), the same pod delivered twice in it once. Should
        that fail, the batch is handled again one assignment at a time (`handle`), so a bad one
        costs only itself its retries; every step is idempotent, so nothing runs twice."""
        results: list[AdmissionResult | None] = [None] * len(messages)
        positions: dict[str, list[int]] = {}
        assignments: list[NodeAssignment] = []
        for i, msg in enumerate(messages):
            try:
                assignment = decode(NodeAssignment, msg.data)
                _check(assignment)
            except MessageError as exc:
                await self._reject(msg, str(exc))
                continue
            if assignment.node not in self.nodes:
                await self._reject(msg, f"node {assignment.node!r} is not one of this agent's nodes")
                continue
            if assignment.uid in positions:
                positions[assignment.uid].append(i)
                continue
            positions[assignment.uid] = [i]
            assignments.append(assignment)
        if not assignments:
            return results
        try:
            admitted = await self._admit_many(assignments)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            self._log_failure("batch admission failed, admitting one by one", exc, pods=len(assignments))
            singles = [i for where in positions.values() for i in where]
            done = await asyncio.gather(*(self.handle(messages[i]) for i in singles))
            for i, result in zip(singles, done, strict=True):
                results[i] = result
            return results
        counts: dict[AdmissionResult, int] = {}
        for assignment, result in zip(assignments, admitted, strict=True):
            for i in positions[assignment.uid]:
                results[i] = result
                counts[result] = counts.get(result, 0) + 1
                with contextlib.suppress(Exception):  # an ack that does not arrive: redelivered, idempotent
                    await messages[i].ack()
        for result, n in counts.items():
            self.metrics.pod_admissions.labels(result=str(result)).inc(n)
        return results

    async def handle(self, msg: Msg) -> AdmissionResult | None:
        """Handle one delivered NodeAssignment to the end (acked, nak'ed or terminated). Never
        raises (but for cancellation). None for garbage or another agent's node."""
        try:
            assignment = decode(NodeAssignment, msg.data)
            _check(assignment)
        except MessageError as exc:
            await self._reject(msg, str(exc))
            return None
        if assignment.node not in self.nodes:
            await self._reject(msg, f"node {assignment.node!r} is not one of this agent's nodes")
            return None
        log = self.log.bind(pod=assignment.key, uid=assignment.uid, node=assignment.node)
        try:
            result = await self._admit(assignment, log)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            delivered = deliveries(msg)
            if delivered < self.options.max_deliver:
                self._log_failure("admission failed, will retry", exc, log=log, delivery=delivered)
                with contextlib.suppress(Exception):
                    await msg.nak(delay=redelivery_delay(delivered))
                result = AdmissionResult.RETRY
            else:
                self._log_failure("admission failed on the last delivery; pod left Bound", exc, log=log)
                with contextlib.suppress(Exception):
                    await msg.term()
                result = AdmissionResult.DROPPED
        else:
            await msg.ack()
        self.metrics.pod_admissions.labels(result=str(result)).inc()
        return result

    async def _admit_many(self, assignments: Sequence[NodeAssignment]) -> list[AdmissionResult]:
        """Admit assignments of distinct pods, as `_admit` does one, in a few round trips: read
        every pod and its reservation (one pipeline), decide every admission at once (no await
        in between, so admissions on one node see each other), start the admitted pods (one
        pipeline of START_POD scripts, each checking again and appending its "Started" event),
        publish their ``pod.running`` events together, then the rare rejections and releases.
        Every return means "done with it" (ack); raises on Redis/NATS errors, with no pod left
        half-tracked (a retry finds the ones that started Running in Redis)."""
        state = self._store()
        results: list[AdmissionResult | None] = [None] * len(assignments)
        running: list[RunningPod] = []
        """Pods to announce ``pod.running`` for."""
        fresh = [i for i, a in enumerate(assignments) if a.uid not in self.running]
        for i, a in enumerate(assignments):
            if a.uid in self.running:  # a redelivery of a pod running here
                running.append(self.running[a.uid])
                results[i] = AdmissionResult.ADMITTED
        views = await state.admission_views([(assignments[i].node, assignments[i].uid) for i in fresh])

        releases: list[NodeAssignment] = []
        rejected: list[tuple[NodeAssignment, Verdict]] = []
        starting: list[tuple[int, RunningPod]] = []
        starts: list[PodStart] = []
        now = self.clock()
        device_healthy = self.inventory.device_healthy if self.inventory is not None else None
        for i, view in zip(fresh, views, strict=True):
            a = assignments[i]
            if a.uid in self.running:  # admitted meanwhile (an orphan adopted during the read)
                running.append(self.running[a.uid])
                results[i] = AdmissionResult.ADMITTED
                continue
            reservation = view.reservation
            drop = _dropped(a, view)
            if drop is not None:
                if view.phase is not None and view.phase.terminal and view.pod_node == a.node:
                    releases.append(a)  # finished or deleted: its room goes back (idempotent)
                self._log_drop(a, drop)
                results[i] = AdmissionResult.DROPPED
                continue
            assert reservation is not None
            if view.phase is PodPhase.RUNNING:  # running here, but forgotten (a restart in between)
                running.append(
                    self._track(a.uid, a.key, a.node, reservation, started_at=view.updated_at, confirmed=True)
                )
                results[i] = AdmissionResult.ADMITTED
                continue
            others = (p.reservation for p in self._on_node[a.node].values() if p.reservation is not None)
            verdict = admit(self.nodes[a.node], reservation, others, device_healthy=device_healthy)
            if not verdict.admitted:
                rejected.append((a, verdict))
                results[i] = AdmissionResult.REJECTED
                continue
            pod = self._track(a.uid, a.key, a.node, reservation, started_at=now, confirmed=False)
            starting.append((i, pod))
            event = PodEvent(now, EventType.NORMAL, "Started", f"Started pod on node {a.node}", self.source)
            starts.append(PodStart(a.uid, a.node, str(a.attempt) if a.attempt else "", event))

        if starts:
            try:
                outcomes = await state.start_pods(starts)
            except BaseException:
                for _, pod in starting:
                    if self.running.get(pod.uid) is pod:
                        self._untrack(pod.uid)
                raise
            started = 0
            for (i, pod), outcome in zip(starting, outcomes, strict=True):
                if outcome.started:
                    self._confirm(pod)
                    running.append(pod)
                    results[i] = AdmissionResult.ADMITTED
                    started += 1
                    continue
                if self.running.get(pod.uid) is pod:
                    self._untrack(pod.uid)
                if outcome.code is StoreCode.GONE:
                    releases.append(assignments[i])
                self.log.info(
                    "assignment dropped: the pod moved on",
                    pod=pod.key,
                    uid=pod.uid,
                    node=pod.node,
                    code=str(outcome.code),
                    phase=str(outcome.phase or "-"),
                    reason=outcome.reason or "-",
                )
                results[i] = AdmissionResult.DROPPED
            if started:
                self.log.info("pods running", pods=started, running=len(self.running))

        await self._each(releases, lambda a: state.release(a.node, a.uid))
        await self._each(
            rejected, lambda item: self._fail(item[0], item[1], self.log.bind(pod=item[0].key, uid=item[0].uid))
        )
        if running:
            await publish_durable_many(self._js(), [self._pod_publication(EventKind.POD_RUNNING, p) for p in running])
        return [r if r is not None else AdmissionResult.DROPPED for r in results]

    def _log_drop(self, a: NodeAssignment, why: str) -> None:
        level = logging.INFO if why.startswith("pod already finished") else logging.WARNING
        self.log.log(level, f"assignment dropped: {why}", pod=a.key, uid=a.uid, node=a.node)

    async def _admit(self, a: NodeAssignment, log: StructuredLogger) -> AdmissionResult:
        """Admit one assignment; every return means "done with it" (ack). Raises on Redis/NATS errors."""
        state = self._store()
        if a.uid in self.running:  # a redelivery of a pod running here
            await self._pod_event(EventKind.POD_RUNNING, self.running[a.uid])
            return AdmissionResult.ADMITTED
        reservation, record = await asyncio.gather(state.reservation(a.node, a.uid), state.get_pod(a.uid))
        if record is None:
            log.warning("assignment dropped: no such pod")
            return AdmissionResult.DROPPED
        if record.phase.terminal:
            if record.node == a.node:
                await state.release(a.node, a.uid)  # finished or deleted: its room goes back (idempotent)
            log.info("assignment dropped: pod already finished", phase=str(record.phase))
            return AdmissionResult.DROPPED
        if record.node != a.node:
            log.warning("assignment dropped: the pod is on another node", pod_node=record.node or "-")
            return AdmissionResult.DROPPED
        if reservation is None or reservation.state is not ReservationState.BOUND:
            why = "no reservation" if reservation is None else "its reservation is not bound"
            log.warning("assignment dropped: no bound reservation on this node", reason=why)
            return AdmissionResult.DROPPED
        if a.attempt and reservation.attempt != str(a.attempt):
            log.warning("assignment dropped: the reservation is another attempt's", reservation=reservation.attempt)
            return AdmissionResult.DROPPED
        if record.phase is PodPhase.RUNNING:  # running here, but forgotten (a restart in between)
            if a.uid not in self.running:
                self._track(a.uid, a.key, a.node, reservation, started_at=record.updated_at, confirmed=True)
            await self._pod_event(EventKind.POD_RUNNING, self.running[a.uid])
            return AdmissionResult.ADMITTED
        if record.phase is not PodPhase.BOUND:
            log.warning("assignment dropped: the pod is not bound", phase=str(record.phase))
            return AdmissionResult.DROPPED

        # Decide and record in one step (no await in between): concurrent admissions on this
        # node see each other.
        if a.uid in self.running:
            return AdmissionResult.ADMITTED
        others = (p.reservation for p in self._on_node[a.node].values() if p.reservation is not None)
        device_healthy = self.inventory.device_healthy if self.inventory is not None else None
        verdict = admit(self.nodes[a.node], reservation, others, device_healthy=device_healthy)
        if not verdict.admitted:
            await self._fail(a, verdict, log)
            return AdmissionResult.REJECTED
        pod = self._track(a.uid, a.key, a.node, reservation, started_at=self.clock(), confirmed=False)
        try:
            write = await state.transition(a.uid, PodPhase.RUNNING, expected_phases={PodPhase.BOUND})
        except BaseException:
            self._untrack(a.uid)
            raise
        if write.code in (StoreCode.OK, StoreCode.ALREADY):
            self._confirm(pod)
            if write.code is StoreCode.OK:
                message = f"Started pod on node {a.node}"
                await state.append_event(
                    a.uid, PodEvent(self.clock(), EventType.NORMAL, "Started", message, self.source)
                )
            await self._pod_event(EventKind.POD_RUNNING, pod)
            log.info("pod running", finishes_in=round(pod.deadline - pod.started_at, 3) if pod.deadline else "never")
            return AdmissionResult.ADMITTED
        self._untrack(a.uid)
        if write.code is StoreCode.GONE:
            await state.release(a.node, a.uid)
        log.info("assignment dropped: the pod moved on", code=str(write.code), phase=str(write.phase or "-"))
        return AdmissionResult.DROPPED

    async def _fail(self, a: NodeAssignment, verdict: Verdict, log: StructuredLogger) -> None:
        """The pod does not fit the node as it is: it fails, as kubelet fails it, and its room goes back."""
        state = self._store()
        write = await state.transition(
            a.uid, PodPhase.FAILED, expected_phases={PodPhase.BOUND}, reason=verdict.reason, message=verdict.message
        )
        if write.code in (StoreCode.OK, StoreCode.ALREADY, StoreCode.GONE):
            await state.release(a.node, a.uid)
        if write.code is StoreCode.OK:
            event = PodEvent(self.clock(), EventType.WARNING, verdict.reason, verdict.message, self.source)
            await state.append_event(a.uid, event)
            pod = RunningPod(a.uid, a.key, a.node, None, self.clock(), 0.0)
            await self._pod_event(EventKind.POD_FINISHED, pod, phase=PodPhase.FAILED, reason=verdict.reason)
        log.warning("pod rejected at admission", reason=verdict.reason, message=verdict.message, code=str(write.code))

    # -- running pods ----------------------------------------------------------------------------

    def _track(
        self, uid: str, key: str, node: str, reservation: Reservation | None, *, started_at: float, confirmed: bool
    ) -> RunningPod:
        duration = pod_duration(uid, self.options.pod_duration, self.options.pod_duration_jitter)
        deadline = started_at + duration if duration > 0 else 0.0
        pod = RunningPod(uid, key, node, reservation, started_at, deadline, confirmed=False)
        self.running[uid] = pod
        self._on_node[node][uid] = pod
        self._by_key[key] = uid
        self.metrics.pods_running.set(len(self.running))
        if confirmed:
            self._confirm(pod)
        return pod

    def _confirm(self, pod: RunningPod) -> None:
        """Redis has the pod Running: its run time counts down from now on."""
        if pod.confirmed:
            return
        pod.confirmed = True
        if pod.deadline:
            self._schedule(pod, pod.deadline)

    def _untrack(self, uid: str) -> RunningPod | None:
        pod = self.running.pop(uid, None)
        if pod is not None:
            self._on_node[pod.node].pop(uid, None)
            if self._by_key.get(pod.key) == uid:
                del self._by_key[pod.key]
            self.metrics.pods_running.set(len(self.running))
        return pod

    def _schedule(self, pod: RunningPod, deadline: float) -> None:
        pod.deadline = deadline
        if not self._timers or deadline < self._timers[0][0]:
            self._wake.set()
        heapq.heappush(self._timers, (deadline, pod.uid))

    async def _finish_loop(self) -> None:
        while not self.stopping.is_set():
            now = self.clock()
            due: list[RunningPod] = []
            while self._timers and self._timers[0][0] <= now:
                deadline, uid = heapq.heappop(self._timers)
                pod = self.running.get(uid)
                if pod is not None and pod.deadline == deadline:  # else stale: rescheduled or gone
                    due.append(pod)
            if due:
                await self._each(due, self._finish_guarded)
                continue
            self._wake.clear()
            timeout = max(0.0, self._timers[0][0] - now) if self._timers else None
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), timeout)

    async def _finish_guarded(self, pod: RunningPod) -> None:
        try:
            await self.finish(pod)
        except Exception as exc:
            self._log_failure("finishing a pod failed, retrying in a second", exc, pod=pod.key, uid=pod.uid)
            if self.running.get(pod.uid) is pod:
                self._schedule(pod, self.clock() + 1.0)

    async def finish(self, pod: RunningPod) -> None:
        """Running → Succeeded, release its room, ``pod.finished``. Idempotent; raises on
        Redis/NATS errors (the caller retries)."""
        state = self._store()
        write = await state.transition(pod.uid, PodPhase.SUCCEEDED, expected_phases={PodPhase.RUNNING})
        await state.release(pod.node, pod.uid)  # every outcome: the pod does not run here any more
        if write.code in (StoreCode.OK, StoreCode.ALREADY):
            if write.code is StoreCode.OK:
                ran = round(self.clock() - pod.started_at, 3)
                event = PodEvent(
                    self.clock(), EventType.NORMAL, "Completed", f"Pod ran {ran}s and succeeded", self.source
                )
                await state.append_event(pod.uid, event)
            await self._pod_event(EventKind.POD_FINISHED, pod, phase=PodPhase.SUCCEEDED)
            self.log.info("pod succeeded", pod=pod.key, uid=pod.uid, node=pod.node)
        else:
            self.log.info("pod stopped: it moved on", pod=pod.key, uid=pod.uid, code=str(write.code))
        self._untrack(pod.uid)

    async def _on_deleted(self, msg: Msg) -> None:
        try:
            event = decode(ClusterEvent, msg.data)
        except MessageError as exc:
            self.log.warning("pod.deleted event unreadable", subject=msg.subject, error=str(exc))
            return
        uid = event.data.get("uid")
        if not isinstance(uid, str) or not uid:  # no uid in the event: the pod of that name
            uid = self._by_key.get(event.name)
        pod = self._untrack(uid) if uid else None
        if pod is None:
            return
        try:
            await self._store().release(pod.node, pod.uid)
        except Exception as exc:
            self._log_failure("release after deletion failed (the queue releases too)", exc, pod=pod.key)
        self.log.info("pod stopped: deleted", pod=pod.key, uid=pod.uid, node=pod.node)

    async def _rescan(self) -> None:
        """Take over the Running pods of this agent's nodes, as Redis has them (after a restart)."""
        state = self._store()
        pods = [p for p in await state.pods_in_phase(PodPhase.RUNNING) if p.node in self.nodes]
        reservations = await self._each(pods, lambda p: state.reservation(p.node, p.uid))
        for record, reservation in zip(pods, reservations, strict=True):
            if record.uid not in self.running:
                if reservation is None:
                    self.log.warning("running pod without a reservation", pod=record.key, node=record.node)
                self._track(
                    record.uid, record.key, record.node, reservation, started_at=record.updated_at, confirmed=True
                )
        if pods:
            self.log.info("running pods taken over", pods=len(pods))

    async def _resync(self) -> None:
        """Forget tracked pods that are not Running on their node in Redis any more."""
        state = self._store()
        pods = [pod for pod in self.running.values() if pod.confirmed]
        if pods:
            # The Running index changes atomically with the records: one membership query per
            # 5,000 pods, and only the pods it misses are read. A Running pod never changes
            # node (bound is for life), so the index says all there is.
            index = state.keys.phase_index(str(PodPhase.RUNNING))
            suspects: list[RunningPod] = []
            for start in range(0, len(pods), 5000):
                chunk = pods[start : start + 5000]
                flags = await state.redis.smismember(index, [pod.uid for pod in chunk])
                suspects += [pod for pod, member in zip(chunk, flags, strict=True) if not int(member)]
            pods = suspects
        for start in range(0, len(pods), 500):
            chunk = pods[start : start + 500]
            pipe = state.redis.pipeline(transaction=False)
            for pod in chunk:
                pipe.hmget(state.keys.pod_record(pod.uid), "phase", "node")
            for pod, (phase, node) in zip(chunk, await pipe.execute(), strict=True):
                if _str(phase) == PodPhase.RUNNING and _str(node) == pod.node:
                    continue
                if self.running.get(pod.uid) is pod:
                    self._untrack(pod.uid)
                    await state.release(pod.node, pod.uid)
                    self.log.info("pod forgotten: not running any more", pod=pod.key, phase=_str(phase) or "-")

    async def _adopt_orphans(self) -> None:
        """Run the pods Bound to this agent's nodes whose assignment never came (a binder that
        bound the pod but could not publish to the node): bound longer than a resync interval,
        held by a bound reservation, not running here. Admitted as if assigned (idempotent with
        an assignment arriving late)."""
        state = self._store()
        # The Bound index is exact (changed with the records): a few pods, not every node.
        candidates = [uid for uid in await state.pod_uids_in_phase(PodPhase.BOUND) if uid not in self.running]
        if not candidates:
            return
        now = self.clock()
        orphans = [
            record
            for record in await state.get_pods(candidates)
            if record is not None
            and record.phase is PodPhase.BOUND
            and record.node in self.nodes
            and record.uid not in self.running
            and now - record.updated_at >= self.options.resync_interval
        ]
        if not orphans:
            return
        # Only pods held by a bound reservation on their node (the others are not ours to run).
        views = await state.admission_views([(record.node, record.uid) for record in orphans])
        assignments: list[NodeAssignment] = []
        for record, view in zip(orphans, views, strict=True):
            if view.reservation is None or view.reservation.state is not ReservationState.BOUND:
                continue
            assignments.append(
                NodeAssignment(
                    uid=record.uid,
                    key=record.key,
                    node=record.node,
                    manifest=record.manifest,
                    gpu_devices=record.gpu_devices,
                )
            )
            self.log.warning(
                "bound pod without an assignment: admitting it",
                pod=record.key,
                uid=record.uid,
                node=record.node,
                bound_for=round(now - record.updated_at, 1),
            )
        for result in await self._admit_many(assignments) if assignments else []:
            self.metrics.pod_admissions.labels(result=str(result)).inc()

    async def _resync_loop(self) -> None:
        while not await self._sleep(self.options.resync_interval):
            try:
                await self._resync()
                await self._adopt_orphans()
            except Exception as exc:
                self._log_failure("resync failed", exc)

    # -- events and helpers ----------------------------------------------------------------------

    async def _node_event(self, kind: EventKind, name: str, generation: int) -> None:
        event = ClusterEvent(kind=kind.value, name=name, node=name, at=self.clock(), data={"generation": generation})
        # A deleted node registered again starts over at generation 1: the nonce keeps its msg id new.
        msg_id = f"{kind.value}/{name}/{generation}/{uuid.uuid4().hex}"
        await publish_durable(self._js(), event_subject(kind, name), encode(event), msg_id)

    async def _pod_event(
        self, kind: EventKind, pod: RunningPod, *, phase: PodPhase | None = None, reason: str = ""
    ) -> None:
        p = self._pod_publication(kind, pod, phase=phase, reason=reason)
        await publish_durable(self._js(), p.subject, p.payload, p.msg_id)

    def _pod_publication(
        self, kind: EventKind, pod: RunningPod, *, phase: PodPhase | None = None, reason: str = ""
    ) -> Publication:
        data: dict[str, Any] = {"uid": pod.uid}
        if phase is not None:
            data["phase"] = str(phase)
        event = ClusterEvent(kind=kind.value, name=pod.key, node=pod.node, at=self.clock(), reason=reason, data=data)
        return Publication(event_subject(kind, pod.key), encode(event), f"{kind.value}/{pod.uid}")

    async def _reject(self, msg: Msg, reason: str) -> None:
        self.metrics.rejected_messages.labels(subject=msg.subject).inc()
        self.log.error("assignment rejected", subject=msg.subject, reason=reason)
        with contextlib.suppress(Exception):
            await msg.term()

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
        self, event: str, exc: BaseException, *, log: StructuredLogger | None = None, **fields: Any
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

    def _js(self) -> JetStreamContext:
        if self.js is None:
            raise RuntimeError(f"{self.name}: not started")
        return self.js


def _check(a: NodeAssignment) -> None:
    """MessageError for an assignment no agent can act on."""
    for name in ("uid", "key", "node"):
        if not getattr(a, name):
            raise MessageError(f"NodeAssignment.{name}: empty")
    if "/" not in a.key:
        raise MessageError(f"NodeAssignment.key: {a.key!r} is not namespace/name")
    if a.attempt < 0:
        raise MessageError(f"NodeAssignment.attempt: negative ({a.attempt})")


def _dropped(a: NodeAssignment, view: AdmissionView) -> str | None:
    """Why an assignment is not this agent's to run, as its pod and reservation are (see
    `AgentService._admit`), or None: the pod is Bound or Running here with a bound reservation
    of the assignment's attempt."""
    if view.phase is None:
        return "no such pod"
    if view.phase.terminal:
        return f"pod already finished ({view.phase})"
    if view.pod_node != a.node:
        return f"the pod is on another node ({view.pod_node or '-'})"
    reservation = view.reservation
    if reservation is None:
        return "no bound reservation on this node (no reservation)"
    if reservation.state is not ReservationState.BOUND:
        return "no bound reservation on this node (its reservation is not bound)"
    if a.attempt and reservation.attempt != str(a.attempt):
        return f"the reservation is another attempt's ({reservation.attempt})"
    if view.phase not in (PodPhase.BOUND, PodPhase.RUNNING):
        return f"the pod is not bound ({view.phase})"
    return None


def _str(value: Any) -> str:
    """A Redis reply as text."""
    if value is None:
        return ""
    return value.decode() if isinstance(value, bytes) else str(value)
