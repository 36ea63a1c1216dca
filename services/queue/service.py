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
- runs once: the replica holding the lease ``queue`` (`kubus.leasing`) serves; a standby
  waits for the lease, and on winning it rebuilds its queues from Redis (`_take_over`, the
  same resync) before it subscribes the pops. A queue that loses the lease stops serving at
  once, and every pop is checked against the lease as Redis has it.

Redis is the truth; the queues are an in-memory index over the Pending pods of each profile.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable
from dataclasses import replace
from functools import partial

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
    untoken,
)
from kubus.bus.messages import (
    ClusterEvent,
    MessageError,
    PodChange,
    decode,
)
from kubus.framework.queueing_hints import NODE_ADDED, NODE_DELETED, POD_BOUND, POD_FREED, WILDCARD, EventObject
from kubus.leasing import Leadership
from kubus.queue._base import QueueBase
from kubus.queue.intake import Intake
from kubus.queue.janitor import Janitor
from kubus.queue.node_lifecycle import NodeLifecycle
from kubus.queue.options import QueueOptions
from kubus.queue.queueing import CLUSTER_EVENTS
from kubus.queue.serving import Serving
from kubus.service import TRANSIENT_ERRORS
from kubus.store import (
    ClusterState,
    NodeRecord,
    queue_lease,
)

__all__ = ["QueueOptions", "QueueService"]


