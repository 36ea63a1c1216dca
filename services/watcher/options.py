"""WatcherOptions: how the watcher (cluster mode's bridge to a kube-apiserver) runs."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["WatcherOptions"]


@dataclass(frozen=True, slots=True)
class WatcherOptions:
    """How the watcher runs. Seconds unless said otherwise."""

    heartbeat_interval: float = 10.0
    """How often the apiserver's nodes are heartbeaten in the store, so that the queue's node
    lifecycle (which marks silent nodes lost) sees them alive while the watcher runs. A node's
    own health reaches kubus as the apiserver says it: its taints (not-ready, unreachable) and
    spec.unschedulable."""
    qps: float = 200.0
    """Requests per second to the apiserver at most, after a ``burst`` (client-go's token bucket;
    kube-scheduler asks 50/100 by default, scheduler_perf far more)."""
    burst: int = 400
    watch_timeout: float = 300.0
    """Seconds after which the apiserver ends a watch (randomized up to twice it); the watch is
    resumed from its resourceVersion (client-go: 5-10 min)."""
    submit_batch: int = 256
    """Pods submitted to the queue in one message at most, a PodList (an initial list of 10,000
    pods goes in 40)."""
    status_batch: int = 256
    """Cluster events fetched at a time to turn into apiserver writes (FailedScheduling,
    Scheduled); at most twice as many are taken and not yet written."""
    status_pace: float = 0.02
    """Seconds between a fetch of cluster events that came back short and the next (events
    trickling in are taken together; none of them holds up a binding)."""
    status_writes: int = 64
    """Writers of those, each owning the pods that hash to it (one pod's writes in order), each
    with a connection of its own to the apiserver."""
    event_series_window: float = 360.0
    """A repeated event (same pod, reason and note) within this many seconds of the last is
    counted in the first one's series (events.k8s.io/v1 series, as kube's recorder: 6 minutes)."""

    def __post_init__(self) -> None:
        for name in ("heartbeat_interval", "qps", "watch_timeout", "event_series_window"):
            if not getattr(self, name) > 0:
                raise ValueError(f"watcher option {name}: must be positive, got {getattr(self, name)!r}")
        if not 0 <= self.status_pace <= 1:
            raise ValueError(f"watcher option status_pace: must be 0 to 1 second, got {self.status_pace!r}")
        for name in ("burst", "submit_batch", "status_batch", "status_writes"):
            if getattr(self, name) < 1:
                raise ValueError(f"watcher option {name}: must be at least 1, got {getattr(self, name)!r}")
