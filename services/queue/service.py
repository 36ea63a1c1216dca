"""QueueService: the scheduling queue of every profile, fed from the bus, kept in step with Redis.

What it does, per docs/services.md (the contract):

- takes pods from JetStream ``KUBUS_PODS`` (``kubus.pods.submit`` / ``.delete`` / ``.requeue``)
  through one durable pull consumer; bad input is acked, announced as a ``pod.rejected`` event
  with its one-line error and counted, and never stops the service;
- keeps one `SchedulingQueue` per profile and serves ``kubus.queue.<profile>.pop`` and
  ``.done`` (core NATS request/reply);
- records why a pod is pending on its PodRecord (reason/message) and as PodEvents, as
  ``kubectl describe`` shows them;
- moves unschedulable pods when cluster events (``kubus.events.>``) may help them, flushes the
  backoffQ every second and the unschedulable leftovers after five minutes;
- repairs what crashed services leave (the janitor), watches node heartbeats, and resyncs
  with Redis, which is also how a restarted queue rebuilds: nothing pending is lost.

Redis is the truth; the queues are an in-memory index over the Pending pods of each profile.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from functools import partial
from typing import Any

from nats.aio.msg import Msg
from nats.js.api import ConsumerConfig, DeliverPolicy

from kubus.bus import (
    EVENTS,
    EVENTS_STREAM,
    PODS_STREAM,
    ensure_pull_consumer,
    event_filter,
    event_kind_of,
    queue_done,
    queue_pop,
)
from kubus.bus.messages import (
    ClusterEvent,
    MessageError,
    decode,
)
from kubus.queue._base import ERROR_HEADER, QueueBase
from kubus.queue.intake import Intake
from kubus.queue.janitor import Janitor
from kubus.queue.node_lifecycle import NodeLifecycle
from kubus.queue.options import QueueOptions
from kubus.queue.queueing import CLUSTER_EVENTS
from kubus.queue.serving import Serving
from kubus.service import TRANSIENT_ERRORS
from kubus.store import (
    ClusterState,
)

__all__ = ["ERROR_HEADER", "QueueOptions", "QueueService"]


class QueueService(Intake, Serving, Janitor, NodeLifecycle, QueueBase):
    """The queue service; see the module docstring. ``settings`` None connects nothing (tests of
    the wiring only). ``registry`` builds each profile's PreEnqueue and QueueSort plugins
    (default: the in-tree plugins and the installed out-of-tree ones)."""

    async def on_start(self) -> None:
        if self.nc is None or self.js is None or self.redis is None:
            return  # no connections: nothing to serve
        self.store = ClusterState(self.redis)
        # Rebuild the queues from Redis before serving a pop: a restart loses nothing pending.
        await self._resync()
        for profile in self.queues:
            self.intake(await self.nc.subscribe(queue_pop(profile), cb=partial(self._on_pop, profile)))
            self.intake(await self.nc.subscribe(queue_done(profile), cb=partial(self._on_done, profile)))
        # Only the cluster events (the kinds that can move a pod): not the bookkeeping ones, such
        # as the pod.accepted this service publishes for every pod.
        only = ConsumerConfig(filter_subjects=[event_filter(kind) for kind in sorted(CLUSTER_EVENTS)])
        self.intake(
            await self.js.subscribe(
                EVENTS,
                stream=EVENTS_STREAM.name,
                config=only,
                cb=self._on_event,
                ordered_consumer=True,
                deliver_policy=DeliverPolicy.NEW,
            )
        )
        self._pods_sub = self.intake(
            await ensure_pull_consumer(
                self.js,
                PODS_STREAM.name,
                self.options.durable,
                f"{PODS_STREAM.subjects[0]}",
                ack_wait=self.options.ack_wait,
                max_deliver=self.options.max_deliver,
                description="the queue service: submitted, deleted and handed-back pods",
            )
        )
        o = self.options
        # Takes submitted, deleted and handed-back pods from JetStream, one at a time, in order.
        self.spawn("consume pods", self._consume_pods)
        # Pods whose backoff expired go to the activeQ (kube's flushBackoffQCompleted, every second).
        self.spawn("flush backoffQ", self._every, o.flush_interval, self._flush_backoff)
        # Pods unschedulable for too long are retried anyway (kube's flushUnschedulablePodsLeftover).
        self.spawn("flush unschedulable leftover", self._every, o.leftover_interval, self._flush_leftover)
        # A cycle that popped pods and died never reports them: hand them out again.
        self.spawn("in-flight deadlines", self._every, o.in_flight_interval, self._expire_in_flight)
        # A cycle or binder that died mid-attempt leaves pods Reserved: give them back or finish the bind.
        self.spawn("janitor", self._every, o.janitor_interval, self._repair_reserved)
        # Everything else a crash between two protocol steps leaves (ClusterState.reconcile).
        self.spawn("reconcile", self._every, o.reconcile_interval, self._reconcile)
        # Nodes that stopped heartbeating are marked lost, and found again when they come back.
        self.spawn("node lifecycle", self._every, o.node_interval, self._check_nodes)
        # Heals anything missed (a lost event, a pod changed behind our back) from Redis, the truth.
        self.spawn("resync", self._every, o.resync, self._resync)
        self._after_change()

    async def on_stop(self) -> None:
        # The message being handled finishes (its ack is sent); the rest of its batch is nak'd.
        await self._consumer_idle.wait()

    async def _every(self, interval: float, step: Callable[[], Awaitable[Any]]) -> None:
        """Run ``step`` every ``interval`` seconds; a server being down is logged, not fatal."""
        while True:
            await asyncio.sleep(interval)
            try:
                await step()
            except TRANSIENT_ERRORS as exc:
                self.log.warning("periodic step failed; retrying", step=step.__name__, error=repr(exc))
            self._after_change()

    async def _on_event(self, msg: Msg) -> None:
        # kubus.events.<resource>.<verb>.<name>: most events (pod.accepted, one per pod) cannot
        # move any pod; they are dropped by their subject, unread. With no unschedulable pod
        # anywhere, a cluster event is only noted for the pods in flight (O(1)), unread too.
        kind = event_kind_of(msg.subject)
        if kind is not None:
            if kind not in CLUSTER_EVENTS:
                return
            if not any(queue.unschedulable_count for queue in self.queues.values()):
                for queue in self.queues.values():
                    queue.move_for_event(kind)
                return
        try:
            event = decode(ClusterEvent, msg.data)
        except MessageError as exc:
            self._count_rejected(EVENTS)
            self.log.warning("bad cluster event", subject=msg.subject, error=str(exc))
            return
        moved = sum(queue.move_for_event(event.kind) for queue in self.queues.values())
        if moved:
            self.log.info("unschedulable pods moved", cluster_event=event.kind, name=event.name, pods=moved)
            self._after_change()

    async def _flush_backoff(self) -> None:
        for queue in self.queues.values():
            queue.flush_backoff()

    async def _flush_leftover(self) -> None:
        for profile, queue in self.queues.items():
            if moved := queue.flush_unschedulable_leftover():
                self.log.info("unschedulable leftovers requeued", profile=profile, pods=moved)
