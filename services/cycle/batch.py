"""One batch of popped pods and what became of it: the pods' outcomes as they are decided, then
reported to the queue (`Reporter.report`) and counted in the metrics (`Reporter.observe`)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

import nats.errors
from nats.aio.client import Client as NATS

from kubus.api.attempts import Attempt
from kubus.api.objects import Pod
from kubus.bus import queue_done
from kubus.bus.messages import ERROR_HEADER, Outcome, OutcomeKind, Outcomes, QueuedPod, encode
from kubus.core.metrics import Metrics
from kubus.cycle.options import CycleOptions
from kubus.framework.scheduling import ScheduleResult
from kubus.runtime.service import StructuredLogger
from kubus.store import Reservation, ReserveResult, StoreCode, cycle_lease


@dataclass(slots=True)
class Batch:
    """The pods of one pop and what became of them."""

    queued: Sequence[QueuedPod]
    token: int
    started: float = field(default_factory=time.perf_counter)
    manifests: dict[str, bytes] = field(default_factory=dict)
    outcomes: dict[str, Outcome] = field(default_factory=dict)
    """Uid -> outcome, once decided; reported in pop order."""
    elapsed: dict[str, float] = field(default_factory=dict)
    """Uid -> seconds from the batch's start to its outcome."""
    conflicts: int = 0
    skipped: set[str] = field(default_factory=set)
    """Uids of pods that were no longer Pending: not an attempt, not counted as one."""
    victims: dict[str, list[tuple[str, Attempt]]] = field(default_factory=dict)
    """Preemptor uid -> (uid, attempt) of each pod its preemption evicts (the table already
    forgot them; the store evicts them with the preemptor's reservation, in one step)."""
    reserved: list[Reserved] = field(default_factory=list)
    """Pods Redis reserved and Permit passed: handed to the binders once the batch is decided."""
    evicted: dict[str, tuple[str, ...]] = field(default_factory=dict)
    """Preemptor uid -> ``namespace/name/uid`` of each pod its preemption evicted in the store
    (`BindRequest.victims`)."""

    def decide(self, outcome: Outcome) -> None:
        """Record ``outcome`` unless the pod has one already (the first decision stands)."""
        if outcome.uid not in self.outcomes:
            self.outcomes[outcome.uid] = outcome
            self.elapsed[outcome.uid] = time.perf_counter() - self.started

    def error(self, uid: str, message: str) -> None:
        self.decide(Outcome(uid=uid, kind=OutcomeKind.ERROR, message=message))

    def ordered(self) -> tuple[Outcome, ...]:
        return tuple(self.outcomes[p.uid] for p in self.queued if p.uid in self.outcomes)

    def count(self, kind: OutcomeKind) -> int:
        return sum(1 for o in self.outcomes.values() if o.kind is kind)


@dataclass(frozen=True, slots=True)
class Reserved:
    """A pod Redis reserved: its result, node, attempt and reservation."""

    result: ScheduleResult
    node: str
    attempt: int
    reservation: Reservation
    gpu_devices: tuple[int, ...]
    """The devices Redis holds for the pod: the Scheduler's pick, or RESERVE's when it picked again."""


Attempted = tuple[ScheduleResult, int, Reservation, ReserveResult, bool]
"""A pod's store step: its result, the attempt, its reservation, the room's answer, and whether
the pod is Reserved in Redis whatever the answer (a refusal then has the attempt to give back)."""


@dataclass(frozen=True, slots=True)
class Refused:
    """A pod whose reservation Redis refused (CONFLICT, NODE_GONE): Pending there, forgotten here."""

    result: ScheduleResult
    node: str
    code: StoreCode
    reason: str


def uid(pod: Pod) -> str:
    """The pod's uid: Redis's identity of it."""
    return pod.metadata.uid


def lost_lease_message(profile: str) -> str:
    return f"the scheduling cycle lost its lease {cycle_lease(profile)!r} before the pod was handed to the binders"


class Reporter:
    """A decided batch's outcomes: to the queue (`report`), to the metrics and the log (`observe`)."""

    def __init__(
        self, *, nc: NATS, profile: str, options: CycleOptions, metrics: Metrics, log: StructuredLogger
    ) -> None:
        self.nc = nc
        self.profile = profile
        self.options = options
        self.metrics = metrics
        self.log = log

    async def report(self, batch: Batch) -> None:
        """docs/services.md 4d: the batch's outcomes to the queue, retried; then left to the
        queue's in-flight deadline. Never raises for the queue not answering (logged)."""
        outcomes = batch.ordered()
        if not outcomes:
            return
        subject, data = queue_done(self.profile), encode(Outcomes(outcomes))
        delay = 0.1
        for attempt in range(1, self.options.done_attempts + 1):
            try:
                reply = await self.nc.request(subject, data, timeout=self.options.request_timeout)
            except (nats.errors.NoRespondersError, nats.errors.TimeoutError) as exc:
                if attempt < self.options.done_attempts:
                    self.log.warning("outcome report failed; retrying", attempt=attempt, error=repr(exc))
                    await asyncio.sleep(delay)
                    delay = min(delay * 2, 2.0)
                continue
            except nats.errors.ConnectionClosedError:
                break
            refusal = (reply.headers or {}).get(ERROR_HEADER)
            if not refusal:
                return
            # The same report would be refused again (e.g. a queue older than this cycle that
            # does not know an outcome kind): said once, left to the in-flight deadline.
            self.log.error(
                "outcomes refused by the queue; its in-flight deadline will requeue the pods",
                subject=subject,
                pods=len(outcomes),
                reason=refusal,
            )
            return
        self.log.error(
            "outcomes not delivered; the queue's in-flight deadline will requeue the pods",
            subject=subject,
            pods=len(outcomes),
        )

    def observe(self, batch: Batch) -> None:
        """The batch's attempts in kube's scheduling metrics, and one log line for the batch."""
        labels = {
            OutcomeKind.RESERVED: "scheduled",
            OutcomeKind.UNSCHEDULABLE: "unschedulable",
            OutcomeKind.REFUSED: "unschedulable",  # found a node, but lost it to another profile
            OutcomeKind.ERROR: "error",
        }
        elapsed: dict[str, list[float]] = {}
        for pod_uid, outcome in batch.outcomes.items():
            if pod_uid not in batch.skipped:
                elapsed.setdefault(labels.get(outcome.kind, "error"), []).append(batch.elapsed[pod_uid])
        handed_over = time.perf_counter() - batch.started  # every pod of the batch ends with its hand-over
        for result, seconds in elapsed.items():  # one labels() per result, not per pod
            self.metrics.schedule_attempts.labels(result=result, profile=self.profile).inc(len(seconds))
            histogram = self.metrics.scheduling_attempt_duration.labels(result=result, profile=self.profile)
            for s in seconds:
                histogram.observe(s)
            e2e = self.metrics.e2e_scheduling_duration.labels(result=result, profile=self.profile)
            for _ in seconds:
                e2e.observe(handed_over)
        self.log.info(
            "batch scheduled",
            pods=len(batch.queued),
            reserved=batch.count(OutcomeKind.RESERVED),
            unschedulable=batch.count(OutcomeKind.UNSCHEDULABLE),
            refused=batch.count(OutcomeKind.REFUSED),
            errors=batch.count(OutcomeKind.ERROR),
            conflicts=batch.conflicts,
            skipped=len(batch.skipped),
            token=batch.token,
            seconds=round(time.perf_counter() - batch.started, 4),
        )
