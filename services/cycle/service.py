"""The scheduling cycle of one profile: pop a batch, schedule it, reserve, hand it to the binders.

One active replica per profile holds the lease ``cycle/<profile>`` (`kubus.leasing`);
standbys run the same service and take over when the lease lapses. The leader, in a loop
(docs/services.md, steps 3 and 4):

1. **Node table.** On becoming leader it loads every node and its reservations from Redis
   (`ClusterState.load_snapshot`) into a `NodeSnapshot`; cluster events (``kubus.events.>``)
   name the nodes whose rows it reads again before the next batch, and a full resync every
   ``resync_interval`` heals any event it missed. Its own reservations are assumed locally as
   it makes them; the other profiles' cycles announce theirs (`ReservedPods` on
   ``kubus.reserved.<profile>``) as they hand them over, while they hear another profile's cycle
   there (an empty one every ``presence_interval``), and those are assumed before the next
   batch, a bind ahead of their ``pod.bound``, so fewer reservations collide in Redis. The
   namespaces' labels (for namespaceSelectors) and the workloads (Services, ReplicationControllers,
   ReplicaSets, StatefulSets: default topology spreading's) are read from the store before every
   pop, when their version moved: one applied is seen from the next batch on.
2. **Pop** up to ``batch_size`` pods (`PopRequest` on ``kubus.queue.<profile>.pop``, with the
   lease's fencing token). Each manifest is parsed; a bad one is an ERROR outcome. The next
   pop is sent as soon as a batch arrives, so the queue answers while this batch is scheduled
   (one pop ahead at most; on stop, its pods are scheduled too, not left in flight).
3. **Schedule** the batch (`Scheduler.schedule`, in a worker thread so the lease keeps being
   renewed; never two batches at once): each pod sees the placements of the ones before it.
4. **Reserve** each placed pod, the batch in one round trip: for each, one atomic script
   (RESERVE_POD, `ClusterState.reserve_attempts`) reserves the room with the fencing token and
   then moves the pod Pending -> Reserved (its new version is the attempt id); a pod placed by
   preemption is moved first, then PREEMPT evicts its victims and reserves. A pod someone else
   moved (deleted, or reserved by another attempt) is forgotten and skipped; its ERROR outcome
   says it is no longer Pending, and the queue, finding that in Redis too, drops it. A refused
   reservation (CONFLICT, NODE_GONE: another profile got there first) leaves the pod Pending;
   the rows of the nodes that refused are read again from Redis (the other profile's pods there
   are news to the table), and the refused pods are scheduled once more against the refreshed
   table; refused again, they are UNSCHEDULABLE with the conflict's reason. FENCED means a
   newer leader exists: this replica steps down.
5. **Hand over** each reserved pod: the batch's reservations announced to the other profiles'
   cycles, then a `BindRequest` on ``kubus.bind.<profile>`` (msg id
   ``bind/<uid>/<attempt>``), after checking the lease once more; a replica that lost it gives
   the room back (unreserve, Pending again) and reports an ERROR instead.
6. **Report** one `Outcomes` message for the batch to ``kubus.queue.<profile>.done``
   (request/reply, retried): RESERVED with the node and devices, UNSCHEDULABLE with kube's
   message and the rejecting plugins, ERROR with the error.

Steps 5 and 6 of a batch run while the next batch is scheduled (one batch finishing at a time);
a stop waits for them.

Leadership is checked before every batch, after scheduling and before every publish.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import math
import os
import socket
import time
import uuid
from collections.abc import Awaitable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import nats.errors
import nats.js.errors
from nats.aio.client import Client as NATS
from nats.aio.msg import Msg

from kubus.api.errors import ManifestError
from kubus.api.manifests import wire_pod
from kubus.api.objects import Pod
from kubus.api.podgroups import pod_group_key
from kubus.bus import (
    EVENTS,
    RESERVED_ALL,
    EventKind,
    Publication,
    announcements,
    bind,
    event_filter,
    msgids,
    publish_durable_many,
    queue_done,
    queue_pop,
)
from kubus.bus import reserved as reserved_subject
from kubus.bus.messages import (
    ERROR_HEADER,
    BindRequest,
    ClusterEvent,
    MessageError,
    Outcome,
    OutcomeKind,
    Outcomes,
    PodChange,
    PopReply,
    PopRequest,
    QueuedPod,
    ReservedPods,
    decode,
    encode,
)
from kubus.cycle.snapshot import NodeSnapshot, SyncStats
from kubus.framework.cycle_state import GPU_DEVICES_STATE_KEY, CycleState
from kubus.framework.registry import ExtensionPoint
from kubus.framework.runtime import Framework
from kubus.framework.scheduling import Scheduler, ScheduleResult
from kubus.framework.status import Code
from kubus.framework.waiting import WaitingPods
from kubus.kernels import NodeTable, select_backend
from kubus.kernels.nodeinfo import PodInfo
from kubus.leasing import Leadership
from kubus.plugins.gpu_fit import GPUFit
from kubus.plugins.node_resources_fit import NodeResourcesFit
from kubus.service import TRANSIENT_ERRORS, Service, Throttle
from kubus.settings import ConnectionSettings
from kubus.store import (
    ClusterState,
    DecodedRecords,
    EventType,
    Move,
    PodEvent,
    PodPhase,
    PodWrite,
    PreemptResult,
    Reservation,
    ReserveResult,
    StoreCode,
    cycle_lease,
)

__all__ = ["CycleOptions", "CycleService"]

NODE_EVENTS = frozenset(
    k.value for k in (EventKind.NODE_ADDED, EventKind.NODE_UPDATED, EventKind.NODE_LOST, EventKind.NODE_DELETED)
)
"""Events after which the node itself is read again (with its reservations)."""
POD_EVENTS = frozenset(
    k.value
    for k in (
        EventKind.POD_UNRESERVED,
        EventKind.POD_BOUND,
        EventKind.POD_FINISHED,
        EventKind.POD_DELETED,
    )
)
"""Events after which the reservations of the pod's node are read again."""
_PENDING_ONLY = frozenset({PodPhase.PENDING})

PLACING_EVENTS = frozenset({EventKind.POD_BOUND.value})
"""Pod events that change nothing in the table when it already accounts the pod on that node
(most of them: this cycle reserved the pod and assumed it at once)."""

SCHEDULE_EXTENSION_POINT = "SchedulePod"
"""`extension_point` label of the whole vectorized algorithm for a batch (PreFilter through
NormalizeScore and the Reserve plugins), observed once per batch."""
RESERVE_EXTENSION_POINT = "Reserve"
"""`extension_point` label of the batch's reservations in Redis (RESERVE_POD, or a preemptor's
TRANSITION and PREEMPT)."""


