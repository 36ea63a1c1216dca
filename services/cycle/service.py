"""The scheduling cycle of one profile: pop a batch, schedule it, reserve, hand it to the binders.

The protocol (node table, pop, schedule, reserve, Permit, hand over, report) is told once, in
docs/services.md, steps 3 and 4. What this module guarantees:

- one active replica per profile: the holder of the lease ``cycle/<profile>``
  (`kubus.runtime.leasing`); standbys keep their node table current (warm) and take over when
  the lease lapses; leadership is checked before every batch, after scheduling and before
  every publish, and a replica that lost it gives back what it reserved;
- one batch scheduled at a time (in a worker thread, so the lease keeps being renewed), one
  pop ahead at most, and one batch finishing (hand-over and report) while the next is
  scheduled; a stop waits for both;
- every failure past Reserve goes back through one path (`kubus.cycle.undo.Undo`).

The service is built from parts, each in its own module, made in `CycleService.on_start` once the
connections exist and handed their dependencies explicitly: the node table (`nodes`), popping
(`popping`), placing (`scheduling`), reserving (`reserving`, `preempting`, `reservation`), Permit
(`permits`), the one way back from a reservation (`undo`), the hand-over (`handover`), the other
profiles' cycles (`presence`), the events (`events`) and the batch's outcomes (`batch`). The
story of a batch reads top-down in `SchedulingCycle`: `scheduling_loop` -> `run_batch` ->
`finish_batch`, as kube-scheduler's ScheduleOne -> schedulingCycle -> bindingCycle.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import uuid

from nats.aio.client import Client as NATS
from nats.js import JetStreamContext

from kubus.bus import RESERVED_ALL, EventKind, event_filter, with_batches
from kubus.bus.messages import Outcome, OutcomeKind, QueuedPod
from kubus.core.settings import ConnectionSettings
from kubus.cycle.batch import Batch, Refused, Reporter, uid
from kubus.cycle.events import NODE_EVENTS, POD_EVENTS, ClusterEvents
from kubus.cycle.handover import HandOver
from kubus.cycle.nodes import Loaded, NodeTableKeeper
from kubus.cycle.options import CycleOptions
from kubus.cycle.permits import Permits
from kubus.cycle.popping import Popper
from kubus.cycle.preempting import Preemptions
from kubus.cycle.presence import Presence
from kubus.cycle.reservation import ReservationMaker
from kubus.cycle.reserving import Reserver
from kubus.cycle.scheduling import BatchScheduler, ExtensionPointTimer
from kubus.cycle.undo import Undo
from kubus.framework.runtime import Framework
from kubus.framework.scheduling import ScheduleResult
from kubus.framework.waiting import WaitingPods
from kubus.kernels import NodeTable, select_backend
from kubus.runtime.leasing import Leadership
from kubus.runtime.service import TRANSIENT_ERRORS, Service, StructuredLogger
from kubus.store import ClusterState, cycle_lease

__all__ = ["CycleOptions", "CycleService", "SchedulingCycle"]


class CycleService(Service):
    """The scheduling-cycle service of one profile (``framework.scheduler_name``).

    ``CycleService(settings, framework, options)``; `run()` until stopped. ``holder`` names this
    replica in the lease (default: host/pid/random). Read-only views for tests and operators:
    `leading`, `fencing_token`, `table`; `running` is the cycle itself once started.
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
        self.running: SchedulingCycle | None = None
        """The cycle's parts and its loop, built by `on_start` once the connections exist."""
        # scheduler_cache_size describes the table: read at each scrape, in the loop that owns it.
        self.metrics.sample(self._sample_cache_size)
        self._loop_task: asyncio.Task[None] | None = None
        self._lease_task: asyncio.Task[None] | None = None

    # -- views -----------------------------------------------------------------------------------

    @property
    def leading(self) -> bool:
        """Whether this replica holds the profile's lease now."""
        return self.running is not None and self.running.leadership.leading

    @property
    def fencing_token(self) -> int | None:
        """The lease's fencing token while leading, else None."""
        return None if self.running is None else self.running.leadership.token

    @property
    def table(self) -> NodeTable | None:
        """The node table, or None before it is loaded."""
        loaded = self._loaded()
        return None if loaded is None else loaded.snapshot.table

    # -- lifecycle -------------------------------------------------------------------------------

    async def on_start(self) -> None:
        assert self.nc is not None and self.js is not None and self.redis is not None
        self.running = running = self._build(self.nc, self.js, ClusterState(self.redis))
        # Keeps the node table fresh: the events that change a node's row name it; it is read again.
        # Only those kinds are subscribed to (the busiest ones, pod.running above all, are not).
        for kind in sorted(with_batches(NODE_EVENTS | POD_EVENTS)):
            await self.nc.subscribe(event_filter(EventKind(kind)), cb=running.events.on_event)
        await self.nc.subscribe(RESERVED_ALL, cb=running.events.on_reserved)
        await running.popper.listen()
        # Takes or renews the lease cycle/<profile>: one active cycle per profile, standbys wait here.
        self._lease_task = self.spawn("lease", running.leadership.keep)
        # The scheduling loop: pop a batch, schedule it, reserve, hand it to the binders, report.
        self._loop_task = self.spawn("scheduling loop", running.scheduling_loop)

    async def on_stop(self) -> None:
        running = self.running
        if running is None:
            return
        # The loop finishes the batch in hand (its pods are in flight at the queue) and returns.
        if self._loop_task is not None and not self._loop_task.done():
            await running.loop_done.wait()
        # Stop renewing, then give the lease up so a standby takes over at once.
        if self._lease_task is not None and not self._lease_task.done():
            self._lease_task.cancel()
            await asyncio.wait([self._lease_task])
        await running.leadership.release()

    def _build(self, nc: NATS, js: JetStreamContext, store: ClusterState) -> SchedulingCycle:
        """The cycle's parts, each handed what it works with."""
        framework, profile, options, log, metrics = self.framework, self.profile, self.options, self.log, self.metrics
        leadership = Leadership(
            store,
            cycle_lease(profile),
            self.holder,
            ttl=options.lease_ttl,
            renew_interval=options.renew_interval,
            log=log,
        )
        nodes = NodeTableKeeper(
            store=store,
            leadership=leadership,
            framework=framework,
            backend=self.backend,
            options=options,
            timer=ExtensionPointTimer(framework=framework, profile=profile, metrics=metrics),
            stopping=self.stopping,
            metrics=metrics,
            log=log,
        )
        undo = Undo(store=store, framework=framework, nodes=nodes, log=log)
        presence = Presence(nc=nc, profile=profile, options=options, nodes=nodes, log=log)
        reservation = ReservationMaker(framework=framework, profile=profile)
        preemptions = Preemptions(store=store, js=js, profile=profile, reservation=reservation, undo=undo, log=log)
        return SchedulingCycle(
            name=self.name,
            stopping=self.stopping,
            log=log,
            store=store,
            leadership=leadership,
            nodes=nodes,
            presence=presence,
            popper=Popper(
                nc=nc,
                profile=profile,
                holder=self.holder,
                options=options,
                stopping=self.stopping,
                metrics=metrics,
                log=log,
            ),
            scheduling=BatchScheduler(
                store=store, profile=profile, leadership=leadership, nodes=nodes, undo=undo, metrics=metrics, log=log
            ),
            reserver=Reserver(
                store=store,
                profile=profile,
                leadership=leadership,
                reservation=reservation,
                preemptions=preemptions,
                undo=undo,
                metrics=metrics,
                log=log,
            ),
            permits=Permits(
                store=store,
                framework=framework,
                waiting=self.waiting,
                profile=profile,
                undo=undo,
                metrics=metrics,
                log=log,
            ),
            hand_over=HandOver(
                js=js,
                profile=profile,
                options=options,
                leadership=leadership,
                presence=presence,
                undo=undo,
                table_lock=nodes.lock,
                log=log,
            ),
            reporter=Reporter(nc=nc, profile=profile, options=options, metrics=metrics, log=log),
            events=ClusterEvents(
                store=store, nodes=nodes, presence=presence, leadership=leadership, metrics=metrics, log=log
            ),
        )

    def _loaded(self) -> Loaded | None:
        return None if self.running is None else self.running.nodes.loaded

    def _sample_cache_size(self) -> None:
        loaded = self._loaded()
        nodes, pods, assumed = (0, 0, 0) if loaded is None else loaded.snapshot.sizes()
        gauge = self.metrics.cache_size
        gauge.labels(type="nodes").set(nodes)
        gauge.labels(type="pods").set(pods)
        gauge.labels(type="assumed_pods").set(assumed)


