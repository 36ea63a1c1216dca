"""The janitor and the resync (`Janitor`): what crashed services or lost messages leave is
repaired from Redis, the truth (Reserved pods, room no pod holds, pods lost in flight, queues out
of step)."""

from __future__ import annotations

from collections.abc import Mapping

from nats.js import JetStreamContext

from kubus.api.objects import Pod
from kubus.bus import (
    EventKind,
    Publication,
    publish_durable_many,
)
from kubus.framework.runtime import Framework
from kubus.queue._pods import parse_stored, pod_announcement, record_event
from kubus.queue.options import QueueOptions
from kubus.queue.placement import NodePlacement, bound_publications
from kubus.queue.queueing import QueueName
from kubus.queue.queues import Queues
from kubus.runtime.service import StructuredLogger
from kubus.store import (
    ClusterState,
    EventType,
    ExpiryKind,
    PodPhase,
)
from kubus.store.records import PodRecord

__all__ = ["Janitor"]


class Janitor:
    """Periodic repairs."""

    def __init__(
        self,
        *,
        store: ClusterState,
        js: JetStreamContext,
        options: QueueOptions,
        queues: Queues,
        frameworks: Mapping[str, Framework],
        placement: NodePlacement,
        log: StructuredLogger,
    ) -> None:
        """``frameworks``: each profile's plugins, for the Unreserve owed a pod given back."""
        self.store = store
        self.js = js
        self.options = options
        self.queues = queues
        self.frameworks = frameworks
        self.placement = placement
        self.log = log

    async def expire_in_flight(self) -> None:
        for profile, queue in self.queues.items():
            expired = queue.take_expired_in_flight()
            if not expired:
                continue
            try:
                records = await self.store.get_pods([e.uid for e in expired])
            except Exception:
                for entry in expired:
                    queue.restore(entry)
                raise
            for entry, record in zip(expired, records, strict=True):
                if record is not None and record.phase is PodPhase.PENDING:
                    queue.restore(entry)
                    self.log.info(
                        "in-flight deadline passed; pod handed out again", profile=profile, pod=entry.key, uid=entry.uid
                    )
                else:
                    self.log.info(
                        "in-flight deadline passed; pod no longer pending, dropped",
                        profile=profile,
                        pod=entry.key,
                        uid=entry.uid,
                        phase=str(record.phase) if record else "gone",
                    )

    async def resync(self) -> None:
        """Compare each profile's queue with its Pending pods in Redis: add the missing ones (this
        is also the rebuild after a restart), drop the ones no longer Pending."""
        for profile, queue in self.queues.items():
            pending = await self.store.pod_uids_in_phase(PodPhase.PENDING, profile=profile)
            known = queue.uids()
            missing = sorted(pending - known)
            added = 0
            if missing:
                records = [r for r in await self.store.get_pods(missing) if r is not None]
                records.sort(key=lambda r: (r.created_at, r.key))
                for record in records:
                    if record.phase is not PodPhase.PENDING or record.profile != profile:
                        continue
                    pod = parse_stored(record, self.log)
                    if pod is None:
                        continue
                    if pod.spec.node_name:  # never queued: placed on its node (a try that stopped)
                        await self._place_again(record, pod)
                        continue
                    queue.add(pod, record.manifest, attempts=record.attempts, event="Resync")
                    added += 1
            stale = sorted(uid for uid in known - pending if queue.where(uid) is not QueueName.IN_FLIGHT)
            dropped = 0
            if stale:
                for uid, stored in zip(stale, await self.store.get_pods(stale), strict=True):
                    if stored is None or stored.phase is not PodPhase.PENDING:
                        queue.delete(uid)
                        dropped += 1
            if added or dropped:
                self.log.info("resynced with redis", profile=profile, added=added, dropped=dropped)
        self.queues.changed()

    async def repair_reserved(self) -> None:
        """The janitor (`ClusterState.expire_reserved`): Reserved pods a crashed cycle or binder
        left are given back and queued again, or their bind is finished; either is announced."""
        o = self.options
        expired = await self.store.expire_reserved(
            timeout_s=o.reserve_timeout, lost_after_s=o.reconcile_grace, source="queue"
        )
        announce: list[Publication] = []
        for e in expired:
            pod = e.pod
            if e.kind is ExpiryKind.BOUND:
                announce += bound_publications(pod, pod.node, e.attempt, e.devices)
                self.log.warning("janitor: finished a bind a binder left", pod=pod.key, uid=pod.uid, node=pod.node)
                continue
            self.log.warning(
                "janitor: reserved pod back to pending", pod=pod.key, uid=pod.uid, node=pod.node, reason=e.reason
            )
            parsed = parse_stored(pod, self.log)
            if e.released:  # room was given back: pods waiting for room on that node may fit now
                announce.append(pod_announcement(EventKind.POD_UNRESERVED, pod, e.attempt, reason=e.reason))
            if parsed is not None and parsed.spec.node_name:
                # Never scheduled elsewhere, never queued: a placement a crash stopped is tried
                # again on its node, as a new attempt (no plugin reserved anything for it).
                await record_event(
                    self.store, pod.uid, EventType.WARNING, e.reason, f"{e.message}; placing it again", "queue"
                )
                fresh = await self.store.get_pod(pod.uid)
                if fresh is not None:
                    await self._place_again(fresh, parsed)
                continue
            await self._unreserve_plugins(pod)
            await record_event(self.store, pod.uid, EventType.WARNING, "FailedScheduling", e.message, "queue")
            queue = self.queues.get(pod.profile)
            if queue is not None and parsed is not None:
                queue.delete(pod.uid)  # a stale in-flight entry, if any
                queue.add(parsed, pod.manifest, attempts=pod.attempts, event=e.reason)
        if announce:
            await publish_durable_many(self.js, announce)

    async def _place_again(self, record: PodRecord, pod: Pod) -> None:
        """`_place_on_node` for a pod that names its node, found Pending by a repair; a failure
        is logged and left for the next resync (the pod stays Pending, never queued)."""
        try:
            await self.placement.place(record, pod)
        except Exception as exc:
            self.log.warning("placing a pod on its node failed; retried at the next resync", pod=record.key,
                             uid=record.uid, node=pod.spec.node_name, error=repr(exc))  # fmt: skip

    async def repair_placements(self) -> None:
        """Bound and Running pods whose room is not held as bind left it
        (`ClusterState.repair_placements`): held again; a pod whose node has no room for it any
        more is failed (Evicted, as kubelet fails a pod it cannot keep) and announced finished,
        so that its agent stops it and no node is overcommitted."""
        fixes, lost = await self.store.repair_placements()
        for fix in fixes:
            self.log.warning("repair", fix=fix)
        announce: list[Publication] = []
        for room in lost:
            pod = room.pod
            message = (
                f"its room on node {pod.node} was given back while it was {pod.phase} there, and the node "
                f"has no room for it now: {', '.join(room.reasons)}"
            )
            w = await self.store.transition(
                pod.uid, PodPhase.FAILED, expected_version=pod.version, expected_phases={pod.phase},
                reason="Evicted", message=message,
            )  # fmt: skip
            if not w.ok:
                continue  # it moved on meanwhile
            self.log.warning("pod failed: its room is lost", pod=pod.key, uid=pod.uid, node=pod.node, message=message)
            await record_event(self.store, pod.uid, EventType.WARNING, "Evicted", message, "queue")
            announce.append(pod_announcement(EventKind.POD_FINISHED, pod, reason="Evicted", message=message))
        if announce:
            await publish_durable_many(self.js, announce)

    async def reconcile(self) -> None:
        fixes = await self.store.reconcile(grace_s=self.options.reconcile_grace)
        for fix in fixes:
            self.log.warning("reconcile", fix=fix)
        if fixes:
            await self.resync()

    async def _unreserve_plugins(self, pod: PodRecord) -> None:
        """Unreserve of the pod's profile's Reserve plugins (reverse order), with a fresh
        CycleState and its node as the store has it: what a failure after Reserve owes them."""
        framework = self.frameworks.get(pod.profile)
        parsed = parse_stored(pod, self.log)
        if framework is None or not framework.reserve or parsed is None:
            return
        await framework.run_unreserve_after(self.store, parsed, pod.node)