@dataclass(frozen=True, slots=True)
class CycleOptions:
    """How a cycle replica works. Every replica of a profile should use the same values."""

    batch_size: int = 256
    """Pods popped and scheduled at a time (PopRequest.max_pods)."""
    pop_wait_ms: int = 200
    """How long the queue may hold a pop when it has no pod (PopRequest.wait_ms)."""
    pop_pace: float = 0.02
    """Seconds a pop waits after one that came back short (fewer than batch_size: the queue had
    no more), so pods trickling in come as one batch: at 200 pods/s, four a batch instead of
    one, each batch's round trips (pop, reserve, hand-over, report) shared; 0: pop at once."""
    request_timeout: float = 2.0
    """Seconds a pop (beyond ``pop_wait_ms``) or an outcome report may take before it is retried."""
    done_attempts: int = 5
    """Tries of one outcome report; then the queue's in-flight deadline takes over."""
    lease_ttl: float = 5.0
    """Seconds the lease lasts without renewal: how long a standby waits after a crash."""
    renew_interval: float = 1.0
    """Seconds between lease renewals (a standby's attempts to take it)."""
    resync_interval: float = 30.0
    """Seconds between the starts of full re-reads of the node table from Redis (heals missed events)."""
    resync_slice: int = 5000
    """Nodes re-read before one batch: a full re-read of a larger cluster is spread over several
    batches (at 50,000 nodes a full one stalled the cycle for seconds)."""
    resync_budget: float = 0.1
    """At most this share of the cycle's time goes to full re-reads, while pods wait: a slice
    goes before a batch only once the last one's cost is this share of the time since it began
    (an idle cycle reads the next slice at once), and a re-read that took longer than budget ×
    resync_interval puts the next one off (at 50,000 nodes a re-read takes seconds)."""
    reserve_concurrency: int = 64
    """Redis calls in flight at once while reserving a batch."""
    presence_interval: float = 2.0
    """Seconds between a leading cycle's presence notices (an empty `ReservedPods`). A cycle
    announces its reservations only while another profile's cycle is there to take them in:
    one heard within 3 intervals, or in its own first 3 intervals of leading (before it could
    have heard any). Alone, it sends nothing more."""
    warm_standby: bool = True
    """A standby keeps its node table current while it waits for the lease: loaded at start,
    the rows events name read again every ``renew_interval``, full re-reads as the leader's
    (within ``resync_budget``). A takeover then reads only the rows changed since, instead of
    every node (at 50,000 nodes: 7.5 s). False: the table is loaded on taking the lease."""
    backend: str = "auto"
    """Array backend of the node table: auto, numpy or cupy (`kubus.kernels.select_backend`)."""
    seed: int = 0
    """Tie-break seed: equal seeds give equal placements."""

    def __post_init__(self) -> None:
        if self.batch_size < 1:
            raise ValueError(f"batch_size: must be at least 1, got {self.batch_size}")
        if self.pop_wait_ms < 0:
            raise ValueError(f"pop_wait_ms: must not be negative, got {self.pop_wait_ms}")
        if not 0 <= self.pop_pace <= 1:
            raise ValueError(f"pop_pace: must be 0 to 1 second, got {self.pop_pace!r}")
        if self.done_attempts < 1:
            raise ValueError(f"done_attempts: must be at least 1, got {self.done_attempts}")
        if self.reserve_concurrency < 1:
            raise ValueError(f"reserve_concurrency: must be at least 1, got {self.reserve_concurrency}")
        if self.resync_slice < 1:
            raise ValueError(f"resync_slice: must be at least 1, got {self.resync_slice}")
        if not 0 < self.resync_budget <= 1:
            raise ValueError(f"resync_budget: must be in (0, 1], got {self.resync_budget!r}")
        for name in ("request_timeout", "lease_ttl", "renew_interval", "resync_interval", "presence_interval"):
            if not getattr(self, name) > 0:
                raise ValueError(f"{name}: must be a positive number of seconds, got {getattr(self, name)!r}")
        if self.renew_interval >= self.lease_ttl:
            raise ValueError(f"renew_interval ({self.renew_interval}s) must be below lease_ttl ({self.lease_ttl}s)")


# ---- one batch ---------------------------------------------------------------------------------


@dataclass(slots=True)
class _Batch:
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
    victims: dict[str, list[tuple[str, str]]] = field(default_factory=dict)
    """Preemptor uid -> (uid, attempt) of each pod its preemption evicts (the table already
    forgot them; the store evicts them with the preemptor's reservation, in one step)."""
    reserved: list[_Reserved] = field(default_factory=list)
    """Pods Redis reserved and Permit passed: handed to the binders once the batch is decided."""
    evicted: dict[str, tuple[str, ...]] = field(default_factory=dict)
    """Preemptor uid -> ``namespace/name/uid`` of each pod its preemption evicted in the store
    (`BindRequest.victims`)."""

    def decide(self, outcome: Outcome) -> None:
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
class _Reserved:
    result: ScheduleResult
    node: str
    attempt: int
    reservation: Reservation
    gpu_devices: tuple[int, ...]
    """The devices Redis holds for the pod: the Scheduler's pick, or RESERVE's when it picked again."""


_Attempted = tuple[ScheduleResult, int, Reservation, ReserveResult, bool]
"""A pod's store step: its result, the attempt, its reservation, the room's answer, and whether
the pod is Reserved in Redis whatever the answer (a refusal then has the attempt to give back)."""


@dataclass(frozen=True, slots=True)
class _Refused:
    result: ScheduleResult
    node: str
    code: StoreCode
    reason: str


# ---- the service -------------------------------------------------------------------------------


