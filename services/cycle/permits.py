"""Permit, right after Redis reserved (`Permits`): the framework's Permit plugins, the waits they
ask for written to Redis, and the handle's view of the pods waiting (`WaitingPods`)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Sequence

from kubus.api.objects import Pod
from kubus.api.podgroups import pod_group_key
from kubus.bus.messages import Outcome, OutcomeKind
from kubus.core.metrics import Metrics
from kubus.cycle.batch import Batch, Reserved, uid
from kubus.cycle.undo import Undo
from kubus.framework.cycle_state import CycleState
from kubus.framework.runtime import Framework
from kubus.framework.waiting import WaitingPods
from kubus.runtime.service import StructuredLogger
from kubus.store import ClusterState


class Permits:
    """Permit for a batch's reserved pods, and the waiting pods as the plugins see them."""

    def __init__(
        self,
        *,
        store: ClusterState,
        framework: Framework,
        waiting: WaitingPods,
        profile: str,
        undo: Undo,
        metrics: Metrics,
        log: StructuredLogger,
    ) -> None:
        self.store = store
        self.framework = framework
        self.waiting = waiting
        self.profile = profile
        self.undo = undo
        self.metrics = metrics
        self.log = log

    @property
    def sees_waiting_pods(self) -> bool:
        """Whether plugins of this profile may look at or decide about waiting pods."""
        return bool(self.framework.permit or self.framework.post_filter)

    async def load_waiting(self, pods: Sequence[Pod]) -> None:
        """The handle's view, from Redis: this profile's pods waiting on Permit, and the pod
        groups (gangs) of the batch's pods and of the waiting ones, with their member counts."""
        store = self.store
        states = [s for s in await store.waiting_pods(self.profile) if not s.rejected]
        self.waiting.load_states(states)
        keys = {key for pod in pods if (key := pod_group_key(pod)) is not None} | {s.group for s in states if s.group}
        if keys:
            counts = await store.group_counts(keys)
            self.waiting.pod_groups.load(
                await store.pod_groups(keys),
                {key: members for key, (members, _) in counts.items()},
                {key: assigned for key, (_, assigned) in counts.items()},
            )

    async def permit(self, batch: Batch, reserved: list[Reserved]) -> list[Reserved]:
        """Permit for the pods Redis reserved (kube runs it right after Reserve): rejected ones
        are undone (Unreserve, given back) and reported unschedulable; waiting ones keep their
        reservation, their wait is written to Redis before their BindRequest goes out (the
        binder waits on it). Returns the pods to hand to the binders (all of them, without
        Permit plugins)."""
        if not reserved or not self.framework.permit:
            return reserved
        started = time.perf_counter()
        store = self.store
        passed: list[Reserved] = []
        undo: list[Awaitable[None]] = []
        for r in reserved:
            pod, pod_uid = r.result.pod, uid(r.result.pod)
            state = r.result.state or CycleState()
            verdict = self.framework.run_permit(state, pod, r.node)
            if verdict.status.is_success:
                passed.append(r)
            elif verdict.status.is_wait:
                self.waiting.add(
                    pod_uid, pod.key, r.node, r.attempt, verdict.waiting_on, group=pod_group_key(pod) or ""
                )
                await store.wait_on_permit(
                    pod_uid,
                    key=pod.key,
                    profile=self.profile,
                    attempt=r.attempt,
                    node=r.node,
                    waiting_on=verdict.waiting_on,
                    group=pod_group_key(pod) or "",
                )
                passed.append(r)
            else:
                status = verdict.status
                message = f'rejected pod "{pod.metadata.name}" by permit plugin "{status.plugin}": {status.message()}'
                undo.append(self.undo(pod, r.node, state, attempt=r.attempt))
                batch.decide(
                    Outcome(uid=pod_uid, kind=OutcomeKind.UNSCHEDULABLE, message=message, plugins=(status.plugin,))
                )
                self.log.info("permit rejected", pod=pod.key, uid=pod_uid, node=r.node, plugin=status.plugin)
        await asyncio.gather(*undo)
        # Before any BindRequest goes out: a member that completed its gang allowed the others,
        # and those allows must be in Redis first, or a crash now would bind it alone.
        await self.apply_decisions()
        self.metrics.extension_point_duration.labels(
            extension_point="Permit", status="Success", profile=self.profile
        ).observe(time.perf_counter() - started)
        return passed

    async def apply_decisions(self) -> None:
        """What plugins decided about waiting pods (allow, reject), written where the waits live."""
        await self.store.apply_permit_decisions(self.waiting.take_decisions())
