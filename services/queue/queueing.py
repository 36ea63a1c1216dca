"""The scheduling queue of one profile, as kube-scheduler's PriorityQueue keeps it: pure logic, no I/O.

A pod the queue knows is in exactly one place (`QueueName`):

- **activeQ**: a heap ordered by the profile's QueueSort plugin (PrioritySort: higher
  priority first, then the pod queued earlier); `pop` hands its head out.
- **backoffQ**: pods waiting out their backoff, ordered by backoff expiry; `flush_backoff`
  (every second) moves the expired ones to the activeQ.
- **unschedulable**: pods the last attempt found no node for; a cluster event that can help
  them (see `event_may_help`) moves them on, and `flush_unschedulable_leftover` retries any
  pod left there longer than `max_in_unschedulable` (kube's podMaxInUnschedulablePodsDuration).
- **gated**: pods a PreEnqueue plugin holds back (SchedulingGates); they leave only when the pod
  is updated and PreEnqueue passes. PreEnqueue runs when a pod is added, updated or restored
  (a pod changes only by an update, so running it on every move would change nothing).
- **in flight**: popped and handed to the cycle, until its outcome comes back (`done`,
  `add_unschedulable`) or the in-flight deadline passes (`take_expired_in_flight`).

kube's rules, with the names of scheduling_queue.go / backoff_queue.go:

- Backoff (`calculateBackoffDuration`): 0 for a pod never attempted, else
  ``initial × 2^(attempts − 1)``, capped at ``max``; it runs from the time the failed attempt
  came back (``timestamp``). ``attempts`` counts pops, as kube's ``Attempts`` does.
- A failed attempt (`AddUnschedulableIfNotPresent`): with no rejecting plugin (an error, not a
  fit problem) the pod goes to the backoffQ. Otherwise it goes to the unschedulable set, unless
  an event that may help it arrived *while it was in flight* (kube's in-flight events, which
  replaced `moveRequestCycle` once QueueingHints went GA): then it is requeued as if that event
  had come a moment later.
- Requeueing after an event or a leftover flush (`requeuePodWithQueueingStrategy`,
  queueAfterBackoff): to the backoffQ while the pod's backoff has not expired, else straight to
  the activeQ.
- QueueingHints, simplified: an event helps a pod when one of the plugins that rejected it
  registered for that kind of event (`PLUGIN_EVENTS`); a plugin that registered for nothing
  we know of, or a pod with no rejecting plugin, is helped by every cluster event.

Not thread-safe: the service drives it from one event loop. Times are seconds from the
injectable ``clock`` (monotonic by default).
"""

from __future__ import annotations

import heapq
import time
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from functools import cmp_to_key
from typing import Any

from kubus.api.objects import Pod
from kubus.framework.interface import PreEnqueuePlugin, QueueSortPlugin
from kubus.plugins.priority_sort import PrioritySort, QueuedPodInfo
from kubus.plugins.scheduling_gates import SchedulingGates

__all__ = [
    "CLUSTER_EVENTS",
    "NODE_CHANGED",
    "PLUGIN_EVENTS",
    "POD_FREED",
    "InFlight",
    "QueueEntry",
    "QueueName",
    "SchedulingQueue",
    "backoff_duration",
    "event_may_help",
]


class QueueName(StrEnum):
    """Where a pod the queue knows is; the values are scheduler_pending_pods' `queue` labels."""

    ACTIVE = "active"
    BACKOFF = "backoff"
    UNSCHEDULABLE = "unschedulable"
    GATED = "gated"
    IN_FLIGHT = "in_flight"
    """Handed to the cycle; not one of kube's pending queues (not counted as pending)."""


# -- QueueingHints, simplified ---------------------------------------------------------------------

NODE_CHANGED = frozenset({"node.added", "node.updated"})
"""Events that can make a node fit a pod it did not fit."""
POD_FREED = frozenset({"pod.finished", "pod.deleted", "pod.unreserved"})
"""Events that give a node's resources back."""
CLUSTER_EVENTS = NODE_CHANGED | POD_FREED | frozenset({"node.lost", "node.deleted", "pod.bound", "pod.running"})
"""The event kinds that are changes of the cluster (docs/services.md, Events). Bookkeeping
events (pod.accepted, pod.rejected, pod.unschedulable) never move a pod."""

