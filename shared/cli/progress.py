"""Following a set of submitted pods through the cluster: phases, timings, a live status line.

Used by `kubus up --demo` and `kubus bench`. The phases come from Redis (the pod records, read
in pipelined batches), the moments from three sources, the most precise first: the pod.bound
and pod.running events on the bus (their arrival here), the record's own ``updated_at`` when a
poll finds it in that very phase, and else the poll that first saw it there. Every time is wall
clock seconds on this machine, which also runs the services.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import sys
import time
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TextIO

from nats.aio.client import Client as NATS
from nats.aio.msg import Msg
from nats.aio.subscription import Subscription

from kubus.bus.subjects import POD_BATCHES, EventKind, event_filter, with_batches
from kubus.core import codec
from kubus.store.cluster_state import ClusterState
from kubus.store.records import PodPhase

__all__ = ["PHASE_GROUPS", "LiveLine", "PodTimes", "PodTracker", "percentile", "sleep_or", "status_line"]

_BATCH = 1000
_POLL_LIMIT = 250
RATE_WINDOW = 5.0
"""Seconds of polls the live line's rate is taken over."""
"""Records a poll with ``skip`` reads at most (`PodTracker.poll`): 500 a second at the bench's
two polls a second. The events say when pods are bound and running; the polls only catch a
missed event and read when each pod was accepted, so a lap over 10,000 pods may take 20 s
(at 1,000 a poll they cost the bench 2 of its 4 CPU-seconds in a 10,000-pod run)."""
_FIELDS = ("phase", "node", "created_at", "updated_at", "reason", "message")

PHASE_GROUPS = (
    ("pending", (PodPhase.PENDING,)),
    ("reserved", (PodPhase.RESERVED,)),
    ("bound", (PodPhase.BOUND,)),
    ("running", (PodPhase.RUNNING,)),
    ("finished", (PodPhase.SUCCEEDED, PodPhase.FAILED)),
    ("deleted", (PodPhase.DELETED,)),
)
"""How the status line groups phases."""

_PLACED = frozenset({PodPhase.BOUND, PodPhase.RUNNING, PodPhase.SUCCEEDED, PodPhase.FAILED})
_STARTED = frozenset({PodPhase.RUNNING, PodPhase.SUCCEEDED, PodPhase.FAILED, PodPhase.DELETED})
_FINISHED = frozenset({PodPhase.SUCCEEDED, PodPhase.FAILED, PodPhase.DELETED})


@dataclass(slots=True)
class PodTimes:
    """What is known about one tracked pod (times in seconds since the epoch; 0 = not yet)."""

    key: str
    uid: str
    submitted: float = 0.0
    accepted: float = 0.0
    """The record's created_at: when the queue stored the pod."""
    bound: float = 0.0
    running: float = 0.0
    phase: PodPhase | None = None
    """None until the queue has stored the pod."""
    node: str = ""
    reason: str = ""
    message: str = ""


def percentile(values: Sequence[float], q: float) -> float | None:
    """The q-th percentile (0..100, nearest rank) of ``values``; None when empty."""
    if not values:
        return None
    ordered = sorted(values)
    rank = max(0, min(len(ordered) - 1, math.ceil(q / 100 * len(ordered)) - 1))
    return ordered[rank]


