"""PrioritySort (QueueSort): higher priority first, then the pod that was queued earlier."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from kubus.api.objects import Pod


@dataclass(frozen=True, slots=True)
class QueuedPodInfo:
    """A pod waiting in a scheduling queue."""

    pod: Pod
    timestamp: float
    """When the pod was (last) added to the queue, seconds since the epoch."""
    attempts: int = 0


class PrioritySort:
    name: ClassVar[str] = "PrioritySort"

    def __init__(self, args: object = None, handle: object = None) -> None:
        pass

    def less(self, a: QueuedPodInfo, b: QueuedPodInfo) -> bool:
        pa, pb = a.pod.spec.priority, b.pod.spec.priority
        return pa > pb or (pa == pb and a.timestamp < b.timestamp)

    @staticmethod
    def sort_key(info: QueuedPodInfo) -> tuple[int, float]:
        """A key equivalent to `less`, for sorted() and heaps."""
        return (-info.pod.spec.priority, info.timestamp)
