"""What the cycle hears between batches (`ClusterEvents`): the cluster events that name a node
whose row changed (``kubus.events.>``; ``nodes.changed`` names several nodes, a ``pods.*`` event
several pods), and the other profiles' reservations (``kubus.reserved.*``)."""

from __future__ import annotations

from nats.aio.msg import Msg

from kubus.bus import EVENTS, RESERVED_ALL, EventKind
from kubus.bus.messages import (
    NODE_KINDS,
    ClusterEvent,
    MessageError,
    NodeChanges,
    PodChange,
    ReservedPods,
    decode,
    expand,
)
from kubus.core.metrics import Metrics
from kubus.cycle.nodes import NodeTableKeeper
from kubus.cycle.presence import Presence
from kubus.runtime.leasing import Leadership
from kubus.runtime.service import TRANSIENT_ERRORS, StructuredLogger
from kubus.store import ClusterState, Reservation

NODE_EVENTS = NODE_KINDS | {EventKind.NODES_CHANGED.value}
"""Events after which the node itself is read again (with its reservations): one node's, or
several nodes' (``nodes.changed``)."""
POD_EVENTS = frozenset(
    k.value
    for k in (
        EventKind.POD_UNRESERVED,
        EventKind.POD_BOUND,
        EventKind.POD_FINISHED,
        EventKind.POD_DELETED,
    )
)
"""Events after which the reservations of the pod's node are read again (alone, or among the
pods of a ``pods.*`` event: `kubus.bus.with_batches`)."""

PLACING_EVENTS = frozenset({EventKind.POD_BOUND.value})
"""Pod events that change nothing in the table when it already accounts the pod on that node
(most of them: this cycle reserved the pod and assumed it at once)."""


class ClusterEvents:
    """The handlers of the events and notices that keep the node table fresh (`on_event`,
    `on_reserved`): they name rows to read again before the next batch, and never raise."""

    def __init__(
        self,
        *,
        store: ClusterState,
        nodes: NodeTableKeeper,
        presence: Presence,
        leadership: Leadership,
        metrics: Metrics,
        log: StructuredLogger,
    ) -> None:
        self.store = store
        self.nodes = nodes
        self.presence = presence
        self.leadership = leadership
        self.metrics = metrics
        self.log = log

    async def on_event(self, msg: Msg) -> None:
        """Note the node whose row an event changed; it is read again before the next batch."""
        try:
            event = decode(ClusterEvent, msg.data)
        except MessageError as exc:
            # By the subscription's filter, not the subject (one per node or pod name).
            self.metrics.rejected_messages.labels(subject=EVENTS).inc()
            self.log.warning("event rejected: not a ClusterEvent", subject=msg.subject, reason=str(exc))
            return
        if isinstance(event.data, NodeChanges):
            for change in event.data.changes:
                self.nodes.mark(change.name)
            return
        for one in expand(event):  # a pods.* event: each pod's as its own
            await self._on_one(one)

    async def _on_one(self, event: ClusterEvent) -> None:
        if event.kind in NODE_EVENTS:
            node = event.name or event.node
        elif event.kind in POD_EVENTS:
            if event.kind in PLACING_EVENTS and self._placed_here(event):
                return  # our own placement: the table has had it since we reserved it
            node = event.node or await self._node_of_pod(event)
        else:
            return
        if node:
            self.nodes.mark(node)

    async def on_reserved(self, msg: Msg) -> None:
        """Another profile's cycle reserved pods: they are taken into the table before the next
        batch (`NodeTableKeeper.refresh`). This cycle's own announcements come back here too,
        and are dropped; so are all while it does not lead (a table loaded on leading reads them
        from Redis)."""
        if msg.subject == self.presence.subject:
            return
        self.presence.heard()
        if self.nodes.loaded is None or not self.leadership.leading:
            return
        try:
            notice = decode(ReservedPods, msg.data)
            reservations = [Reservation.from_json(r) for r in notice.reservations]
        except (MessageError, ValueError, KeyError, TypeError) as exc:
            self.metrics.rejected_messages.labels(subject=RESERVED_ALL).inc()
            self.log.warning("reservations notice rejected", subject=msg.subject, reason=str(exc) or repr(exc))
            return
        self.nodes.notice(reservations)

    def _placed_here(self, event: ClusterEvent) -> bool:
        """True when the table already accounts the event's pod (same uid) on the event's node,
        or will before the next batch (another profile announced it)."""
        if not isinstance(event.data, PodChange):
            return False
        placement = self.nodes.placement_of(event.name)
        if placement is None:
            return False
        uid, node = placement
        return uid == event.data.uid and (not event.node or node == event.node)

    async def _node_of_pod(self, event: ClusterEvent) -> str:
        uid = event.data.uid if isinstance(event.data, PodChange) else ""
        if not uid:
            return ""
        try:
            record = await self.store.get_pod(uid)
        except TRANSIENT_ERRORS as exc:
            self.log.warning("event: cannot look up the pod's node", pod=event.name, error=repr(exc))
            return ""
        return record.node if record is not None else ""
