"""Resync with Redis (`Resync`): the Running pods of this agent's nodes taken over after a restart (and any
it does not run, found by its nodes' bound reservations), pods no longer Running forgotten (a
missed deletion), and Bound pods whose assignment never came adopted (a binder that bound but
could not publish). Reads the phase indexes and its nodes' bound marks, not every pod."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence

from kubus.api.objects import Node
from kubus.bus.messages import NodeAssignment
from kubus.core.metrics import Metrics
from kubus.gpu_agent._plumbing import each
from kubus.gpu_agent.assignments import AdmissionResult
from kubus.gpu_agent.options import AgentOptions
from kubus.gpu_agent.running import RunningPods
from kubus.runtime.service import StructuredLogger
from kubus.store import ClusterState, PodPhase

__all__ = ["Resync"]


class Resync:
    """Keeps the pods this agent runs in step with Redis."""

    def __init__(
        self,
        *,
        store: ClusterState,
        nodes: Mapping[str, Node],
        running: RunningPods,
        admit: Callable[[Sequence[NodeAssignment]], Awaitable[list[AdmissionResult]]],
        options: AgentOptions,
        clock: Callable[[], float],
        log: StructuredLogger,
        metrics: Metrics,
    ) -> None:
        """``running``: the pods the agent runs; ``admit``: admits assignments of distinct pods
        (`Assignments.admit_many`), for the orphans."""
        self.store = store
        self.nodes = nodes
        self.names = list(nodes)
        self.running = running
        self.admit = admit
        self.options = options
        self.clock = clock
        self.log = log
        self.metrics = metrics

    async def rescan(self) -> None:
        """Take over the Running pods of this agent's nodes, as Redis has them (after a restart)."""
        pods = [p for p in await self.store.pods_in_phase(PodPhase.RUNNING) if p.node in self.nodes]
        reservations = await each(
            pods, lambda p: self.store.reservation(p.node, p.uid), concurrency=self.options.concurrency
        )
        for record, reservation in zip(pods, reservations, strict=True):
            if record.uid not in self.running:
                if reservation is None:
                    self.log.warning("running pod without a reservation", pod=record.key, node=record.node)
                self.running.track(
                    record.uid, record.key, record.node, reservation, started_at=record.updated_at, confirmed=True
                )
        if pods:
            self.log.info("running pods taken over", pods=len(pods))

    async def resync(self) -> None:
        """Forget tracked pods that are not Running on their node in Redis any more, and release them."""
        pods = [pod for pod in self.running.values() if pod.confirmed]
        if not pods:
            return
        stopped = await self.store.not_running_here([(pod.node, pod.uid) for pod in pods])
        for pod in pods:
            if pod.uid in stopped and self.running.get(pod.uid) is pod:
                self.running.untrack(pod.uid)
                await self.store.release(pod.node, pod.uid)
                phase = stopped[pod.uid]
                self.log.info("pod forgotten: not running any more", pod=pod.key, phase=str(phase or "-"))

    async def adopt_untracked(self) -> None:
        """Take over the pods Running on this agent's nodes in Redis, with their room held there,
        that it does not run: ones it stopped on a claim the store did not back, or whose room the
        janitor held again (`ClusterState.repair_placements`). The store is the truth."""
        marks = await self.store.bound_here(self.names)
        untracked = [(node, uid) for node, uids in marks.items() for uid in uids if uid not in self.running]
        if not untracked:
            return
        records = await self.store.get_pods(uid for _, uid in untracked)
        for (node, uid), record in zip(untracked, records, strict=True):
            if record is None or record.phase is not PodPhase.RUNNING or record.node != node or uid in self.running:
                continue  # Bound ones are adopt_orphans'; the rest moved on
            reservation = await self.store.reservation(node, uid)
            self.running.track(uid, record.key, node, reservation, started_at=record.updated_at, confirmed=True)
            self.log.warning("running pod taken over: Redis has it running here", pod=record.key, uid=uid, node=node)

    async def adopt_orphans(self) -> None:
        """Run the pods Bound to this agent's nodes whose assignment never came (a binder that
        bound the pod but could not publish to the node): bound longer than a resync interval,
        held by a bound reservation, not running here. Admitted as if assigned (idempotent with
        an assignment arriving late)."""
        # The Bound index is exact (changed with the records): a few pods, not every node.
        candidates = [uid for uid in await self.store.pod_uids_in_phase(PodPhase.BOUND) if uid not in self.running]
        if not candidates:
            return
        now = self.clock()
        orphans = [
            record
            for record in await self.store.get_pods(candidates)
            if record is not None
            and record.phase is PodPhase.BOUND
            and record.node in self.nodes
            and record.uid not in self.running
            and now - record.updated_at >= self.options.resync_interval
        ]
        if not orphans:
            return
        # Only the pods this agent may run (held by a bound reservation on their node).
        views = await self.store.admission_views([(record.node, record.uid) for record in orphans])
        assignments: list[NodeAssignment] = []
        for record, view in zip(orphans, views, strict=True):
            if view.refusal() is not None:
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
        for result in await self.admit(assignments) if assignments else []:
            self.metrics.pod_admissions.labels(result=str(result)).inc()
