"""PodGroup (`scheduling.x-k8s.io/v1alpha1`, as scheduler-plugins' Coscheduling defines it): a
gang of pods that is scheduled all together or not at all.

A pod joins a group with the label ``scheduling.x-k8s.io/pod-group: <group name>`` (the group
is in the pod's namespace). ``minMember`` pods must be placeable at once before any of them
binds; ``minResources`` is what they need together; ``scheduleTimeoutSeconds`` bounds how long
members wait for the others at Permit.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from kubus.api.objects import Pod

__all__ = ["DEFAULT_SCHEDULE_TIMEOUT", "POD_GROUP_LABEL", "PodGroup", "pod_group_key"]

POD_GROUP_LABEL = "scheduling.x-k8s.io/pod-group"
"""The label that puts a pod in a group of its namespace."""

DEFAULT_SCHEDULE_TIMEOUT = 60
"""Seconds members wait at Permit when the group names no scheduleTimeoutSeconds and
Coscheduling's args no permitWaitingTimeSeconds (scheduler-plugins' default and DefaultWaitTime)."""


@dataclass(frozen=True, slots=True)
class PodGroup:
    namespace: str
    name: str
    min_member: int
    """Pods that must be scheduled together (at least 1)."""
    min_resources: Mapping[str, int] = field(default_factory=dict)
    """What the members need together, in base units (milli-CPU, bytes)."""
    schedule_timeout_seconds: int | None = None
    creation_timestamp: float = 0.0
    """Seconds since the epoch (orders groups in the queue, as scheduler-plugins does)."""

    @property
    def key(self) -> str:
        """namespace/name"""
        return f"{self.namespace}/{self.name}"


def pod_group_key(pod: Pod) -> str | None:
    """``namespace/group`` of the group the pod belongs to, or None."""
    name = pod.metadata.labels.get(POD_GROUP_LABEL)
    return f"{pod.namespace}/{name}" if name else None