PLUGIN_EVENTS: Mapping[str, frozenset[str]] = {
    "NodeResourcesFit": NODE_CHANGED | POD_FREED,
    "GPUFit": NODE_CHANGED | POD_FREED,
    "NodePorts": NODE_CHANGED | POD_FREED,
    "NodeAffinity": NODE_CHANGED,
    "TaintToleration": NODE_CHANGED,
    "NodeUnschedulable": NODE_CHANGED,
    "NodeName": NODE_CHANGED,
}
"""Plugin -> the event kinds that can undo its rejection (its EventsToRegister). A plugin not
listed is helped by every cluster event."""

_EVENT_LABELS = {
    "node.added": "NodeAdd",
    "node.updated": "NodeUpdate",
    "node.lost": "NodeLost",
    "node.deleted": "NodeDelete",
    "pod.bound": "AssignedPodAdd",
    "pod.running": "AssignedPodUpdate",
    "pod.finished": "AssignedPodUpdate",
    "pod.deleted": "AssignedPodDelete",
    "pod.unreserved": "PodUnreserve",
}
"""Event kind -> kube's event label, for scheduler_queue_incoming_pods_total{event}."""


def event_may_help(kind: str, plugins: Collection[str]) -> bool:
    """Whether an event of ``kind`` can make a pod that ``plugins`` rejected schedulable."""
    if kind not in CLUSTER_EVENTS:
        return False
    if not plugins:
        return True
    for plugin in plugins:
        events = PLUGIN_EVENTS.get(plugin)
        if events is None or kind in events:
            return True
    return False


def backoff_duration(attempts: int, initial: float, maximum: float) -> float:
    """kube's calculateBackoffDuration, seconds: 0 before any attempt, else initial doubled per
    attempt after the first, capped at ``maximum``."""
    if attempts <= 0:
        return 0.0
    duration = initial
    for _ in range(1, attempts):
        if duration > maximum - duration:
            return maximum
        duration += duration
    return min(duration, maximum)


# -- entries ---------------------------------------------------------------------------------------


@dataclass(slots=True, eq=False)
class QueueEntry:
    """One pod in the queue (kube's QueuedPodInfo). Mutated only by its SchedulingQueue."""

    pod: Pod
    manifest: bytes
    """The pod as JSON, what the cycle receives."""
    timestamp: float
    """When the pod was added, or its last attempt came back: QueueSort's tie-break and the
    start of its backoff."""
    attempts: int = 0
    """Times it was popped (scheduling attempts started)."""
    unschedulable_plugins: frozenset[str] = frozenset()
    """The plugins that rejected it last time (empty: it failed for another reason)."""
    gated_by: str = ""
    """The PreEnqueue plugin holding it back, when gated."""
    gate_message: str = ""
    """That plugin's reason ("waiting for scheduling gates: [a]")."""
    backoff_expiry: float = 0.0
    where: QueueName = QueueName.ACTIVE
    seq: int = 0
    """Which heap item is current (lazy deletion)."""

    @property
    def uid(self) -> str:
        return self.pod.metadata.uid

    @property
    def key(self) -> str:
        return self.pod.key


@dataclass(slots=True)
class InFlight:
    """A popped pod, while the cycle works on it."""

    entry: QueueEntry
    deadline: float
    """After this (clock seconds) the pod is handed out again unless its outcome came back."""
    holder: str = ""
    token: int = 0
    """The fencing token of the cycle that popped it."""
    events: set[str] = field(default_factory=set)
    """Cluster event kinds noted for it by hand (the queue's own events are counted through
    ``since``; see `SchedulingQueue.events_in_flight`)."""
    since: int = 0
    """The queue's cluster-event count when it was popped: events after it arrived in flight."""


# -- the queue -------------------------------------------------------------------------------------


