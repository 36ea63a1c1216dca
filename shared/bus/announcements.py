"""What services announce on the bus, built in one place: cluster events about pods and nodes,
the announcement of a bind (the node's assignment and the ``pod.bound`` event) and of the
victims of a preemption.

Each function returns the `Publication` (subject, payload, msg id): the caller publishes it,
alone or in a batch (`publish_durable_many`). Whoever announces the same fact builds the same
message id (`kubus.bus.msgids`), so the binder and the janitor finishing its bind announce once.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Sequence
from typing import Protocol

from kubus.api.attempts import NO_ATTEMPT, Attempt
from kubus.bus import msgids
from kubus.bus.connection import Publication
from kubus.bus.messages import (
    BatchedPod,
    ClusterEvent,
    NodeAssignment,
    NodeChange,
    NodeChanged,
    NodeChanges,
    PodBatch,
    PodChange,
    Rejection,
    encode,
)
from kubus.bus.subjects import EventKind, event_subject, node_pods
from kubus.core import codec

__all__ = [
    "NODE_CHANGES_PER_EVENT",
    "POD_BATCH_SIZE",
    "Evicted",
    "assigned",
    "bound",
    "node_changes",
    "node_event",
    "pod_batch",
    "pod_event",
    "preempted",
    "rejection_event",
]


class Evicted(Protocol):
    """A pod preemption evicted: its uid, namespace/name (``key``) and scheduler profile
    (`kubus.store.Eviction` is one)."""

    @property
    def uid(self) -> str: ...

    @property
    def key(self) -> str: ...

    @property
    def profile(self) -> str: ...


def pod_event(
    kind: EventKind,
    key: str,
    uid: str,
    *,
    at: float,
    node: str = "",
    attempt: Attempt = NO_ATTEMPT,
    profile: str = "",
    phase: str = "",
    reason: str = "",
    message: str = "",
) -> Publication:
    """A ``pod.*`` event about pod ``key`` (namespace/name); one per (kind, uid, attempt)."""
    event = ClusterEvent(
        kind=kind.value,
        name=key,
        node=node,
        at=at,
        reason=reason,
        message=message,
        data=PodChange(uid=uid, attempt=attempt, profile=profile, phase=phase),
    )
    msg_id = msgids.event(kind, uid, attempt) if attempt else msgids.event(kind, uid)
    return Publication(event_subject(kind, key), _event_bytes(event), msg_id)


def node_event(
    kind: EventKind, name: str, generation: int, *, at: float, reason: str = "", message: str = "", nonce: str = ""
) -> Publication:
    """A ``node.*`` event about node ``name`` at record generation ``generation``; one per (kind,
    node, generation), or per ``nonce`` too when given (a node registered again after its
    deletion starts over at generation 1, and must be announced again)."""
    event = ClusterEvent(
        kind=kind.value, name=name, node=name, at=at, reason=reason, message=message, data=NodeChange(generation)
    )
    msg_id = msgids.event(kind, name, generation, nonce) if nonce else msgids.event(kind, name, generation)
    return Publication(event_subject(kind, name), _event_bytes(event), msg_id)


NODE_CHANGES_PER_EVENT = 1000
"""Node changes one ``nodes.changed`` event carries at most (about 60 KiB of JSON)."""


def node_changes(changes: Sequence[tuple[EventKind, str, int]], *, at: float) -> list[Publication]:
    """``nodes.changed`` events for many nodes' changes, each ``(kind, name, generation)`` as
    `node_event` takes them, in order: one event per `NODE_CHANGES_PER_EVENT`. Each is its own
    announcement (a fresh id), as the watcher's node events are."""
    kind = EventKind.NODES_CHANGED
    out: list[Publication] = []
    for start in range(0, len(changes), NODE_CHANGES_PER_EVENT):
        nonce = uuid.uuid4().hex
        chunk = changes[start : start + NODE_CHANGES_PER_EVENT]
        data = NodeChanges(tuple(NodeChanged(k.value, name, generation) for k, name, generation in chunk))
        event = ClusterEvent(kind=kind.value, name=nonce, at=at, data=data)
        out.append(Publication(event_subject(kind, nonce), _event_bytes(event), msgids.event(kind, nonce)))
    return out


POD_BATCH_SIZE = 500
"""Pods one ``pods.*`` event carries at most (about 75 KiB of JSON)."""


def pod_batch(kind: EventKind, pods: Sequence[BatchedPod], *, at: float) -> list[Publication]:
    """``pods.*`` events of ``kind`` (`POD_BATCHES`) for many pods, in order: one per
    `POD_BATCH_SIZE`. Each one's id is its pods' digest (`msgids.pod_batch`): the same pods
    announced again together (a redelivered group of bind requests) are stored once."""
    out: list[Publication] = []
    for start in range(0, len(pods), POD_BATCH_SIZE):
        chunk = tuple(pods[start : start + POD_BATCH_SIZE])
        msg_id = msgids.pod_batch(kind, [(p.uid, p.attempt) for p in chunk])
        name = msg_id.rpartition("/")[2]
        event = ClusterEvent(kind=kind.value, name=name, at=at, data=PodBatch(chunk))
        out.append(Publication(event_subject(kind, name), _event_bytes(event), msg_id))
    return out


def rejection_event(
    name: str, subject: str, seq: int, *, at: float, reason: str, message: str, uid: str = ""
) -> Publication:
    """``pod.rejected``: bad input on ``subject`` (stream sequence ``seq``); ``name`` the pod's
    namespace/name and ``uid`` its uid when it could be read."""
    kind = EventKind.POD_REJECTED
    data = Rejection(subject=subject, seq=seq, uid=uid)
    event = ClusterEvent(kind=kind.value, name=name, at=at, reason=reason, message=message, data=data)
    return Publication(event_subject(kind, name), _event_bytes(event), msgids.event(kind, seq))


def bound(assignment: NodeAssignment, profile: str, *, at: float) -> list[Publication]:
    """A pod bound: its assignment for the node's agent, then ``pod.bound`` for everyone else.
    (A binder announces the pods it bound together: their assignments and one ``pods.bound``.)"""
    a = assignment
    event = pod_event(EventKind.POD_BOUND, a.key, a.uid, at=at, node=a.node, attempt=a.attempt, profile=profile)
    return [assigned(a), event]


def assigned(assignment: NodeAssignment) -> Publication:
    """A bound pod's assignment, for its node's agent; one per attempt."""
    a = assignment
    return Publication(node_pods(a.node), encode(a), msgids.assign(a.uid, a.attempt))


def preempted(victims: Iterable[Evicted], *, node: str, message: str, at: float) -> list[Publication]:
    """Pods preemption evicted from ``node``: per victim, the ``pod.deleted`` event a deletion
    sends, with reason ``Preempted`` and ``message`` (`kubus.store.PreemptResult.message`), so
    its node's agent stops it and the queue and the cycles see its room freed. Its message id is
    the deletion's (one ``pod.deleted`` per pod), so announcing again (a retried preemption, a
    later delete of the victim) is stored once."""
    kind = EventKind.POD_DELETED
    return [
        pod_event(kind, v.key, v.uid, at=at, node=node, profile=v.profile, reason="Preempted", message=message)
        for v in victims
    ]


def _event_bytes(event: ClusterEvent) -> bytes:
    # The bytes `encode` gives (an event has no bytes fields), 8x faster: the codec encodes the
    # dataclasses itself. Every pod's life announces several events.
    return codec.dumps(event)
