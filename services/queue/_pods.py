"""What the queue's parts do alike with the pods and messages they handle: a stored pod parsed,
its events recorded and announced, a message that could not be read counted."""

from __future__ import annotations

import time

from nats.js import JetStreamContext

from kubus.api.errors import ManifestError
from kubus.api.objects import Pod
from kubus.bus import (
    EVENTS,
    PODS_DELETE,
    PODS_REQUEUE,
    PODS_STREAM,
    PODS_SUBMIT,
    EventKind,
    Publication,
    announcements,
    publish_durable,
)
from kubus.core import codec
from kubus.core.metrics import Metrics
from kubus.runtime.service import StructuredLogger
from kubus.store import ClusterState, EventType, PodEvent, PodRecord


def parse_stored(record: PodRecord, log: StructuredLogger) -> Pod | None:
    """The stored pod, parsed; None (logged) for a manifest that no longer parses."""
    try:
        return record.pod()
    except (ManifestError, codec.DecodeError) as exc:
        log.error("stored pod unreadable; not queued", pod=record.key, uid=record.uid, error=str(exc))
        return None


def pod_announcement(kind: EventKind, record: PodRecord, attempt: int = 0, *, reason: str = "",
                     message: str = "") -> Publication:  # fmt: skip
    """The cluster event ``kind`` about a stored pod, stamped now."""
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


async def publish(js: JetStreamContext, p: Publication) -> None:
    """Publish one announcement durably (its message id makes a repeat harmless)."""
    await publish_durable(js, p.subject, p.payload, p.msg_id)


async def record_event(store: ClusterState, uid: str, type_: EventType, reason: str, message: str, source: str) -> None:
    """Append a PodEvent, stamped now, to the pod's events (as ``kubectl describe`` shows them)."""
    await store.append_event(uid, PodEvent(time.time(), type_, reason, message, source))


def count_rejected(metrics: Metrics, subject: str) -> None:
    """Count a message the queue could not read, by its subject."""
    # The subjects the queue reads by name, or their stream's filter: a bounded label set.
    known = subject in (PODS_SUBMIT, PODS_DELETE, PODS_REQUEUE) or subject.startswith("kubus.queue.")
    label = subject if known else PODS_STREAM.subjects[0] if subject.startswith("kubus.pods.") else EVENTS
    metrics.rejected_messages.labels(subject=label).inc()
