"""The queue service's state and the helpers its parts share (`QueueService` is made of
`kubus.queue.intake`, `.serving`, `.janitor` and `.node_lifecycle` over this)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import time
import uuid
from collections import Counter, OrderedDict
from collections.abc import Awaitable
from typing import Any

from nats.aio.subscription import Subscription

from kubus import codec
from kubus.api.errors import ManifestError
from kubus.api.objects import Node, Pod
from kubus.bus import (
    EVENTS,
    PODS_DELETE,
    PODS_REQUEUE,
    PODS_STREAM,
    PODS_SUBMIT,
    EventKind,
    MessageFaults,
    Publication,
    announcements,
    publish_durable,
)
from kubus.bus.messages import (
    Outcome,
    OutcomeKind,
)
from kubus.framework.config import SchedulerConfiguration
from kubus.framework.registry import Registry
from kubus.framework.runtime import Framework
from kubus.framework.waiting import WaitingPods
from kubus.leasing import Leadership
from kubus.plugins import in_tree_registry
from kubus.queue.options import QueueOptions
from kubus.queue.queueing import QueueName, SchedulingQueue
from kubus.service import Service, Throttle
from kubus.settings import ConnectionSettings
from kubus.store import (
    ClusterState,
    EventType,
    PodEvent,
    PodPhase,
    PodRecord,
)

RESERVED_PODS_KEPT = 50_000
"""Parsed pods the queue keeps of those reserved lately (QueueBase._reserved_pods): a few
batches' worth of bind and finish events find their pod there."""
"""Header of an empty reply to a pop or done request the queue could not read: the one-line error."""

_PENDING_QUEUES = (QueueName.ACTIVE, QueueName.BACKOFF, QueueName.UNSCHEDULABLE, QueueName.GATED)


class Subscriptions:
    """NATS subscriptions held for a while (the queue's pop and done ones, while it serves), let
    go together: `unsubscribe` is idempotent, so stop() may call it after a step-down did."""

    def __init__(self) -> None:
        self._held: list[Subscription] = []

    def add(self, subscription: Subscription) -> None:
        self._held.append(subscription)

    async def unsubscribe(self) -> None:
        held, self._held = self._held, []
        for subscription in held:
            # One closed already (its connection closed) has nothing left to undo.
            with contextlib.suppress(Exception):
                await subscription.unsubscribe()


class Retry(Exception):
    """A message to process again later (the state it needs is changing); nak'd with a delay."""


