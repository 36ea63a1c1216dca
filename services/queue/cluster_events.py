"""Cluster events move unschedulable pods (`ClusterEvents`), as the QueueingHints of the plugins
that rejected them say: the event's node or pod read from Redis for the hints (or the pod as the
queue parsed it, for pods its cycles reserved lately), and the last copy of each node kept as the
next event's ``old``."""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import replace

from nats.aio.msg import Msg

from kubus.api.objects import Node, Pod
from kubus.bus import EVENTS, POD_BATCHES, EventKind, event_kind_of, untoken
from kubus.bus.messages import (
    NODE_KINDS,
    ClusterEvent,
    MessageError,
    NodeChange,
    NodeChanges,
    PodChange,
    decode,
    expand,
)
from kubus.core.metrics import Metrics
from kubus.framework.queueing_hints import NODE_ADDED, NODE_DELETED, POD_BOUND, POD_FREED, WILDCARD, EventObject
from kubus.queue._pods import count_rejected, parse_stored
from kubus.queue.queueing import CLUSTER_EVENTS
from kubus.queue.queues import Queues
from kubus.queue.term import Term
from kubus.runtime.service import TRANSIENT_ERRORS, StructuredLogger
from kubus.store import ClusterState, NodeRecord

__all__ = ["RESERVED_PODS_KEPT", "ClusterEvents"]

RESERVED_PODS_KEPT = 50_000
"""Parsed pods the queue keeps of those reserved lately (`ClusterEvents.note_reserved`): a few
batches' worth of bind and finish events find their pod there."""


class ClusterEvents:
    """Moves the pods of every profile's queue on the cluster events (``kubus.events.>``)."""

    def __init__(
        self, *, store: ClusterState, queues: Queues, term: Term, log: StructuredLogger, metrics: Metrics
    ) -> None:
        self.store = store
        self.queues = queues
        self.term = term
        self.log = log
        self.metrics = metrics
        self._nodes: dict[str, tuple[int, Node]] = {}
        """Node name -> (generation, node) as last read for a node event: the ``old`` object of
        the next event's hints. Dropped when an event goes unread, so a stale copy is never
        taken for the node's previous state."""
        self._reserved_pods: OrderedDict[str, Pod] = OrderedDict()
        """Uid -> the pod as the queue parsed it, for the pods its cycles reserved lately (at most
        RESERVED_PODS_KEPT): the objects of their bound and finished events' hints, without a
        Redis read and a second parse of the manifest (a pod's manifest never changes once it
        is reserved)."""

    def note_reserved(self, pod: Pod) -> None:
        """A pod its cycle reserved: kept, parsed, for the hints of its next events."""
        kept = self._reserved_pods
        kept[pod.metadata.uid] = pod
        kept.move_to_end(pod.metadata.uid)
        while len(kept) > RESERVED_PODS_KEPT:
            kept.popitem(last=False)

    def forget(self) -> None:
        """Drop the copies kept of nodes and pods (the queues they served are gone)."""
        self._nodes.clear()
        self._reserved_pods.clear()

    async def on_event(self, msg: Msg) -> None:
        # kubus.events.<resource>.<verb>.<name>: events that cannot move any pod (pods.accepted)
        # are dropped by their subject, unread. An event no hint would look at now (no pod
        # unschedulable or in flight, or no hint for its kind) is noted unread: the pods in
        # flight remember it, and plugins without a hint move pods on it. A pods.* event is read
        # as its pods' pod.* events, one by one.
        if not self.term.serves():
            return  # a standby holds no pods to move
        kind = event_kind_of(msg.subject)
        if kind is not None and kind != EventKind.NODES_CHANGED.value:  # several nodes': read below
            batched = POD_BATCHES.get(kind)  # several pods' events of one kind
            if (batched or kind) not in CLUSTER_EVENTS:
                return
            if batched is None and not self._hints_look_at(kind):
                node = untoken(msg.subject.split(".", 4)[4]) if kind.startswith("node.") else None
                self._unread(kind, node)
                return
        try:
            event = decode(ClusterEvent, msg.data)
        except MessageError as exc:
            count_rejected(self.metrics, EVENTS)
            self.log.warning("bad cluster event", subject=msg.subject, error=str(exc))
            return
        if isinstance(event.data, NodeChanges):
            # Several nodes' changes: each as its own node event would move pods, in order.
            for change in event.data.changes:
                if change.kind not in NODE_KINDS or not change.name:
                    count_rejected(self.metrics, EVENTS)
                    self.log.warning("bad node change in a cluster event", subject=msg.subject,
                                     kind=change.kind, node=change.name)  # fmt: skip
                    continue
                if self._hints_look_at(change.kind):
                    await self._move(replace(event, kind=change.kind, name=change.name, node=change.name,
                                             data=NodeChange(change.generation)))  # fmt: skip
                else:
                    self._unread(change.kind, change.name)
            return
        for one in expand(event):  # a pods.* event: each pod's as its own, in order
            if one.kind not in CLUSTER_EVENTS:
                continue
            if self._hints_look_at(one.kind):
                await self._move(one)
            else:
                self._unread(one.kind, None)

    def _unread(self, kind: str, node: str | None) -> None:
        """An event no hint looks at now: noted by the queues, unread; the copy of its node (if
        it names one) may be stale now."""
        if node is not None:
            self._nodes.pop(node, None)
        for queue in self.queues.values():
            queue.move_for_event(kind)

    async def _move(self, event: ClusterEvent) -> None:
        """Move the pods whose hints say the event may make them schedulable."""
        old, new = await self._objects_of(event)
        moved = sum(queue.move_for_event(event.kind, old, new) for queue in self.queues.values())
        if moved:
            self.log.info("unschedulable pods moved", cluster_event=event.kind, name=event.name, pods=moved)
            self.queues.changed()

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
        record: NodeRecord | None = await self.store.get_node(event.name)
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
            record = await self.store.get_pod(uid) if uid else None
            pod = parse_stored(record, self.log) if record is not None else None
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
