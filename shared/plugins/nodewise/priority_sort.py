"""PrioritySort (QueueSort): higher priority first, then the earlier queue timestamp.

After kube's pkg/scheduler/framework/plugins/queuesort/priority_sort.go.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from kubus.api.objects import Pod


@dataclass(frozen=True, slots=True)
class QueuedPodInfo:
    """What QueueSort compares: a pod and when it was (last) added to the queue."""

    pod: Pod
    timestamp: float
    """Seconds since the epoch (any monotone clock works: only the order matters)."""


def pod_priority(pod: Pod) -> int:
    """corev1helpers.PodPriority: spec.priority, which admission resolved (0 when it did not)."""
    return pod.spec.priority


class PrioritySort:
    name: ClassVar[str] = "PrioritySort"

    def __init__(self, args: Any = None, handle: Any = None) -> None:
        pass

    def less(self, a: QueuedPodInfo, b: QueuedPodInfo) -> bool:
        """True when `a` should be scheduled before `b`."""
        p1, p2 = pod_priority(a.pod), pod_priority(b.pod)
        return p1 > p2 or (p1 == p2 and a.timestamp < b.timestamp)
