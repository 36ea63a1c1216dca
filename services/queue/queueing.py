"""The scheduling queue of one profile, as kube-scheduler's PriorityQueue keeps it: pure logic, no I/O.

A pod the queue knows is in exactly one place (`QueueName`):

- **activeQ**: a heap ordered by the profile's QueueSort plugin (PrioritySort: higher
  priority first, then the pod queued earlier); `pop` hands its head out.
- **backoffQ**: pods waiting out their backoff, ordered by backoff expiry; `flush_backoff`
  (every second) moves the expired ones to the activeQ.
- **unschedulable**: pods the last attempt found no node for; a cluster event that can help
  them (`SchedulingQueue.worth_requeuing`) moves them on, and `flush_unschedulable_leftover`
  retries any pod left there longer than `max_in_unschedulable` (kube's
  podMaxInUnschedulablePodsDuration).
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
- QueueingHints (`isPodWorthRequeuing`): an event moves an unschedulable pod when one of the
  plugins that rejected it registered for the event (`EnqueueExtensions.events_to_register`)
  and its hint, given the pod and the event's old and new objects, answers Queue (a hint that
  raises counts as Queue). A plugin that does not implement EnqueueExtensions, one the profile
  does not have, or a pod with no rejecting plugin is moved by every cluster event.

Not thread-safe: the service drives it from one event loop. Times are seconds from the
injectable ``clock`` (monotonic by default).
"""

from __future__ import annotations

import heapq
import time
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from functools import cmp_to_key

from kubus.api.objects import Pod
from kubus.api.podgroups import pod_group_key
from kubus.framework.interface import (
    FilterPlugin,
    PermitPlugin,
    PreEnqueuePlugin,
    PreFilterPlugin,
    QueueSortPlugin,
    ReservePlugin,
)
from kubus.framework.queueing_hints import (
    ALL_EVENTS,
    WILDCARD,
    ClusterEventWithHint,
    EnqueueExtensions,
    EventObject,
    QueueingHint,
)
from kubus.plugins import IN_TREE
from kubus.plugins.priority_sort import PrioritySort, QueuedPodInfo
from kubus.plugins.scheduling_gates import SchedulingGates

__all__ = [
    "CLUSTER_EVENTS",
    "ClusterChange",
    "HintObserver",
    "InFlight",
    "QueueEntry",
    "QueueName",
    "SchedulingQueue",
    "backoff_duration",
    "registered_events",
]


class QueueName(StrEnum):
    """Where a pod the queue knows is; the values are scheduler_pending_pods' `queue` labels."""

    ACTIVE = "active"
    BACKOFF = "backoff"
    UNSCHEDULABLE = "unschedulable"
    GATED = "gated"
    IN_FLIGHT = "in_flight"
    """Handed to the cycle; not one of kube's pending queues (not counted as pending)."""


# -- QueueingHints -----------------------------------------------------------------------------------

CLUSTER_EVENTS = ALL_EVENTS
"""The event kinds that are changes of the cluster (docs/services.md, Events). Bookkeeping
events (pod.accepted, pod.rejected, pod.unschedulable) never move a pod."""

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
"""Event kind -> kube's event label, for scheduler_queue_incoming_pods_total{event} and
scheduler_queueing_hint_execution_duration_seconds{event}."""

HintObserver = Callable[[str, str, str, float], None]
"""``observe(plugin, event, hint, seconds)``: one hint call, for
scheduler_queueing_hint_execution_duration_seconds (``hint``: Queue, QueueSkip or Error)."""


@dataclass(frozen=True, slots=True)
class ClusterChange:
    """One cluster event as hints see it: its kind and the objects before and after (see
    `kubus.framework.queueing_hints` for what each kind carries; None where unknown)."""

    kind: str
    old: EventObject = None
    new: EventObject = None


def registered_events(plugins: Mapping[str, object]) -> dict[str, tuple[ClusterEventWithHint, ...] | None]:
    """Plugin name -> the events it registered (its `events_to_register`), or None for a plugin
    that does not implement EnqueueExtensions (every event may help it)."""
    out: dict[str, tuple[ClusterEventWithHint, ...] | None] = {}
    for name, plugin in plugins.items():
        out[name] = tuple(plugin.events_to_register()) if isinstance(plugin, EnqueueExtensions) else None
    return out


def _in_tree_plugins() -> dict[str, object]:
    """The in-tree plugins with default args: the hints of a queue built without a profile."""
    return {cls.name: cls() for cls in IN_TREE}


