"""QueueService: the scheduling queue of every profile, fed from the bus, kept in step with Redis.

What it does, per docs/services.md (the contract):

- takes pods from JetStream ``KUBUS_PODS`` (``kubus.pods.submit`` / ``.delete`` / ``.requeue``)
  through one durable pull consumer; bad input is acked, announced as a ``pod.rejected`` event
  with its one-line error and counted, and never stops the service;
- keeps one `SchedulingQueue` per profile and serves ``kubus.queue.<profile>.pop`` and
  ``.done`` (core NATS request/reply);
- records why a pod is pending on its PodRecord (reason/message) and as PodEvents, as
  ``kubectl describe`` shows them;
- moves unschedulable pods when cluster events (``kubus.events.>``) may help them, as the
  QueueingHints of the plugins that rejected them say (reading the event's node or pod from
  Redis for the hints, and keeping the last copy of each node as the next event's ``old``),
  flushes the backoffQ every second and the unschedulable leftovers after five minutes;
- repairs what crashed services leave (the janitor), watches node heartbeats, and resyncs
  with Redis, which is also how a restarted queue rebuilds: nothing pending is lost;
- runs once: the replica holding the lease ``queue`` (`kubus.runtime.leasing`) serves; a standby
  waits for the lease, and on winning it rebuilds its queues from Redis (`_take_over`, the
  same resync) before it subscribes the pops. A queue that loses the lease stops serving at
  once, and every pop is checked against the lease as Redis has it.

Redis is the truth; the queues are an in-memory index over the Pending pods of each profile.

It is made of parts, each given what it needs, built once the connections exist
(`QueueParts`): `Queues` (every profile's queue, built at construction), `Term` (the lease and
whether this replica serves), `Intake` (KUBUS_PODS), `NodePlacement` (pods that name their
node), `Serving` (pops and outcomes), `ClusterEvents` (pods moved by cluster events),
`Janitor` (repairs and resync) and `NodeLifecycle` (heartbeats). The service runs their loops.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from nats.aio.client import Client as NATS
from nats.js import JetStreamContext
from nats.js.api import ConsumerConfig, DeliverPolicy

from kubus.bus import (
    EVENTS,
    EVENTS_STREAM,
    PODS_STREAM,
    PullConsumer,
    ensure_pull_consumer,
    event_filter,
    in_progress_while,
)
from kubus.core.settings import ConnectionSettings
from kubus.framework.config import SchedulerConfiguration
from kubus.framework.registry import Registry
from kubus.framework.runtime import Framework
from kubus.framework.waiting import WaitingPods
from kubus.plugins import in_tree_registry
from kubus.queue.cluster_events import ClusterEvents
from kubus.queue.intake import Intake
from kubus.queue.janitor import Janitor
from kubus.queue.node_lifecycle import NodeLifecycle
from kubus.queue.options import QueueOptions
from kubus.queue.placement import NodePlacement
from kubus.queue.queues import Queues
from kubus.queue.serving import Serving
from kubus.queue.term import Term
from kubus.runtime.leasing import Leadership
from kubus.runtime.service import TRANSIENT_ERRORS, Service
from kubus.store import ClusterState, queue_lease

__all__ = ["QueueOptions", "QueueParts", "QueueService"]


@dataclass(frozen=True, slots=True)
class QueueParts:
    """The parts of a started queue service, each holding what it needs."""

    store: ClusterState
    term: Term
    placement: NodePlacement
    intake: Intake
    serving: Serving
    events: ClusterEvents
    janitor: Janitor
    node_lifecycle: NodeLifecycle


class QueueService(Service):
    """The queue service; see the module docstring. ``settings`` None connects nothing (tests of
    the wiring only). ``registry`` builds each profile's plugins: PreEnqueue and QueueSort, and
    every plugin's `events_to_register` for the QueueingHints (default: the in-tree plugins and
    the installed out-of-tree ones)."""

    metrics_role = "queue"

    def __init__(
        self,
        settings: ConnectionSettings | None,
        config: SchedulerConfiguration,
        options: QueueOptions | None = None,
        *,
        registry: Registry | None = None,
        holder: str | None = None,
    ) -> None:
        super().__init__("queue", settings)
        self.holder = holder or f"{socket.gethostname()}/{os.getpid()}/{uuid.uuid4().hex[:8]}"
        """This replica's name in the lease ``queue`` (default: host/pid/random)."""
        self.config = config
        self.options = options or QueueOptions()
        registry = registry if registry is not None else in_tree_registry(entry_points=True)
        self.frameworks: dict[str, Framework] = {
            profile.scheduler_name: Framework.from_profile(profile, registry, handle=WaitingPods())
            for profile in config.profiles
        }
        """Each profile's plugins: its queue's PreEnqueue, QueueSort and hints, and the Unreserve
        the janitor owes a pod it gives back."""
        self.queues = Queues(
            config=config, options=self.options, frameworks=self.frameworks, metrics=self.metrics, log=self.log
        )
        """One scheduling queue per profile (schedulerName)."""
        self.parts: QueueParts | None = None
        """The parts, built by start() once the connections are open (None before, or without settings)."""
        self._consumer_idle = asyncio.Event()
        self._consumer_idle.set()

    def _assemble(self, store: ClusterState, nc: NATS, js: JetStreamContext) -> QueueParts:
        o, log, metrics, queues = self.options, self.log, self.metrics, self.queues
        leadership = Leadership(
            store, queue_lease(), self.holder, ttl=o.lease_ttl, renew_interval=o.renew_interval, log=log
        )
        term = Term(leadership=leadership)
        placement = NodePlacement(store=store, js=js, log=log)
        intake = Intake(
            store=store, js=js, options=o, queues=queues, placement=placement, outage=self.outage, log=log,
            metrics=metrics,
        )  # fmt: skip
        events = ClusterEvents(store=store, queues=queues, term=term, log=log, metrics=metrics)
        serving = Serving(
            store=store, nc=nc, js=js, options=o, queues=queues, term=term, hand_back=intake.hand_back,
            on_reserved=events.note_reserved, log=log, metrics=metrics,
        )  # fmt: skip
        janitor = Janitor(
            store=store, js=js, options=o, queues=queues, frameworks=self.frameworks, placement=placement, log=log
        )
        node_lifecycle = NodeLifecycle(store=store, js=js, options=o, log=log, metrics=metrics)
        return QueueParts(store, term, placement, intake, serving, events, janitor, node_lifecycle)

    async def on_start(self) -> None:
        if self.nc is None or self.js is None or self.redis is None:
            return  # no connections: nothing to serve
        self.parts = parts = self._assemble(ClusterState(self.redis), self.nc, self.js)
        o, term, janitor = self.options, parts.term, parts.janitor
        # Pops and outcomes are served by the lease holder alone (`_take_over` subscribes them).
        self.intake(parts.serving.subscriptions)
        # Only the cluster events some plugin registered (`Queues.event_kinds`): not the bookkeeping
        # ones, such as the pods.accepted this service publishes for every batch of pods.
        only = ConsumerConfig(filter_subjects=[event_filter(kind) for kind in self.queues.event_kinds()])
        self.intake(
            await self.js.subscribe(
                EVENTS,
                stream=EVENTS_STREAM.name,
                config=only,
                cb=parts.events.on_event,
                ordered_consumer=True,
                deliver_policy=DeliverPolicy.NEW,
            )
        )
        pods = self.intake(
            await ensure_pull_consumer(
                self.nc,
                self.js,
                PODS_STREAM.name,
                self.options.durable,
                f"{PODS_STREAM.subjects[0]}",
                ack_wait=self.options.ack_wait,
                description="the queue service: submitted, deleted and handed-back pods",
            )
        )
        # A queue alone takes the lease at once and serves before start() returns, as it always
        # did; a standby's start leaves that to the lease loop.
        if await term.leadership.try_acquire():
            try:
                await self._take_over(parts)
            except TRANSIENT_ERRORS as exc:
                self.log.warning("taking over failed; trying again", error=repr(exc))
        # Takes or renews the lease "queue": one queue serves; a standby waits here and takes over.
        self.spawn("lease", term.leadership.keep)
        # Serves while leading: rebuilds the queues from Redis on each new term, and stops
        # serving (pops, outcomes, intake, repairs) the moment the lease is lost.
        self.spawn("leadership", self._lead, parts)
        # Takes submitted, deleted and handed-back pods from JetStream, one at a time, in order
        # (the durable consumer is shared with any standby; only the leader fetches).
        self.spawn("consume pods", self._consume_pods, parts, pods)
        # Pods whose backoff expired go to the activeQ (kube's flushBackoffQCompleted, every second).
        self.spawn("flush backoffQ", self._every, term, o.flush_interval, self.queues.flush_backoff)
        # Pods unschedulable for too long are retried anyway (kube's flushUnschedulablePodsLeftover).
        self.spawn("flush unschedulable leftover", self._every, term, o.leftover_interval, self.queues.flush_leftover)
        # A cycle that popped pods and died never reports them: hand them out again.
        self.spawn("in-flight deadlines", self._every, term, o.in_flight_interval, janitor.expire_in_flight)
        # A cycle or binder that died mid-attempt leaves pods Reserved: give them back or finish the bind.
        self.spawn("janitor", self._every, term, o.janitor_interval, janitor.repair_reserved)
        # Bound and Running pods whose room was given back (a release that should not have happened).
        self.spawn("repair placements", self._every, term, o.resync, janitor.repair_placements)
        # Everything else a crash between two protocol steps leaves (ClusterState.reconcile).
        self.spawn("reconcile", self._every, term, o.reconcile_interval, janitor.reconcile)
        # Nodes that stopped heartbeating are marked lost, and found again when they come back.
        self.spawn("node lifecycle", self._every, term, o.node_interval, parts.node_lifecycle.check_nodes)
        # Heals anything missed (a lost event, a pod changed behind our back) from Redis, the truth.
        self.spawn("resync", self._every, term, o.resync, janitor.resync)
        self.queues.changed()

    async def on_stop(self) -> None:
        # The message being handled finishes (its ack is sent); the rest of its batch is nak'd.
        await self._consumer_idle.wait()
        # Then the lease is given up, so a standby takes over at once.
        if self.parts is not None:
            self.parts.term.end()
            await self.parts.term.leadership.release()

    # -- the parts' loops ------------------------------------------------------------------------

    async def _lead(self, parts: QueueParts) -> None:
        """Serve in every term this replica leads: rebuild on winning the lease, stop serving on
        losing it (`kubus.runtime.leasing.Leadership`)."""
        leadership = parts.term.leadership
        while not self.stopping.is_set():
            if not await leadership.wait(self.stopping):
                return
            term = leadership.term
            if not parts.term.serves():
                try:
                    await self._take_over(parts)
                except TRANSIENT_ERRORS as exc:
                    self.log.warning("taking over failed; trying again", error=repr(exc))
                    await self._stop_serving(parts, "taking over failed")
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(self.stopping.wait(), 0.5)
                    continue
            await leadership.wait_lost(self.stopping, term)
            if not self.stopping.is_set():
                await self._stop_serving(parts, "the lease is lost")

    async def _take_over(self, parts: QueueParts) -> None:
        """Start serving this term: the queues rebuilt from Redis (every Pending pod: a takeover
        or a restart loses nothing pending; what another queue had in flight is handed out
        again), then the pops and outcomes subscribed. Raises what Redis or NATS raise."""
        leadership = parts.term.leadership
        term, started = leadership.term, time.perf_counter()
        parts.term.end()
        await parts.serving.subscriptions.unsubscribe()
        self._forget_all(parts)
        await parts.janitor.resync()
        # Said before the pops are served: a cycle gives up a pop the dead queue held and asks
        # again; asked before the subscription, it meets no responder and asks 0.1 s later. Said
        # after, a pop this queue had taken meanwhile would be given up with its pods in flight.
        await parts.serving.announce()
        await parts.serving.subscribe()
        parts.term.begin(term)
        self.queues.changed()
        self.log.info(
            "serving",
            term=term,
            token=leadership.token,
            pods=sum(len(q) for q in self.queues.values()),
            seconds=round(time.perf_counter() - started, 4),
        )

    async def _stop_serving(self, parts: QueueParts, why: str) -> None:
        """Stop serving at once: no pop, outcome, intake or repair from here on; the queues are
        emptied (the next leader rebuilds its own from Redis)."""
        was = parts.term.end()
        await parts.serving.subscriptions.unsubscribe()
        self._forget_all(parts)
        self.queues.changed()
        if was:
            self.log.warning("stopped serving", reason=why)

    def _forget_all(self, parts: QueueParts) -> None:
        """Drop everything held in memory about pods and nodes: fresh, empty queues."""
        self.queues.reset()
        parts.serving.forget()
        parts.events.forget()
        parts.node_lifecycle.forget()

    async def _consume_pods(self, parts: QueueParts, consumer: PullConsumer) -> None:
        term = parts.term
        while not self.stopping.is_set():
            if not term.serves():
                # A standby takes nothing in (the pods it stored would wait in no served queue).
                await term.until_serving()
                continue
            msgs = await self.fetch(consumer, self.options.fetch_batch, timeout=1.0, pace=self.options.fetch_pace)
            if not msgs:
                continue
            self._consumer_idle.clear()
            try:
                async with in_progress_while(msgs, self.options.ack_wait / 3):
                    await parts.intake.take(msgs, go_on=lambda: not self.stopping.is_set() and term.serves())
            finally:
                self._consumer_idle.set()
            self.queues.changed()

    async def _every(self, term: Term, interval: float, step: Callable[[], Awaitable[object]]) -> None:
        """Run ``step`` every ``interval`` seconds; a server being down is logged, not fatal."""
        while True:
            await asyncio.sleep(interval)
            if not term.serves():
                continue  # a standby repairs nothing: the leader does
            try:
                await step()
            except TRANSIENT_ERRORS as exc:
                self.log.warning("periodic step failed; retrying", step=step.__name__, error=repr(exc))
            self.queues.changed()