class SchedulingCycle:
    """The running cycle of one profile: its parts, and the loop that drives them.

    `scheduling_loop` -> `run_batch` -> `finish_batch`, as kube-scheduler's ScheduleOne ->
    schedulingCycle -> bindingCycle: each step of a batch is one call into a part.
    """

    def __init__(
        self,
        *,
        name: str,
        stopping: asyncio.Event,
        log: StructuredLogger,
        store: ClusterState,
        leadership: Leadership,
        nodes: NodeTableKeeper,
        presence: Presence,
        popper: Popper,
        scheduling: BatchScheduler,
        reserver: Reserver,
        permits: Permits,
        hand_over: HandOver,
        reporter: Reporter,
        events: ClusterEvents,
    ) -> None:
        self.name = name
        self.stopping = stopping
        self.log = log
        self.store = store
        """The cluster state in Redis, the one every part works with."""
        self.leadership = leadership
        self.nodes = nodes
        self.presence = presence
        self.popper = popper
        self.scheduling = scheduling
        self.reserver = reserver
        self.permits = permits
        self.hand_over = hand_over
        self.reporter = reporter
        self.events = events
        self.loop_done = asyncio.Event()
        """Set when `scheduling_loop` has returned (its last batch handed over and reported)."""
        self._finishing: asyncio.Task[None] | None = None
        """The last batch's hand-over and report, running while the next batch is scheduled."""

    # -- the loop (ScheduleOne) ------------------------------------------------------------------

    async def scheduling_loop(self) -> None:
        """Until the service stops: wait for the lease, prepare the node table, pop a batch, run
        it, and finish it while the next one is scheduled (a root task)."""
        leadership = self.leadership
        # The next batch is asked for as soon as one arrives: the queue answers while this one is
        # scheduled, so its answer (and its wait for pods) is off the loop's path. At most one
        # pop is ahead; its pods are scheduled with the token they were popped with.
        ahead: asyncio.Task[list[QueuedPod]] | None = None
        ahead_token = 0
        try:
            while not self.stopping.is_set():
                if not await self.nodes.stand_by():
                    break
                token = leadership.token
                if token is None:
                    continue
                try:
                    await self.nodes.prepare()
                    await self.presence.say_present()
                    if ahead is not None:
                        popping, popped_with, ahead = ahead, ahead_token, None
                        queued = await popping
                    else:
                        queued, popped_with = await self.popper.pop(token), token
                    self.nodes.pace.idle = not queued
                    if queued:
                        if not self.stopping.is_set():
                            ahead, ahead_token = asyncio.create_task(self.popper.pop(token), name="pop ahead"), token
                        await self._run_and_finish(Batch(queued, popped_with))
                except TRANSIENT_ERRORS as exc:
                    self.log.warning("redis or nats unavailable; the node table will be reloaded", error=repr(exc))
                    self.nodes.drop()
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(self.stopping.wait(), 0.5)
            if ahead is not None:
                # Stopping: pods popped ahead are scheduled, not left in flight at the queue.
                await self._last_batch(ahead, ahead_token)
                ahead = None
            await self._finished()
        finally:
            if ahead is not None:
                ahead.cancel()
            self.popper.close()
            if self._finishing is not None:
                self._finishing.cancel()
            self.loop_done.set()

    async def _last_batch(self, ahead: asyncio.Task[list[QueuedPod]], token: int) -> None:
        try:
            queued = await ahead
            if queued:
                await self._run_and_finish(Batch(queued, token))
        except TRANSIENT_ERRORS as exc:
            self.log.warning("the last batch's pods are left to the queue's in-flight deadline", error=repr(exc))

    async def _run_and_finish(self, batch: Batch) -> None:
        """Decide ``batch`` (`run_batch`), then finish it (`finish_batch`) in the background while
        the next batch is scheduled: one batch finishing at a time, in order."""
        await self.run_batch(batch)
        await self._finished()
        self._finishing = asyncio.create_task(self.finish_batch(batch), name="hand over and report")

    async def _finished(self) -> None:
        """Wait for the last batch's hand-over and report."""
        if self._finishing is not None:
            finishing, self._finishing = self._finishing, None
            await finishing

    # -- one batch (schedulingCycle) -------------------------------------------------------------

    async def run_batch(self, batch: Batch) -> None:
        """Admit, schedule, reserve and Permit one popped batch (`finish_batch` hands it over and
        reports it). Never raises but for cancellation: an unexpected error fails the batch's pods
        not yet reserved (ERROR) and makes the table be loaded again."""
        try:
            await self.nodes.refresh()  # events that came while the pop waited
            loaded = self.nodes.loaded
            if loaded is None:  # a stop's last batch, popped ahead of an error that dropped the table
                raise RuntimeError(f"{self.name}: node table not loaded")
            pods = self.scheduling.admit(batch, loaded.snapshot)
            if self.permits.sees_waiting_pods:
                await self.permits.load_waiting(pods)
            placed = await self.scheduling.schedule(batch, pods, loaded)
            refused = await self._reserve(batch, placed, loaded)
            if refused:
                # Another profile got there first: read again the nodes that refused (the other
                # profile's pods there are news to the table; those elsewhere come in its
                # announcement) and retry the refused pods once.
                await self.nodes.refresh({r.node for r in refused})
                retried = await self.scheduling.schedule(batch, [r.result.pod for r in refused], loaded)
                for again in await self._reserve(batch, retried, loaded):
                    # Refused twice: the queue retries it at once (`retry_refused`), the table now knowing more.
                    batch.decide(
                        Outcome(
                            uid=uid(again.result.pod),
                            kind=OutcomeKind.REFUSED,
                            node=again.node,
                            message=f"reservation on node {again.node} refused by Redis: {again.reason}",
                        )
                    )
            if self.permits.sees_waiting_pods:
                await self.permits.apply_decisions()  # what PostFilter or Permit decided about waiting pods
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            if isinstance(exc, TRANSIENT_ERRORS):
                self.log.warning("batch failed: redis or nats unavailable", error=repr(exc))
            else:
                self.log.exception("batch failed", error=repr(exc))
            self.nodes.drop()  # placements may be half-assumed: read it all again
            # The pods reserved and through Permit before the error are still handed over.
            reserved = {uid(r.result.pod) for r in batch.reserved}
            for pod in batch.queued:
                if pod.uid not in reserved:
                    batch.error(pod.uid, f"scheduling failed: {exc!r}")

    async def _reserve(self, batch: Batch, placed: list[ScheduleResult], loaded: Loaded) -> list[Refused]:
        """Reserve the placed pods in Redis, then Permit the reserved ones: those that pass join
        ``batch.reserved``. Returns the pods Redis refused (to retry)."""
        reserved, refused = await self.reserver.reserve(batch, placed, loaded.snapshot)
        batch.reserved += await self.permits.permit(batch, reserved)
        return refused

    # -- its hand-over (bindingCycle) ------------------------------------------------------------

    async def finish_batch(self, batch: Batch) -> None:
        """Hand the batch's reserved pods to the binders and report its outcomes. Never raises but
        for cancellation."""
        try:
            if batch.reserved:
                await self.hand_over.hand_over(batch)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            # Reserved in Redis all the same: the janitor finishes or gives back what is left.
            self.log.exception("hand-over failed", error=repr(exc))
            for pod in batch.queued:
                batch.error(pod.uid, f"handing the pod to the binders failed: {exc!r}")
        await self.reporter.report(batch)
        self.reporter.observe(batch)