_REJECTING = (PreEnqueuePlugin, PreFilterPlugin, FilterPlugin, ReservePlugin, PermitPlugin)
"""The plugins that can leave a pod unschedulable: the ones whose registered events matter."""

_PRUNE_MIN = 64

REFUSED_RETRIES = 3
"""Attempts in a row a pod whose reservation Redis refused goes straight back to the activeQ
(`SchedulingQueue.retry_refused`). Under binpacking two profiles race for the same fullest
nodes: with one retry, about one pod in a thousand still lost twice in a row and waited out a
backoff, the last to bind of a 10,000-pod run."""


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
    refused: int = 0
    """Its last attempts in a row whose reservation Redis refused (`retry_refused`)."""
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
    events: list[ClusterChange] = field(default_factory=list)
    """Cluster events noted for it by hand (the queue's own events are found through ``since``;
    see `SchedulingQueue.events_in_flight`)."""
    since: int = 0
    """The queue's cluster-event count when it was popped: events after it arrived in flight."""


# -- the queue -------------------------------------------------------------------------------------


class SchedulingQueue:
    """activeQ, backoffQ, unschedulable and gated sets and the in-flight map of one profile.

    ``pre_enqueue``: the profile's PreEnqueue plugins (default: SchedulingGates).
    ``queue_sort``: its QueueSort plugin (default: PrioritySort). ``on_incoming(queue, event)``
    is called for every pod added to the active, backoff or unschedulable queue, with kube's
    event label (for scheduler_queue_incoming_pods_total). ``plugins``: every plugin of the
    profile by name, whose `events_to_register` decide which events move the pods they rejected
    (default: the in-tree plugins); ``on_hint`` observes each hint call. Times are seconds.
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
        plugins: Mapping[str, object] | None = None,
        on_hint: HintObserver | None = None,
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
        self._on_hint = on_hint
        source = _in_tree_plugins() if plugins is None else plugins
        self._registered = registered_events(source)
        """Plugin -> the events it registered (None: every event)."""
        rejecting = [self._registered[name] for name, plugin in source.items() if isinstance(plugin, _REJECTING)]
        self.registered_kinds: frozenset[str] = (
            frozenset({WILDCARD})
            if any(events is None for events in rejecting)
            else frozenset(e.kind for events in rejecting for e in events or ())
        )
        """The event kinds registered by the plugins that can reject a pod (kube's PreEnqueue,
        PreFilter, Filter, Reserve and Permit plugins; `WILDCARD` among them: every kind). As
        kube's informers, the queue need not hear of the others."""
        self.hinted_kinds: frozenset[str] = frozenset(
            e.kind for events in self._registered.values() for e in events or () if e.hint is not None
        )
        """The event kinds some plugin's hint looks at (`WILDCARD` among them: every kind): the
        events whose objects are worth reading."""
        sort_key = getattr(self.queue_sort, "sort_key", None)
        if callable(sort_key):
            self._sort_key: Callable[[QueuedPodInfo], object] = sort_key
        else:
            less = self.queue_sort.less
            self._sort_key = cmp_to_key(lambda a, b: -1 if less(a, b) else (1 if less(b, a) else 0))
        self._seq = 0
        self._active: dict[str, QueueEntry] = {}
        self._active_heap: list[tuple[object, int, str]] = []
        self._backoff: dict[str, QueueEntry] = {}
        self._backoff_heap: list[tuple[float, int, str]] = []
        self._unschedulable: dict[str, QueueEntry] = {}
        self._gated: dict[str, QueueEntry] = {}
        self._events = 0
        """Cluster events seen (`move_for_event`)."""
        self._recent: list[tuple[int, ClusterChange]] = []
        """The events (numbered by ``_events``) that arrived while pods were in flight, for their
        hints when they come back unschedulable (kube's inFlightEvents); none kept while no pod
        is in flight, and pruned past the oldest pod in flight."""
        self._prune_at = _PRUNE_MIN
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
    def in_flight_count(self) -> int:
        """Pods handed to the cycle whose outcome has not come back."""
        return len(self._in_flight)

    def unschedulable_by_plugin(self) -> Counter[str]:
        """How many pods in the unschedulable set each plugin rejected (a pod counts once per
        rejecting plugin; one rejected by none counts under ""): kube's
        scheduler_unschedulable_pods."""
        counts: Counter[str] = Counter()
        for entry in self._unschedulable.values():
            counts.update(entry.unschedulable_plugins or ("",))
        return counts

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
            self._forget_events()
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
        self._forget_events()
        return flight.entry if flight is not None else None

    def activate_siblings(self, groups: Iterable[str]) -> int:
        """Members of ``groups`` were reserved: their siblings in the backoffQ or the
        unschedulable set go straight to the activeQ (scheduler-plugins' Coscheduling
        ActivateSiblings at Permit, through kube's Activate), so the gang is tried while the
        reserved members wait, not after their wait timed out. Returns how many moved."""
        wanted = set(groups)
        if not wanted:
            return 0
        return self._activate_members(wanted, (self._backoff, self._unschedulable), "ForceActivate")

    def retry_refused(self, uid: str) -> QueueName | None:
        """The in-flight pod was placed but Redis refused its reservation (the cycle's table was
        stale, not the pod unschedulable): back to the activeQ at once, keeping its place, as an
        in-flight pod past its deadline is (`done`, then `restore`). At most `REFUSED_RETRIES`
        attempts in a row: after that it stays in flight and None is returned, for the caller
        to fail the attempt (`add_unschedulable`: backoff), so a refusal that reading the node
        again does not cure cannot loop."""
        flight = self._in_flight.get(uid)
        if flight is None or flight.entry.refused >= REFUSED_RETRIES:
            return None
        self.done(uid)
        flight.entry.refused += 1
        return self.restore(flight.entry, "ReservationRefused")

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
        binder), with ``attempts`` made. The cluster events of its attempt are unknown then (kube
        counts those of the binding cycle as in flight too; here it ran in the binder): it is
        requeued after its backoff, not left unschedulable, so a gang's members handed back
        together cannot all wait there for an event that came before them. Returns where it went;
        None when the pod is already queued (nothing changes, as in kube) or unknown without a
        pod to add.
        """
        flight = self._in_flight.pop(uid, None)
        missed_events = False
        if flight is not None:
            entry = flight.entry
            events = self.events_in_flight(flight)
            self._forget_events()
        elif self.where(uid) is not None or pod is None or manifest is None:
            return None
        else:
            entry = QueueEntry(pod=pod, manifest=manifest, timestamp=self.clock(), attempts=attempts)
            events, missed_events = [], True
        now = self.clock()
        entry.unschedulable_plugins = frozenset(plugins)
        entry.refused = 0
        entry.timestamp = now
        entry.backoff_expiry = now + self.backoff_duration(entry.attempts)
        if self._gate(entry):
            return self._put(entry, QueueName.GATED, "ScheduleAttemptFailure")
        if (
            missed_events
            or not entry.unschedulable_plugins
            or any(self.worth_requeuing(entry, change) for change in events)
        ):
            return self._requeue_after_backoff(entry, "ScheduleAttemptFailure")
        return self._put(entry, QueueName.UNSCHEDULABLE, "ScheduleAttemptFailure")

    # -- moving pods on --------------------------------------------------------------------------

    def move_for_event(self, kind: str, old: EventObject = None, new: EventObject = None) -> int:
        """A cluster event of ``kind`` happened, changing ``old`` into ``new`` (None where there
        is none or it was not read: hints then answer Queue where they need it). Every
        unschedulable pod it is worth requeuing (`worth_requeuing`) goes to the backoffQ (still
        backing off) or the activeQ (kube's movePodsToActiveOrBackoffQueue); the pods in flight
        remember it. Returns how many pods moved; bookkeeping kinds move none and are not kept."""
        if kind not in CLUSTER_EVENTS:
            return 0
        self._events += 1
        change = ClusterChange(kind, old, new)
        if self._in_flight:
            self._recent.append((self._events, change))
            if len(self._recent) >= self._prune_at:
                self._prune_events()
        if not self._unschedulable:
            return 0
        label = _EVENT_LABELS.get(kind, kind)
        helped = [e for e in self._unschedulable.values() if self.worth_requeuing(e, change)]
        for entry in helped:
            del self._unschedulable[entry.uid]
            self._requeue_after_backoff(entry, label)
        return len(helped)

    def worth_requeuing(self, entry: QueueEntry, change: ClusterChange) -> bool:
        """kube's isPodWorthRequeuing: whether ``change`` may make the pod schedulable. True for
        a pod no plugin rejected, or when one of its rejecting plugins registered for the event
        (or for every event, or is unknown to the profile) and its hint, if any, says Queue.
        Each hint call is timed into ``on_hint``; a hint that raises counts as Queue."""
        plugins = entry.unschedulable_plugins
        if not plugins or change.kind == WILDCARD:
            return True
        for name in sorted(plugins):  # a set: the same order, and the same hint calls, every time
            registered = self._registered.get(name)
            if registered is None:
                return True  # not an EnqueueExtensions plugin, or not one this profile has
            for event in registered:
                if not event.matches(change.kind):
                    continue
                if event.hint is None or self._hint(name, event, entry.pod, change) is QueueingHint.QUEUE:
                    return True
        return False

    def events_in_flight(self, flight: InFlight) -> list[ClusterChange]:
        """The cluster events that arrived while ``flight`` was in flight, oldest first."""
        seen = [change for number, change in self._recent if number > flight.since]
        return seen + flight.events if flight.events else seen

    def inflight_events(self) -> Counter[str]:
        """kube's scheduler_inflight_events, by event label: the events kept for the pods in
        flight (those that arrived after the oldest of them was popped, and those noted for one
        by hand). O(events kept + pods in flight)."""
        counts: Counter[str] = Counter()
        if not self._in_flight:
            return counts
        oldest = min(f.since for f in self._in_flight.values())
        for number, change in self._recent:
            if number > oldest:
                counts[_EVENT_LABELS.get(change.kind, change.kind)] += 1
        for flight in self._in_flight.values():
            for change in flight.events:
                counts[_EVENT_LABELS.get(change.kind, change.kind)] += 1
        return counts

    def flush_backoff(self) -> int:
        """Move every pod whose backoff expired to the activeQ (kube's flushBackoffQCompleted,
        every second), and with a pod of a PodGroup its siblings still backing off: a gang's
        members come back together, so QueueSort keeps them side by side in the activeQ
        (members backing off apart could never all be placed within the group's timeout).
        Returns how many moved."""
        now = self.clock()
        moved = 0
        groups: set[str] = set()
        while self._backoff_heap and self._backoff_heap[0][0] <= now:
            _, seq, uid = heapq.heappop(self._backoff_heap)
            entry = self._backoff.get(uid)
            if entry is None or entry.seq != seq:
                continue
            del self._backoff[uid]
            self._put(entry, QueueName.ACTIVE, "BackoffComplete")
            moved += 1
            group = pod_group_key(entry.pod)
            if group is not None:
                groups.add(group)
        if groups:
            moved += self._activate_members(groups, (self._backoff,), "GangSiblingBackoffComplete")
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
        self._forget_events()
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
        self._forget_events()
        return stale

    # -- internals -------------------------------------------------------------------------------

    def _hint(self, plugin: str, event: ClusterEventWithHint, pod: Pod, change: ClusterChange) -> QueueingHint:
        assert event.hint is not None
        start = time.perf_counter()
        try:
            hint = event.hint(pod, change.old, change.new)
            label = str(hint)
        except Exception:  # kube: a hint's error means Queue
            hint, label = QueueingHint.QUEUE, "Error"
        if self._on_hint is not None:
            self._on_hint(plugin, _EVENT_LABELS.get(change.kind, change.kind), label, time.perf_counter() - start)
        return hint

    def _activate_members(self, groups: set[str], sets: Iterable[dict[str, QueueEntry]], event: str) -> int:
        """Move the pods of ``groups`` found in ``sets`` to the activeQ. Returns how many."""
        moved = 0
        for entries in sets:
            for entry in [e for e in entries.values() if pod_group_key(e.pod) in groups]:
                del entries[entry.uid]  # a backoff heap item goes stale (lazy deletion by seq)
                self._put(entry, QueueName.ACTIVE, event)
                moved += 1
        return moved

    def _forget_events(self) -> None:
        """No pod in flight: no event kept for one."""
        if not self._in_flight:
            self._recent.clear()
            self._prune_at = _PRUNE_MIN

    def _prune_events(self) -> None:
        """Drop the events every pod in flight was popped after (O(in flight), amortized by
        pruning only when the list doubled)."""
        oldest = min((f.since for f in self._in_flight.values()), default=self._events)
        self._recent = [item for item in self._recent if item[0] > oldest]
        self._prune_at = max(_PRUNE_MIN, 2 * len(self._recent))

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
    def _current(entries: dict[str, QueueEntry], item: tuple[object, int, str]) -> bool:
        entry = entries.get(item[2])
        return entry is not None and entry.seq == item[1]
