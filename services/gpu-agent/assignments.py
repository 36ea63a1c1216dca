"""Taking assignments: the NodeAssignments of this agent's nodes, admitted a fetched batch at
once (docs/services.md, step 6), each acked only when what became of it is durable."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Mapping, Sequence
from enum import StrEnum

from nats.aio.msg import Msg
from nats.js import JetStreamContext

from kubus.api.attempts import Attempt
from kubus.api.objects import Node
from kubus.bus import (
    NODE_PODS_ALL,
    EventKind,
    MessageFaults,
    deliveries,
    publish_durable_many,
    redelivery_delay,
)
from kubus.bus.messages import MessageError, NodeAssignment, decode
from kubus.core.metrics import Metrics
from kubus.gpu_agent._plumbing import each, log_failure, pod_publication, publish_pod_event
from kubus.gpu_agent.admission import Verdict, admit
from kubus.gpu_agent.inventory import NodeInventory
from kubus.gpu_agent.options import AgentOptions
from kubus.gpu_agent.running import RunningPod, RunningPods
from kubus.runtime.service import Outage, StructuredLogger, is_transient
from kubus.store import ClusterState, EventType, PodEvent, PodPhase, PodStart, Reservation, StoreCode

__all__ = ["AdmissionResult", "Assignments"]


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


_Delivered = tuple[NodeAssignment, list[int]]
"""An assignment and the positions, in the batch, of the messages that delivered it."""


class Assignments:
    """Admits the NodeAssignments of this agent's nodes."""

    def __init__(
        self,
        *,
        store: ClusterState,
        js: JetStreamContext,
        nodes: Mapping[str, Node],
        running: RunningPods,
        inventory: NodeInventory | None,
        options: AgentOptions,
        outage: Outage,
        clock: Callable[[], float],
        source: str,
        log: StructuredLogger,
        metrics: Metrics,
    ) -> None:
        """``nodes``: the agent's nodes, by name (as it knows them now); ``running``: the pods it
        runs; ``inventory``: a real node's, whose GPUs' health admission asks (None: simulated);
        ``source``: who records the pod events it writes."""
        self.store = store
        self.js = js
        self.nodes = nodes
        self.running = running
        self.inventory = inventory
        self.options = options
        self.outage = outage
        self.clock = clock
        self.source = source
        self.log = log
        self.metrics = metrics
        self.faults = MessageFaults(options.max_failures)
        """Failed tries of each assignment that were its own fault (not an outage's)."""

    async def handle_batch(self, messages: Sequence[Msg]) -> list[AdmissionResult | None]:
        """Handle delivered NodeAssignments to the end (each acked, nak'ed or terminated), in
        order; never raises (but for cancellation). None for garbage or another agent's node.

        The batch is admitted together (`admit_many`: a few pipelined round trips to Redis and
        one to JetStream, whatever its size), the same pod delivered twice in it once. Should
        that fail, each assignment is admitted again alone, through the same code, so a bad one
        costs only itself its retries; every step is idempotent, so nothing runs twice."""
        results: list[AdmissionResult | None] = [None] * len(messages)
        delivered: dict[str, _Delivered] = {}
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
            delivered.setdefault(assignment.uid, (assignment, []))[1].append(i)
        if delivered:
            await self._settle(list(delivered.values()), messages, results)
        counts: dict[AdmissionResult, int] = {}
        for result in results:
            if result is not None:
                counts[result] = counts.get(result, 0) + 1
        for result, n in counts.items():
            self.metrics.pod_admissions.labels(result=str(result)).inc(n)
        return results

    async def _settle(
        self, group: Sequence[_Delivered], messages: Sequence[Msg], results: list[AdmissionResult | None]
    ) -> None:
        """Admit ``group`` (assignments of distinct pods) and ack their messages, writing what
        became of each message into ``results``. When that fails: a group of many is settled
        again one assignment at a time; one alone has its messages nak'ed (to be delivered
        again), or terminated on their last delivery. Never raises (but for cancellation)."""
        try:
            admitted = await self.admit_many([assignment for assignment, _ in group])
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            if is_transient(exc):  # a server away: every assignment waits for it, none fails alone
                self.outage.note(exc)
                log_failure(self.log, "admission failed, will retry when the servers answer", exc, pods=len(group))
                for _, where in group:
                    for i in where:
                        results[i] = await self._give_back(messages[i], exc, self.log)
                return
            if len(group) > 1:
                log_failure(self.log, "batch admission failed, admitting one by one", exc, pods=len(group))
                await each(
                    group, lambda one: self._settle([one], messages, results), concurrency=self.options.concurrency
                )
                return
            ((assignment, where),) = group
            log = self.log.bind(pod=assignment.key, uid=assignment.uid, node=assignment.node)
            for i in where:
                results[i] = await self._give_back(messages[i], exc, log)
            return
        for (_, where), result in zip(group, admitted, strict=True):
            for i in where:
                results[i] = result
                with contextlib.suppress(Exception):  # an ack that does not arrive: redelivered, idempotent
                    await messages[i].ack()

    async def _give_back(self, msg: Msg, exc: Exception, log: StructuredLogger) -> AdmissionResult:
        """Admission failed: nak ``msg`` to have it delivered again, or terminate it after its
        last allowed failure (the pod is left Bound: the resync adopts it). A server that is
        away is waited out, however long: it is not the assignment's failure."""
        delivered = deliveries(msg)
        if is_transient(exc) or self.faults.failed(msg) < self.options.max_failures:
            if not is_transient(exc):
                log_failure(log, "admission failed, will retry", exc, delivery=delivered)
            with contextlib.suppress(Exception):
                await msg.nak(delay=redelivery_delay(delivered))
            return AdmissionResult.RETRY
        log_failure(log, "admission failed for the last time; pod left Bound", exc)
        with contextlib.suppress(Exception):
            await msg.term()
        return AdmissionResult.DROPPED

    async def admit_many(self, assignments: Sequence[NodeAssignment]) -> list[AdmissionResult]:
        """Admit assignments of distinct pods in a few round trips: read every pod and its
        reservation (one pipeline), decide every admission at once (no await in between, so
        admissions on one node see each other), start the admitted pods (one pipeline of
        START_POD scripts, each checking again and appending its "Started" event), publish
        their ``pod.running`` events together, then the rare rejections and releases.
        Every return means "done with it" (ack); raises on Redis/NATS errors, with no pod left
        half-tracked (a retry finds the ones that started Running in Redis)."""
        results: list[AdmissionResult | None] = [None] * len(assignments)
        running: list[RunningPod] = []
        """Pods to announce ``pod.running`` for."""
        fresh = [i for i, a in enumerate(assignments) if a.uid not in self.running]
        for i, a in enumerate(assignments):
            if a.uid in self.running:  # a redelivery of a pod running here
                running.append(self.running[a.uid])
                results[i] = AdmissionResult.ADMITTED
        views = await self.store.admission_views([(assignments[i].node, assignments[i].uid) for i in fresh])

        releases: list[NodeAssignment] = []
        rejected: list[tuple[NodeAssignment, Verdict]] = []
        starting: list[tuple[int, RunningPod]] = []
        starts: list[PodStart] = []
        blocked: list[tuple[int, Reservation, Attempt]] = []
        """The rejected ones: position, reservation, attempt (for a second decision)."""
        now = self.clock()

        def start(i: int, a: NodeAssignment, reservation: Reservation, attempt: Attempt) -> None:
            pod = self.running.track(a.uid, a.key, a.node, reservation, started_at=now, confirmed=False)
            starting.append((i, pod))
            event = PodEvent(now, EventType.NORMAL, "Started", f"Started pod on node {a.node}", self.source)
            starts.append(PodStart(a.uid, a.node, attempt, event, ends_at=pod.deadline))
            results[i] = None

        device_healthy = self.inventory.device_healthy if self.inventory is not None else None
        for i, view in zip(fresh, views, strict=True):
            a = assignments[i]
            if a.uid in self.running:  # admitted meanwhile (an orphan adopted during the read)
                running.append(self.running[a.uid])
                results[i] = AdmissionResult.ADMITTED
                continue
            attempt = a.attempt
            refusal = view.refusal(attempt)
            if refusal is not None:
                finished = view.phase is not None and view.phase.terminal
                if finished and view.pod_node == a.node:
                    releases.append(a)  # finished or deleted: its room goes back (idempotent)
                level = logging.INFO if finished else logging.WARNING
                self.log.log(level, f"assignment dropped: {refusal}", pod=a.key, uid=a.uid, node=a.node)
                results[i] = AdmissionResult.DROPPED
                continue
            reservation = view.reservation
            assert reservation is not None  # refusal() is None only with a bound reservation
            if view.phase is PodPhase.RUNNING:  # running here, but forgotten (a restart in between)
                running.append(
                    self.running.track(a.uid, a.key, a.node, reservation, started_at=view.updated_at, confirmed=True)
                )
                results[i] = AdmissionResult.ADMITTED
                continue
            others = self.running.reservations_on(a.node)
            verdict = admit(self.nodes[a.node], reservation, others, device_healthy=device_healthy)
            if not verdict.admitted:
                rejected.append((a, verdict))
                blocked.append((i, reservation, attempt))
                results[i] = AdmissionResult.REJECTED
                continue
            start(i, a, reservation, attempt)

        # The pods in the way may be gone already, their pod.deleted events not read yet (a
        # preemption's victims, evicted in the step that reserved the preemptor's room): stop
        # those the store no longer has running there, then decide once more.
        if rejected and await self._forget_gone({a.node for a, _ in rejected}):
            rejected = []
            for i, reservation, attempt in blocked:
                a = assignments[i]
                others = self.running.reservations_on(a.node)
                verdict = admit(self.nodes[a.node], reservation, others, device_healthy=device_healthy)
                if verdict.admitted:
                    start(i, a, reservation, attempt)
                else:
                    rejected.append((a, verdict))

        if starts:
            try:
                outcomes = await self.store.start_pods(starts)
            except BaseException:
                for _, pod in starting:
                    if self.running.get(pod.uid) is pod:
                        self.running.untrack(pod.uid)
                raise
            started = 0
            for (i, pod), outcome in zip(starting, outcomes, strict=True):
                if outcome.started:
                    self.running.confirm(pod)
                    running.append(pod)
                    results[i] = AdmissionResult.ADMITTED
                    started += 1
                    continue
                if self.running.get(pod.uid) is pod:
                    self.running.untrack(pod.uid)
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

        await each(releases, lambda a: self.store.release(a.node, a.uid), concurrency=self.options.concurrency)
        await each(
            rejected,
            lambda item: self._fail(item[0], item[1], self.log.bind(pod=item[0].key, uid=item[0].uid)),
            concurrency=self.options.concurrency,
        )
        if running:
            await publish_durable_many(
                self.js, [pod_publication(EventKind.POD_RUNNING, p, at=self.clock()) for p in running]
            )
        return [r if r is not None else AdmissionResult.DROPPED for r in results]

    async def _forget_gone(self, nodes: set[str]) -> int:
        """Stop tracking the pods of ``nodes`` the store no longer has running there (deleted or
        moved on while their events are still on the way); their room is released again
        (idempotent). Returns how many were forgotten."""
        tracked = [p for node in nodes for p in self.running.on(node)]
        records = await self.store.get_pods([p.uid for p in tracked])
        gone = [
            p for p, r in zip(tracked, records, strict=True)
            if r is None or r.node != p.node or r.phase not in (PodPhase.BOUND, PodPhase.RUNNING)
        ]  # fmt: skip
        for pod in gone:
            self.running.untrack(pod.uid)
            self.log.info("pod stopped: gone from the store", pod=pod.key, uid=pod.uid, node=pod.node)
        await each(gone, lambda p: self.store.release(p.node, p.uid), concurrency=self.options.concurrency)
        return len(gone)

    async def _fail(self, a: NodeAssignment, verdict: Verdict, log: StructuredLogger) -> None:
        """The pod does not fit the node as it is: it fails, as kubelet fails it, and its room goes back."""
        write = await self.store.transition(
            a.uid, PodPhase.FAILED, expected_phases={PodPhase.BOUND}, reason=verdict.reason, message=verdict.message
        )
        if write.code in (StoreCode.OK, StoreCode.ALREADY, StoreCode.GONE):
            await self.store.release(a.node, a.uid)
        if write.code is StoreCode.OK:
            event = PodEvent(self.clock(), EventType.WARNING, verdict.reason, verdict.message, self.source)
            await self.store.append_event(a.uid, event)
            pod = RunningPod(a.uid, a.key, a.node, None, self.clock(), 0.0)
            await publish_pod_event(
                self.js, EventKind.POD_FINISHED, pod, at=self.clock(), phase=PodPhase.FAILED, reason=verdict.reason
            )
        log.warning("pod rejected at admission", reason=verdict.reason, message=verdict.message, code=str(write.code))

    async def _reject(self, msg: Msg, reason: str) -> None:
        """A message no agent can act on (garbage, another agent's node): counted, logged, terminated."""
        # By the stream's filter, not the subject: garbage on many subjects is not many series.
        self.metrics.rejected_messages.labels(subject=NODE_PODS_ALL).inc()
        self.log.error("assignment rejected", subject=msg.subject, reason=reason)
        with contextlib.suppress(Exception):
            await msg.term()


def _check(a: NodeAssignment) -> None:
    """MessageError for an assignment no agent can act on."""
    for name in ("uid", "key", "node"):
        if not getattr(a, name):
            raise MessageError(f"NodeAssignment.{name}: empty")
    if "/" not in a.key:
        raise MessageError(f"NodeAssignment.key: {a.key!r} is not namespace/name")
    if a.attempt < 0:
        raise MessageError(f"NodeAssignment.attempt: negative ({a.attempt})")