class QueueService(Intake, Serving, Janitor, NodeLifecycle, QueueBase):
    """The queue service; see the module docstring. ``settings`` None connects nothing (tests of
    the wiring only). ``registry`` builds each profile's PreEnqueue and QueueSort plugins
    (default: the in-tree plugins and the installed out-of-tree ones)."""

    async def on_start(self) -> None:
        if self.nc is None or self.js is None or self.redis is None:
            return  # no connections: nothing to serve
        self.store = ClusterState(self.redis)
        o = self.options
        self.leadership = Leadership(
            self.store, queue_lease(), self.holder, ttl=o.lease_ttl, renew_interval=o.renew_interval, log=self.log
        )
        # Pops and outcomes are served by the lease holder alone (`_take_over` subscribes them).
        self.intake(self._serving_subs)
        # Only the cluster events some plugin registered (`_event_kinds`): not the bookkeeping
        # ones, such as the pod.accepted this service publishes for every pod.
        only = ConsumerConfig(filter_subjects=[event_filter(kind) for kind in self._event_kinds()])
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
        if await self.leadership.try_acquire():
            try:
                await self._take_over()
            except TRANSIENT_ERRORS as exc:
                self.log.warning("taking over failed; trying again", error=repr(exc))
        # Takes or renews the lease "queue": one queue serves; a standby waits here and takes over.
        self.spawn("lease", self.leadership.keep)
        # Serves while leading: rebuilds the queues from Redis on each new term, and stops
        # serving (pops, outcomes, intake, repairs) the moment the lease is lost.
        self.spawn("leadership", self._lead)
        # Takes submitted, deleted and handed-back pods from JetStream, one at a time, in order
        # (the durable consumer is shared with any standby; only the leader fetches).
        self.spawn("consume pods", self._consume_pods)
        # Pods whose backoff expired go to the activeQ (kube's flushBackoffQCompleted, every second).
        self.spawn("flush backoffQ", self._every, o.flush_interval, self._flush_backoff)
        # Pods unschedulable for too long are retried anyway (kube's flushUnschedulablePodsLeftover).
        self.spawn("flush unschedulable leftover", self._every, o.leftover_interval, self._flush_leftover)
        # A cycle that popped pods and died never reports them: hand them out again.
        self.spawn("in-flight deadlines", self._every, o.in_flight_interval, self._expire_in_flight)
        # A cycle or binder that died mid-attempt leaves pods Reserved: give them back or finish the bind.
        self.spawn("janitor", self._every, o.janitor_interval, self._repair_reserved)
        # Bound and Running pods whose room was given back (a release that should not have happened).
        self.spawn("repair placements", self._every, o.resync, self._repair_placements)
        # Everything else a crash between two protocol steps leaves (ClusterState.reconcile).
        self.spawn("reconcile", self._every, o.reconcile_interval, self._reconcile)
        # Nodes that stopped heartbeating are marked lost, and found again when they come back.
        self.spawn("node lifecycle", self._every, o.node_interval, self._check_nodes)
        # Heals anything missed (a lost event, a pod changed behind our back) from Redis, the truth.
        self.spawn("resync", self._every, o.resync, self._resync)
        self._after_change()

    def _event_kinds(self) -> list[str]:
        """The cluster event kinds the queue listens to: every node event (the node copies the
        hints read follow them), and the pod events some profile's plugin registered, all of them
        where one registered every event (kube's informers listen for the registered events
        alone). With kube's plugins, pod.running, one per pod, is not among them."""
        registered = frozenset().union(*(queue.registered_kinds for queue in self.queues.values()))
        if WILDCARD in registered:
            return sorted(CLUSTER_EVENTS)
        return sorted(k for k in CLUSTER_EVENTS if k.startswith("node.") or k in registered)

    async def on_stop(self) -> None:
        # The message being handled finishes (its ack is sent); the rest of its batch is nak'd.
        await self._consumer_idle.wait()
        # Then the lease is given up, so a standby takes over at once.
        self._serving.clear()
        if self.leadership is not None:
            await self.leadership.release()

    async def _lead(self) -> None:
        """Serve in every term this replica leads: rebuild on winning the lease, stop serving on
        losing it (`kubus.leasing.Leadership`)."""
        leadership = self._leader()
        while not self.stopping.is_set():
            if not await leadership.wait(self.stopping):
                return
            term = leadership.term
            if not self._serves():
                try:
                    await self._take_over()
                except TRANSIENT_ERRORS as exc:
                    self.log.warning("taking over failed; trying again", error=repr(exc))
                    await self._stop_serving("taking over failed")
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(self.stopping.wait(), 0.5)
                    continue
            await leadership.wait_lost(self.stopping, term)
            if not self.stopping.is_set():
                await self._stop_serving("the lease is lost")

    async def _take_over(self) -> None:
        """Start serving this term: the queues rebuilt from Redis (every Pending pod: a takeover
        or a restart loses nothing pending; what another queue had in flight is handed out
        again), then the pops and outcomes subscribed. Raises what Redis or NATS raise."""
        leadership, nc = self._leader(), self.nc
        assert nc is not None
        term, started = leadership.term, time.perf_counter()
        self._serving.clear()
        await self._serving_subs.unsubscribe()
        self._forget_all()
        await self._resync()
        for profile in self.queues:
            self._serving_subs.add(await nc.subscribe(queue_pop(profile), cb=partial(self._on_pop, profile)))
            self._serving_subs.add(await nc.subscribe(queue_done(profile), cb=partial(self._on_done, profile)))
        self._served_term = term
        self._serving.set()
        self._after_change()
        self.log.info(
            "serving",
            term=term,
            token=leadership.token,
            pods=sum(len(q) for q in self.queues.values()),
            seconds=round(time.perf_counter() - started, 4),
        )

    async def _stop_serving(self, why: str) -> None:
        """Stop serving at once: no pop, outcome, intake or repair from here on; the queues are
        emptied (the next leader rebuilds its own from Redis)."""
        was = self._serving.is_set()
        self._serving.clear()
        await self._serving_subs.unsubscribe()
        self._forget_all()
        self._after_change()
        if was:
            self.log.warning("stopped serving", reason=why)

    def _forget_all(self) -> None:
        """Drop everything held in memory about pods and nodes: fresh, empty queues."""
        self.queues = {name: self._build_queue(name) for name in self.frameworks}
        self._tokens.clear()
        self._nodes.clear()
        self._reserved_pods.clear()
        self._lost_nodes = None
        self._next_node_scan = 0.0

    def _leader(self) -> Leadership:
        if self.leadership is None:
            raise RuntimeError("queue: not started")
        return self.leadership

    async def _every(self, interval: float, step: Callable[[], Awaitable[object]]) -> None:
        """Run ``step`` every ``interval`` seconds; a server being down is logged, not fatal."""
        while True:
            await asyncio.sleep(interval)
            if not self._serves():
                continue  # a standby repairs nothing: the leader does
            try:
                await step()
            except TRANSIENT_ERRORS as exc:
                self.log.warning("periodic step failed; retrying", step=step.__name__, error=repr(exc))
            self._after_change()

    async def _on_event(self, msg: Msg) -> None:
        # kubus.events.<resource>.<verb>.<name>: most events (pod.accepted, one per pod) cannot
        # move any pod; they are dropped by their subject, unread. An event no hint would look
        # at now (no pod unschedulable or in flight, or no hint for its kind) is noted unread:
        # the pods in flight remember it, and plugins without a hint move pods on it.
        if not self._serves():
            return  # a standby holds no pods to move
        kind = event_kind_of(msg.subject)
        if kind is not None:
            if kind not in CLUSTER_EVENTS:
                return
            if not self._hints_look_at(kind):
                if kind.startswith("node."):
                    self._nodes.pop(untoken(msg.subject.split(".", 4)[4]), None)  # its copy may be stale now
                for queue in self.queues.values():
                    queue.move_for_event(kind)
                return
        try:
            event = decode(ClusterEvent, msg.data)
        except MessageError as exc:
            self._count_rejected(EVENTS)
            self.log.warning("bad cluster event", subject=msg.subject, error=str(exc))
            return
        if event.kind not in CLUSTER_EVENTS:
            return
        old, new = await self._objects_of(event)
        moved = sum(queue.move_for_event(event.kind, old, new) for queue in self.queues.values())
        if moved:
            self.log.info("unschedulable pods moved", cluster_event=event.kind, name=event.name, pods=moved)
            self._after_change()

    def _hints_look_at(self, kind: str) -> bool:
        """Whether some queue has pods whose hints may read the objects of an event of ``kind``."""
        return any(
            (queue.unschedulable_count or queue.in_flight_count)
            and (kind in queue.hinted_kinds or WILDCARD in queue.hinted_kinds)
            for queue in self.queues.values()
        )

    async def _objects_of(self, event: ClusterEvent) -> tuple[EventObject, EventObject]:
        """The event's old and new objects, as `kubus.framework.queueing_hints` describes them;
        None where there is none or it could not be read (hints then answer Queue)."""
        try:
            if event.kind.startswith("node."):
                return await self._node_change(event)
            return await self._pod_change(event)
        except (*TRANSIENT_ERRORS, KeyError, ValueError) as exc:  # type: ignore[misc]  # mypy: no `*` in except
            self._nodes.pop(event.name, None)
            self.log.warning("cluster event's object unreadable; hints get none", cluster_event=event.kind,
                             name=event.name, error=repr(exc))  # fmt: skip
            return None, None

    async def _node_change(self, event: ClusterEvent) -> tuple[EventObject, EventObject]:
        cached = self._nodes.pop(event.name, None)
        if event.kind == NODE_DELETED:
            return (cached[1] if cached else None), None
        record: NodeRecord | None = await self._cluster().get_node(event.name)
        if record is None:  # deleted since
            return (cached[1] if cached else None), None
        new = record.to_node()
        self._nodes[event.name] = (record.generation, new)
        # The copy is this change's "before" only when it is older than what was read now: an
        # event for a version already read (events racing reads) has no known "before".
        if event.kind == NODE_ADDED or cached is None or cached[0] >= record.generation:
            return None, new
        return cached[1], new

    async def _pod_change(self, event: ClusterEvent) -> tuple[EventObject, EventObject]:
        uid = event.data.uid if isinstance(event.data, PodChange) else ""
        pod = self._reserved_pods.get(uid) if event.node else None
        node = event.node
        if pod is None:  # not one this queue's cycles reserved lately: as Redis has it
            record = await self._cluster().get_pod(uid) if uid else None
            pod = self._pod_of(record) if record is not None else None
            if record is None or pod is None:
                return None, None
            node = event.node or record.node
        if node != pod.spec.node_name:  # as kube's bound pods carry spec.nodeName
            pod = replace(pod, spec=replace(pod.spec, node_name=node))
        if event.kind in POD_FREED:
            self._reserved_pods.pop(uid, None)  # its last event
            return pod, None
        if event.kind == POD_BOUND:
            return None, pod
        return pod, pod

    async def _flush_backoff(self) -> None:
        for queue in self.queues.values():
            queue.flush_backoff()
        self._count_unschedulable()

    def _count_unschedulable(self) -> None:
        # Once a second, with the flush: counting walks the unschedulable set.
        for profile, queue in self.queues.items():
            counts = queue.unschedulable_by_plugin()
            for plugin in self._unschedulable_labels.get(profile, set()) - set(counts):
                self.metrics.unschedulable_pods.labels(plugin=plugin, profile=profile).set(0)
            for plugin, count in counts.items():
                self.metrics.unschedulable_pods.labels(plugin=plugin, profile=profile).set(count)
            self._unschedulable_labels[profile] = set(counts)

    async def _flush_leftover(self) -> None:
        for profile, queue in self.queues.items():
            if moved := queue.flush_unschedulable_leftover():
                self.log.info("unschedulable leftovers requeued", profile=profile, pods=moved)
