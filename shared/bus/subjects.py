"""Every NATS subject and JetStream stream of kubus, in one place.

Subjects (``<...>`` is one token made safe by `token`):

=====================================  ==========  ==============================================
subject                                transport   meaning
=====================================  ==========  ==============================================
``kubus.pods.submit``                  JetStream   a Pod manifest to schedule (clients → queue)
``kubus.pods.delete``                  JetStream   delete a pod by namespace/name (clients → queue)
``kubus.pods.requeue``                 JetStream   a pod handed back with its reason (cycle/binder
                                                   → queue), after Unreserve or a failed bind
``kubus.queue.<profile>.pop``          core req    cycle asks its profile's queue for up to B pods
``kubus.queue.<profile>.done``         core req    cycle reports the outcome of popped pods
``kubus.bind.<profile>``               JetStream   a reserved pod to bind (cycle → binders, shared
                                                   work queue per profile)
``kubus.reserved.<profile>``           core        the reservations a cycle is handing to the
                                                   binders (cycle → the other profiles' cycles)
``kubus.node.<node>.pods``             JetStream   a bound pod to run on the node (binder → agent)
``kubus.events.<kind>.<name...>``      JetStream   cluster events (`event_subject`); consumers
                                                   filter ``kubus.events.>`` or narrower
=====================================  ==========  ==============================================

Streams are described as data in `STREAMS` (`StreamSpec`); `kubus.bus.connection.ensure_streams`
creates or updates them. JetStream publishes carry a ``Nats-Msg-Id`` so retries within a
stream's duplicate window are stored once.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from enum import Enum

__all__ = [
    "APISERVER_DELETED",
    "BIND_ALL",
    "BIND_STREAM",
    "EVENTS",
    "EVENTS_STREAM",
    "MAX_MANIFEST_SIZE",
    "MAX_MSG_SIZE",
    "NODES_STREAM",
    "NODE_PODS_ALL",
    "PODS_DELETE",
    "PODS_REQUEUE",
    "PODS_STREAM",
    "PODS_SUBMIT",
    "POD_BATCHES",
    "POD_BATCH_EVENTS",
    "POD_EVENTS",
    "PREFIX",
    "RESERVED_ALL",
    "STREAMS",
    "EventKind",
    "Retention",
    "StreamSpec",
    "bind",
    "event_filter",
    "event_kind_of",
    "event_subject",
    "node_pods",
    "queue_done",
    "queue_pop",
    "queue_serving",
    "reserved",
    "token",
    "untoken",
    "with_batches",
]

PREFIX = "kubus"
"""First token of every kubus subject."""

MAX_MSG_SIZE = 1024 * 1024
"""Largest message any kubus stream accepts, in bytes (1 MiB, NATS' default max_payload)."""

MAX_MANIFEST_SIZE = 256 * 1024
"""Largest pod manifest (as JSON) kubus accepts: `kubus apply` refuses bigger ones, the queue
rejects them (TooLarge). Keeps a pop reply of even one such pod well under `MAX_MSG_SIZE`."""

# -- tokens --------------------------------------------------------------------------------------

# NATS forbids '.', '*', '>' and whitespace inside a token; control characters and '%' are
# escaped too, so the mapping is total and reversible. Everything else (letters, digits, '-',
# '_', '/', ':', non-ASCII) passes unchanged, so Kubernetes names (DNS labels) read as themselves.
_UNSAFE = re.compile(r"[%.*>\x00-\x20\x7f]")
_ESCAPE = re.compile(r"%([0-9A-F]{2})")


def token(value: str) -> str:
    """``value`` as one subject token: ``%``, ``.``, ``*``, ``>``, spaces and ASCII control
    characters become ``%XX`` (upper-case hex). Reversed by `untoken`. Raises ValueError for an
    empty string (an empty token is not a subject)."""
    if not value:
        raise ValueError("subject token: empty")
    return _UNSAFE.sub(lambda m: f"%{ord(m.group()):02X}", value)


def untoken(value: str) -> str:
    """The string `token` was given: ``%XX`` escapes decoded."""
    return _ESCAPE.sub(lambda m: chr(int(m.group(1), 16)), value)


# -- pods, queue, bind, node ---------------------------------------------------------------------

PODS_SUBMIT = f"{PREFIX}.pods.submit"
"""A Pod manifest (``apiVersion: v1, kind: Pod``) to schedule; JetStream, stream PODS."""
PODS_DELETE = f"{PREFIX}.pods.delete"
"""Delete a pod, by namespace and name; JetStream, stream PODS."""
PODS_REQUEUE = f"{PREFIX}.pods.requeue"
"""A pod handed back to the queue with its reason (failed Reserve/Permit/bind); JetStream, stream PODS."""
APISERVER_DELETED = f"{PREFIX}.apiserver.deleted"
"""Cluster mode: a pod the kube-apiserver no longer has (a `PodDeletion` with its uid), said by
the watcher as it sees it go; core NATS, no stream. The binders wait on their preemptors'
victims with it (`kubus.binder.apiserver.Deletions`); only the watcher may publish it."""


def queue_pop(profile: str) -> str:
    """``kubus.queue.<profile>.pop``: core NATS request/reply; the cycle asks for up to B pods."""
    return f"{PREFIX}.queue.{token(profile)}.pop"


def queue_serving(profile: str) -> str:
    """``kubus.queue.<profile>.serving``: core NATS, empty; a queue that starts serving the
    profile (it took the lease ``queue``) says so, and a cycle whose pop waits on the queue
    before it asks again at once: a pop the dead queue will never answer is not waited out."""
    return f"{PREFIX}.queue.{token(profile)}.serving"


def queue_done(profile: str) -> str:
    """``kubus.queue.<profile>.done``: core NATS request/reply; the cycle reports what became of
    the pods it popped (scheduled, unschedulable with reasons, error), as kube's queue Done."""
    return f"{PREFIX}.queue.{token(profile)}.done"


def bind(profile: str) -> str:
    """``kubus.bind.<profile>``: a reserved pod to bind; JetStream work queue (stream BIND) that
    every binder of the profile shares through one durable consumer."""
    return f"{PREFIX}.bind.{token(profile)}"


BIND_ALL = f"{PREFIX}.bind.*"
"""Every profile's bind subject."""


def reserved(profile: str) -> str:
    """``kubus.reserved.<profile>``: core NATS; the reservations a cycle of ``profile`` just made
    and is handing to the binders (`ReservedPods`). The other profiles' cycles take them into
    their node tables at once instead of at ``pod.bound``: a hint, Redis stays the arbiter."""
    return f"{PREFIX}.reserved.{token(profile)}"


RESERVED_ALL = f"{PREFIX}.reserved.*"
"""Every profile's reserved subject."""


def node_pods(node: str) -> str:
    """``kubus.node.<node>.pods``: a bound pod for the node's agent; JetStream (stream NODES)."""
    return f"{PREFIX}.node.{token(node)}.pods"


NODE_PODS_ALL = f"{PREFIX}.node.*.pods"
"""Every node's pod subject (an agent simulating many nodes consumes this)."""

# -- events --------------------------------------------------------------------------------------

EVENTS = f"{PREFIX}.events.>"
"""Every cluster event; JetStream (stream EVENTS, kept for an hour) so a restarted consumer catches up."""

POD_EVENTS = f"{PREFIX}.events.pod.>"
"""Every pod event, one pod each (`kubus get pods -w` follows them, and `POD_BATCH_EVENTS`)."""

POD_BATCH_EVENTS = f"{PREFIX}.events.pods.>"
"""Every ``pods.*`` event: several pods' events of one kind in one (`EventKind.PODS_BOUND`)."""


class EventKind(Enum):
    """What happened; the value is the two subject tokens ``<resource>.<verb>``."""

    NODE_ADDED = "node.added"
    NODE_UPDATED = "node.updated"
    NODE_LOST = "node.lost"
    NODE_DELETED = "node.deleted"
    NODES_CHANGED = "nodes.changed"
    """Several nodes' changes in one event (`kubus.bus.messages.NodeChanges`): a watcher's list."""
    POD_ACCEPTED = "pod.accepted"
    POD_REJECTED = "pod.rejected"
    POD_UNRESERVED = "pod.unreserved"
    POD_BOUND = "pod.bound"
    POD_RUNNING = "pod.running"
    POD_FINISHED = "pod.finished"
    POD_DELETED = "pod.deleted"
    POD_UNSCHEDULABLE = "pod.unschedulable"
    PODS_ACCEPTED = "pods.accepted"
    """Several pods' ``pod.accepted`` in one event (`kubus.bus.messages.PodBatch`): a queue's
    batch of submissions."""
    PODS_BOUND = "pods.bound"
    """Several pods' ``pod.bound`` in one event (`kubus.bus.messages.PodBatch`): a binder's group."""


POD_BATCHES: dict[str, str] = {
    EventKind.PODS_ACCEPTED.value: EventKind.POD_ACCEPTED.value,
    EventKind.PODS_BOUND.value: EventKind.POD_BOUND.value,
}
"""A ``pods.*`` kind -> the ``pod.*`` kind each of its pods' events is (`EventKind` values).
Announcing thousands of pods' events one message a pod cost every publisher, the server and
every consumer a message a pod; a batch costs them one."""


def with_batches(kinds: Iterable[str]) -> set[str]:
    """``kinds`` (`EventKind` values) and the ``pods.*`` kinds that carry events of them: what a
    consumer of those kinds subscribes to."""
    wanted = set(kinds)
    return wanted | {batch for batch, kind in POD_BATCHES.items() if kind in wanted}


def event_subject(kind: EventKind | str, name: str) -> str:
    """``kubus.events.<resource>.<verb>.<name>``; a namespaced ``name`` ("ns/pod") becomes two
    tokens, so ``kubus.events.pod.bound.<ns>.<pod>``; a node name is one token.

    ``kind`` is an `EventKind` or its value. Raises ValueError for an unknown kind or an empty name.
    """
    kind = EventKind(kind)
    return ".".join((PREFIX, "events", kind.value, *(token(part) for part in name.split("/"))))


def event_kind_of(subject: str) -> str | None:
    """The ``<resource>.<verb>`` of an event subject (`event_subject`), unchecked against
    `EventKind` (a consumer drops kinds it does not read by this, before decoding); None for a
    subject that is not an event's."""
    parts = subject.split(".", 4)
    if len(parts) < 5 or parts[0] != PREFIX or parts[1] != "events":
        return None
    return f"{parts[2]}.{parts[3]}"


def event_filter(kind: EventKind | str | None = None) -> str:
    """A subscription filter for every event, or every event of one ``kind``."""
    if kind is None:
        return EVENTS
    return f"{PREFIX}.events.{EventKind(kind).value}.>"


# -- streams -------------------------------------------------------------------------------------


class Retention(Enum):
    """JetStream retention policy (values as in the JetStream API)."""

    LIMITS = "limits"
    """Keep messages until a limit (age, count, bytes) drops them; any number of consumers."""
    WORK_QUEUE = "workqueue"
    """A message is removed once acked; consumers must filter disjoint subjects."""


@dataclass(frozen=True, slots=True)
class StreamSpec:
    """One JetStream stream as kubus wants it; `kubus.bus.connection.ensure_streams` applies it."""

    name: str
    """Stream name (upper case by convention)."""
    subjects: tuple[str, ...]
    """Subjects it captures; no two streams overlap."""
    retention: Retention
    """What removes messages."""
    description: str
    """What the stream is for."""
    max_age: float = 0.0
    """Seconds a message is kept at most; 0 for no limit."""
    max_msg_size: int = MAX_MSG_SIZE
    """Largest message accepted, bytes."""
    duplicate_window: float = 120.0
    """Seconds within which a repeated ``Nats-Msg-Id`` is stored only once."""


PODS_STREAM = StreamSpec(
    name="KUBUS_PODS",
    subjects=(f"{PREFIX}.pods.>",),
    retention=Retention.WORK_QUEUE,
    description="Pods submitted, deleted and handed back; consumed by the queue service.",
)
BIND_STREAM = StreamSpec(
    name="KUBUS_BIND",
    subjects=(f"{PREFIX}.bind.>",),
    retention=Retention.WORK_QUEUE,
    description="Reserved pods waiting to be bound; one durable consumer per profile shared by its binders.",
)
NODES_STREAM = StreamSpec(
    name="KUBUS_NODES",
    subjects=(f"{PREFIX}.node.>",),
    retention=Retention.WORK_QUEUE,
    description="Bound pods for each node's agent; removed once the agent acks them.",
)
EVENTS_STREAM = StreamSpec(
    name="KUBUS_EVENTS",
    subjects=(EVENTS,),
    retention=Retention.LIMITS,
    description="Cluster events; kept an hour so restarted consumers catch up, then dropped.",
    max_age=3600.0,
)

STREAMS: tuple[StreamSpec, ...] = (PODS_STREAM, BIND_STREAM, NODES_STREAM, EVENTS_STREAM)
"""Every stream kubus uses."""
