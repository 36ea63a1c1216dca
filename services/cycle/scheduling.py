"""Placing a batch's pods on the node table (`BatchScheduler`): the manifests admitted, the
vectorized algorithm run over them in a worker thread (PreFilter through NormalizeScore, then
Reserve), the pods it could not place decided; and the time each extension point takes
(`ExtensionPointTimer`)."""

from __future__ import annotations

import asyncio
import time

from prometheus_client import Histogram

from kubus.api.attempts import NO_ATTEMPT
from kubus.api.errors import ManifestError
from kubus.api.manifests import wire_pod
from kubus.api.objects import Pod
from kubus.bus.messages import Outcome, OutcomeKind, QueuedPod
from kubus.core.metrics import Metrics
from kubus.cycle.batch import Batch, lost_lease_message, uid
from kubus.cycle.nodes import Loaded, NodeTableKeeper
from kubus.cycle.snapshot import NodeSnapshot
from kubus.cycle.undo import Undo
from kubus.framework.registry import ExtensionPoint
from kubus.framework.runtime import Framework
from kubus.framework.scheduling import ScheduleResult
from kubus.framework.status import Code
from kubus.runtime.leasing import Leadership
from kubus.runtime.service import StructuredLogger
from kubus.store import ClusterState

SCHEDULE_EXTENSION_POINT = "SchedulePod"
"""`extension_point` label of the whole vectorized algorithm for a batch (PreFilter through
NormalizeScore and the Reserve plugins), observed once per batch."""


class BatchScheduler:
    """Admits a batch's pods and places them, each seeing the placements of the ones before it."""

    def __init__(
        self,
        *,
        store: ClusterState,
        profile: str,
        leadership: Leadership,
        nodes: NodeTableKeeper,
        undo: Undo,
        metrics: Metrics,
        log: StructuredLogger,
    ) -> None:
        self.store = store
        self.profile = profile
        self.leadership = leadership
        self.nodes = nodes
        self.undo = undo
        self.metrics = metrics
        self.log = log

    def admit(self, batch: Batch, snapshot: NodeSnapshot) -> list[Pod]:
        """Parse the batch's manifests; a pod that cannot be scheduled as it is gets its outcome.
        Returns the pods to schedule."""
        pods: list[Pod] = []
        keys: set[str] = set()
        for queued in batch.queued:
            if queued.uid in batch.manifests:
                continue  # the same pod twice in one pop
            batch.manifests[queued.uid] = queued.manifest
            try:
                pod = _parse(queued)
            except (ManifestError, ValueError) as exc:
                batch.error(queued.uid, "; ".join(str(exc).splitlines()))
                continue
            if pod.key in keys:
                batch.error(queued.uid, f"pod {pod.key}: twice in one batch (another uid)")
                continue
            where = snapshot.placed.get(pod.key)
            if where is not None:
                # Redis (as last read) has the pod on a node already: read that node again.
                self.nodes.mark(where.node)
                batch.error(
                    queued.uid,
                    f"pod {pod.key} already holds a reservation on node {where.node} (uid {where.uid}); "
                    "retry after the node is read again",
                )
                continue
            keys.add(pod.key)
            pods.append(pod)
            self.store.know_profile(queued.uid, self.profile)  # popped from our queue: ours
        return pods

    async def schedule(self, batch: Batch, pods: list[Pod], loaded: Loaded) -> list[ScheduleResult]:
        """Run the algorithm over ``pods`` in a worker thread (holding the table's lock); decide
        the ones it could not place. Returns the placed ones (assumed in the table); none when
        this replica lost the lease meanwhile (they are undone, and decided)."""
        if not pods:
            return []
        scheduler, snapshot = loaded.scheduler, loaded.snapshot
        started = time.perf_counter()
        status = "Error"
        try:
            async with self.nodes.lock:
                results = await asyncio.to_thread(scheduler.schedule, pods)
            status = "Success"
        finally:
            self.metrics.extension_point_duration.labels(
                extension_point=SCHEDULE_EXTENSION_POINT, status=status, profile=self.profile
            ).observe(time.perf_counter() - started)
        placed: list[ScheduleResult] = []
        for result in results:
            pod = result.pod
            if result.node is not None:
                snapshot.placed_by_scheduler(pod.key, uid(pod), result.node)
                placed.append(result)
                if result.preempted:
                    batch.victims[uid(pod)] = [
                        (v.pod.metadata.uid, where.attempt if where is not None else NO_ATTEMPT)
                        for v in result.preempted
                        for where in (snapshot.evicted(v.pod.key, result.node),)
                    ]
                    self.metrics.preemption_victims.labels(profile=self.profile).observe(len(result.preempted))
            elif result.status.code is Code.ERROR:
                batch.error(uid(pod), result.message or "scheduling failed")
            else:
                batch.decide(
                    Outcome(
                        uid=uid(pod),
                        kind=OutcomeKind.UNSCHEDULABLE,
                        message=result.message,
                        plugins=result.plugins,
                    )
                )
        if placed and self.leadership.token != batch.token:
            for result in placed:
                self.undo(result.pod, result.node or "", result.state)
                batch.error(uid(result.pod), lost_lease_message(self.profile))
            return []
        return placed


class ExtensionPointTimer:
    """The Scheduler's timer (`PointTimer`): each extension point's and plugin's time into kube's
    duration histograms, and a PostFilter of a preempting profile counted as a preemption attempt."""

    def __init__(self, *, framework: Framework, profile: str, metrics: Metrics) -> None:
        self.framework = framework
        self.profile = profile
        self.metrics = metrics
        self._histograms: dict[tuple[ExtensionPoint, str], Histogram] = {}
        """The extension-point and plugin duration series, by (point, plugin)."""

    def __call__(self, point: ExtensionPoint, plugin: str, seconds: float) -> None:
        histogram = self._histograms.get((point, plugin))
        if histogram is None:  # labels() once per (point, plugin): it is called at every decision
            if plugin:
                labels = {"plugin": plugin, "extension_point": point.label, "status": "Success"}
                histogram = self.metrics.plugin_execution_duration.labels(**labels)
            else:
                labels = {"extension_point": point.label, "status": "Success", "profile": self.profile}
                histogram = self.metrics.extension_point_duration.labels(**labels)
            self._histograms[point, plugin] = histogram
        histogram.observe(seconds)
        if not plugin and point is ExtensionPoint.POST_FILTER and self._preempts:
            self.metrics.preemption_attempts.labels(profile=self.profile).inc()

    @property
    def _preempts(self) -> bool:
        return any(p.name == "DefaultPreemption" for p in self.framework.post_filter)


def _parse(queued: QueuedPod) -> Pod:
    """The queued manifest as a Pod, with the queue's uid (Redis's identity of the pod).
    Raises ManifestError or ValueError."""
    return wire_pod(queued.manifest, queued.uid, queued.key)
