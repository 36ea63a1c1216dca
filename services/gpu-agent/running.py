"""The pods an agent runs: what it knows of each (`RunningPod`) and its table of them
(`RunningPods`), with the one timer (a heap of deadlines) that serves them all.

Synchronous on purpose: an agent decides a pod's admission and tracks it with no await in
between, so admissions on one node always see each other.
"""

from __future__ import annotations

import asyncio
import heapq
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass

from kubus.store import Reservation

__all__ = ["RunningPod", "RunningPods"]


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


class RunningPods(Mapping[str, RunningPod]):
    """The pods an agent runs, by uid (this mapping), by node and by key, and the heap of their
    deadlines. Changed only through `track`, `confirm`, `untrack` and `schedule`."""

    def __init__(
        self,
        nodes: Iterable[str],
        duration: Callable[[str], float],
        on_count: Callable[[int], None] = lambda count: None,
    ) -> None:
        """``duration(uid)``: how long a pod runs, in seconds (0 = until deleted); ``on_count``
        is told the number of pods after every change (a gauge)."""
        self._pods: dict[str, RunningPod] = {}
        self._on_node: dict[str, dict[str, RunningPod]] = {n: {} for n in nodes}
        self._by_key: dict[str, str] = {}
        self._timers: list[tuple[float, str]] = []
        self._duration = duration
        self._on_count = on_count
        self.wake = asyncio.Event()
        """Set when the earliest deadline comes closer (or the agent stops): the timer waits on it."""

    def __getitem__(self, uid: str) -> RunningPod:
        return self._pods[uid]

    def __iter__(self) -> Iterator[str]:
        return iter(self._pods)

    def __len__(self) -> int:
        return len(self._pods)

    def reservations_on(self, node: str) -> list[Reservation]:
        """What the pods running on ``node`` hold there (those tracked without one left out)."""
        return [p.reservation for p in self._on_node[node].values() if p.reservation is not None]

    def on(self, node: str) -> list[RunningPod]:
        """The pods tracked as running on ``node``."""
        return list(self._on_node[node].values())

    def uid_of(self, key: str) -> str | None:
        """The uid of the pod named ``key`` (namespace/name) running here, or None."""
        return self._by_key.get(key)

    def track(
        self, uid: str, key: str, node: str, reservation: Reservation | None, *, started_at: float, confirmed: bool
    ) -> RunningPod:
        """Run a pod on ``node`` from ``started_at`` (seconds since the epoch); its deadline is
        set by its duration, and its timer starts when it is ``confirmed`` (or `confirm`)."""
        duration = self._duration(uid)
        deadline = started_at + duration if duration > 0 else 0.0
        pod = RunningPod(uid, key, node, reservation, started_at, deadline, confirmed=False)
        self._pods[uid] = pod
        self._on_node[node][uid] = pod
        self._by_key[key] = uid
        self._on_count(len(self._pods))
        if confirmed:
            self.confirm(pod)
        return pod

    def confirm(self, pod: RunningPod) -> None:
        """Redis has the pod Running: its run time counts down from now on. Idempotent."""
        if pod.confirmed:
            return
        pod.confirmed = True
        if pod.deadline:
            self.schedule(pod, pod.deadline)

    def untrack(self, uid: str) -> RunningPod | None:
        """Forget a pod (its timer entry goes stale); the pod, or None if it was not here."""
        pod = self._pods.pop(uid, None)
        if pod is not None:
            self._on_node[pod.node].pop(uid, None)
            if self._by_key.get(pod.key) == uid:
                del self._by_key[pod.key]
            self._on_count(len(self._pods))
        return pod

    def schedule(self, pod: RunningPod, deadline: float) -> None:
        """Finish ``pod`` at ``deadline`` (seconds since the epoch), replacing its earlier one."""
        pod.deadline = deadline
        if not self._timers or deadline < self._timers[0][0]:
            self.wake.set()
        heapq.heappush(self._timers, (deadline, pod.uid))

    def due(self, now: float) -> list[RunningPod]:
        """The pods whose deadline is ``now`` or earlier, taken off the timer."""
        out: list[RunningPod] = []
        while self._timers and self._timers[0][0] <= now:
            deadline, uid = heapq.heappop(self._timers)
            pod = self._pods.get(uid)
            if pod is not None and pod.deadline == deadline:  # else stale: rescheduled or gone
                out.append(pod)
        return out

    def next_deadline(self) -> float | None:
        """The earliest deadline on the timer (maybe a stale one), or None."""
        return self._timers[0][0] if self._timers else None
