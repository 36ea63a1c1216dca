"""The events a scheduler writes about a pod, in kube-scheduler's shape (events.k8s.io/v1, as its
event recorder writes them): the watcher's FailedScheduling and Preempted, the binder's
Scheduled."""

from __future__ import annotations

import functools
import uuid
from datetime import UTC, datetime

from kubus.core.codec import JSONObject

__all__ = ["DEFAULT_REPORTER", "micro_time", "pod_event"]

DEFAULT_REPORTER = "default-scheduler"
"""The reportingController of an event whose pod names no profile."""

NOTE_LIMIT = 1024
"""The apiserver's limit on an event's note (bytes)."""


@functools.lru_cache(maxsize=64)
def micro_time(seconds: float) -> str:
    """A MicroTime (eventTime, series.lastObservedTime). Cached: a binder's group of pods share
    their events' time (formatting it was 2% of a binder's CPU, py-spy)."""
    return datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def pod_event(
    *,
    namespace: str,
    name: str,
    uid: str,
    type_: str,
    reason: str,
    action: str,
    note: str,
    profile: str,
    instance: str,
    at: float,
) -> JSONObject:
    """An Event about pod ``namespace/name`` (that uid), reported by its profile as kube-scheduler
    reports as its scheduler name (reportingInstance "<profile>-<instance>"); a fresh name, as
    the recorder gives each event."""
    reporter = profile or DEFAULT_REPORTER
    return {
        "apiVersion": "events.k8s.io/v1",
        "kind": "Event",
        "metadata": {"name": f"{name}.{uuid.uuid4().hex[:16]}", "namespace": namespace},
        "eventTime": micro_time(at),
        "type": type_,
        "reason": reason,
        "action": action,
        "note": note[:NOTE_LIMIT],
        "reportingController": reporter,
        "reportingInstance": f"{reporter}-{instance}",
        "regarding": {"apiVersion": "v1", "kind": "Pod", "namespace": namespace, "name": name, "uid": uid},
    }