class QueueBase(Service):
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
        self.leadership: Leadership | None = None
        """The lease ``queue``: only its holder takes pods in, serves the cycles and repairs."""
        self._serving = asyncio.Event()
        """Set while this replica serves (it leads, and its queues were rebuilt for this term)."""
        self._served_term = 0
        """The leadership term the queues were last rebuilt for (0: never)."""
        self._serving_subs = Subscriptions()
        """The pop and done subscriptions: held only while serving."""
        self.config = config
        self.options = options or QueueOptions()
        registry = registry if registry is not None else in_tree_registry(entry_points=True)
        self.frameworks: dict[str, Framework] = {
            profile.scheduler_name: Framework.from_profile(profile, registry, handle=WaitingPods())
            for profile in config.profiles
        }
        """Each profile's plugins: its queue's PreEnqueue, QueueSort and hints, and the Unreserve
        the janitor owes a pod it gives back."""
        self.queues: dict[str, SchedulingQueue] = {name: self._build_queue(name) for name in self.frameworks}
        """One scheduling queue per profile (schedulerName)."""
        # scheduler_inflight_events describes the queues' state: read at each scrape, in the loop.
        self._inflight_labels: set[str] = set()
        self.metrics.sample(self._sample_inflight_events)
        self.store: ClusterState | None = None
        self._ready = {profile: asyncio.Event() for profile in self.queues}
        self._tokens: dict[str, int] = {}
        """Profile -> the newest fencing token a pop carried that the lease in Redis confirmed."""
        self._refused_pops: dict[str, Throttle] = {}
        """Profile -> the throttle of its 'pop refused' lines."""
        self._lost_nodes: set[str] | None = None
        self._next_node_scan = 0.0
        """When _check_nodes next reads every node's heartbeat (not only the silent ones)."""
        self._pods_sub: Any = None
        self._faults = MessageFaults(self.options.max_failures)
        """Failed tries of each KUBUS_PODS message that were its own fault (not an outage's)."""
        self._consumer_idle = asyncio.Event()
        self._consumer_idle.set()
        self._redis_slots = asyncio.Semaphore(32)
        """Bounds the Redis writes one batch of outcomes makes at once."""
        self._unschedulable_labels: dict[str, set[str]] = {}
        """Profile -> the plugins of its scheduler_unschedulable_pods series set last time."""
        self._nodes: dict[str, tuple[int, Node]] = {}
        """Node name -> (generation, node) as last read for a node event: the ``old`` object of
        the next event's hints. Dropped when an event goes unread, so a stale copy is never
        taken for the node's previous state."""
        self._reserved_pods: OrderedDict[str, Pod] = OrderedDict()
        """Uid -> the pod as the queue parsed it, for the pods its cycles reserved lately (at most
        RESERVED_PODS_KEPT): the objects of their bound and finished events' hints, without a
        Redis read and a second parse of the manifest (a pod's manifest never changes once it
        is reserved)."""

    def _serves(self) -> bool:
        """Whether this replica serves now: it holds the lease ``queue`` (not run out) and its
        queues were rebuilt for this term. Pops, outcomes, intake, events and the periodic
        repairs are all refused otherwise."""
        leadership = self.leadership
        return (
            self._serving.is_set()
            and leadership is not None
            and leadership.leading
            and leadership.term == self._served_term
        )

    async def _until_serving(self, timeout: float = 1.0) -> None:
        """Wait (at most ``timeout`` seconds) for this replica to serve."""
        if self._serving.is_set():  # the lease ran out, the step-down is under way
            await asyncio.sleep(0.05)
            return
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._serving.wait(), timeout)

    def _build_queue(self, name: str) -> SchedulingQueue:
        framework = self.frameworks[name]
        return SchedulingQueue(
            name,
            initial_backoff=float(self.config.pod_initial_backoff_seconds),
            max_backoff=float(self.config.pod_max_backoff_seconds),
            max_in_unschedulable=self.options.max_in_unschedulable,
            in_flight_timeout=self.options.in_flight_timeout,
            pre_enqueue=framework.pre_enqueue,
            queue_sort=framework.queue_sort,
            on_incoming=self._count_incoming,
            plugins=framework.plugins,
            on_hint=self._observe_hint,
        )

    def _observe_hint(self, plugin: str, event: str, hint: str, seconds: float) -> None:
        self.metrics.queueing_hint_execution_duration.labels(plugin=plugin, event=event, hint=hint).observe(seconds)

    def _count_rejected(self, subject: str) -> None:
        # The subjects the queue reads by name, or their stream's filter: a bounded label set.
        known = subject in (PODS_SUBMIT, PODS_DELETE, PODS_REQUEUE) or subject.startswith("kubus.queue.")
        label = subject if known else PODS_STREAM.subjects[0] if subject.startswith("kubus.pods.") else EVENTS
        self.metrics.rejected_messages.labels(subject=label).inc()

    def _count_incoming(self, queue: QueueName, event: str) -> None:
        self.metrics.queue_incoming_pods.labels(queue=str(queue), event=event).inc()

    def _sample_inflight_events(self) -> None:
        totals: Counter[str] = Counter()
        for queue in self.queues.values():
            totals.update(queue.inflight_events())
        self._inflight_labels.update(totals)
        for event in self._inflight_labels:  # an event no longer kept reads 0, not its last count
            self.metrics.inflight_events.labels(event=event).set(totals[event])

    def _after_change(self) -> None:
        """Refresh the pending-pods gauges and wake pops waiting for a profile that has pods."""
        totals: Counter[QueueName] = Counter()
        for profile, queue in self.queues.items():
            for name, count in queue.counts().items():
                totals[name] += count
            if len(queue):
                self._ready[profile].set()
        for name in _PENDING_QUEUES:
            self.metrics.pending_pods.labels(queue=str(name)).set(totals[name])

    def _note_reserved(self, pod: Pod) -> None:
        kept = self._reserved_pods
        kept[pod.metadata.uid] = pod
        kept.move_to_end(pod.metadata.uid)
        while len(kept) > RESERVED_PODS_KEPT:
            kept.popitem(last=False)

    def _pod_of(self, record: PodRecord) -> Pod | None:
        """The stored pod, parsed; None (logged) for a manifest that no longer parses."""
        try:
            return record.pod()
        except (ManifestError, codec.DecodeError) as exc:
            self.log.error("stored pod unreadable; not queued", pod=record.key, uid=record.uid, error=str(exc))
            return None

    def _cluster(self) -> ClusterState:
        if self.store is None:
            raise RuntimeError("queue: not connected")
        return self.store

    async def _publish(self, p: Publication) -> None:
        await publish_durable(self.jetstream(), p.subject, p.payload, p.msg_id)

    @staticmethod
    def _pod_announcement(kind: EventKind, record: PodRecord, attempt: int = 0, *, reason: str = "",
                          message: str = "") -> Publication:  # fmt: skip
        return announcements.pod_event(
            kind,
            record.key,
            record.uid,
            at=time.time(),
            node=record.node,
            attempt=attempt,
            profile=record.profile,
            reason=reason,
            message=message,
        )

    async def _pod_event(self, uid: str, type_: EventType, reason: str, message: str, source: str) -> None:
        await self._cluster().append_event(uid, PodEvent(time.time(), type_, reason, message, source))

    async def _settle(self, ack: Awaitable[object]) -> None:
        try:
            await ack
        except Exception as exc:  # the server redelivers it after ack_wait: handlers are idempotent
            self.log.warning("ack failed", error=repr(exc))

    async def _hand_back(self, outcome: Outcome) -> None:
        """A pod handed back after its reservation was given up (a failed Permit or bind): back
        to Pending (compare-and-set on the attempt when given), its reason recorded, requeued."""
        state = self._cluster()
        uid = outcome.uid
        if outcome.kind is OutcomeKind.RESERVED:
            return  # nothing to hand back
        record = await state.get_pod(uid)
        if record is None:
            self.log.warning("hand-back of an unknown pod ignored", uid=uid)
            return
        bind_failed = outcome.kind is OutcomeKind.BIND_FAILED
        unschedulable = outcome.kind is OutcomeKind.UNSCHEDULABLE
        reason = "Unschedulable" if unschedulable else "SchedulerError"
        message = outcome.message or "handed back"
        if bind_failed:
            message = f"binding rejected: {message}"
        if record.phase is PodPhase.RESERVED:
            if outcome.node and record.node != outcome.node:
                self.log.info("stale hand-back ignored", pod=record.key, uid=uid, node=outcome.node, now_on=record.node)
                return
            if not outcome.attempt:
                held = await state.reservation(record.node, uid)
                if held is not None:  # without the attempt we cannot tell whose it is: the janitor decides
                    self.log.info(
                        "hand-back without attempt while a reservation is held; left to the janitor",
                        pod=record.key,
                        uid=uid,
                        node=record.node,
                        state=str(held.state),
                    )
                    return
            attempt = outcome.attempt or record.version
            given = await state.give_back(uid, record.node, attempt, reason=reason, message=message)
            if not given.ok:
                self.log.info("stale hand-back ignored", pod=record.key, uid=uid, code=str(given.code))
                return
            if given.released:  # the binder could not give the room back itself
                await self._publish(self._pod_announcement(EventKind.POD_UNRESERVED, record, attempt, reason=reason))
        elif record.phase is PodPhase.PENDING:
            w = await state.transition(
                uid, PodPhase.PENDING, expected_phases={PodPhase.PENDING}, reason=reason, message=message
            )
            if not w.ok:
                return
        else:
            self.log.info(
                "hand-back of a pod no longer reserved ignored", pod=record.key, uid=uid, phase=str(record.phase)
            )
            return
        await self._pod_event(uid, EventType.WARNING, "FailedScheduling", message, record.profile)
        queue = self.queues.get(record.profile)
        pod = self._pod_of(record)
        if queue is None or pod is None:
            return
        plugins = outcome.plugins if unschedulable else ()
        where = queue.add_unschedulable(
            uid, plugins, pod=pod, manifest=record.manifest, attempts=max(record.attempts, 1)
        )
        self.log.info(
            "pod handed back", pod=record.key, uid=uid, kind=str(outcome.kind), queue=str(where or "-"), message=message
        )
        self._after_change()