class CycleService(Service):
    """The scheduling-cycle service of one profile (``framework.scheduler_name``).

    ``CycleService(settings, framework, options)``; `run()` until stopped. ``holder`` names this
    replica in the lease (default: host/pid/random). Read-only views for tests and operators:
    `leading`, `fencing_token`, `table`.
    """

    metrics_role = "cycle"

    def __init__(
        self,
        settings: ConnectionSettings | None,
        framework: Framework,
        options: CycleOptions | None = None,
        *,
        holder: str | None = None,
        name: str = "cycle",
        waiting: WaitingPods | None = None,
    ) -> None:
        super().__init__(name, settings)
        self.framework = framework
        self.waiting = waiting if waiting is not None else WaitingPods()
        """The pods of this profile waiting on Permit, as the framework's plugins see them (the
        handle their factories got): loaded from Redis before each batch that needs it."""
        self.profile = framework.scheduler_name
        self.options = options or CycleOptions()
        self.holder = holder or f"{socket.gethostname()}/{os.getpid()}/{uuid.uuid4().hex[:8]}"
        self.log = self.log.bind(profile=self.profile)
        self.backend = select_backend(self.options.backend)
        """The node table's array backend (raises here, before connecting, when unavailable)."""
        self.cluster: ClusterState | None = None
        self.leadership: Leadership | None = None
        self.snapshot: NodeSnapshot | None = None
        # scheduler_cache_size describes the table: read at each scrape, in the loop that owns it.
        self.metrics.sample(self._sample_cache_size)
        """The node table; None until loaded (and after an error that makes it suspect)."""
        self._scheduler: Scheduler | None = None
        self._term = 0
        self._dirty: set[str] = set()
        self._noticed: dict[str, Reservation] = {}
        """Other profiles' reservations announced since the last batch, by pod key (`_on_reserved`)."""
        self._next_resync = 0.0
        self._resync_left: list[str] = []
        """Nodes the current re-read has still to read, in order; empty between re-reads."""
        self._resync_stats = SyncStats()
        self._resync_started = 0.0
        """When the current re-read began (the event loop's clock)."""
        self._resync_cost = 0.0
        """Seconds the current re-read's slices have taken so far."""
        self._next_slice = 0.0
        """When the current re-read's next slice may go before a batch (the event loop's clock)."""
        self._idle = True
        """The last pop brought no pods: nothing waits on a slice read now."""
        self._short_pop_at: float | None = None
        """When the last pop came back short (loop time); None after a full one (`_pop`)."""
        self._timers: dict[tuple[ExtensionPoint, str], Any] = {}
        """The extension-point and plugin duration series, by (point, plugin)."""
        self._decoded = DecodedRecords()
        """Nodes and reservations read before, by their bytes: a re-read parses only what changed."""
        self._loop_task: asyncio.Task[None] | None = None
        self._lease_task: asyncio.Task[None] | None = None
        self._loop_done = asyncio.Event()
        self._finishing: asyncio.Task[None] | None = None
        """The last batch's hand-over and report, running while the next batch is scheduled."""
        self._table_lock = asyncio.Lock()
        """Held while a batch is scheduled in the worker thread: a hand-over that gives a pod back
        (a table change) waits for it."""
        self._queue_answering = True
        self._refused_pops = Throttle()
        """The throttle of the "the queue refused a pop" lines (one per interval, with a count)."""
        self._own_reserved = reserved_subject(self.profile)
        self._heard_others_at = -math.inf
        """When another profile's cycle was last heard on kubus.reserved.* (the loop's clock)."""
        self._leading_since = -math.inf
        """When this replica's table was last loaded (a term began)."""
        self._followed = False
        """The table was kept current while standing by (`_follow`): a takeover catches up
        on the rows changed since instead of loading every node."""
        self._present_due = 0.0
        """When the next presence notice is due (the loop's clock)."""
        fit = framework.plugins.get("NodeResourcesFit")
        self._fit: NodeResourcesFit | None = fit if isinstance(fit, NodeResourcesFit) else None
        gpu_fit = framework.plugins.get("GPUFit")
        self._gpu_pick = gpu_fit.mode if isinstance(gpu_fit, GPUFit) else ""
        """GPUFit's mode: RESERVE may pick other devices the same way when the chosen ones
        were taken by another profile meanwhile ('' without GPUFit: the devices stand)."""

    # -- views -----------------------------------------------------------------------------------

    @property
    def leading(self) -> bool:
        """Whether this replica holds the profile's lease now."""
        return self.leadership is not None and self.leadership.leading

    @property
    def fencing_token(self) -> int | None:
        """The lease's fencing token while leading, else None."""
        return None if self.leadership is None else self.leadership.token

    @property
    def table(self) -> NodeTable | None:
        """The node table, or None before it is loaded."""
        return None if self.snapshot is None else self.snapshot.table

    # -- lifecycle -------------------------------------------------------------------------------

    async def on_start(self) -> None:
        assert self.nc is not None and self.redis is not None
        self.cluster = ClusterState(self.redis)
        self.leadership = Leadership(
            self.cluster,
            cycle_lease(self.profile),
            self.holder,
            ttl=self.options.lease_ttl,
            renew_interval=self.options.renew_interval,
            log=self.log,
        )
        # Keeps the node table fresh: the events that change a node's row name it; it is read again.
        # Only those kinds are subscribed to (the busiest ones, pod.running above all, are not).
        for kind in sorted(NODE_EVENTS | POD_EVENTS):
            await self.nc.subscribe(event_filter(EventKind(kind)), cb=self._on_event)
        await self.nc.subscribe(RESERVED_ALL, cb=self._on_reserved)
        # Takes or renews the lease cycle/<profile>: one active cycle per profile, standbys wait here.
        self._lease_task = self.spawn("lease", self.leadership.keep)
        # The scheduling loop: pop a batch, schedule it, reserve, hand it to the binders, report.
        self._loop_task = self.spawn("scheduling loop", self._scheduling_loop)

    async def on_stop(self) -> None:
        # The loop finishes the batch in hand (its pods are in flight at the queue) and returns.
        if self._loop_task is not None and not self._loop_task.done():
            await self._loop_done.wait()
        # Stop renewing, then give the lease up so a standby takes over at once.
        if self._lease_task is not None and not self._lease_task.done():
            self._lease_task.cancel()
            await asyncio.wait([self._lease_task])
        if self.leadership is not None:
            await self.leadership.release()

    # -- the loop --------------------------------------------------------------------------------

    async def _scheduling_loop(self) -> None:
        leadership = self._leadership()
        # The next batch is asked for as soon as one arrives: the queue answers while this one is
        # scheduled, so its answer (and its wait for pods) is off the loop's path. At most one
        # pop is ahead; its pods are scheduled with the token they were popped with.
        ahead: asyncio.Task[list[QueuedPod]] | None = None
        ahead_token = 0
        try:
            while not self.stopping.is_set():
                if not await self._stand_by():
                    break
                token = leadership.token
                if token is None:
                    continue
                try:
                    await self._prepare_table()
                    if ahead is not None:
                        popping, popped_with, ahead = ahead, ahead_token, None
                        queued = await popping
                    else:
                        queued, popped_with = await self._pop(token), token
                    self._idle = not queued
                    if queued:
                        if not self.stopping.is_set():
                            ahead, ahead_token = asyncio.create_task(self._pop(token), name="pop ahead"), token
                        await self._run_and_finish(_Batch(queued, popped_with))
                except TRANSIENT_ERRORS as exc:
                    self.log.warning("redis or nats unavailable; the node table will be reloaded", error=repr(exc))
                    self.snapshot = None
                    await self._pause(0.5)
            if ahead is not None:
                # Stopping: pods popped ahead are scheduled, not left in flight at the queue.
                await self._last_batch(ahead, ahead_token)
                ahead = None
            await self._finished()
        finally:
            if ahead is not None:
                ahead.cancel()
            if self._finishing is not None:
                self._finishing.cancel()
            self._loop_done.set()

    async def _last_batch(self, ahead: asyncio.Task[list[QueuedPod]], token: int) -> None:
        try:
            queued = await ahead
            if queued:
                await self._run_and_finish(_Batch(queued, token))
        except TRANSIENT_ERRORS as exc:
            self.log.warning("the last batch's pods are left to the queue's in-flight deadline", error=repr(exc))

    async def _run_and_finish(self, batch: _Batch) -> None:
        """Decide ``batch`` (schedule, reserve, Permit), then hand it over and report it in the
        background while the next batch is scheduled: one batch finishing at a time, in order."""
        await self._run_batch(batch)
        await self._finished()
        self._finishing = asyncio.create_task(self._finish(batch), name="hand over and report")

    async def _finished(self) -> None:
        """Wait for the last batch's hand-over and report."""
        if self._finishing is not None:
            finishing, self._finishing = self._finishing, None
            await finishing

    async def _finish(self, batch: _Batch) -> None:
        """Hand the batch's reserved pods to the binders and report its outcomes. Never raises but
        for cancellation."""
        try:
            if batch.reserved:
                await self._hand_over(batch, batch.reserved, asyncio.Semaphore(self.options.reserve_concurrency))
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            # Reserved in Redis all the same: the janitor finishes or gives back what is left.
            self.log.exception("hand-over failed", error=repr(exc))
            for pod in batch.queued:
                batch.error(pod.uid, f"handing the pod to the binders failed: {exc!r}")
        await self._report(batch)
        self._observe(batch)

    async def _prepare_table(self) -> None:
        """Load the table on a new term (or after an error), resync it when due, and read again
        the rows events named."""
        leadership = self._leadership()
        if self.snapshot is None or (self._term != leadership.term and not self._followed):
            await self._load()
        elif self._term != leadership.term:
            self._catch_up()
        elif self._resync_due():
            await self._resync_slice()
        await self._refresh()
        store, table = self._store(), self._snapshot().table
        # one round trip's wait for both (each a GET of its version while nothing changed)
        table.namespaces, table.workloads = await asyncio.gather(store.namespaces(), store.workloads())
        await self._say_present()

    async def _stand_by(self) -> bool:
        """Wait for the lease: True once leading, False once stopping. A warm standby
        (`CycleOptions.warm_standby`) follows the cluster meanwhile (`_follow`, every
        ``renew_interval``)."""
        leadership = self._leadership()
        while not self.stopping.is_set():
            if leadership.leading:
                return True
            if self.options.warm_standby:
                try:
                    await self._follow()
                except TRANSIENT_ERRORS as exc:
                    self.log.warning("redis unavailable; the standby's node table will be reloaded", error=repr(exc))
                    self.snapshot, self._followed = None, False
            if await leadership.wait(self.stopping, timeout=self.options.renew_interval):
                return True
        return False

    async def _follow(self) -> None:
        """Keep the table current while standing by, as the leader does between batches: loaded
        once, the rows events named read again, a full re-read every resync_interval within
        resync_budget (a standby is never idle: it shares the machine with the leader)."""
        self._idle = False
        if self.snapshot is None:
            await self._load()
        elif self._resync_due():
            await self._resync_slice()
        await self._refresh()
        self._followed = True

    def _catch_up(self) -> None:
        """Take over with the table followed while standing by: a new term begins on it, and
        `_refresh` reads the rows changed since the last follow. The predecessor's reservations
        not yet bound are news to it: a reservation there is refused (CONFLICT) and the row
        read again, as for another profile's."""
        term = self._leadership().term
        self._term, self._followed = term, False
        self._leading_since = asyncio.get_running_loop().time()
        nodes = len(self._snapshot().table)
        self.log.info("node table taken over warm", nodes=nodes, rows_to_read=len(self._dirty), term=term)

    async def _load(self) -> None:
        """Read every node and reservation into a new table (a new term, or after an error)."""
        started = time.perf_counter()
        self._followed = False
        term = self._leadership().term
        self._dirty.clear()  # events from now on are read again after this snapshot
        self._noticed.clear()  # so are reservations announced from now on
        self._leading_since = asyncio.get_running_loop().time()
        self._resync_left = []  # this read is the full one
        snapshot = NodeSnapshot(self.backend, seed=self.options.seed)
        stats = snapshot.load(await self._store().load_snapshot(decoded=self._decoded))
        self.snapshot, self._term = snapshot, term
        self._scheduler = Scheduler(
            self.framework, snapshot.table, seed=self.options.seed, timer=self._time_extension_point
        )
        self._next_resync = asyncio.get_running_loop().time() + self.options.resync_interval
        table = snapshot.table
        unreachable = self._count_nodes(snapshot)
        self.log.info(
            "node table loaded",
            nodes=len(table),
            pods=len(snapshot.placed),
            unreachable=unreachable,
            added=stats.nodes_added,
            assumed=stats.pods_assumed,
            backend=self.backend.name,
            seconds=round(time.perf_counter() - started, 4),
        )

    def _sample_cache_size(self) -> None:
        snapshot = self.snapshot
        nodes, pods, assumed = (0, 0, 0) if snapshot is None else snapshot.sizes()
        gauge = self.metrics.cache_size
        gauge.labels(type="nodes").set(nodes)
        gauge.labels(type="pods").set(pods)
        gauge.labels(type="assumed_pods").set(assumed)

    def _count_nodes(self, snapshot: NodeSnapshot) -> int:
        """Set the ready/unreachable node gauges from the whole table; returns the unreachable count."""
        unreachable = snapshot.unreachable_nodes()
        self.metrics.nodes.labels(state="ready").set(len(snapshot.table) - unreachable)
        self.metrics.nodes.labels(state="unreachable").set(unreachable)
        return unreachable

    def _resync_due(self) -> bool:
        """A full re-read starts every resync_interval (or later: resync_budget); its next slice
        is due at once while the cycle is idle, and within resync_budget while pods wait."""
        now = asyncio.get_running_loop().time()
        if not self._resync_left:
            return now >= self._next_resync
        return self._idle or now >= self._next_slice

    async def _resync_slice(self) -> None:
        """Re-read the next `resync_slice` nodes of the current full re-read (starting one when
        due: every node Redis lists or the table holds, so a node added or removed behind a
        missed event is found), diffing them into the table."""
        snapshot, table = self._snapshot(), self._snapshot().table
        began = time.perf_counter()
        if not self._resync_left:
            self._resync_left = sorted(set(await self._store().node_names()) | set(table.row_of))
            self._resync_started = asyncio.get_running_loop().time()
            self._resync_stats, self._resync_cost = SyncStats(), 0.0
        names, self._resync_left = (
            self._resync_left[: self.options.resync_slice],
            self._resync_left[self.options.resync_slice :],
        )
        stats = self._resync_stats
        snapshot.sync_nodes(names, await self._store().load_snapshot(names, decoded=self._decoded), stats)
        cost = time.perf_counter() - began
        self._resync_cost += cost
        options = self.options
        self._next_slice = asyncio.get_running_loop().time() + cost * (1 / options.resync_budget - 1)
        if self._resync_left:
            return
        wait = max(options.resync_interval, self._resync_cost / options.resync_budget)
        self._next_resync = self._resync_started + wait
        unreachable = self._count_nodes(snapshot)
        self.log.log(
            logging.INFO if stats.changed else logging.DEBUG,
            "node table resynced",
            nodes=len(table),
            pods=len(snapshot.placed),
            unreachable=unreachable,
            added=stats.nodes_added,
            updated=stats.nodes_updated,
            removed=stats.nodes_removed,
            assumed=stats.pods_assumed,
            forgotten=stats.pods_forgotten,
            seconds=round(self._resync_cost, 4),
            next_in=round(wait, 1),
        )

    async def _refresh(self, extra: Iterable[str] = ()) -> None:
        """Take in the reservations other profiles announced, then read again, from Redis, the
        rows events named (and ``extra``)."""
        if self.snapshot is None:
            return
        if self._noticed:
            noticed, self._noticed = self._noticed, {}
            self._dirty |= self.snapshot.noticed(noticed.values())
        names = self._dirty.union(extra)
        if not names:
            return
        self._dirty = set()
        ordered = sorted(names)
        try:
            entries = await self._store().load_snapshot(ordered, decoded=self._decoded)
        except BaseException:
            self._dirty |= names
            raise
        stats = self.snapshot.sync_nodes(ordered, entries)
        if stats.changed:
            self.log.debug(
                "node rows refreshed",
                nodes=len(ordered),
                added=stats.nodes_added,
                updated=stats.nodes_updated,
                removed=stats.nodes_removed,
                assumed=stats.pods_assumed,
                forgotten=stats.pods_forgotten,
            )

    async def _pop(self, token: int) -> list[QueuedPod]:
        """Up to batch_size pods from the queue; [] when it has none or does not answer. After a
        pop that came back short, the next waits out `CycleOptions.pop_pace` first."""
        loop = asyncio.get_running_loop()
        if self._short_pop_at is not None:
            wait = self._short_pop_at + self.options.pop_pace - loop.time()
            if wait > 0:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self.stopping.wait(), wait)
        pods = await self._pop_now(token)
        self._short_pop_at = loop.time() if len(pods) < self.options.batch_size else None
        return pods

    async def _pop_now(self, token: int) -> list[QueuedPod]:
        request = PopRequest(
            max_pods=self.options.batch_size,
            wait_ms=self.options.pop_wait_ms,
            holder=self.holder,
            fencing_token=token,
        )
        subject = queue_pop(self.profile)
        try:
            msg = await self._nats().request(
                subject, encode(request), timeout=self.options.pop_wait_ms / 1000 + self.options.request_timeout
            )
        except nats.errors.NoRespondersError:
            if self._queue_answering:
                self.log.warning("the queue does not answer pops; retrying", subject=subject)
                self._queue_answering = False
            await self._pause(0.5)
            return []
        except nats.errors.TimeoutError:
            self.log.warning("pop timed out; retrying", subject=subject)
            return []
        if not self._queue_answering:
            self.log.info("the queue answers pops again", subject=subject)
            self._queue_answering = True
        refusal = (msg.headers or {}).get(ERROR_HEADER)
        if refusal:
            # Fenced (the lease in Redis names another token: the lease loop finds out) or a
            # queue that cannot read the lease now: either way, ask again in a moment.
            if (dropped := self._refused_pops.allow()) is not None:
                self.log.warning("the queue refused a pop; retrying", reason=refusal, refused_before_unlogged=dropped)
            await self._pause(0.5)
            return []
        try:
            return list(decode(PopReply, msg.data).pods)
        except MessageError as exc:
            self.metrics.rejected_messages.labels(subject=subject).inc()
            self.log.error("pop reply rejected: not a PopReply", subject=subject, reason=str(exc))
            return []

    # -- one batch -------------------------------------------------------------------------------

    async def _run_batch(self, batch: _Batch) -> None:
        """Schedule, reserve and Permit one popped batch (`_finish` hands it over and reports it).
        Never raises but for cancellation: an unexpected error fails the batch's pods not yet
        reserved (ERROR) and makes the table be loaded again."""
        try:
            await self._refresh()  # events that came while the pop waited
            pods = self._admit(batch)
            if self._sees_waiting_pods:
                await self._load_waiting(pods)
            placed = await self._schedule(batch, pods)
            refused = await self._reserve_round(batch, placed)
            if refused:
                # Another profile got there first: read again the nodes that refused (the other
                # profile's pods there are news to the table; those elsewhere come in its
                # announcement) and retry the refused pods once.
                await self._refresh({r.node for r in refused})
                retried = await self._schedule(batch, [r.result.pod for r in refused])
                for again in await self._reserve_round(batch, retried):
                    # Refused twice: the queue retries it at once (`retry_refused`), the table now knowing more.
                    batch.decide(
                        Outcome(
                            uid=_uid(again.result.pod),
                            kind=OutcomeKind.REFUSED,
                            node=again.node,
                            message=f"reservation on node {again.node} refused by Redis: {again.reason}",
                        )
                    )
            if self._sees_waiting_pods:
                await self._apply_decisions()  # what PostFilter or Permit decided about waiting pods
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            if isinstance(exc, TRANSIENT_ERRORS):
                self.log.warning("batch failed: redis or nats unavailable", error=repr(exc))
            else:
                self.log.exception("batch failed", error=repr(exc))
            self.snapshot = None  # placements may be half-assumed: read it all again
            # The pods reserved and through Permit before the error are still handed over.
            reserved = {_uid(r.result.pod) for r in batch.reserved}
            for pod in batch.queued:
                if pod.uid not in reserved:
                    batch.error(pod.uid, f"scheduling failed: {exc!r}")

    def _admit(self, batch: _Batch) -> list[Pod]:
        """Parse the batch's manifests; a pod that cannot be scheduled as it is gets its outcome."""
        snapshot = self._snapshot()
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
                self._dirty.add(where.node)
                batch.error(
                    queued.uid,
                    f"pod {pod.key} already holds a reservation on node {where.node} (uid {where.uid}); "
                    "retry after the node is read again",
                )
                continue
            keys.add(pod.key)
            pods.append(pod)
            self._store().know_profile(queued.uid, self.profile)  # popped from our queue: ours
        return pods

    async def _schedule(self, batch: _Batch, pods: list[Pod]) -> list[ScheduleResult]:
        """Run the algorithm over ``pods`` in a worker thread; decide the ones it could not place.
        Returns the placed ones (assumed in the table)."""
        if not pods:
            return []
        scheduler, snapshot = self._scheduler, self._snapshot()
        assert scheduler is not None
        started = time.perf_counter()
        status = "Error"
        try:
            async with self._table_lock:
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
                snapshot.placed_by_scheduler(pod.key, _uid(pod), result.node)
                placed.append(result)
                if result.preempted:
                    batch.victims[_uid(pod)] = [
                        (v.pod.metadata.uid, where.attempt if where is not None else "")
                        for v in result.preempted
                        for where in (snapshot.evicted(v.pod.key, result.node),)
                    ]
                    self.metrics.preemption_victims.labels(profile=self.profile).observe(len(result.preempted))
            elif result.status.code is Code.ERROR:
                batch.error(_uid(pod), result.message or "scheduling failed")
            else:
                batch.decide(
                    Outcome(
                        uid=_uid(pod),
                        kind=OutcomeKind.UNSCHEDULABLE,
                        message=result.message,
                        plugins=result.plugins,
                    )
                )
        if placed and not self._still_leading(batch.token):
            for result in placed:
                self._forget(result.pod, result.node or "")
                batch.error(_uid(result.pod), _lost_lease_message(self.profile))
            return []
        return placed

    async def _reserve_round(self, batch: _Batch, placed: list[ScheduleResult]) -> list[_Refused]:
        """docs/services.md 4a and 4b for the placed pods, one pipelined round trip for the
        batch: most pods' attempt and room in one step each (`ClusterState.reserve_attempts`),
        a preemptor's attempt then its victims' eviction and its room (`_attempt_preemptors`);
        then the reserved ones go to the binders. Returns the pods Redis refused (CONFLICT /
        NODE_GONE), Pending in Redis and forgotten locally."""
        if not placed:
            return []
        started = time.perf_counter()
        wanted: list[tuple[ScheduleResult, PodInfo]] = []
        for result in placed:
            pod_info = result.pod_info or PodInfo.of(result.pod, result.gpu_devices)
            if pod_info.gpu is not None and len(result.gpu_devices) != pod_info.gpu.count:
                self._forget(result.pod, result.node or "")
                batch.error(
                    _uid(result.pod),
                    f"pod {result.pod.key} asks for {pod_info.gpu.count} GPU(s) but profile {self.profile!r} "
                    f"picked {len(result.gpu_devices)} device(s) on node {result.node}: enable the GPUFit plugin "
                    "to schedule GPU pods",
                )
                continue
            wanted.append((result, pod_info))
        preemptors = [w for w in wanted if _uid(w[0].pod) in batch.victims]
        attempts = await self._attempt(batch, [w for w in wanted if _uid(w[0].pod) not in batch.victims])
        attempts += await self._attempt_preemptors(batch, preemptors)
        reserved: list[_Reserved] = []
        refused: list[_Refused] = []
        undo: list[Awaitable[None]] = []
        for result, attempt, reservation, answer, in_store in attempts:
            pod, node, uid = result.pod, result.node or "", _uid(result.pod)
            if answer.ok:
                devices = tuple(result.gpu_devices)
                if answer.gpu_devices is not None and answer.gpu_devices != devices:
                    reservation = self._moved_devices(result, reservation, answer.gpu_devices)
                    devices = answer.gpu_devices
                reserved.append(_Reserved(result, node, attempt, reservation, devices))
                self._snapshot().reserved(pod.key, node, str(attempt))
                continue
            if in_store:  # Reserved in Redis: the attempt is given back there too
                undo.append(self._give_back(pod, node, attempt, result.state))
            else:
                self._unreserve(pod, node, result.state)
            if answer.code is StoreCode.FENCED:
                self._leadership().step_down(f"reservation fenced on node {node}: {answer.reason}")
                batch.error(uid, _lost_lease_message(self.profile))
                continue
            if answer.code is StoreCode.CONFLICT:
                batch.conflicts += 1
                self.metrics.reserve_conflicts.labels(profile=self.profile).inc()
            self.log.info(
                "reservation refused", pod=pod.key, uid=uid, node=node, code=str(answer.code), reason=answer.reason
            )
            refused.append(_Refused(result, node, answer.code, answer.reason))
        await asyncio.gather(*undo)
        self.metrics.extension_point_duration.labels(
            extension_point=RESERVE_EXTENSION_POINT, status="Success", profile=self.profile
        ).observe(time.perf_counter() - started)
        if reserved and self.framework.permit:
            reserved = await self._permit(batch, reserved)
        batch.reserved += reserved
        return refused

    def _reservation(self, batch: _Batch, result: ScheduleResult, pod_info: PodInfo, attempt: str) -> Reservation:
        """The pod's reservation on its node. Raises ValueError when it cannot be made."""
        uid = _uid(result.pod)
        return Reservation.of(
            pod_info,
            result.node or "",
            profile=self.profile,
            token=batch.token,
            attempt=attempt,
            ignored=self._ignored(pod_info.requests),
            namespace_labels=self._snapshot().table.namespaces.get(result.pod.namespace),
            gpu_pick=self._gpu_pick if uid not in batch.victims else "",
        )

    def _not_reserved(self, batch: _Batch, result: ScheduleResult, exc: Exception) -> None:
        """Reserving failed before the pod was Reserved in Redis: Unreserve and the table undone,
        the error its outcome."""
        self._unreserve(result.pod, result.node or "", result.state)
        batch.error(_uid(result.pod), f"reserving on node {result.node} failed: {exc!r}")

    def _attempt_failed(self, batch: _Batch, result: ScheduleResult, attempt: int, exc: Exception) -> Awaitable[None]:
        """Reserving failed after the pod was Reserved in Redis at ``attempt``: `_not_reserved`,
        and the attempt given back in the store (the awaitable returned)."""
        self._not_reserved(batch, result, exc)
        return self._give_back_in_store(result.pod, result.node or "", attempt)

    def _not_pending(self, batch: _Batch, result: ScheduleResult, write: PodWrite) -> None:
        """Someone else moved the pod (deleted, or reserved by another attempt): not ours."""
        pod, node, uid = result.pod, result.node or "", _uid(result.pod)
        self._forget(pod, node)
        batch.skipped.add(uid)
        batch.error(uid, f"not scheduled: the pod is {write.phase or 'gone'} now, no longer Pending")
        self.log.info(
            "pod skipped: no longer Pending", pod=pod.key, uid=uid, code=str(write.code), phase=str(write.phase or "-")
        )

    async def _attempt(self, batch: _Batch, wanted: Sequence[tuple[ScheduleResult, PodInfo]]) -> list[_Attempted]:
        """4a and 4b in one store step per pod (RESERVE_POD): the room, then Pending -> Reserved.
        A refused room leaves the pod Pending in Redis (in_store False: only Unreserve and the
        table to undo)."""
        holds: list[tuple[ScheduleResult, Reservation]] = []
        for result, pod_info in wanted:
            try:
                holds.append((result, self._reservation(batch, result, pod_info, "")))
            except ValueError as exc:
                self._not_reserved(batch, result, exc)
        try:
            answers = await self._store().reserve_attempts(self.profile, [r for _, r in holds])
        except TRANSIENT_ERRORS as exc:
            for result, _ in holds:  # each step was atomic: any that ran is the janitor's
                self._not_reserved(batch, result, exc)
            return []
        out: list[_Attempted] = []
        for (result, reservation), answer in zip(holds, answers, strict=True):
            if answer.room is None:
                self._not_pending(batch, result, answer.write)
                continue
            attempt = answer.write.version  # OK: the attempt made; NOOP: the pod's version, unchanged
            out.append((result, attempt, dataclasses.replace(reservation, attempt=str(attempt)), answer.room, False))
        return out

    async def _attempt_preemptors(
        self, batch: _Batch, wanted: Sequence[tuple[ScheduleResult, PodInfo]]
    ) -> list[_Attempted]:
        """4a then 4b for pods placed by preemption: Pending -> Reserved, then PREEMPT, which
        checks the victims are still what the table held, evicts them and takes their room
        for the pod in one step (in_store True: a refusal gives the attempt back)."""
        if not wanted:
            return []
        moves = [
            Move(
                _uid(r.pod),
                PodPhase.RESERVED,
                expected_phases=_PENDING_ONLY,
                node=r.node,
                gpu_devices=tuple(r.gpu_devices),
                count_attempt=True,
            )
            for r, _ in wanted
        ]
        try:
            writes = await self._store().transition_many(moves)
        except TRANSIENT_ERRORS as exc:
            for r, _ in wanted:
                self._not_reserved(batch, r, exc)
            return []
        holds: list[tuple[ScheduleResult, int, Reservation]] = []
        undo: list[Awaitable[None]] = []
        for (result, pod_info), write in zip(wanted, writes, strict=True):
            if not write.ok:
                self._not_pending(batch, result, write)
                continue
            try:
                holds.append((result, write.version, self._reservation(batch, result, pod_info, str(write.version))))
            except ValueError as exc:
                undo.append(self._attempt_failed(batch, result, write.version, exc))
        try:
            answers = await self._preempt(batch, holds)
        except TRANSIENT_ERRORS as exc:
            undo += (self._attempt_failed(batch, result, attempt, exc) for result, attempt, _ in holds)
            answers = []
        await asyncio.gather(*undo)
        return [(r, a, h, answer, True) for (r, a, h), answer in zip(holds, answers, strict=False)]

    def _moved_devices(self, result: ScheduleResult, reservation: Reservation, devices: tuple[int, ...]) -> Reservation:
        """RESERVE gave the pod other devices than the Scheduler picked (another profile took
        those): the table, the pod's CycleState (what Unreserve and Permit see) and the
        reservation announced follow. Returns that reservation."""
        pod, node = result.pod, result.node or ""
        table = self._snapshot().table
        if node in table and pod.key in table.node_info(node).pods:
            pod_info = table.forget(pod.key, node)
            table.assume(pod_info.placed_on(devices), node)
        if result.state is not None:
            result.state.write(GPU_DEVICES_STATE_KEY, devices)
        self.metrics.reserve_device_repicks.labels(profile=self.profile).inc()
        self.log.debug("devices picked again by the store", pod=pod.key, node=node, devices=list(devices))
        return dataclasses.replace(reservation, gpu_devices=devices)

    async def _preempt(
        self, batch: _Batch, holds: Sequence[tuple[ScheduleResult, int, Reservation]]
    ) -> list[PreemptResult]:
        """PREEMPT for pods placed by preemption, in order: each checks its victims are still
        what the table held, evicts them and takes their room for the pod in one step; then the
        victims' ``pod.deleted`` events, so their agents stop them and every cycle forgets them."""
        state = self._store()
        source = f"cycle/{self.profile}"
        outcomes = await state.preempt_many(
            [(h[2].node, h[2], batch.victims[_uid(h[0].pod)]) for h in holds], source=source
        )
        notes: list[Awaitable[None]] = []
        publications: list[Publication] = []
        for (result, _, reservation), outcome in zip(holds, outcomes, strict=True):
            if not (outcome.ok and outcome.evicted):
                continue
            batch.evicted[_uid(result.pod)] = tuple(f"{v.key}/{v.uid}" for v in outcome.evicted)
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
            notes.append(state.append_event(_uid(result.pod), note))
            publications += announcements.preempted(
                outcome.evicted, node=reservation.node, message=outcome.message, at=time.time()
            )
        if notes:
            # The records say it all; the preemptors' events are extra.
            for failed in await asyncio.gather(*notes, return_exceptions=True):
                if isinstance(failed, BaseException) and not isinstance(failed, TRANSIENT_ERRORS):
                    raise failed
        if publications:
            try:
                await publish_durable_many(self.jetstream(), publications)
            except TRANSIENT_ERRORS as exc:
                # Evicted in Redis all the same: the agent's resync stops pods no longer
                # Running there, and the cycles' node resync drops them.
                self.log.warning("preemption announcement failed", pods=len(notes), error=repr(exc))
        return list(outcomes)

    async def _hand_over(self, batch: _Batch, reserved: list[_Reserved], limit: asyncio.Semaphore) -> None:
        """docs/services.md 4c: the reserved pods' BindRequests, all sent before any ack is
        awaited, if this replica still leads; a pod whose request JetStream did not store is undone."""

        async def undo(r: _Reserved, message: str) -> None:
            async with limit:
                async with self._table_lock:  # not while the next batch is being scheduled
                    step = self._give_back(r.result.pod, r.node, r.attempt, r.result.state)
                await step
            batch.error(_uid(r.result.pod), message)

        if not self._still_leading(batch.token):
            await asyncio.gather(*(undo(r, _lost_lease_message(self.profile)) for r in reserved))
            return
        if self._others_listen():
            await self._announce(reserved)
        requests = [
            BindRequest(
                uid=_uid(r.result.pod),
                key=r.result.pod.key,
                profile=self.profile,
                node=r.node,
                manifest=batch.manifests[_uid(r.result.pod)],
                gpu_devices=r.gpu_devices,
                fencing_token=batch.token,
                attempt=r.attempt,
                reserved_at=time.time(),
                victims=batch.evicted.get(_uid(r.result.pod), ()),
            )
            for r in reserved
        ]
        publications = [Publication(bind(self.profile), encode(q), msgids.bind(q.uid, q.attempt)) for q in requests]
        try:
            acks = await publish_durable_many(self.jetstream(), publications, return_exceptions=True)
        except TRANSIENT_ERRORS as exc:
            acks = [exc] * len(reserved)
        failed = []
        for r, ack in zip(reserved, acks, strict=True):
            uid = _uid(r.result.pod)
            if isinstance(ack, Exception):
                failed.append(undo(r, f"handing the pod to the binders failed: {ack!r}"))
                continue
            self.log.debug("pod reserved", pod=r.result.pod.key, uid=uid, node=r.node, attempt=r.attempt)
            batch.decide(
                Outcome(uid=uid, kind=OutcomeKind.RESERVED, node=r.node, gpu_devices=r.gpu_devices, attempt=r.attempt)
            )
        await asyncio.gather(*failed)

    def _others_listen(self) -> bool:
        """Whether another profile's cycle may take announcements in (`presence_interval`)."""
        now, window = asyncio.get_running_loop().time(), 3 * self.options.presence_interval
        return now - self._heard_others_at <= window or now - self._leading_since <= window

    async def _say_present(self) -> None:
        """An empty announcement every `presence_interval` while leading: the other profiles'
        cycles announce their reservations while they hear it."""
        now = asyncio.get_running_loop().time()
        if now < self._present_due:
            return
        self._present_due = now + self.options.presence_interval
        with contextlib.suppress(nats.errors.Error):
            await self._nats().publish(self._own_reserved, encode(ReservedPods(self.profile)))

    async def _announce(self, reserved: Sequence[_Reserved]) -> None:
        """Tell the other profiles' cycles about the reservations about to be handed over. Sent
        before the BindRequests, on the same connection, so that it reaches them before any
        event a binder publishes about these pods. Best effort: a hint."""
        nc = self._nats()
        try:
            for data in _notices(self.profile, [r.reservation.to_json() for r in reserved], nc.max_payload):
                await nc.publish(self._own_reserved, data)
        except nats.errors.Error as exc:
            self.log.debug("reservations not announced", pods=len(reserved), error=repr(exc))

    def _give_back(self, pod: Pod, node: str, attempt: int, state: CycleState | None = None) -> Awaitable[None]:
        """Unreserve (the Reserve plugins, in reverse order, with the pod's CycleState), take the
        pod off the node in the table now, and return the store step to await: give back this
        attempt's room and make the pod Pending again, in one step conditional on the attempt
        (`ClusterState.give_back`), so a newer attempt is never touched; the outcome sent to the
        queue says why. What fails is left to the janitor."""
        self._unreserve(pod, node, state)
        return self._give_back_in_store(pod, node, attempt)

    def _unreserve(self, pod: Pod, node: str, state: CycleState | None) -> None:
        """`_give_back` with nothing in Redis to undo: Unreserve, and the pod off the node in the table."""
        if self.framework.reserve and self.snapshot is not None and node in self.snapshot.table.row_of:
            node_info = self.snapshot.table.node_info(self.snapshot.table.row_of[node])
            self.framework.run_unreserve(state or CycleState(), pod, node_info)
        self._forget(pod, node)

    async def _give_back_in_store(self, pod: Pod, node: str, attempt: int) -> None:
        try:
            await self._store().give_back(_uid(pod), node, attempt)
        except TRANSIENT_ERRORS as exc:
            self.log.warning("give back failed; the janitor will", pod=pod.key, node=node, error=repr(exc))

    def _time_extension_point(self, point: ExtensionPoint, plugin: str, seconds: float) -> None:
        histogram = self._timers.get((point, plugin))
        if histogram is None:  # labels() once per (point, plugin): it is called at every decision
            if plugin:
                labels = {"plugin": plugin, "extension_point": point.label, "status": "Success"}
                histogram = self.metrics.plugin_execution_duration.labels(**labels)
            else:
                labels = {"extension_point": point.label, "status": "Success", "profile": self.profile}
                histogram = self.metrics.extension_point_duration.labels(**labels)
            self._timers[point, plugin] = histogram
        histogram.observe(seconds)
        if not plugin and point is ExtensionPoint.POST_FILTER and self._preempts:
            self.metrics.preemption_attempts.labels(profile=self.profile).inc()

    @property
    def _preempts(self) -> bool:
        return any(p.name == "DefaultPreemption" for p in self.framework.post_filter)

    # -- Permit --------------------------------------------------------------------------------------

    @property
    def _sees_waiting_pods(self) -> bool:
        """Whether plugins of this profile may look at or decide about waiting pods."""
        return bool(self.framework.permit or self.framework.post_filter)

    async def _load_waiting(self, pods: Sequence[Pod]) -> None:
        """The handle's view, from Redis: this profile's pods waiting on Permit, and the pod
        groups (gangs) of the batch's pods and of the waiting ones, with their member counts."""
        store = self._store()
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

    async def _permit(self, batch: _Batch, reserved: list[_Reserved]) -> list[_Reserved]:
        """Permit for the pods Redis reserved (kube runs it right after Reserve): rejected ones
        are unreserved, given back and reported unschedulable; waiting ones keep their
        reservation, their wait is written to Redis before their BindRequest goes out (the
        binder waits on it). Returns the pods to hand to the binders."""
        started = time.perf_counter()
        store = self._store()
        passed: list[_Reserved] = []
        undo: list[Awaitable[None]] = []
        for r in reserved:
            pod, uid = r.result.pod, _uid(r.result.pod)
            state = r.result.state or CycleState()
            verdict = self.framework.run_permit(state, pod, r.node)
            if verdict.status.is_success:
                passed.append(r)
            elif verdict.status.is_wait:
                self.waiting.add(uid, pod.key, r.node, r.attempt, verdict.waiting_on, group=pod_group_key(pod) or "")
                await store.wait_on_permit(
                    uid,
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
                undo.append(self._give_back(pod, r.node, r.attempt, state))
                batch.decide(
                    Outcome(uid=uid, kind=OutcomeKind.UNSCHEDULABLE, message=message, plugins=(status.plugin,))
                )
                self.log.info("permit rejected", pod=pod.key, uid=uid, node=r.node, plugin=status.plugin)
        await asyncio.gather(*undo)
        # Before any BindRequest goes out: a member that completed its gang allowed the others,
        # and those allows must be in Redis first, or a crash now would bind it alone.
        await self._apply_decisions()
        self.metrics.extension_point_duration.labels(
            extension_point="Permit", status="Success", profile=self.profile
        ).observe(time.perf_counter() - started)
        return passed

    async def _apply_decisions(self) -> None:
        """What plugins decided about waiting pods (allow, reject), written where the waits live."""
        await self._store().apply_permit_decisions(self.waiting.take_decisions())

    async def _report(self, batch: _Batch) -> None:
        """docs/services.md 4d: the batch's outcomes to the queue, retried; then left to the
        queue's in-flight deadline."""
        outcomes = batch.ordered()
        if not outcomes:
            return
        subject, data = queue_done(self.profile), encode(Outcomes(outcomes))
        delay = 0.1
        for attempt in range(1, self.options.done_attempts + 1):
            try:
                reply = await self._nats().request(subject, data, timeout=self.options.request_timeout)
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

    def _observe(self, batch: _Batch) -> None:
        labels = {
            OutcomeKind.RESERVED: "scheduled",
            OutcomeKind.UNSCHEDULABLE: "unschedulable",
            OutcomeKind.REFUSED: "unschedulable",  # found a node, but lost it to another profile
            OutcomeKind.ERROR: "error",
        }
        elapsed: dict[str, list[float]] = {}
        for uid, outcome in batch.outcomes.items():
            if uid not in batch.skipped:
                elapsed.setdefault(labels.get(outcome.kind, "error"), []).append(batch.elapsed[uid])
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

    # -- events ----------------------------------------------------------------------------------

    async def _on_event(self, msg: Msg) -> None:
        """Note the node whose row an event changed; it is read again before the next batch."""
        try:
            event = decode(ClusterEvent, msg.data)
        except MessageError as exc:
            # By the subscription's filter, not the subject (one per node or pod name).
            self.metrics.rejected_messages.labels(subject=EVENTS).inc()
            self.log.warning("event rejected: not a ClusterEvent", subject=msg.subject, reason=str(exc))
            return
        if event.kind in NODE_EVENTS:
            node = event.name or event.node
        elif event.kind in POD_EVENTS:
            if event.kind in PLACING_EVENTS and self._placed_here(event):
                return  # our own placement: the table has had it since we reserved it
            node = event.node or await self._node_of_pod(event)
        else:
            return
        if node:
            self._dirty.add(node)

    async def _on_reserved(self, msg: Msg) -> None:
        """Another profile's cycle reserved pods: they are taken into the table before the next
        batch (`_refresh`). This cycle's own announcements come back here too, and are dropped;
        so are all while it does not lead (a table loaded on leading reads them from Redis)."""
        if msg.subject == self._own_reserved:
            return
        self._heard_others_at = asyncio.get_running_loop().time()
        if self.snapshot is None or not self.leading:
            return
        try:
            notice = decode(ReservedPods, msg.data)
            reservations = [Reservation.from_json(r) for r in notice.reservations]
        except (MessageError, ValueError, KeyError, TypeError) as exc:
            self.metrics.rejected_messages.labels(subject=RESERVED_ALL).inc()
            self.log.warning("reservations notice rejected", subject=msg.subject, reason=str(exc) or repr(exc))
            return
        for r in reservations:
            self._noticed[r.pod_key] = r

    def _placed_here(self, event: ClusterEvent) -> bool:
        """True when the table already accounts the event's pod (same uid) on the event's node,
        or will before the next batch (another profile announced it)."""
        if self.snapshot is None or not isinstance(event.data, PodChange):
            return False
        placed = self.snapshot.placed.get(event.name)
        if placed is not None:
            uid, node = placed.uid, placed.node
        elif (noticed := self._noticed.get(event.name)) is not None:
            uid, node = noticed.pod_uid, noticed.node
        else:
            return False
        return uid == event.data.uid and (not event.node or node == event.node)

    async def _node_of_pod(self, event: ClusterEvent) -> str:
        uid = event.data.uid if isinstance(event.data, PodChange) else ""
        if not uid:
            return ""
        try:
            record = await self._store().get_pod(uid)
        except TRANSIENT_ERRORS as exc:
            self.log.warning("event: cannot look up the pod's node", pod=event.name, error=repr(exc))
            return ""
        return record.node if record is not None else ""

    # -- helpers ---------------------------------------------------------------------------------

    def _ignored(self, requests: dict[str, int]) -> tuple[str, ...]:
        """The requests NodeResourcesFit ignores (ignoredResources/Groups): Redis skips them too."""
        return self._fit.ignored_requests(requests) if self._fit is not None else ()

    def _forget(self, pod: Pod, node: str) -> None:
        if self.snapshot is not None and node:
            self.snapshot.forget(pod.key, node)

    def _still_leading(self, token: int) -> bool:
        return self._leadership().token == token

    async def _pause(self, seconds: float) -> None:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.stopping.wait(), seconds)

    def _store(self) -> ClusterState:
        if self.cluster is None:
            raise RuntimeError(f"{self.name}: not started")
        return self.cluster

    def _leadership(self) -> Leadership:
        if self.leadership is None:
            raise RuntimeError(f"{self.name}: not started")
        return self.leadership

    def _snapshot(self) -> NodeSnapshot:
        if self.snapshot is None:
            raise RuntimeError(f"{self.name}: node table not loaded")
        return self.snapshot

    def _nats(self) -> NATS:
        if self.nc is None:
            raise RuntimeError(f"{self.name}: not started")
        return self.nc


def _uid(pod: Pod) -> str:
    return pod.metadata.uid


def _lost_lease_message(profile: str) -> str:
    return f"the scheduling cycle lost its lease {cycle_lease(profile)!r} before the pod was handed to the binders"


def _notices(profile: str, reservations: list[dict[str, Any]], limit: int) -> Iterator[bytes]:
    """`ReservedPods` messages of at most ``limit`` bytes (NATS' max payload) for ``reservations``."""
    data = encode(ReservedPods(profile, tuple(reservations)))
    if len(data) <= limit or len(reservations) == 1:
        yield data
        return
    half = len(reservations) // 2
    yield from _notices(profile, reservations[:half], limit)
    yield from _notices(profile, reservations[half:], limit)


def _parse(queued: QueuedPod) -> Pod:
    """The queued manifest as a Pod, with the queue's uid (Redis's identity of the pod).
    Raises ManifestError or ValueError."""
    return wire_pod(queued.manifest, queued.uid, queued.key)
