"""Resync with Redis: the Running pods of this agent's nodes taken over after a restart (and any
it does not run, found by its nodes' bound reservations), pods no longer Running forgotten (a
missed deletion), and Bound pods whose assignment never came adopted (a binder that bound but
could not publish). Reads the phase indexes and its nodes' bound marks, not every pod."""

from __future__ import annotations

from kubus.bus.messages import NodeAssignment
from kubus.gpu_agent.assignments import Assignments
from kubus.store import PodPhase


class Resync(Assignments):
    """Keeps the pods this agent runs in step with Redis."""

    async def _rescan(self) -> None:
        """Take over the Running pods of this agent's nodes, as Redis has them (after a restart)."""
        state = self._store()
        pods = [p for p in await state.pods_in_phase(PodPhase.RUNNING) if p.node in self.nodes]
        reservations = await self._each(pods, lambda p: state.reservation(p.node, p.uid))
        for record, reservation in zip(pods, reservations, strict=True):
            if record.uid not in self.running:
                if reservation is None:
                    self.log.warning("running pod without a reservation", pod=record.key, node=record.node)
                self.running.track(
                    record.uid, record.key, record.node, reservation, started_at=record.updated_at, confirmed=True
                )
        if pods:
            self.log.info("running pods taken over", pods=len(pods))

    async def _resync(self) -> None:
        """Forget tracked pods that are not Running on their node in Redis any more, and release them."""
        state = self._store()
        pods = [pod for pod in self.running.values() if pod.confirmed]
        if not pods:
            return
        stopped = await state.not_running_here([(pod.node, pod.uid) for pod in pods])
        for pod in pods:
            if pod.uid in stopped and self.running.get(pod.uid) is pod:
                self.running.untrack(pod.uid)
                await state.release(pod.node, pod.uid)
                phase = stopped[pod.uid]
                self.log.info("pod forgotten: not running any more", pod=pod.key, phase=str(phase or "-"))

    async def _adopt_untracked(self) -> None:
        """Take over the pods Running on this agent's nodes in Redis, with their room held there,
        that it does not run: ones it stopped on a claim the store did not back, or whose room the
        janitor held again (`ClusterState.repair_placements`). The store is the truth."""
        state = self._store()
        marks = await state.bound_here(self._names)
        untracked = [(node, uid) for node, uids in marks.items() for uid in uids if uid not in self.running]
        if not untracked:
            return
        records = await state.get_pods(uid for _, uid in untracked)
        for (node, uid), record in zip(untracked, records, strict=True):
            if record is None or record.phase is not PodPhase.RUNNING or record.node != node or uid in self.running:
                continue  # Bound ones are _adopt_orphans'; the rest moved on
            reservation = await state.reservation(node, uid)
            self.running.track(uid, record.key, node, reservation, started_at=record.updated_at, confirmed=True)
            self.log.warning("running pod taken over: Redis has it running here", pod=record.key, uid=uid, node=node)

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
        # Only the pods this agent may run (held by a bound reservation on their node).
        views = await state.admission_views([(record.node, record.uid) for record in orphans])
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
        for result in await self._admit_many(assignments) if assignments else []:
            self.metrics.pod_admissions.labels(result=str(result)).inc()

    async def _resync_loop(self) -> None:
        while not await self._sleep(self.options.resync_interval):
            try:
                await self._resync()
                await self._adopt_untracked()
                await self._adopt_orphans()
            except Exception as exc:
                self._log_failure("resync failed", exc)