class PodTracker:
    """Phases and timings of the pods with the given uids (keyed by namespace/name)."""

    def __init__(self, store: ClusterState, pods: Iterable[tuple[str, str]]) -> None:
        """``pods``: (namespace/name, uid) of every pod to follow."""
        self.store = store
        self.pods: dict[str, PodTimes] = {key: PodTimes(key, uid) for key, uid in pods}
        self._subs: list[Subscription] = []
        self._history: list[tuple[float, int]] = []
        self._turn = 0
        """Where the next limited poll starts among the pods it reads (`poll`)."""

    # -- inputs ------------------------------------------------------------------------------------

    def submitted(self, key: str, at: float | None = None) -> None:
        """Record that the pod was stored by JetStream (its submit ack) at ``at`` (default now)."""
        self.pods[key].submitted = time.time() if at is None else at

    async def follow_events(self, nc: NATS) -> None:
        """Subscribe (core NATS) to pod events, for bind and start moments as they happen."""

        async def on_event(msg: Msg) -> None:
            now = time.time()
            # Only the kind and the name, not a checked ClusterEvent: two events per pod, and the
            # tracker shares the machine with what it measures.
            try:
                raw = codec.loads(msg.data)
                kind, name = raw["kind"], raw["name"]
                if kind in POD_BATCHES:  # several pods' events: each pod's name in its data
                    kind, names = POD_BATCHES[kind], [p["name"] for p in raw["data"]["pods"]]
                else:
                    names = [name]
            except (ValueError, TypeError, KeyError):  # not JSON, not an object, not an event
                return
            for name in names:
                pod = self.pods.get(name) if isinstance(name, str) else None
                if pod is None:
                    continue
                if kind == EventKind.POD_BOUND.value and not pod.bound:
                    pod.bound = now
                    if pod.phase not in _STARTED:
                        pod.phase = PodPhase.BOUND
                elif kind == EventKind.POD_RUNNING.value and not pod.running:
                    pod.running = now
                    if pod.phase not in _FINISHED:
                        pod.phase = PodPhase.RUNNING

        # Only the kinds it reads: the tracker shares the machine with what it measures.
        self._subs = [
            await nc.subscribe(event_filter(kind), cb=on_event, pending_msgs_limit=1_000_000, pending_bytes_limit=-1)
            for kind in sorted(with_batches({EventKind.POD_BOUND.value, EventKind.POD_RUNNING.value}))
        ]

    async def close(self) -> None:
        for sub in self._subs:
            with contextlib.suppress(Exception):
                await sub.unsubscribe()
        self._subs = []

    async def poll(self, *, skip: frozenset[PodPhase] = frozenset()) -> Counter[PodPhase | None]:
        """Read the tracked pods' records; returns how many are in each phase (None: not stored
        yet). Without ``skip``, every pod. With it, pods last seen in a phase of ``skip`` (one
        they cannot leave) are not read again, and of the others at most `_POLL_LIMIT`, taking
        turns from one poll to the next: the events tell when pods are bound and running, a poll
        catches a missed one, and the bench shares the machine it measures (reading every
        pending pod twice a second cost it a fifth of a core at 10,000 pods)."""
        now = time.time()
        everything = list(self.pods.values())
        items = [p for p in everything if p.phase not in skip]
        if skip and len(items) > _POLL_LIMIT:
            start = self._turn % len(items)
            items = items[start : start + _POLL_LIMIT] + items[: max(0, start + _POLL_LIMIT - len(items))]
            self._turn = start + _POLL_LIMIT
        keys = self.store.keys
        for start in range(0, len(items), _BATCH):
            chunk = items[start : start + _BATCH]
            pipe = self.store.redis.pipeline(transaction=False)
            for pod in chunk:
                pipe.hmget(keys.pod_record(pod.uid), *_FIELDS)
            for pod, values in zip(chunk, await pipe.execute(), strict=True):
                phase, node, created, updated, reason, message = (codec.text(v) for v in values)
                if not phase:
                    continue
                read = PodPhase(phase)
                # A read sent before a pod.bound/running event arrived is older than the event:
                # never move a pod back from the phase an event showed (bound is for life).
                stale = (read in (PodPhase.PENDING, PodPhase.RESERVED) and pod.bound) or (
                    read is PodPhase.BOUND and pod.running
                )
                if not stale:
                    pod.phase = read
                pod.node, pod.reason, pod.message = node, reason, message
                pod.accepted = pod.accepted or float(created or 0)
                at = float(updated or 0) or now
                if pod.phase in _PLACED and not pod.bound:
                    pod.bound = at if pod.phase is PodPhase.BOUND else now
                if pod.phase in (PodPhase.RUNNING, PodPhase.SUCCEEDED, PodPhase.FAILED) and not pod.running:
                    pod.running = at if pod.phase is PodPhase.RUNNING else now
        counts: Counter[PodPhase | None] = Counter(p.phase for p in everything)
        self._history.append((time.monotonic(), self.placed()))
        self._history = self._history[-40:]
        return counts

    # -- outputs -----------------------------------------------------------------------------------

    def placed(self) -> int:
        """Pods bound at some point (bound, running or finished now)."""
        return sum(1 for p in self.pods.values() if p.bound)

    def rate(self, window: float = RATE_WINDOW) -> float:
        """Pods bound per second over the last ``window`` seconds of polls (the recent rate, not
        the average since the start)."""
        if len(self._history) < 2:
            return 0.0
        t1, n1 = self._history[-1]
        t0, n0 = next(((t, n) for t, n in self._history if t1 - t <= window), self._history[0])
        return (n1 - n0) / (t1 - t0) if t1 > t0 else 0.0

    def latencies(self, start: str, end: str, keys: Iterable[str] | None = None) -> list[float]:
        """Seconds from ``start`` to ``end`` (PodTimes field names) for pods that have both."""
        pods = self.pods.values() if keys is None else (self.pods[k] for k in keys)
        out = []
        for p in pods:
            a, b = getattr(p, start), getattr(p, end)
            if a and b:
                out.append(max(0.0, b - a))
        return out


def status_line(counts: Counter[PodPhase | None], total: int, rate: float, elapsed: float) -> str:
    """``pending 12  reserved 0  bound 40  running 200  finished 37  |  bound 85.3/s (last 5s)  12s``:
    ``rate`` is the recent rate (`PodTracker.rate`). When none was bound of late while pods wait
    and others run, it says so: they wait for room the running pods hold, not for the scheduler."""
    parts = [f"submitted {total - counts.get(None, 0)}/{total}"] if counts.get(None) else []
    for label, phases in PHASE_GROUPS:
        n = sum(counts.get(p, 0) for p in phases)
        if n or label != "deleted":
            parts.append(f"{label} {n}")
    recent = f"bound {rate:.1f}/s (last {RATE_WINDOW:g}s)"
    if rate == 0 and counts.get(PodPhase.PENDING) and counts.get(PodPhase.RUNNING):
        recent += ", pending pods wait for running ones to finish"
    return "  ".join(parts) + f"  |  {recent}  {elapsed:.0f}s"


class LiveLine:
    """One status line, rewritten in place on a terminal, printed every ``every`` seconds otherwise."""

    def __init__(self, out: TextIO = sys.stdout, every: float = 5.0) -> None:
        self.out = out
        self.tty = out.isatty()
        self.every = every
        self._last = 0.0
        self._width = 0

    def show(self, text: str, *, force: bool = False) -> None:
        if self.tty:
            self.out.write("\r" + text.ljust(self._width))
            self._width = len(text)
            self.out.flush()
        elif force or time.monotonic() - self._last >= self.every:
            self.out.write(text + "\n")
            self.out.flush()
            self._last = time.monotonic()

    def done(self) -> None:
        if self.tty and self._width:
            self.out.write("\n")
            self.out.flush()
            self._width = 0


async def sleep_or(event: asyncio.Event, seconds: float) -> bool:
    """Sleep ``seconds`` unless ``event`` is set first; True when it is set."""
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(event.wait(), seconds)
    return event.is_set()
