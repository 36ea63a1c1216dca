"""Requeue events declared by plugins: kube-scheduler's EnqueueExtensions and QueueingHints.

A plugin that can reject a pod says which cluster events may make that pod schedulable
(`EnqueueExtensions.events_to_register`), each with an optional hint function that looks at the
event's objects and answers `QueueingHint.QUEUE` (retry the pod) or `QueueingHint.QUEUE_SKIP`
(this change cannot help it). The scheduling queue asks only the plugins that rejected a pod,
only for the events they registered; a plugin that registers nothing through this protocol is
asked about nothing and moves its pods on every cluster event, as in kube.

Event kinds are kubus's `kubus.bus.EventKind` values (``node.added``, ``pod.deleted``, ...; the
framework does not import the bus). The objects a hint sees, ``old`` and ``new``, are kubus
`Node` or `Pod` objects, or None where there is none *or where the queue could not read it*:

- ``node.added``: old None, new the node. ``node.updated`` / ``node.lost``: old the node as the
  queue last saw it (None when it has no earlier copy), new the node now. ``node.deleted``:
  old the last copy, new None.
- ``pod.finished`` / ``pod.deleted`` / ``pod.unreserved`` (kube's AssignedPodDelete: a pod left
  the node it held room on): old the pod, with ``spec.node_name`` set to that node; new None.
- ``pod.bound`` (AssignedPodAdd): old None, new the pod on its node. ``pod.running``: both.

A hint must treat a missing object it needs as "maybe": return QUEUE (kube requeues on a hint
error too). Hints are pure and fast: they run for every unschedulable pod on every event.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Protocol, runtime_checkable

from kubus.api.objects import Node, Pod

__all__ = [
    "ALL_EVENTS",
    "NODE_ADDED",
    "NODE_DELETED",
    "NODE_LOST",
    "NODE_UPDATED",
    "POD_BOUND",
    "POD_DELETED",
    "POD_FINISHED",
    "POD_FREED",
    "POD_RUNNING",
    "POD_UNRESERVED",
    "WILDCARD",
    "ClusterEventWithHint",
    "EnqueueExtensions",
    "EventObject",
    "QueueingHint",
    "QueueingHintFn",
    "events_on",
    "node_change",
    "removed_pod",
]


class QueueingHint(StrEnum):
    """A hint's answer; the values are the ``hint`` label of
    scheduler_queueing_hint_execution_duration_seconds."""

    QUEUE = "Queue"
    """The event may make the pod schedulable: move it to the backoffQ or the activeQ."""
    QUEUE_SKIP = "QueueSkip"
    """The event cannot help the pod: leave it unschedulable."""


NODE_ADDED = "node.added"
NODE_UPDATED = "node.updated"
NODE_LOST = "node.lost"
NODE_DELETED = "node.deleted"
POD_BOUND = "pod.bound"
POD_RUNNING = "pod.running"
POD_FINISHED = "pod.finished"
POD_DELETED = "pod.deleted"
POD_UNRESERVED = "pod.unreserved"

POD_FREED = (POD_FINISHED, POD_DELETED, POD_UNRESERVED)
"""The events of a pod leaving a node it held room on (kube's AssignedPodDelete)."""
ALL_EVENTS = frozenset({NODE_ADDED, NODE_UPDATED, NODE_LOST, NODE_DELETED, POD_BOUND, POD_RUNNING, *POD_FREED})
"""Every cluster event kind (docs/services.md, Events); bookkeeping events are not among them."""
WILDCARD = "*"
"""An event kind that matches every cluster event."""

EventObject = Node | Pod | None
QueueingHintFn = Callable[[Pod, EventObject, EventObject], QueueingHint]
"""``hint(pod, old, new)``: may the change from ``old`` to ``new`` make ``pod`` (which the
plugin rejected) schedulable? Must not raise for a None or an unexpected object: QUEUE."""


@dataclass(frozen=True, slots=True)
class ClusterEventWithHint:
    """One event a plugin registers (kube's ClusterEventWithHint)."""

    kind: str
    """An event kind (`ALL_EVENTS`), or `WILDCARD`."""
    hint: QueueingHintFn | None = None
    """None: every event of ``kind`` may help (always QUEUE)."""

    def matches(self, kind: str) -> bool:
        return self.kind == kind or self.kind == WILDCARD


@runtime_checkable
class EnqueueExtensions(Protocol):
    """A plugin that says which events can undo its rejections (kube's EnqueueExtensions)."""

    def events_to_register(self) -> Sequence[ClusterEventWithHint]:
        """The events that may make a pod this plugin rejected schedulable; empty: none ever
        does (the pod waits for its own update or the unschedulable timeout). Called once, when
        the queue is built."""
        ...


def events_on(kinds: Iterable[str], hint: QueueingHintFn | None = None) -> tuple[ClusterEventWithHint, ...]:
    """One `ClusterEventWithHint` per kind, all with ``hint`` (kube's ActionType bit-or)."""
    return tuple(ClusterEventWithHint(kind, hint) for kind in kinds)


def node_change(old: EventObject, new: EventObject) -> tuple[Node | None, Node | None]:
    """``old`` and ``new`` as nodes (None for anything else): kube's ``util.As[*v1.Node]``."""
    return (old if isinstance(old, Node) else None), (new if isinstance(new, Node) else None)


def removed_pod(old: EventObject) -> Pod | None:
    """The pod a ``pod.finished/deleted/unreserved`` event removed from its node, when known."""
    return old if isinstance(old, Pod) else None