class SchedulingQueue:
    """activeQ, backoffQ, unschedulable and gated sets and the in-flight map of one profile.

    ``pre_enqueue``: the profile's PreEnqueue plugins (default: SchedulingGates).
    ``queue_sort``: its QueueSort plugin (default: PrioritySort). ``on_incoming(queue, event)``
    is called for every pod added to the active, backoff or unschedulable queue, with kube's
    event label (for scheduler_queue_incoming_pods_total). Times are seconds.
    """

    def __init__(
        self,
        profile: str = "default-scheduler",
        *,
        initial_backoff: float = 1.0,
        max_backoff: float = 10.0,
        max_in_unschedulable: float = 300.0,
        in_flight_timeout: float = 30.0,
        pre_enqueue: Sequence[PreEnqueuePlugin] | None = None,
        queue_sort: QueueSortPlugin | None = None,
        clock: Callable[[], float] = time.monotonic,
        on_incoming: Callable[[QueueName, str], None] | None = None,
    ) -> None:
        if initial_backoff <= 0 or max_backoff < initial_backoff:
            raise ValueError(f"backoff: need 0 < initial ({initial_backoff}) <= max ({max_backoff})")
        self.profile = profile
        self.initial_backoff = initial_backoff
        self.max_backoff = max_backoff
        self.max_in_unschedulable = max_in_unschedulable
        self.in_flight_timeout = in_flight_timeout
        self.pre_enqueue: tuple[PreEnqueuePlugin, ...] = (
            (SchedulingGates(),) if pre_enqueue is None else tuple(pre_enqueue)
        )
        self.queue_sort: QueueSortPlugin = queue_sort if queue_sort is not None else PrioritySort()
        self.clock = clock
        self._on_incoming = on_incoming
        sort_key = getattr(self.queue_sort, "sort_key", None)
        if callable(sort_key):
            self._sort_key: Callable[[QueuedPodInfo], Any] = sort_key
        else:
            less = self.queue_sort.less
            self._sort_key = cmp_to_key(lambda a, b: -1 if less(a, b) else (1 if less(b, a) else 0))
        self._seq = 0
        self._active: dict[str, QueueEntry] = {}
        self._active_heap: list[tuple[Any, int, str]] = []
        self._backoff: dict[str, QueueEntry] = {}
        self._backoff_heap: list[tuple[float, int, str]] = []
        self._unschedulable: dict[str, QueueEntry] = {}
        self._gated: dict[str, QueueEntry] = {}
        self._events = 0
        """Cluster events seen (`move_for_event`)."""
        self._last_event: dict[str, int] = {}
        """Event kind -> the number (``_events``) of its latest event: O(1) per event for any
        number of pods in flight."""
        self._in_flight: dict[str, InFlight] = {}

    # -- reading -----------------------------------------------------------------------------------

    def where(self, uid: str) -> QueueName | None:
        """Where the pod is, or None when the queue does not know it."""
        if uid in self._in_flight:
            return QueueName.IN_FLIGHT
        for name, entries in self._sets():
            if uid in entries:
                return name
        return None

    def __contains__(self, uid: object) -> bool:
        return isinstance(uid, str) and self.where(uid) is not None

    def get(self, uid: str) -> QueueEntry | None:
        """The pod's entry, wherever it is."""
        if uid in self._in_flight:
            return self._in_flight[uid].entry
        for _, entries in self._sets():
            if uid in entries:
                return entries[uid]
        return None

    def in_flight(self, uid: str) -> InFlight | None:
        return self._in_flight.get(uid)

    def uids(self) -> set[str]:
        """Every pod the queue knows, in flight included."""
        out = set(self._in_flight)
        for _, entries in self._sets():
            out.update(entries)
        return out

    def counts(self) -> dict[QueueName, int]:
        """How many pods are where."""
        counts = {name: len(entries) for name, entries in self._sets()}
        counts[QueueName.IN_FLIGHT] = len(self._in_flight)
        return counts

    def active(self) -> list[QueueEntry]:
        """The activeQ in pop order (a copy; for tests and debugging)."""
        return sorted(self._active.values(), key=lambda e: (self._sort_key(self._info(e)), e.seq))

    def __len__(self) -> int:
        return len(self._active)

    @property
    def unschedulable_count(self) -> int:
        """Pods in the unschedulable set (the ones a cluster event can move)."""
        return len(self._unschedulable)

    def backoff_duration(self, attempts: int) -> float:
        return backoff_duration(attempts, self.initial_backoff, self.max_backoff)

    def is_backing_off(self, entry: QueueEntry) -> bool:
        return entry.backoff_expiry > self.clock()

    def gate_message(self, pod: Pod) -> str:
        """Why PreEnqueue would hold ``pod`` back ("" when it passes); changes nothing."""
        for plugin in self.pre_enqueue:
            status = plugin.pre_enqueue(pod)
            if not status.is_success:
                return status.message()
        return ""

    # -- adding, updating, deleting ----------------------------------------------------------------

    def add(self, pod: Pod, manifest: bytes, *, attempts: int = 0, event: str = "PodAdd") -> QueueName:
        """A pod to schedule (new, or rebuilt from Redis with its ``attempts``): PreEnqueue, then
        the activeQ or the gated set. Idempotent: a pod the queue knows stays where it is
        (its location is returned)."""
        uid = pod.metadata.uid
        where = self.where(uid)
        if where is not None:
            return where
        entry = QueueEntry(pod=pod, manifest=manifest, timestamp=self.clock(), attempts=attempts)
        return self._admit(entry, event)

    def update(self, pod: Pod, manifest: bytes) -> QueueName | None:
        """The pod changed (a resubmission while pending). PreEnqueue runs again: a gated pod whose
        gates are gone moves to the activeQ; a pod waiting as unschedulable is requeued (the change
        may help it); one in a heap is re-sorted; one in flight keeps the new version for when it
        comes back. Returns where it is now; None for a pod the queue does not know."""
        uid = pod.metadata.uid
        flight = self._in_flight.get(uid)
        if flight is not None:
            flight.entry.pod, flight.entry.manifest = pod, manifest
            return QueueName.IN_FLIGHT
        entry = self._take(uid)
        if entry is None:
            return None
        entry.pod, entry.manifest = pod, manifest
        previous = entry.where
        if previous is QueueName.GATED:
            return self._admit(entry, "PodUpdate")
        if self._gate(entry):
            return self._put(entry, QueueName.GATED, "PodUpdate")
        if previous is QueueName.UNSCHEDULABLE:
            return self._requeue_after_backoff(entry, "PodUpdate")
        return self._put(entry, previous, "PodUpdate")

    def delete(self, uid: str) -> QueueName | None:
        """Forget the pod wherever it is (in flight too). Returns where it was."""
        flight = self._in_flight.pop(uid, None)
        if flight is not None:
            return QueueName.IN_FLIGHT
        entry = self._take(uid)
        return entry.where if entry is not None else None

    # -- pop and outcomes --------------------------------------------------------------------------

    def pop(self, max_pods: int, *, holder: str = "", token: int = 0, max_bytes: int | None = None) -> list[QueueEntry]:
        """Up to ``max_pods`` pods from the head of the activeQ, in order, each marked in flight
        (deadline: now + in_flight_timeout) with its ``attempts`` counted (the entries' attempts
        include this one). With ``max_bytes``, stops before the manifests would total more
        (the first pod always goes)."""
        out: list[QueueEntry] = []
        deadline = self.clock() + self.in_flight_timeout
        size = 0
        while len(out) < max_pods and self._active_heap:
            _, seq, uid = self._active_heap[0]
            entry = self._active.get(uid)
            if entry is None or entry.seq != seq:
                heapq.heappop(self._active_heap)
                continue  # a stale heap item: the pod moved or was deleted
            size += len(entry.manifest)
            if max_bytes is not None and out and size > max_bytes:
                break
            heapq.heappop(self._active_heap)
            del self._active[uid]
            entry.attempts += 1
            entry.where = QueueName.IN_FLIGHT
            self._in_flight[uid] = InFlight(entry, deadline, holder, token, since=self._events)
            out.append(entry)
        return out

    def done(self, uid: str) -> QueueEntry | None:
        """The popped pod was reserved: it leaves the queue. Returns its entry (None if it was
        not in flight)."""
        flight = self._in_flight.pop(uid, None)
        return flight.entry if flight is not None else None

    def add_unschedulable(
        self,
        uid: str,
        plugins: Iterable[str] = (),
        *,
        pod: Pod | None = None,
        manifest: bytes | None = None,
        attempts: int = 0,
    ) -> QueueName | None:
        """An attempt failed (kube's AddUnschedulableIfNotPresent): ``plugins`` rejected the pod,
        or none for an error. Its backoff starts now.

        The pod is normally in flight. One the queue does not know is added when ``pod`` and
        ``manifest`` are given (an outcome arriving after a restart, a pod handed back by the
        binder), with ``attempts`` made. Returns where it went; None when the pod is already
        queued (nothing changes, as in kube) or unknown without a pod to add.
        """
        flight = self._in_flight.pop(uid, None)
        if flight is not None:
            entry = flight.entry
            events = self.events_in_flight(flight)
        elif self.where(uid) is not None or pod is None or manifest is None:
            return None
        else:
            entry = QueueEntry(pod=pod, manifest=manifest, timestamp=self.clock(), attempts=attempts)
            events = set()
        now = self.clock()
        entry.unschedulable_plugins = frozenset(plugins)
        entry.timestamp = now
        entry.backoff_expiry = now + self.backoff_duration(entry.attempts)
        if self._gate(entry):
            return self._put(entry, QueueName.GATED, "ScheduleAttemptFailure")
        if not entry.unschedulable_plugins or any(event_may_help(kind, entry.unschedulable_plugins) for kind in events):
            return self._requeue_after_backoff(entry, "ScheduleAttemptFailure")
        return self._put(entry, QueueName.UNSCHEDULABLE, "ScheduleAttemptFailure")

    # -- moving pods on --------------------------------------------------------------------------

    def move_for_event(self, kind: str) -> int:
        """A cluster event of ``kind`` happened: every unschedulable pod it may help goes to the
        backoffQ (still backing off) or the activeQ; in-flight pods remember it. Returns how
        many pods moved."""
        if kind not in CLUSTER_EVENTS:
            return 0
        self._events += 1
        self._last_event[kind] = self._events  # what the pods in flight now will see
        if not self._unschedulable:
            return 0
        label = _EVENT_LABELS.get(kind, kind)
        helped = [e for e in self._unschedulable.values() if event_may_help(kind, e.unschedulable_plugins)]
        for entry in helped:
            del self._unschedulable[entry.uid]
            self._requeue_after_backoff(entry, label)
        return len(helped)

    def events_in_flight(self, flight: InFlight) -> set[str]:
        """The cluster event kinds that arrived while ``flight`` was in flight."""
        seen = {kind for kind, number in self._last_event.items() if number > flight.since}
        return seen | flight.events if flight.events else seen

    def flush_backoff(self) -> int:
        """Move every pod whose backoff expired to the activeQ (kube's flushBackoffQCompleted,
        every second). Returns how many moved."""
        now = self.clock()
        moved = 0
        while self._backoff_heap and self._backoff_heap[0][0] <= now:
            _, seq, uid = heapq.heappop(self._backoff_heap)
            entry = self._backoff.get(uid)
            if entry is None or entry.seq != seq:
                continue
            del self._backoff[uid]
            self._put(entry, QueueName.ACTIVE, "BackoffComplete")
            moved += 1
        return moved

    def flush_unschedulable_leftover(self) -> int:
        """Requeue every pod unschedulable for longer than ``max_in_unschedulable`` (kube's
        flushUnschedulablePodsLeftover): to the backoffQ or the activeQ. Returns how many."""
        now = self.clock()
        stale = [e for e in self._unschedulable.values() if now - e.timestamp > self.max_in_unschedulable]
        for entry in stale:
            del self._unschedulable[entry.uid]
            self._requeue_after_backoff(entry, "UnschedulableTimeout")
        return len(stale)

    def take_expired_in_flight(self) -> list[QueueEntry]:
        """Remove and return the in-flight pods past their deadline (their outcome never came
        back). The caller checks each is still pending and gives it back with `restore`."""
        now = self.clock()
        expired = [f.entry for f in self._in_flight.values() if f.deadline <= now]
        for entry in expired:
            del self._in_flight[entry.uid]
        return expired

    def restore(self, entry: QueueEntry, event: str = "InFlightTimeout") -> QueueName | None:
        """Put a pod taken out of flight back into the activeQ, keeping its attempts (PreEnqueue
        runs again). None when the queue knows the pod by now (it stays where it is)."""
        if self.where(entry.uid) is not None:
            return None
        return self._admit(entry, event)

    def expire_in_flight(self) -> list[QueueEntry]:
        """`take_expired_in_flight` and `restore` each: in-flight pods past their deadline return
        to the activeQ. Returns them."""
        expired = self.take_expired_in_flight()
        for entry in expired:
            self.restore(entry)
        return expired

    def fence(self, token: int) -> list[QueueEntry]:
        """A cycle with fencing ``token`` took over: pods popped under an older (non-zero) token
        go back to the activeQ at once instead of waiting for their deadline. Returns them."""
        stale = [f.entry for f in self._in_flight.values() if 0 < f.token < token]
        for entry in stale:
            del self._in_flight[entry.uid]
            self._admit(entry, "ForceActivate")
        return stale

    # -- internals -------------------------------------------------------------------------------

    def _sets(self) -> tuple[tuple[QueueName, dict[str, QueueEntry]], ...]:
        return (
            (QueueName.ACTIVE, self._active),
            (QueueName.BACKOFF, self._backoff),
            (QueueName.UNSCHEDULABLE, self._unschedulable),
            (QueueName.GATED, self._gated),
        )

    def _info(self, entry: QueueEntry) -> QueuedPodInfo:
        return QueuedPodInfo(pod=entry.pod, timestamp=entry.timestamp, attempts=entry.attempts)

    def _take(self, uid: str) -> QueueEntry | None:
        """Remove the pod from whichever queue holds it (not from the in-flight map)."""
        for _, entries in self._sets():
            entry = entries.pop(uid, None)
            if entry is not None:
                return entry  # a heap item left behind is skipped by its seq
        return None

    def _gate(self, entry: QueueEntry) -> bool:
        """Run PreEnqueue; True (and the entry says by whom) when a plugin holds the pod back."""
        for plugin in self.pre_enqueue:
            status = plugin.pre_enqueue(entry.pod)
            if not status.is_success:
                entry.gated_by = getattr(plugin, "name", type(plugin).__name__)
                entry.gate_message = status.message()
                return True
        entry.gated_by = entry.gate_message = ""
        return False

    def _admit(self, entry: QueueEntry, event: str) -> QueueName:
        if self._gate(entry):
            return self._put(entry, QueueName.GATED, event)
        return self._put(entry, QueueName.ACTIVE, event)

    def _requeue_after_backoff(self, entry: QueueEntry, event: str) -> QueueName:
        if self.is_backing_off(entry):
            return self._put(entry, QueueName.BACKOFF, event)
        return self._put(entry, QueueName.ACTIVE, event)

    def _put(self, entry: QueueEntry, where: QueueName, event: str) -> QueueName:
        self._seq += 1
        entry.seq = self._seq
        entry.where = where
        uid = entry.uid
        if where is QueueName.ACTIVE:
            self._active[uid] = entry
            heapq.heappush(self._active_heap, (self._sort_key(self._info(entry)), entry.seq, uid))
            if len(self._active_heap) > 2 * len(self._active) + 64:
                self._active_heap = [item for item in self._active_heap if self._current(self._active, item)]
                heapq.heapify(self._active_heap)
        elif where is QueueName.BACKOFF:
            self._backoff[uid] = entry
            heapq.heappush(self._backoff_heap, (entry.backoff_expiry, entry.seq, uid))
            if len(self._backoff_heap) > 2 * len(self._backoff) + 64:
                self._backoff_heap = [item for item in self._backoff_heap if self._current(self._backoff, item)]
                heapq.heapify(self._backoff_heap)
        elif where is QueueName.UNSCHEDULABLE:
            self._unschedulable[uid] = entry
        elif where is QueueName.GATED:
            self._gated[uid] = entry
        else:
            raise ValueError(f"cannot put a pod in {where}")
        if where is not QueueName.GATED and self._on_incoming is not None:
            self._on_incoming(where, event)
        return where

    @staticmethod
    def _current(entries: dict[str, QueueEntry], item: tuple[Any, int, str]) -> bool:
        entry = entries.get(item[2])
        return entry is not None and entry.seq == item[1]
