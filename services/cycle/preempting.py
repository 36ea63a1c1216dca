"""The store steps of pods placed by preemption (`Preemptions`): Pending -> Reserved, then PREEMPT,
which checks the victims are still what the table held, evicts them and takes their room for the
preemptor in one step; then the victims' ``pod.deleted``."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Sequence

from nats.js import JetStreamContext

from kubus.bus import Publication, announcements, publish_durable_many
from kubus.cycle.batch import Attempted, Batch, uid
from kubus.cycle.reservation import ReservationMaker
from kubus.cycle.undo import Undo
from kubus.framework.scheduling import ScheduleResult
from kubus.kernels import NodeTable, PodInfo
from kubus.runtime.service import TRANSIENT_ERRORS, StructuredLogger
from kubus.store import (
    ClusterState,
    EventType,
    Move,
    PodEvent,
    PodPhase,
    PreemptResult,
    Reservation,
)

_PENDING_ONLY = frozenset({PodPhase.PENDING})


class Preemptions:
    """4a then 4b (docs/services.md) for the pods of a batch that preemption placed."""

    def __init__(
        self,
        *,
        store: ClusterState,
        js: JetStreamContext,
        profile: str,
        reservation: ReservationMaker,
        undo: Undo,
        log: StructuredLogger,
    ) -> None:
        self.store = store
        self.js = js
        self.profile = profile
        self.reservation = reservation
        self.undo = undo
        self.log = log

    async def attempt(
        self, batch: Batch, wanted: Sequence[tuple[ScheduleResult, PodInfo]], table: NodeTable
    ) -> list[Attempted]:
        """4a then 4b for pods placed by preemption: Pending -> Reserved, then PREEMPT (in_store
        True: a refusal gives the attempt back). A pod that failed on the way is undone and
        decided; it is not returned."""
        if not wanted:
            return []
        moves = [
            Move(
                uid(r.pod),
                PodPhase.RESERVED,
                expected_phases=_PENDING_ONLY,
                node=r.node,
                gpu_devices=tuple(r.gpu_devices),
                count_attempt=True,
            )
            for r, _ in wanted
        ]
        try:
            writes = await self.store.transition_many(moves)
        except TRANSIENT_ERRORS as exc:
            for r, _ in wanted:
                self.undo.failed(batch, r, exc)
            return []
        holds: list[tuple[ScheduleResult, int, Reservation]] = []
        undo: list[Awaitable[None]] = []
        for (result, pod_info), write in zip(wanted, writes, strict=True):
            if not write.ok:
                self.undo.not_pending(batch, result, write)
                continue
            try:
                holds.append(
                    (result, write.version, self.reservation(batch, result, pod_info, write.version, table))
                )
            except ValueError as exc:
                undo.append(self.undo.failed(batch, result, exc, attempt=write.version))
        try:
            answers = await self._preempt(batch, holds)
        except TRANSIENT_ERRORS as exc:
            undo += (self.undo.failed(batch, result, exc, attempt=attempt) for result, attempt, _ in holds)
            answers = []
        await asyncio.gather(*undo)
        return [(r, a, h, answer, True) for (r, a, h), answer in zip(holds, answers, strict=False)]

    async def _preempt(
        self, batch: Batch, holds: Sequence[tuple[ScheduleResult, int, Reservation]]
    ) -> list[PreemptResult]:
        """PREEMPT for pods placed by preemption, in order: each checks its victims are still
        what the table held, evicts them and takes their room for the pod in one step; then the
        victims' ``pod.deleted`` events, so their agents stop them and every cycle forgets them."""
        store = self.store
        source = f"cycle/{self.profile}"
        outcomes = await store.preempt_many(
            [(h[2].node, h[2], batch.victims[uid(h[0].pod)]) for h in holds], source=source
        )
        notes: list[tuple[str, PodEvent]] = []
        publications: list[Publication] = []
        for (result, _, reservation), outcome in zip(holds, outcomes, strict=True):
            if not (outcome.ok and outcome.evicted):
                continue
            batch.evicted[uid(result.pod)] = tuple(f"{v.key}/{v.uid}" for v in outcome.evicted)
            self.log.info(
                "pod preempted others", pod=result.pod.key, node=reservation.node, victims=len(outcome.evicted)
            )
            victims_text = ", ".join(v.key for v in outcome.evicted)
            note = PodEvent(
                time.time(),
                EventType.NORMAL,
                "Preempting",
                f"preempted {len(outcome.evicted)} pod(s) of lower priority on node {reservation.node}: {victims_text}",
                source=source,
            )
            notes.append((uid(result.pod), note))
            publications += announcements.preempted(
                outcome.evicted, node=reservation.node, message=outcome.message, at=time.time()
            )
        # The records say it all; the preemptors' events are extra.
        with contextlib.suppress(*TRANSIENT_ERRORS):
            await store.append_events(notes)
        if publications:
            try:
                await publish_durable_many(self.js, publications)
            except TRANSIENT_ERRORS as exc:
                # Evicted in Redis all the same: the agent's resync stops pods no longer
                # Running there, and the cycles' node resync drops them.
                self.log.warning("preemption announcement failed", pods=len(notes), error=repr(exc))
        return list(outcomes)
